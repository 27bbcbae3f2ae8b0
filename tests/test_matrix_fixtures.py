"""Wire fixtures of the capability matrix, replayed through Pydantic AI's real model classes.

What Pydantic AI 2.68 puts on `TextPart.citations` from each fixture is pinned with inline snapshots; the fixtures'
citation objects and stream event kinds are checked against the real recordings in `../shared/corpus` (the `corpus`
fixture in tests/conftest.py skips those checks when it is absent).
"""

from __future__ import annotations

import contextlib
import json
import socket
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, cast

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from inline_snapshot import snapshot
from pydantic import BaseModel, JsonValue
from pydantic_ai import Agent, ModelResponse, TextPart
from pydantic_ai.exceptions import UserError
from pydantic_ai.messages import ModelMessage, PartDeltaEvent, PartEndEvent, TextPartDelta

from pydantic_ai_citations._models import ApiLabel, describe_model
from pydantic_ai_citations._replay import decode_event_stream, encode_event_stream, render_stream
from pydantic_ai_citations.matrix import FIXTURE_APIS, load_fixture, scenarios
from pydantic_ai_citations.matrix._fixtures import FixtureRecording, fixture_path, load_fixtures, parse_fixture
from pydantic_ai_citations.testing import RecordingError, load_recording

ALL = [pytest.param(api, s, id=f'{api}/{s}') for api in FIXTURE_APIS for s in scenarios(api)]
NEVER_CITING: frozenset[ApiLabel] = frozenset({'perplexity-agent', 'perplexity-sonar', 'mistral', 'cohere', 'groq'})
# A non-streamed Agent API response holds a `search_results` output item, which crashes pydantic-ai 2.68's
# `OpenAIResponsesModel` (the SDK builds it as a message with `content=None`); the fixture model is served through
# the package's `PerplexityTap`, which keeps those items away from the SDK (the crash itself is pinned in
# tests/test_formats_perplexity.py). No fixture is expected to crash.
KNOWN_CRASHES: dict[tuple[str, str], type[Exception]] = {}


class Answer(BaseModel):
    answer: str


@pytest.fixture(autouse=True)
def no_network(monkeypatch: pytest.MonkeyPatch) -> None:
    """Replay must never open a connection or resolve a host."""

    def refuse(*args: object, **kwargs: object) -> Any:
        raise AssertionError(f'fixture replay tried to touch the network: {args!r}')

    monkeypatch.setattr(socket.socket, 'connect', refuse)
    monkeypatch.setattr(socket, 'getaddrinfo', refuse)
    monkeypatch.setattr(socket, 'create_connection', refuse)


async def _replay(recording: FixtureRecording) -> tuple[list[ModelMessage], list[str]]:
    """Run one agent turn on the fixture; the messages, and for a stream when each citation delta arrived."""
    prompt = recording.prompt or 'Hello'
    output_type: Any = Answer if recording.scenario == 'structured' else str
    agent = Agent(recording.model(), output_type=output_type)
    if not recording.streamed:
        result = await agent.run(prompt)
        return result.all_messages(), []
    arrivals: list[str] = []
    ended: set[int] = set()
    async with agent.run_stream_events(prompt) as stream:
        async for event in stream:
            if isinstance(event, PartEndEvent):
                ended.add(event.index)
            elif (
                isinstance(event, PartDeltaEvent)
                and isinstance(event.delta, TextPartDelta)
                and event.delta.citations_delta
            ):
                arrivals.append(f'part {event.index}: ' + ('after_part_end' if event.index in ended else 'part_end'))
    # A fresh model: each model instance serves the fixture's responses once.
    async with Agent(recording.model(), output_type=output_type).run_stream(prompt) as run:
        await run.get_output()
    return run.all_messages(), arrivals


def _summary(messages: list[ModelMessage]) -> list[str]:
    """One line per citation of the last response: anchor kind, the text it covers, its sources."""
    response = [m for m in messages if isinstance(m, ModelResponse)][-1]
    lines: list[str] = []
    for part in response.parts:
        if not isinstance(part, TextPart) or not part.citations:
            continue
        for citation in part.citations:
            anchor = citation.anchor
            where = 'none' if anchor is None else f'{anchor.kind} {part.content[anchor.start : anchor.end]!r}'
            sources = ', '.join(
                f'web {s.url}' if s.kind == 'web' else f'document id={s.document_id} title={s.title}'
                for s in citation.sources
            )
            lines.append(f'{where} <- {sources}')
    return lines


