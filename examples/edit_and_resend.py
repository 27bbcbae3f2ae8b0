"""Edit a cited answer, store it, and send the history on: citations stay true to the text, or go.

Runs offline: `CitingModel` answers like Gemini with grounding (content anchors over the supported words).

1. A run with `CleanStaleCitations` fingerprints the cited answer (in `ModelResponse.metadata`, never sent).
2. `SQLiteConversationStore` keeps the conversation; `edit_answer` edits the answer with `edit_text`: the citation
   whose words are unchanged moves with the edit, the one whose words changed is dropped and reported.
3. A UI stores an edit by itself (no `edit_text`): `find_stale` notices, and the next run's `CleanStaleCitations`
   realigns the part in the history before it is sent.

    python examples/edit_and_resend.py
"""

from __future__ import annotations

import asyncio
import json

from pydantic_ai import Agent, TextPart, WebCitationSource
from pydantic_ai.conversation import Conversation
from pydantic_ai.messages import ModelMessagesTypeAdapter

from pydantic_ai_citations import CleanStaleCitations, SQLiteConversationStore, find_stale
from pydantic_ai_citations.testing import CitingModel, ScriptedCitation

ANSWER = 'K2 is 8,611 m tall. It was first climbed in 1954.'


def cited(part: TextPart) -> list[str]:
    """Each anchored citation as `'words' -> url`."""
    out: list[str] = []
    for citation in part.citations or []:
        source = citation.sources[0]
        url = source.url if isinstance(source, WebCitationSource) else source.document_id
        if citation.anchor is not None:
            out.append(f'{part.content[citation.anchor.start : citation.anchor.end]!r} -> {url}')
    return out


async def main() -> list[str]:
    lines: list[str] = []
    model = CitingModel(
        ANSWER,
        [
            ScriptedCitation('K2 is 8,611 m tall.', [WebCitationSource('https://ex.com/k2', title='K2')]),
            ScriptedCitation('first climbed in 1954', [WebCitationSource('https://ex.com/1954', title='1954')]),
        ],
        style='google',
    )
    agent = Agent(model, capabilities=[CleanStaleCitations()])
    store = SQLiteConversationStore()  # a file path in a real app

    # 1. Answer and store.
    result = await agent.run('Tell me about K2.', conversation=Conversation(conversation_id='k2'))
    await store.save(result)
    part = result.all_messages()[1].parts[0]
    assert isinstance(part, TextPart)
    lines.append(f'answer: {cited(part)}')

    # 2. Edit through the store: one citation moves with its words, the other's words changed.
    loaded = await store.load('k2')
    assert loaded is not None
    edited, problems = await store.edit_answer(
        'k2',
        message_index=1,
        part_index=0,
        new_text='Fact: K2 is 8,611 m tall. It was first climbed in July 1954.',
        expected_revision=loaded.revision,
    )
    part = edited.messages[1].parts[0]
    assert isinstance(part, TextPart)
    lines.append(f'edited: {cited(part)}')
    lines.extend(f'  {p.code}: citation {p.citation_index}' for p in problems if p.citation_index is not None)
    lines.append(f'stored answers citing ex.com/k2: {len(await store.answers_citing(url="https://ex.com/k2"))}')

    # 3. A UI saves an edit as JSON by itself, without `edit_text`.
    data = json.loads(ModelMessagesTypeAdapter.dump_json(edited.messages))
    data[1]['parts'][0]['content'] = 'Note: K2 is 8,611 m tall. It was first climbed in 1954 by an Italian team.'
    from_ui = ModelMessagesTypeAdapter.validate_json(json.dumps(data))
    lines.extend(f'find_stale: {p.code} at message {p.message_index}' for p in find_stale(from_ui))
    resent = await agent.run('How long did it take?', message_history=from_ui)
    part = resent.all_messages()[1].parts[0]
    assert isinstance(part, TextPart)
    lines.append(f'realigned before sending: {cited(part)}')
    store.close()
    return lines


if __name__ == '__main__':
    for line in asyncio.run(main()):
        print(line)
