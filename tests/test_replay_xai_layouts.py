"""xAI gRPC cassettes as pydantic-ai writes them today: `collections_method` setup calls around the chat sample, and
the streamed layout (`request_stream` + `response_stream.chunks_json` of `{chunk: ...}`). Built from the shared
corpus's real x_search cassette."""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

import pytest
import yaml
from pydantic_ai import Agent, TextPart

from pydantic_ai_citations.testing import load_recording, replay_recording

XAI = 'pydantic-ai-cassettes/tests/models/cassettes/test_xai/test_xai_x_search_citations_recorded.xai.yaml'

COLLECTION_CREATE = {
    'collections_method': {
        'method': 'create',
        'response_proto_type': 'CollectionMetadata',
        'request_json': {'name': 'pydantic-ai-test'},
        'response_json': {'collection_id': 'collection_1', 'collection_name': 'pydantic-ai-test'},
        'response_raw': b'\n\x0ccollection_1',
    }
}
COLLECTION_DELETE = {
    'collections_method': {
        'method': 'delete',
        'response_proto_type': '',
        'request_json': {'_args': ["'collection_1'"]},
        'response_raw': b'',
    }
}


def _document(corpus: Path) -> dict[str, Any]:
    return cast(dict[str, Any], yaml.safe_load((corpus / XAI).read_text()))


def _texts(messages: list[Any]) -> list[TextPart]:
    return [p for m in messages for p in getattr(m, 'parts', []) if isinstance(p, TextPart)]


@pytest.mark.anyio
async def test_collections_method_calls_are_skipped(corpus: Path, tmp_path: Path) -> None:
    document = _document(corpus)
    [chat] = document['interactions']
    document['interactions'] = [COLLECTION_CREATE, chat, COLLECTION_DELETE, {'mystery_kind': {'x': 1}}]
    path = tmp_path / 'file_search.xai.yaml'
    path.write_text(yaml.safe_dump(document))

    recording = load_recording(path)
    plain = load_recording(corpus / XAI)
    assert len(recording.responses) == 1
    assert recording.requests == plain.requests
    assert recording.prompt == plain.prompt and recording.prompt
    assert recording.model_settings == plain.model_settings
    assert recording.notes == (
        'interaction 0 skipped: a collections_method setup call',
        'interaction 2 skipped: a collections_method setup call',
        'interaction 3 skipped: unknown (mystery_kind)',
    )
    result = await Agent(replay_recording(path)).run(recording.prompt or '', model_settings=recording.model_settings)
    expected = await Agent(plain.model()).run(plain.prompt or '', model_settings=plain.model_settings)
    assert [p.citations for p in _texts(result.all_messages())] == [
        p.citations for p in _texts(expected.all_messages())
    ]
    assert any(p.citations for p in _texts(result.all_messages()))


@pytest.mark.anyio
async def test_streamed_layout_keeps_prompt_settings_and_requests(corpus: Path, tmp_path: Path) -> None:
    document = _document(corpus)
    [chat] = document['interactions']
    response = chat['response_sample']['json']
    # The same answer as pydantic-ai records a stream: one chunk per output, each wrapped in `chunk`.
    chunks: list[dict[str, Any]] = []
    for output in response['outputs']:
        delta = dict(output.get('message') or {})
        item = {k: v for k, v in output.items() if k != 'message'} | {'delta': delta}
        chunks.append({'chunk': {'id': response['id'], 'model': response['model'], 'outputs': [item]}})
    stream_document = {
        'version': 1,
        'interactions': [
            COLLECTION_CREATE,
            {'request_stream': {'json': chat['request_sample']['json']}, 'response_stream': {'chunks_json': chunks}},
        ],
    }
    path = tmp_path / 'x_search_stream.xai.yaml'
    path.write_text(yaml.safe_dump(stream_document))

    recording = load_recording(path)
    plain = load_recording(corpus / XAI)
    assert recording.streamed
    assert recording.prompt == plain.prompt and recording.prompt
    assert recording.model_settings == plain.model_settings
    assert recording.model_settings.get('citations') is True  # INCLUDE_OPTION_INLINE_CITATIONS kept
    assert recording.requests == plain.requests
    assert recording.model_name == plain.model_name
    assert recording.notes == ('interaction 0 skipped: a collections_method setup call',)
    agent = Agent(recording.model())
    async with agent.run_stream(recording.prompt or '', model_settings=recording.model_settings) as run:
        await run.get_output()
    assert any(p.citations for p in _texts(run.all_messages()))