CITATIONS = snapshot(
    {
        'anthropic-messages/cited': [
            "content 'Gull Point Light, first lit in 1791, is the oldest lighthouse on the coast.' <- web https://example.com/lighthouses/gull-point",
            "content 'Its stone tower stands 27 metres tall.' <- web https://example.org/coast/heritage-lights, web https://example.com/lighthouses/gull-point",
        ],
        'anthropic-messages/cited_stream': [
            "content 'Gull Point Light, first lit in 1791, is the oldest lighthouse on the coast.' <- web https://example.com/lighthouses/gull-point"
        ],
        'anthropic-messages/document': [
            "content 'the bell is rung every 30 seconds.' <- document id=None title=Keeper handbook"
        ],
        'anthropic-messages/document_page': [
            "content 'Lamps are trimmed at dusk.' <- document id=None title=Keeper handbook (PDF)"
        ],
        'anthropic-messages/followup': [],
        'anthropic-messages/structured': [],
        'bedrock-converse/cited': [
            "content 'The fog bell is rung every 30 seconds in fog.' <- document id=None title=Keeper handbook"
        ],
        'bedrock-converse/cited_stream': [
            "content 'The fog bell is rung every 30 seconds in fog.' <- document id=None title=Keeper handbook"
        ],
        'bedrock-converse/document': [
            "content 'Lamps are trimmed at dusk.' <- document id=None title=Keeper handbook (PDF)"
        ],
        'bedrock-converse/followup': [],
        'bedrock-converse/structured': [],
        'openai-responses/cited': [
            "marker '([example.com](https://example.com/lighthouses/gull-point))' <- web https://example.com/lighthouses/gull-point",
            "marker '([example.org](https://example.org/coast/heritage-lights))' <- web https://example.org/coast/heritage-lights",
        ],
        'openai-responses/cited_stream': [
            "marker '([example.com](https://example.com/lighthouses/gull-point))' <- web https://example.com/lighthouses/gull-point",
            "marker '([example.org](https://example.org/coast/heritage-lights))' <- web https://example.org/coast/heritage-lights",
        ],
        'openai-responses/document': ['none <- document id=file-FX0000000000000000000001 title=keeper-handbook.pdf'],
        'openai-responses/followup': [],
        'openai-responses/structured': [],
        'openai-chat/cited': [
            "marker '([example.com](https://example.com/lighthouses/gull-point))' <- web https://example.com/lighthouses/gull-point"
        ],
        'openai-chat/cited_stream': [
            "marker '([example.com](https://example.com/lighthouses/gull-point))' <- web https://example.com/lighthouses/gull-point"
        ],
        'openai-chat/followup': [],
        'openai-chat/structured': [],
        'openrouter/cited': [
            'none <- web https://example.com/lighthouses/gull-point',
            'none <- web https://example.org/coast/heritage-lights',
        ],
        'openrouter/cited_stream': [
            'none <- web https://example.com/lighthouses/gull-point',
            'none <- web https://example.org/coast/heritage-lights',
        ],
        'openrouter/followup': [],
        'openrouter/structured': [],
        'google-gemini/cited': [
            "content 'Gull Point Light – lit in 1791 – is the coast’s oldest lighthouse.' <- web https://example.com/lighthouses/gull-point, web https://example.org/coast/heritage-lights",
            "content 'Its stone tower is 27 m tall.' <- web https://example.org/coast/heritage-lights",
        ],
        'google-gemini/cited_stream': [
            "content 'Gull Point Light – lit in 1791 – is the coast’s oldest lighthouse.' <- web https://example.com/lighthouses/gull-point, web https://example.org/coast/heritage-lights",
            "content 'Its stone tower is 27 m tall.' <- web https://example.org/coast/heritage-lights",
        ],
        'google-gemini/document': [
            "content 'The fog bell is rung every 30 seconds in fog.' <- document id=None title=keeper-handbook.pdf"
        ],
        'google-gemini/followup': [],
        'google-gemini/structured': [],
        'google-vertex/cited': [
            "content 'Gull Point Light – lit in 1791 – is the coast’s oldest lighthouse.' <- web https://example.com/lighthouses/gull-point, web https://example.org/coast/heritage-lights",
            "content 'Its stone tower is 27 m tall.' <- web https://example.org/coast/heritage-lights",
        ],
        'google-vertex/cited_stream': [
            "content 'Gull Point Light – lit in 1791 – is the coast’s oldest lighthouse.' <- web https://example.com/lighthouses/gull-point, web https://example.org/coast/heritage-lights",
            "content 'Its stone tower is 27 m tall.' <- web https://example.org/coast/heritage-lights",
        ],
        'google-vertex/document': [
            "content 'The fog bell is rung every 30 seconds in fog.' <- document id=None title=keeper-handbook.pdf"
        ],
        'google-vertex/followup': [],
        'google-vertex/structured': [],
        'xai/cited': [
            "marker '[[1]](https://example.com/lighthouses/gull-point)' <- web https://example.com/lighthouses/gull-point"
        ],
        'xai/cited_stream': [
            "marker '[[1]](https://example.com/lighthouses/gull-point)' <- web https://example.com/lighthouses/gull-point"
        ],
        'xai/document': ["marker '[[1]](collections://keeper-handbook)' <- document id=file_fx01 title=None"],
        'xai/followup': [],
        'xai/structured': [],
        'perplexity-agent/cited_stream': [],
        'perplexity-agent/followup': [],
        'perplexity-agent/structured': [],
        'perplexity-sonar/cited': [],
        'perplexity-sonar/cited_stream': [],
        'perplexity-sonar/followup': [],
        'mistral/cited': [],
        'mistral/cited_stream': [],
        'mistral/followup': [],
        'mistral/structured': [],
        'cohere/cited': [],
        'cohere/cited_stream': [],
        'cohere/followup': [],
        'cohere/structured': [],
        'groq/cited': [],
        'groq/cited_stream': [],
        'groq/document': [],
        'groq/followup': [],
        'groq/structured': [],
        'perplexity-agent/cited': [],
    }
)

