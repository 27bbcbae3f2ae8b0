"""One process of the store concurrency test: append to a shared and an own conversation, retrying on conflicts."""

from __future__ import annotations

import asyncio
from typing import Any

from pydantic_ai import ModelRequest, ModelResponse, TextPart
from pydantic_ai.conversation import Conversation
from pydantic_ai.conversation_store import ConversationConflict


def open_store(backend: str, target: str) -> Any:
    if backend == 'sqlite':
        from pydantic_ai_citations import SQLiteConversationStore

        return SQLiteConversationStore(target)
    from pydantic_ai_citations import PostgresConversationStore

    return PostgresConversationStore(target, max_size=2)


async def _append(store: Any, cid: str, tag: str, outcome: dict[str, Any]) -> None:
    for _ in range(200):
        conversation = await store.load(cid) or Conversation(conversation_id=cid)
        conversation.messages.append(ModelRequest.user_text_prompt(tag))
        conversation.messages.append(ModelResponse(parts=[TextPart(f'answer to {tag}')]))
        try:
            await store.save(conversation)
        except ConversationConflict:
            outcome['conflicts'] += 1
            continue
        except Exception as e:  # anything else is a bug the test reports
            outcome['errors'].append(f'{type(e).__name__}: {e}')
            continue
        outcome['saved'].append(tag)
        return
    outcome['errors'].append(f'gave up on {tag}')


async def _run(backend: str, target: str, worker: int, rounds: int) -> dict[str, Any]:
    store = open_store(backend, target)
    outcome: dict[str, Any] = {'saved': [], 'conflicts': 0, 'errors': []}
    try:
        for i in range(rounds):
            await _append(store, 'shared', f'w{worker}-shared-{i}', outcome)
            await _append(store, f'own-{worker}', f'w{worker}-own-{i}', outcome)
    finally:
        closed = store.close()
        if asyncio.iscoroutine(closed):
            await closed
    return outcome


def append_many(backend: str, target: str, worker: int, rounds: int) -> dict[str, Any]:
    """Append `rounds` exchanges to `shared` and to `own-<worker>`; report saved tags, conflicts, other errors."""
    return asyncio.run(_run(backend, target, worker, rounds))