ARRIVALS = snapshot(
    {
        'anthropic-messages/cited_stream': ['part 3: part_end'],
        'bedrock-converse/cited_stream': ['part 0: part_end'],
        'openai-responses/cited_stream': ['part 2: part_end'],
        'openai-chat/cited_stream': ['part 0: part_end'],
        'openrouter/cited_stream': ['part 0: part_end'],
        'google-gemini/cited_stream': ['part 0: after_part_end', 'part 3: part_end'],
        'google-vertex/cited_stream': ['part 0: after_part_end', 'part 3: part_end'],
        'xai/cited_stream': ['part 0: part_end'],
        'perplexity-agent/cited_stream': [],
        'perplexity-sonar/cited_stream': [],
        'mistral/cited_stream': [],
        'cohere/cited_stream': [],
        'groq/cited_stream': [],
    }
)

OUTPUTS = snapshot(
    {
        'anthropic-messages/structured': [
            {
                'answer': '<cite index="0-1">Gull Point Light, first lit in 1791, is the oldest lighthouse on the coast.</cite>'
            }
        ],
        'bedrock-converse/structured': [
            {'answer': '<cite index="0-1">The fog bell is rung every 30 seconds in fog.</cite>'}
        ],
        'openai-responses/structured': [
            {
                'answer': 'Gull Point Light, first lit in 1791, is the oldest lighthouse on the coast. \ue200cite\ue202turn0search0\ue201'
            }
        ],
        'openai-chat/structured': [
            {
                'answer': 'Gull Point Light, first lit in 1791, is the oldest lighthouse on the coast. \ue200cite\ue202turn0search0\ue201'
            }
        ],
        'openrouter/structured': [
            {'answer': 'Gull Point Light, first lit in 1791, is the oldest lighthouse on the coast. [1]'}
        ],
        'google-gemini/structured': [
            {'answer': 'Gull Point Light, first lit in 1791, is the oldest lighthouse on the coast.'}
        ],
        'google-vertex/structured': [
            {'answer': 'Gull Point Light, first lit in 1791, is the oldest lighthouse on the coast.'}
        ],
        'xai/structured': [
            {
                'answer': 'Gull Point Light, first lit in 1791, is the oldest lighthouse on the coast.[[1]](https://example.com/lighthouses/gull-point)'
            }
        ],
        'perplexity-agent/structured': [
            {'answer': 'Gull Point Light, first lit in 1791, is the oldest lighthouse on the coast. [1]'}
        ],
        'mistral/structured': [
            {'answer': 'Gull Point Light, first lit in 1791, is the oldest lighthouse on the coast.'}
        ],
        'cohere/structured': [{'answer': 'The fog bell is rung every 30 seconds in fog.'}],
        'groq/structured': [{'answer': 'Gull Point Light, first lit in 1791, is the oldest lighthouse on the coast.'}],
    }
)


@pytest.mark.anyio
@pytest.mark.parametrize(('api', 'scenario'), ALL)
async def test_fixture_replays_through_real_model_class(api: ApiLabel, scenario: str) -> None:
    recording = load_fixture(api, scenario)
    assert recording.api == api
    assert recording.note
    assert describe_model(recording.model()).api == api
    if (api, scenario) in KNOWN_CRASHES:
        with pytest.raises(KNOWN_CRASHES[api, scenario]):
            await _replay(recording)
        return
    messages, arrivals = await _replay(recording)
    key = f'{api}/{scenario}'
    summary = _summary(messages)
    assert summary == CITATIONS[key]
    if api in NEVER_CITING:
        assert summary == []
    if recording.streamed:
        assert arrivals == ARRIVALS[key]
    if scenario == 'structured':
        response = [m for m in messages if isinstance(m, ModelResponse)][-1]
        args = [p.args_as_dict() for p in response.tool_calls]
        assert args == OUTPUTS[key]


@pytest.mark.anyio
async def test_history_probe_serves_second_turn() -> None:
    """The engine's history probe: `cited`, then `followup` with `message_history`, inspecting what was sent."""
    combined = load_fixtures('openai-responses', 'cited', 'followup')
    assert combined.scenario == 'cited'
    assert len(combined.responses) == 2
    sent: list[dict[str, JsonValue]] = []
    agent = Agent(combined.model(sent=sent))
    first = await agent.run(combined.prompt or '')
    second = await agent.run('Summarise.', message_history=first.all_messages())
    assert second.output.startswith('The Gull Point light')
    assert len(sent) == 2
    assert 'url_citation' not in json.dumps(sent[1])  # gpt-4o sends no item ids, so annotations are not replayed


@pytest.mark.anyio
async def test_perplexity_sonar_keeps_unmapped_search_results() -> None:
    result = await Agent(load_fixture('perplexity-sonar', 'cited').model()).run('Lighthouses?')
    response = result.all_messages()[-1]
    assert isinstance(response, ModelResponse)
    assert response.provider_details is not None
    unmapped = response.provider_details['unmapped']['response']
    assert unmapped['citations'] == snapshot(
        ['https://example.com/lighthouses/gull-point', 'https://example.org/coast/heritage-lights']
    )


# --- The loader --------------------------------------------------------------------------------------------------


def test_every_api_row_has_the_core_scenarios() -> None:
    assert {api: scenarios(api) for api in FIXTURE_APIS} == snapshot(
        {
            'anthropic-messages': ['cited', 'cited_stream', 'document', 'document_page', 'followup', 'structured'],
            'bedrock-converse': ['cited', 'cited_stream', 'document', 'followup', 'structured'],
            'openai-responses': ['cited', 'cited_stream', 'document', 'followup', 'structured'],
            'openai-chat': ['cited', 'cited_stream', 'followup', 'structured'],
            'openrouter': ['cited', 'cited_stream', 'followup', 'structured'],
            'google-gemini': ['cited', 'cited_stream', 'document', 'followup', 'structured'],
            'google-vertex': ['cited', 'cited_stream', 'document', 'followup', 'structured'],
            'xai': ['cited', 'cited_stream', 'document', 'followup', 'structured'],
            'perplexity-agent': ['cited', 'cited_stream', 'followup', 'structured'],
            'perplexity-sonar': ['cited', 'cited_stream', 'followup'],
            'mistral': ['cited', 'cited_stream', 'followup', 'structured'],
            'cohere': ['cited', 'cited_stream', 'followup', 'structured'],
            'groq': ['cited', 'cited_stream', 'document', 'followup', 'structured'],
        }
    )
    for api in FIXTURE_APIS:
        assert {'cited', 'cited_stream', 'followup'} <= set(scenarios(api))
        for scenario in scenarios(api):
            size = fixture_path(api, scenario).stat().st_size
            assert size < 8_000, f'{api}/{scenario} is {size} bytes: keep fixtures small'


def test_fixture_urls_are_example_domains() -> None:
    for api in FIXTURE_APIS:
        for scenario in scenarios(api):
            text = fixture_path(api, scenario).read_text('utf-8')
            for url in _urls(json.loads(text)):
                host = url.split('/')[2]
                assert host.endswith(('example.com', 'example.org')), f'{api}/{scenario}: {url}'


def _urls(value: object) -> Iterator[str]:
    if isinstance(value, str):
        if value.startswith(('http://', 'https://')):
            yield value
    elif isinstance(value, dict):
        for v in cast(dict[str, object], value).values():
            yield from _urls(v)
    elif isinstance(value, list):
        for v in cast(list[object], value):
            yield from _urls(v)


def test_unknown_api_or_scenario_is_misuse() -> None:
    with pytest.raises(UserError, match="'other'"):
        scenarios('other')
    with pytest.raises(UserError, match="'nope'"):
        load_fixture('anthropic-messages', 'nope')
    with pytest.raises(UserError, match='at least one'):
        load_fixtures('anthropic-messages')


@pytest.mark.parametrize(
    ('content', 'reason'),
    [
        pytest.param(b'{', 'malformed wire fixture', id='not-json'),
        pytest.param(b'[]', 'malformed wire fixture', id='not-object'),
        pytest.param(b'{"model_name": "m", "streamed": false, "note": "n"}', 'responses', id='no-responses'),
        pytest.param(
            b'{"model_name": "m", "streamed": false, "note": "n", "responses": []}', 'is empty', id='empty-responses'
        ),
        pytest.param(
            b'{"model_name": "m", "streamed": false, "note": "n", "responses": [{}]}', 'exactly one', id='no-body'
        ),
        pytest.param(
            b'{"model_name": "m", "streamed": false, "note": "n", "responses": [{"events": [{"type": "x"}]}]}',
            'not `streamed`',
            id='events-not-streamed',
        ),
        pytest.param(
            b'{"model_name": "m", "streamed": true, "note": "n", "responses": [{"body": {}}]}',
            'is `streamed`',
            id='body-streamed',
        ),
        pytest.param(
            b'{"model_name": "m", "streamed": true, "note": "n", "responses": [{"events": [{"no": "type"}]}]}',
            'no string `type`',
            id='event-without-type',
        ),
        pytest.param(
            b'{"model_name": "m", "streamed": true, "note": "n", "responses": [{"events": []}]}',
            'is empty',
            id='no-events',
        ),
        pytest.param(
            b'{"model_name": "m", "streamed": false, "note": "n", "extra": 1, "responses": [{"body": {}}]}',
            'extra',
            id='unknown-field',
        ),
    ],
)
def test_malformed_fixture_names_the_file(tmp_path: Path, content: bytes, reason: str) -> None:
    path = tmp_path / 'broken.json'
    with pytest.raises(RecordingError, match=reason) as info:
        parse_fixture('anthropic-messages', path, content)
    assert info.value.path == str(path)


def test_malformed_xai_and_bedrock_fixtures(tmp_path: Path) -> None:
    path = tmp_path / 'broken.json'
    bad_xai = b'{"model_name": "m", "streamed": false, "note": "n", "responses": [{"body": {"outputs": 3}}]}'
    with pytest.raises(RecordingError, match='GetChatCompletionResponse'):
        parse_fixture('xai', path, bad_xai)
    not_object = b'{"model_name": "m", "streamed": false, "note": "n", "responses": [{"body": [1]}]}'
    with pytest.raises(RecordingError, match='not an object'):
        parse_fixture('xai', path, not_object)
    not_event = b'{"model_name": "m", "streamed": true, "note": "n", "responses": [{"events": [3]}]}'
    with pytest.raises(RecordingError, match='event 0 is not an object'):
        parse_fixture('google-gemini', path, not_event)
    bad_bedrock = b'{"model_name": "m", "streamed": true, "note": "n", "responses": [{"events": [{"a": {}, "b": {}}]}]}'
    with pytest.raises(RecordingError, match='event type'):
        parse_fixture('bedrock-converse', path, bad_bedrock)


@settings(max_examples=50, deadline=None)
@given(st.binary(max_size=200) | st.text(max_size=200).map(str.encode))
def test_parse_fixture_never_crashes(data: bytes) -> None:
    with contextlib.suppress(RecordingError):
        parse_fixture('openai-chat', Path('fuzz.json'), data)


def test_render_events_numbers_responses_events_and_ends_chat_streams() -> None:
    responses = render_stream('openai-responses', [{'type': 'response.created'}, {'type': 'response.completed'}])
    assert responses.decode() == snapshot(
        """\
event: response.created
data: {"type": "response.created", "sequence_number": 0}

event: response.completed
data: {"type": "response.completed", "sequence_number": 1}

"""
    )
    chat = render_stream('groq', [{'choices': []}])
    assert chat.decode() == snapshot('data: {"choices": []}\n\ndata: [DONE]\n\n')
    google = render_stream('google-gemini', [{'candidates': []}])
    assert google.decode() == snapshot('data: {"candidates": []}\n\n')


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**31), 2**31) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=10,
)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.text(min_size=1, max_size=30), json_values), max_size=5))
def test_event_stream_round_trips(events: list[tuple[str, JsonValue]]) -> None:
    frames = decode_event_stream(encode_event_stream(events))
    assert [(f.headers[':event-type'], json.loads(f.payload)) for f in frames] == events
    assert all(f.headers[':message-type'] == 'event' for f in frames)
    assert all(f.headers[':content-type'] == 'application/json' for f in frames)


def test_bedrock_stream_fixture_decodes_like_a_recording() -> None:
    recording = load_fixture('bedrock-converse', 'cited_stream')
    frames = decode_event_stream(recording.responses[0].body)
    decoded = [{f.headers[':event-type']: json.loads(f.payload)} for f in frames]
    assert decoded == recording.responses[0].payload


# --- Honest fixtures: the same citation shapes as the real recordings --------------------------------------------

CASSETTES = 'pydantic-ai-cassettes/tests/models/cassettes'
VERCEL = 'vercel-ai-fixtures/packages'
REAL: dict[ApiLabel, list[str]] = {
    'anthropic-messages': [
        f'{CASSETTES}/test_anthropic/test_anthropic_document_citations.yaml',
        f'{CASSETTES}/test_anthropic/test_anthropic_document_citations_stream.yaml',
        f'{CASSETTES}/test_anthropic/test_anthropic_pdf_citations.yaml',
        f'{CASSETTES}/test_anthropic/test_anthropic_web_search_citations.yaml',
        f'{CASSETTES}/test_anthropic/test_anthropic_web_search_citations_stream.yaml',
    ],
    'bedrock-converse': [
        f'{CASSETTES}/test_bedrock/test_bedrock_document_citations_live.yaml',
        f'{CASSETTES}/test_bedrock/test_bedrock_document_citations_live_stream.yaml',
        f'{CASSETTES}/test_bedrock/test_bedrock_pdf_citations.yaml',
    ],
    'openai-responses': [
        f'{CASSETTES}/test_openai/test_openai_responses_web_search_citations.yaml',
        f'{CASSETTES}/test_openai/test_openai_responses_web_search_citations_stream.yaml',
        f'{CASSETTES}/test_openai_responses/test_openai_responses_model_file_search_tool_with_results.yaml',
        f'{VERCEL}/openai/src/responses/__fixtures__/openai-file-search-tool.1.json',
    ],
    'openrouter': [f'{CASSETTES}/test_openrouter/test_openrouter_web_search_annotations.yaml'],
    'google-gemini': [
        f'{CASSETTES}/test_google/test_google_gemini_web_search_citations.yaml',
        f'{CASSETTES}/test_google/test_google_model_file_search_tool.yaml',
        f'{CASSETTES}/test_google/test_google_model_web_fetch_tool.yaml',
    ],
    'google-vertex': [f'{CASSETTES}/test_google/test_google_vertex_web_search_citations_stream.yaml'],
    'xai': [f'{CASSETTES}/test_xai/test_xai_x_search_citations_recorded.xai.yaml'],
    'perplexity-sonar': [
        f'{VERCEL}/perplexity/src/__fixtures__/perplexity-citations.json',
        f'{VERCEL}/perplexity/src/__fixtures__/perplexity-citations.chunks.txt',
    ],
    'cohere': [f'{VERCEL}/cohere/src/__fixtures__/cohere-citations.json'],
}

Shapes = dict[str, set[frozenset[str]]]


def _find(value: object, key: str) -> Iterator[object]:
    """Every value stored under `key`, anywhere in a JSON value."""
    if isinstance(value, dict):
        for k, v in cast(dict[str, object], value).items():
            if k == key:
                yield v
            yield from _find(v, key)
    elif isinstance(value, list):
        for v in cast(list[object], value):
            yield from _find(v, key)


def _items(value: object, key: str) -> Iterator[dict[str, Any]]:
    """The objects under `key` (a single object, or the objects of a list)."""
    for found in _find(value, key):
        for item in found if isinstance(found, list) else [found]:  # pyright: ignore[reportUnknownVariableType]
            if isinstance(item, dict):
                yield item  # pyright: ignore[reportUnknownReturnType]


def _add(shapes: Shapes, kind: str, obj: dict[str, Any]) -> None:
    shapes.setdefault(kind, set()).add(frozenset(obj))


def _anthropic_shapes(payload: object, shapes: Shapes) -> None:
    for key in ('citations', 'citation'):
        for c in _items(payload, key):
            _add(shapes, str(c.get('type')), c)


def _bedrock_shapes(payload: object, shapes: Shapes) -> None:
    for key in ('citations', 'citation'):
        for c in _items(payload, key):
            location = c.get('location', {})
            _add(shapes, 'citation', c)
            for kind, inner in location.items():
                _add(shapes, f'location.{kind}', inner)


def _openai_shapes(payload: object, shapes: Shapes) -> None:
    for key in ('annotations', 'annotation'):
        for a in _items(payload, key):
            kind = str(a.get('type'))
            _add(shapes, kind, a)
            if isinstance(inner := a.get(kind), dict):
                _add(shapes, f'{kind}.inner', inner)  # pyright: ignore[reportUnknownArgumentType]


def _google_shapes(payload: object, shapes: Shapes) -> None:
    for chunk in _items(payload, 'groundingChunks'):
        for kind, inner in chunk.items():
            _add(shapes, f'chunk.{kind}', inner)
    for support in _items(payload, 'groundingSupports'):
        _add(shapes, 'support', support)
        _add(shapes, 'segment', support['segment'])


def _xai_shapes(payload: object, shapes: Shapes) -> None:
    for c in _items(payload, 'citations'):
        inline = 'start_index' in c
        (source,) = (k for k in c if k.endswith('_citation'))
        _add(
            shapes, 'inline' if inline else 'tool_output', {('<source>' if k == source else k): v for k, v in c.items()}
        )
        _add(shapes, 'web_or_x_source' if source in ('web_citation', 'x_citation') else source, c[source])


def _sonar_shapes(payload: object, shapes: Shapes) -> None:
    for found in _find(payload, 'citations'):
        assert isinstance(found, list)
        assert all(isinstance(u, str) for u in cast(list[object], found))
        shapes.setdefault('citations', set()).add(frozenset({'<list of url strings>'}))
    for r in _items(payload, 'search_results'):
        _add(shapes, 'search_result', r)


def _cohere_shapes(payload: object, shapes: Shapes) -> None:
    for c in _items(payload, 'citations'):
        _add(shapes, 'citation', c)
        for s in c.get('sources', []):
            _add(shapes, 'source', s)
            if isinstance(doc := s.get('document'), dict):
                _add(shapes, 'document', doc)  # pyright: ignore[reportUnknownArgumentType]


_SHAPE_READERS: dict[str, Callable[[object, Shapes], None]] = {
    'anthropic-messages': _anthropic_shapes,
    'bedrock-converse': _bedrock_shapes,
    'openai-responses': _openai_shapes,
    'openai-chat': _openai_shapes,
    'openrouter': _openai_shapes,
    'google-gemini': _google_shapes,
    'google-vertex': _google_shapes,
    'xai': _xai_shapes,
    'perplexity-sonar': _sonar_shapes,
    'cohere': _cohere_shapes,
}


def _shapes(api: ApiLabel, payload: object) -> Shapes:
    """Kind of citation object -> the key sets seen for it."""
    shapes: Shapes = {}
    if (reader := _SHAPE_READERS.get(api)) is not None:
        reader(payload, shapes)
    return shapes


def _merge(into: Shapes, shapes: Shapes) -> Shapes:
    for kind, key_sets in shapes.items():
        into.setdefault(kind, set()).update(key_sets)
    return into


def _fixture_shapes(api: ApiLabel) -> Shapes:
    shapes: Shapes = {}
    for scenario in scenarios(api):
        for response in load_fixture(api, scenario).responses:
            _merge(shapes, _shapes(api, response.payload))
    return shapes


def _real_payloads(corpus: Path, api: ApiLabel) -> Iterator[JsonValue]:
    for relative in REAL[api]:
        for response in load_recording(corpus / relative).responses:
            yield response.payload


# Documented fields the real recordings happen not to show: kind -> keys a fixture may add or leave out.
OPTIONAL_KEYS: dict[str, frozenset[str]] = {
    # Google: `startIndex` is omitted when 0; `confidenceScores` appear on web search supports (documented in
    # GroundingSupport); Vertex web chunks add `domain`; a retrieved context may name its `uri`, `title`,
    # `fileSearchStore`.
    'segment': frozenset({'startIndex'}),
    'support': frozenset({'confidenceScores'}),
    'chunk.web': frozenset({'domain'}),
    'chunk.retrievedContext': frozenset({'uri', 'title', 'fileSearchStore'}),
}


@pytest.mark.parametrize('api', list(REAL))
def test_fixture_citation_objects_match_real_recordings(corpus: Path, api: ApiLabel) -> None:
    real: Shapes = {}
    for payload in _real_payloads(corpus, api):
        _merge(real, _shapes(api, payload))
    fixture = _fixture_shapes(api)
    assert fixture, f'{api}: the fixtures hold no citation object'
    shared = set(fixture) & set(real)
    assert shared, f'{api}: no citation kind in common with the real recordings ({sorted(fixture)} vs {sorted(real)})'
    for kind in shared:
        optional = OPTIONAL_KEYS.get(kind, frozenset())
        real_sets = {keys - optional for keys in real[kind]}
        for keys in fixture[kind]:
            assert keys - optional in real_sets, (
                f'{api} {kind}: fixture keys {sorted(keys)} match no real object ({[sorted(k) for k in real_sets]})'
            )


def _event_kinds(api: ApiLabel, payload: JsonValue) -> list[str]:
    if not isinstance(payload, list):
        return []
    kinds: list[str] = []
    for event in payload:
        assert isinstance(event, dict)
        if api == 'bedrock-converse':
            kinds.extend(event)
        elif api == 'anthropic-messages' and isinstance(delta := event.get('delta'), dict) and 'type' in delta:
            kinds.append(f'{event["type"]}.{delta["type"]}')
        elif isinstance(kind := event.get('type'), str):
            kinds.append(kind)
    return kinds


def _citations_before_end(kinds: list[str], citation: str, end: str) -> bool:
    """Each citation event comes before the next end event."""
    pending = False
    for kind in kinds:
        if kind == citation:
            pending = True
        elif kind == end:
            pending = False
    return not pending and citation in kinds


STREAM_ORDER: dict[ApiLabel, tuple[str, str]] = {
    'anthropic-messages': ('content_block_delta.citations_delta', 'content_block_stop'),
    'openai-responses': ('response.output_text.annotation.added', 'response.output_text.done'),
    'bedrock-converse': ('contentBlockDelta', 'contentBlockStop'),
}


@pytest.mark.parametrize('api', list(STREAM_ORDER))
def test_fixture_stream_events_match_real_recordings(corpus: Path, api: ApiLabel) -> None:
    real_streams = [k for p in _real_payloads(corpus, api) if (k := _event_kinds(api, p))]
    fixture_stream = _event_kinds(api, load_fixture(api, 'cited_stream').responses[0].payload)
    assert real_streams
    real_kinds = {k for stream in real_streams for k in stream}
    assert set(fixture_stream) <= real_kinds, sorted(set(fixture_stream) - real_kinds)
    citation, end = STREAM_ORDER[api]
    for stream in [*real_streams, fixture_stream]:
        assert _citations_before_end(stream, citation, end)
        assert stream[-1] == {'anthropic-messages': 'message_stop', 'openai-responses': 'response.completed'}.get(
            api, stream[-1]
        )
