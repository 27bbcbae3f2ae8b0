from __future__ import annotations

import gzip
import json
from collections.abc import Callable
from importlib.resources import files
from pathlib import Path
from typing import Any

import httpx2
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from inline_snapshot import snapshot
from pydantic_ai import Agent
from pydantic_ai.exceptions import UserError
from pydantic_ai.messages import (
    Citation,
    MarkerCitationAnchor,
    ModelMessage,
    ModelResponse,
    TextPart,
    WebCitationSource,
)
from pydantic_ai.models.openai import OpenAIChatModel, OpenAIChatModelSettings, OpenAIResponsesModel
from pydantic_ai.providers.openai import OpenAIProvider

from pydantic_ai_citations import PerplexityTap, TrackCitations, perplexity_http_client
from pydantic_ai_citations.formats.numbered import NumberedMarker, extract_numbered
from pydantic_ai_citations.formats.perplexity import (
    AgentStreamCollector,
    ConflictingSourceIdError,
    apply_agent_api,
    apply_sonar,
    collect_response,
    recover_sonar,
)

FIXTURES = files('pydantic_ai_citations.matrix') / 'fixtures' / 'perplexity'
SHARED = Path(__file__).resolve().parents[1].parent / 'shared'


def fixture_bytes(name: str) -> bytes:
    return (FIXTURES / name).read_bytes()


def sse_events(raw: bytes) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    for block in raw.decode().split('\n\n'):
        data = [line[6:] for line in block.splitlines() if line.startswith('data: ')]
        if data and data[0] != '[DONE]':
            events.append(json.loads('\n'.join(data)))
    return events


def result(rid: Any, url: str, title: str = 't', snippet: str = 's') -> dict[str, Any]:
    return {'id': rid, 'url': url, 'title': title, 'snippet': snippet}


def delta(text: str, item_id: str = 'msg_1', content_index: int = 0) -> dict[str, Any]:
    return {'type': 'response.output_text.delta', 'item_id': item_id, 'content_index': content_index, 'delta': text}


def search(*results: dict[str, Any]) -> dict[str, Any]:
    return {'type': 'response.reasoning.search_results', 'results': list(results)}


COMPLETED: dict[str, Any] = {'type': 'response.completed', 'response': {'id': 'resp_1', 'status': 'completed'}}


# -- markers ---------------------------------------------------------------------------------------------------


def test_numbered_markers_in_perplexity_text():
    # Perplexity answers are read with the package's numbered rules (`formats.numbered`).
    assert extract_numbered('a [1] b[23][4] [x] [] [1234567] [٣]') == [
        NumberedMarker('[1]', (1,), 2, 5),
        NumberedMarker('[23]', (23,), 7, 11),
        NumberedMarker('[4]', (4,), 11, 14),
    ]


# -- collector rules -------------------------------------------------------------------------------------------


def test_results_accumulate_by_id_across_events_and_resorting_keeps_ids():
    c = AgentStreamCollector()
    c.feed_event(search(result(2, 'https://b'), result(1, 'https://a')))
    c.feed_event(delta('x [1] y [2]'))
    c.feed_event(search(result(3, 'https://c'), result(1, 'https://a'), result(2, 'https://b')))
    c.feed_event(delta(' z [3].'))
    assert list(c.results) == [2, 1, 3]
    assert c.links == {1: 'https://a', 2: 'https://b', 3: 'https://c'}
    assert [cit.sources[0].url for cit in c.citations() if isinstance(cit.sources[0], WebCitationSource)] == [
        'https://a',
        'https://b',
        'https://c',
    ]
    assert c.problems == []


def test_marker_split_across_deltas_and_unresolved_kept():
    c = AgentStreamCollector()
    c.feed_event(search(result(7, 'https://seven')))
    for piece in ['See [', '7', ']. Also [1', '2]', '.']:
        c.feed_event(delta(piece))
    assert c.text == 'See [7]. Also [12].'
    assert c.markers == [NumberedMarker('[7]', (7,), 4, 7), NumberedMarker('[12]', (12,), 14, 18)]
    assert c.links == {7: 'https://seven'}
    assert c.unresolved == [12]
    assert [p.code for p in c.problems] == ['unresolved_marker']
    assert (c.problems[0].start, c.problems[0].end) == (14, 18)
    # the unresolved marker is never re-pointed, even when a result with another id exists
    assert len(c.citations()) == 1


@pytest.mark.parametrize(
    'pieces',
    [
        pytest.param(['Use `a[3]` here [1].'], id='code-span'),
        pytest.param(['Use `a[', '3]` here [1].'], id='code-span-split'),
        pytest.param(['Example:\n```python\nx = a[3]\n```\nSee [1].'], id='fence'),
        pytest.param(['Example:\n``', '`\nx = a[3', ']\n``', '`\nSee [1].'], id='fence-split'),
    ],
)
def test_markers_in_code_are_not_citations(pieces: list[str]):
    c = AgentStreamCollector()
    c.feed_event(search(result(1, 'https://a')))
    for piece in pieces:
        c.feed_event(delta(piece))
    c.feed_event(COMPLETED)
    text = ''.join(pieces)
    start = text.index('[1]')
    assert c.markers == [NumberedMarker('[1]', (1,), start, start + 3)]
    assert c.unresolved == []
    assert c.problems == []
    assert c.links == {1: 'https://a'}
    assert c.citations() == [
        Citation(
            [WebCitationSource('https://a', title='t', excerpts=['s'])],
            anchor=MarkerCitationAnchor(start=start, end=start + 3),
        )
    ]


@pytest.mark.parametrize('end', ['completed', 'close'])
def test_marker_at_end_of_last_delta_found_at_the_end(end: str):
    c = AgentStreamCollector()
    c.feed_event(search(result(1, 'https://a')))
    c.feed_event(delta('Tides [1]. Also [2]'))
    # `[2]` ends the text so far: `[2](` would be a link, so it is not decided yet
    assert c.markers == [NumberedMarker('[1]', (1,), 6, 9)]
    assert c.unresolved == []
    if end == 'completed':
        c.feed_event(COMPLETED)
    else:
        c.close()
    assert c.markers == [NumberedMarker('[1]', (1,), 6, 9), NumberedMarker('[2]', (2,), 16, 19)]
    assert c.unresolved == [2]
    expected = ['unresolved_marker'] if end == 'completed' else ['unresolved_marker', 'stream_incomplete']
    assert [p.code for p in c.problems] == expected
    assert (c.problems[0].start, c.problems[0].end, c.problems[0].detail) == (16, 19, '[2]')
    [segment] = c.segments()
    assert segment.markers == c.markers
    assert [(cit.anchor.start, cit.anchor.end) for cit in segment.citations if cit.anchor] == [(6, 9)]


def test_final_body_text_taken_whole_ends_with_marker():
    c = collect_response(
        {
            'id': 'r',
            'status': 'completed',
            'output': [
                {'type': 'search_results', 'results': [result(4, 'https://d')]},
                {'type': 'message', 'id': 'msg_1', 'content': [{'type': 'output_text', 'text': 'Done [4]'}]},
            ],
        }
    )
    assert c.markers == [NumberedMarker('[4]', (4,), 5, 8)]
    assert c.links == {4: 'https://d'}


def test_delta_after_the_end_is_scanned_with_the_text():
    c = AgentStreamCollector()
    c.feed_event(search(result(1, 'https://a')))
    c.feed_event(delta('See [1]'))
    c.feed_event(COMPLETED)
    assert c.markers == [NumberedMarker('[1]', (1,), 4, 7)]
    # a protocol slip: text after the end; `[1](` turns the marker into a link
    c.feed_event(delta('(https://a) and [1]'))
    assert c.text == 'See [1](https://a) and [1]'
    assert c.markers == extract_numbered(c.text) == [NumberedMarker('[1]', (1,), 23, 26)]


def test_comma_list_marker_resolves_each_id():
    c = AgentStreamCollector()
    c.feed_event(search(result(1, 'https://a'), result(2, 'https://b')))
    c.feed_event(delta('Both [1, 2, 7, 1].', item_id='msg_a'))
    c.feed_event(COMPLETED)
    assert c.links == {1: 'https://a', 2: 'https://b'}
    assert c.unresolved == [7]
    [citation] = c.citations()
    assert [s.url for s in citation.sources if isinstance(s, WebCitationSource)] == ['https://a', 'https://b']
    response = ModelResponse(parts=[TextPart('Both [1, 2, 7, 1].', id='msg_a')])
    problems = apply_agent_api(response, c)
    assert [(p.code, p.part_index, p.start, p.end, p.detail) for p in problems] == [
        ('unresolved_marker', 0, 5, 17, '[1, 2, 7, 1]')
    ]
    part = response.parts[0]
    assert isinstance(part, TextPart)
    assert part.provider_details is not None
    assert part.provider_details['citations'] == [
        {'type': 'perplexity_search_result', 'id': 1, 'url': 'https://a', 'start': 5, 'end': 17},
        {'type': 'perplexity_search_result', 'id': 2, 'url': 'https://b', 'start': 5, 'end': 17},
    ]


def test_completed_only_after_response_completed():
    c = AgentStreamCollector()
    c.feed_event({'type': 'response.created', 'response': {'id': 'resp_9', 'status': 'in_progress'}})
    c.feed_event(delta('hi'))
    assert c.response_id == 'resp_9'
    assert not c.completed
    c.close()
    assert [p.code for p in c.problems] == ['stream_incomplete']
    c2 = AgentStreamCollector()
    c2.feed_event(COMPLETED)
    c2.close()
    assert c2.completed
    assert c2.problems == []


@pytest.mark.parametrize(
    'event',
    [
        pytest.param({'type': 'response.failed', 'error': {'message': 'boom', 'code': 'x'}}, id='failed'),
        pytest.param(
            {'type': 'response.failed', 'response': {'id': 'r', 'error': {'message': 'boom'}}}, id='failed-in-response'
        ),
        pytest.param({'type': 'error', 'message': 'boom'}, id='error'),
    ],
)
def test_error_events_are_provider_error_problems(event: dict[str, Any]):
    c = AgentStreamCollector()
    c.feed_event(event)
    assert [p.code for p in c.problems] == ['provider_error']
    assert 'boom' in c.problems[0].message
    assert not c.completed


def test_conflicting_id_is_reported_never_overwritten():
    c = AgentStreamCollector()
    c.feed_event(search(result(1, 'https://first')))
    c.feed_event(search(result(1, 'https://second')))
    c.feed_event(search(result(1, 'https://second'), result(1, 'https://first')))  # seen before: nothing new
    assert c.results[1].url == 'https://first'
    assert c.conflicts == {1: ('https://first', 'https://second')}
    assert [p.code for p in c.problems] == ['conflicting_source_id']
    c.feed_event(search(result(1, 'https://third')))
    assert c.conflicts == {1: ('https://first', 'https://second', 'https://third')}
    assert [p.message for p in c.problems][-1] == (
        "Search result id 1 arrived with two URLs ('https://second', then 'https://third'); "
        'markers citing [1] are linked to neither.'
    )


def anchored(text: str, citation: Citation) -> str:
    assert citation.anchor is not None
    return text[citation.anchor.start : citation.anchor.end]


def urls(citation: Citation) -> list[str]:
    return [s.url for s in citation.sources if isinstance(s, WebCitationSource)]


def test_conflicting_id_links_neither_url():
    """Seed rule: `[2]` whose result id arrived with two URLs cites neither; the marker is a problem, with offsets."""
    c = AgentStreamCollector()
    c.feed_event(search(result(1, 'https://a'), result(2, 'https://first')))
    c.feed_event(search(result(2, 'https://second')))
    c.feed_event(delta('One [1]. Two [2]. Both [1, 2].', item_id='msg_a'))
    c.feed_event(COMPLETED)
    assert c.links == {1: 'https://a'}
    assert c.unresolved == []
    assert [(anchored(c.text, cit), urls(cit)) for cit in c.citations()] == [
        ('[1]', ['https://a']),
        ('[1, 2]', ['https://a']),
    ]
    assert [(p.code, p.start, p.end, p.detail) for p in c.problems] == [
        ('conflicting_source_id', None, None, '2'),
        ('conflicting_source_id', 13, 16, '[2]'),
        ('conflicting_source_id', 23, 29, '[1, 2]'),
    ]
    assert "search result 2 arrived with different URLs ('https://first', 'https://second')" in c.problems[1].message
    response = ModelResponse(parts=[TextPart('One [1]. Two [2]. Both [1, 2].', id='msg_a')])
    problems = apply_agent_api(response, c)
    assert [(p.code, p.part_index, p.start) for p in problems] == [
        ('conflicting_source_id', None, None),
        ('conflicting_source_id', 0, 13),
        ('conflicting_source_id', 0, 23),
    ]
    part = response.parts[0]
    assert isinstance(part, TextPart)
    assert cited(part) == [('[1]', 'https://a'), ('[1, 2]', 'https://a')]
    assert part.provider_details is not None
    assert [(c['id'], c['url']) for c in part.provider_details['citations']] == [(1, 'https://a'), (1, 'https://a')]


def test_conflicting_id_strict_raises():
    c = AgentStreamCollector(strict=True)
    c.feed_event(search(result(1, 'https://first')))
    with pytest.raises(ConflictingSourceIdError, match='two URLs') as exc:
        c.feed_event(search(result(1, 'https://second')))
    assert exc.value.problem.code == 'conflicting_source_id'


def test_invalid_results_are_reported():
    c = AgentStreamCollector()
    c.feed_event(
        search(result('x', 'https://a'), result(True, 'https://a'), {'id': 2}, result('3', 'https://c'))  # type: ignore[arg-type]
    )
    c.feed_event({'type': 'response.reasoning.search_results', 'results': 'nope'})
    assert list(c.results) == [3]
    assert [p.code for p in c.problems] == ['invalid_search_result'] * 4


def test_collector_citations_shape():
    c = AgentStreamCollector()
    c.feed_event(search(result(1, 'https://a', title='A', snippet='')))
    c.feed_event(delta('Yes [1].'))
    assert c.citations() == [
        Citation([WebCitationSource('https://a', title='A')], anchor=MarkerCitationAnchor(start=4, end=7))
    ]


def test_agent_stream_fixture_through_collector():
    c = AgentStreamCollector()
    for event in sse_events(fixture_bytes('agent-api-stream.sse')):
        c.feed_event(event)
    c.close()
    assert c.completed
    assert c.response_id == 'resp_pplx_tides_stream'
    assert c.links == snapshot(
        {
            1: 'https://tides.example.org/moon-and-tides',
            2: 'https://ocean.example.net/spring-neap',
            3: 'https://coast.example.com/bay-of-fundy',
        }
    )
    assert c.unresolved == [9]
    assert [c.text[m.start : m.end] for m in c.markers] == ['[1]', '[2]', '[3]', '[2]', '[9]']
    assert [p.code for p in c.problems] == ['unresolved_marker']


def test_collect_response_non_streamed_fixture():
    c = collect_response(json.loads(fixture_bytes('agent-api-response.json')))
    assert c.completed
    assert c.links == {1: 'https://tides.example.org/moon-and-tides', 3: 'https://coast.example.com/bay-of-fundy'}
    assert c.unresolved == [5]
    assert [(cit.anchor.start, cit.anchor.end) for cit in c.citations() if cit.anchor] == [(33, 36), (81, 84)]


def test_collect_response_error_body():
    c = collect_response({'id': 'r', 'status': 'failed', 'error': {'message': 'quota'}, 'output': []})
    assert not c.completed
    assert [p.code for p in c.problems] == ['provider_error', 'stream_incomplete']


# -- property tests --------------------------------------------------------------------------------------------

json_leaf = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=10)
json_values = st.recursive(
    json_leaf,
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=8), children, max_size=3),
    max_leaves=12,
)
event_types = st.sampled_from(
    [
        'response.output_text.delta',
        'response.reasoning.search_results',
        'response.output_item.added',
        'response.output_item.done',
        'response.created',
        'response.completed',
        'response.failed',
        'error',
        'other',
    ]
)


def event(t: str, extra: dict[str, Any]) -> dict[str, Any]:
    return {**extra, 'type': t}


def result_obj(i: int, u: str) -> dict[str, Any]:
    return {'id': i, 'url': u, 'title': 't', 'snippet': 's'}


events = st.builds(
    event,
    event_types,
    st.dictionaries(
        st.sampled_from(['delta', 'results', 'item', 'response', 'error', 'item_id', 'content_index', 'message']),
        json_values,
        max_size=4,
    ),
)
result_objs = st.builds(
    result_obj,
    st.integers(0, 5),
    st.sampled_from(['https://a', 'https://b']),
)


@settings(max_examples=120, deadline=None)
@given(st.lists(events | st.builds(search, result_objs) | st.builds(delta, st.text(max_size=20)), max_size=15))
def test_arbitrary_event_sequences_never_crash(seq: list[dict[str, Any]]):
    c = AgentStreamCollector()
    for event in seq:
        c.feed_event(event)
    c.close()
    text = c.text
    for m in c.markers:
        assert 0 <= m.start < m.end <= len(text)
        assert text[m.start : m.end] == m.raw
    for cit in c.citations():
        assert cit.anchor is not None
        assert 0 <= cit.anchor.start < cit.anchor.end <= len(text)
    for p in c.problems:
        if p.start is not None and p.end is not None:
            assert 0 <= p.start < p.end <= len(text)


marker_text = st.lists(
    st.sampled_from(['[', ']', '1', '23', '[4]', '[12', 'x', ' ', 'é', '٣', '1234567']) | st.text(max_size=4),
    max_size=20,
).map(''.join)


@settings(max_examples=300, deadline=None)
@given(marker_text, st.data())
def test_any_split_gives_same_markers(text: str, data: st.DataObject):
    cuts = sorted(data.draw(st.lists(st.integers(0, len(text)), max_size=8)))
    pieces = [text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)], strict=True)]
    c = AgentStreamCollector()
    for piece in pieces:
        c.feed_event(delta(piece))
    assert c.text == text
    expected = extract_numbered(text)
    # before the end, only decided markers: all but possibly the one at the very end of the text
    assert c.markers == expected[: len(c.markers)]
    assert len(c.markers) >= len(expected) - 1
    c.close()
    assert c.markers == expected
    for m in c.markers:
        assert 0 <= m.start < m.end <= len(text)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 6), st.sampled_from(['https://a', 'https://b'])), min_size=1, max_size=12))
def test_conflicting_ids_always_reported(pairs: list[tuple[int, str]]):
    c = AgentStreamCollector()
    for rid, url in pairs:
        c.feed_event(search(result(rid, url)))
    first: dict[int, str] = {}
    seen: dict[int, list[str]] = {}
    for rid, url in pairs:
        first.setdefault(rid, url)
        if url not in seen.setdefault(rid, []):
            seen[rid].append(url)
    assert {k: v.url for k, v in c.results.items()} == first
    assert c.conflicts == {rid: tuple(urls) for rid, urls in seen.items() if len(urls) > 1}
    assert sum(p.code == 'conflicting_source_id' for p in c.problems) == sum(len(u) - 1 for u in seen.values())


@settings(max_examples=100, deadline=None)
@given(st.permutations(list(range(1, 7))), st.permutations(list(range(1, 7))))
def test_resorted_results_keep_ids(order_a: list[int], order_b: list[int]):
    c = AgentStreamCollector()
    c.feed_event(search(*[result(i, f'https://r{i}') for i in order_a]))
    c.feed_event(search(*[result(i, f'https://r{i}') for i in order_b]))
    c.feed_event(delta(''.join(f'[{i}]' for i in range(1, 7))))
    c.feed_event(COMPLETED)  # `[6]` ends the text: the end of the response decides it
    assert c.links == {i: f'https://r{i}' for i in range(1, 7)}
    assert c.problems == []


# -- through Pydantic AI: the tap ------------------------------------------------------------------------------


def agent_handler(stream_name: str, json_name: str) -> Callable[[httpx2.Request], httpx2.Response]:
    def handler(request: httpx2.Request) -> httpx2.Response:
        if json.loads(request.content).get('stream'):
            return httpx2.Response(
                200, headers={'content-type': 'text/event-stream'}, content=fixture_bytes(stream_name)
            )
        return httpx2.Response(200, headers={'content-type': 'application/json'}, content=fixture_bytes(json_name))

    return handler


def perplexity_agent(tap: PerplexityTap, handler: Callable[[httpx2.Request], httpx2.Response]) -> Agent[None, str]:
    client = perplexity_http_client(tap, transport=httpx2.MockTransport(handler))
    provider = OpenAIProvider(base_url='https://api.perplexity.ai/v1', api_key='x', http_client=client)
    return Agent(OpenAIResponsesModel('sonar-pro', provider=provider))


def cited(part: TextPart) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    for cit in part.citations or []:
        assert cit.anchor is not None
        source = cit.sources[0]
        assert isinstance(source, WebCitationSource)
        out.append((part.content[cit.anchor.start : cit.anchor.end], source.url))
    return out


@pytest.mark.anyio
async def test_end_to_end_streamed():
    tap = PerplexityTap()
    agent = perplexity_agent(tap, agent_handler('agent-api-stream.sse', 'agent-api-response.json'))
    async with agent.run_stream('What causes tides?') as result:
        await result.get_output()
    response = result.all_messages()[-1]
    assert isinstance(response, ModelResponse)
    part = response.parts[0]
    assert isinstance(part, TextPart)
    assert part.citations is None  # Pydantic AI alone drops the Perplexity events
    collector = tap.collector_for(response.provider_response_id)
    assert collector is not None
    assert collector.completed
    problems = apply_agent_api(response, collector)
    assert [(p.code, p.part_index, p.detail) for p in problems] == [('unresolved_marker', 0, '[9]')]
    assert cited(part) == snapshot(
        [
            ('[1]', 'https://tides.example.org/moon-and-tides'),
            ('[2]', 'https://ocean.example.net/spring-neap'),
            ('[3]', 'https://coast.example.com/bay-of-fundy'),
            ('[2]', 'https://ocean.example.net/spring-neap'),
        ]
    )
    # in place: the history the run handed out shows the citations
    last = result.all_messages()[-1]
    assert isinstance(last, ModelResponse)
    assert last.parts[0] is part
    assert part.provider_details is not None
    assert part.provider_details['citations'][0] == {
        'type': 'perplexity_search_result',
        'id': 1,
        'url': 'https://tides.example.org/moon-and-tides',
        'start': 46,
        'end': 49,
    }


@pytest.mark.anyio
async def test_end_to_end_non_streamed():
    tap = PerplexityTap()
    agent = perplexity_agent(tap, agent_handler('agent-api-stream.sse', 'agent-api-response.json'))
    result = await agent.run('What causes tides?')
    response = result.response
    collector = tap.collector_for(response.provider_response_id)
    assert collector is not None
    problems = apply_agent_api(response, collector)
    assert [(p.code, p.detail) for p in problems] == [('unresolved_marker', '[5]')]
    part = response.parts[0]
    assert isinstance(part, TextPart)
    assert cited(part) == snapshot(
        [('[1]', 'https://tides.example.org/moon-and-tides'), ('[3]', 'https://coast.example.com/bay-of-fundy')]
    )


@pytest.mark.anyio
async def test_non_streamed_without_stripping_crashes_pydantic_ai():
    """Documents why the tap strips Perplexity-only output items by default (pydantic-ai 2.68, openai 3.57)."""
    tap = PerplexityTap(strip_unknown_output_items=False)
    agent = perplexity_agent(tap, agent_handler('agent-api-stream.sse', 'agent-api-response.json'))
    with pytest.raises(TypeError):
        await agent.run('What causes tides?')
    assert tap.collector_for('resp_pplx_tides_json') is not None


@pytest.mark.anyio
async def test_tap_streams_bytes_unchanged_and_gzip_json():
    tap = PerplexityTap()
    raw_json = fixture_bytes('agent-api-response.json')

    def handler(request: httpx2.Request) -> httpx2.Response:
        assert request.headers['accept-encoding'] == 'identity'
        if request.url.path.endswith('/agent'):
            return httpx2.Response(
                200,
                headers={'content-type': 'application/json', 'content-encoding': 'gzip'},
                content=gzip.compress(raw_json),
            )
        return httpx2.Response(
            200, headers={'content-type': 'text/event-stream'}, content=fixture_bytes('agent-api-stream.sse')
        )

    async with perplexity_http_client(tap, transport=httpx2.MockTransport(handler)) as client:
        streamed = b''
        async with client.stream('POST', 'https://api.perplexity.ai/v1/responses', json={}) as response:
            async for chunk in response.aiter_bytes():
                streamed += chunk
        assert streamed == fixture_bytes('agent-api-stream.sse')
        response = await client.post('https://api.perplexity.ai/v1/agent', json={})
        body = response.json()
        assert [item['type'] for item in body['output']] == ['message']
    assert tap.collector_for('resp_pplx_tides_stream') is not None
    json_collector = tap.collector_for('resp_pplx_tides_json')
    assert json_collector is not None
    assert json_collector.links == {
        1: 'https://tides.example.org/moon-and-tides',
        3: 'https://coast.example.com/bay-of-fundy',
    }


@pytest.mark.anyio
async def test_tap_ignores_other_hosts_errors_and_evicts():
    tap = PerplexityTap(max_responses=2)
    n = 0

    def handler(request: httpx2.Request) -> httpx2.Response:
        nonlocal n
        if request.url.host != 'api.perplexity.ai':
            return httpx2.Response(
                200, headers={'content-type': 'application/json'}, json={'id': 'other', 'output': []}
            )
        if request.url.path.endswith('/bad'):
            return httpx2.Response(500, json={'error': 'x'})
        n += 1
        return httpx2.Response(
            200, headers={'content-type': 'application/json'}, json={'id': f'r{n}', 'status': 'completed'}
        )

    async with perplexity_http_client(tap, transport=httpx2.MockTransport(handler)) as client:
        await client.post('https://api.example.com/v1/responses', json={})
        assert (await client.post('https://api.perplexity.ai/v1/bad', json={})).status_code == 500
        for _ in range(3):
            await client.post('https://api.perplexity.ai/v1/responses', json={})
    assert tap.collector_for('other') is None
    assert tap.collector_for('r1') is None  # evicted
    assert tap.collector_for('r3') is not None
    popped = tap.pop('r2')
    assert popped is not None
    assert tap.collector_for('r2') is None
    assert tap.collector_for(None) is None
    assert tap.pop(None) is None


def test_tap_misuse():
    with pytest.raises(UserError, match='max_responses'):
        PerplexityTap(max_responses=0)


def test_apply_agent_api_mismatch_and_existing_citations():
    c = AgentStreamCollector()
    c.feed_event(search(result(1, 'https://a')))
    c.feed_event(delta('A [1].', item_id='msg_a'))
    c.feed_event(delta('B [1].', item_id='msg_b'))
    existing = [Citation([WebCitationSource('https://kept')])]
    response = ModelResponse(
        parts=[
            TextPart('A [1]. edited', id='msg_a'),
            TextPart('B [1].', id='msg_b', citations=existing),
        ]
    )
    problems = apply_agent_api(response, c)
    assert [(p.code, p.part_index) for p in problems] == [('unmapped_provider_citation', 0)]
    assert response.parts[0].citations is None  # type: ignore[union-attr]
    assert response.parts[1].citations is existing  # type: ignore[union-attr]


# -- Sonar chat completions ------------------------------------------------------------------------------------


def sonar_agent(json_body: bytes, sse_body: bytes) -> Agent[None, str]:
    def handler(request: httpx2.Request) -> httpx2.Response:
        if json.loads(request.content).get('stream'):
            return httpx2.Response(200, headers={'content-type': 'text/event-stream'}, content=sse_body)
        return httpx2.Response(200, headers={'content-type': 'application/json'}, content=json_body)

    client = httpx2.AsyncClient(transport=httpx2.MockTransport(handler))
    provider = OpenAIProvider(base_url='https://api.perplexity.ai', api_key='x', http_client=client)
    return Agent(
        OpenAIChatModel('sonar', provider=provider),
        model_settings=OpenAIChatModelSettings(openai_include_unmapped_response_data=True),
    )


async def last_message(agent: Agent[None, str], stream: bool) -> ModelMessage:
    """Run `agent` on 'q', streamed or not; return the last message of the run."""
    if stream:
        async with agent.run_stream('q') as result:
            await result.get_output()
        return result.all_messages()[-1]
    return (await agent.run('q')).response


@pytest.mark.anyio
@pytest.mark.parametrize('stream', [False, True])
async def test_sonar_fixture(stream: bool):
    agent = sonar_agent(fixture_bytes('sonar-chat.json'), fixture_bytes('sonar-chat-stream.sse'))
    response = await last_message(agent, stream)
    assert isinstance(response, ModelResponse)
    problems = apply_sonar(response)
    assert [(p.code, p.detail) for p in problems] == [('unresolved_marker', '[4]')]
    part = response.parts[0]
    assert isinstance(part, TextPart)
    assert cited(part) == snapshot(
        [
            ('[1]', 'https://ocean.example.net/spring-neap'),
            ('[2]', 'https://coast.example.com/bay-of-fundy'),
            ('[1]', 'https://ocean.example.net/spring-neap'),
        ]
    )
    assert part.citations is not None
    assert part.citations[0].sources[0].title == 'Spring and neap tides explained'


def test_sonar_without_unmapped_data_and_bad_sources():
    assert recover_sonar(ModelResponse(parts=[TextPart('a [1]')])) == ({}, [])
    response = ModelResponse(
        parts=[TextPart('a [1] b [2]')],
        provider_details={
            'unmapped': {
                'response': {
                    'citations': ['https://a', 5],
                    'search_results': [{'url': 'https://other', 'title': 'T'}],
                }
            }
        },
    )
    by_part, problems = recover_sonar(response)
    assert [p.code for p in problems] == ['conflicting_source_id', 'invalid_search_result', 'unresolved_marker']
    assert by_part[0][0].sources[0].title is None


@pytest.mark.anyio
@pytest.mark.parametrize('stream', [False, True])
async def test_sonar_real_recording(stream: bool):
    root = SHARED / 'corpus' / 'vercel-ai-fixtures'
    found = sorted(root.rglob('perplexity-citations.json')) if root.is_dir() else []
    if not found:
        pytest.skip(f'Vercel AI fixtures not found under {root} (CI places ../shared beside the checkout)')
    body = found[0].read_bytes()
    chunks = found[0].with_name('perplexity-citations.chunks.txt').read_text()
    sse = ''.join(f'data: {line}\n\n' for line in chunks.splitlines() if line.strip()) + 'data: [DONE]\n\n'
    agent = sonar_agent(body, sse.encode())
    response = await last_message(agent, stream)
    assert isinstance(response, ModelResponse)
    part = response.parts[0]
    assert isinstance(part, TextPart)
    assert part.citations is None  # Pydantic AI 2.68 alone maps nothing
    assert apply_sonar(response) == []
    pairs = cited(part)
    urls = json.loads(body)['citations'] if not stream else json.loads(chunks.splitlines()[-1])['citations']
    for marker, url in pairs:
        assert url == urls[int(marker[1:-1]) - 1]
    if stream:
        assert [m for m, _ in pairs] == ['[2]', '[3]']
    else:
        assert len(pairs) == 13
        assert pairs[0] == ('[2]', 'https://en.wikipedia.org/wiki/San_Francisco')


# -- edge cases of the collector and the tap -------------------------------------------------------------------


def test_collector_bad_inputs():
    c = AgentStreamCollector()
    c.feed_event(['not', 'an', 'object'])  # type: ignore[arg-type]
    c.feed_response('nope')  # type: ignore[arg-type]
    c.feed_event(
        {'type': 'response.output_item.done', 'item': {'type': 'search_results', 'results': [result(4, 'https://d')]}}
    )
    c.feed_event(delta('streamed [4]'))
    c.feed_event(
        {
            'type': 'response.completed',
            'response': {
                'id': 'r',
                'output': [
                    'junk',
                    {
                        'type': 'message',
                        'id': 'msg_1',
                        'content': [{'type': 'output_text', 'text': 'different'}, {'type': 'refusal'}],
                    },
                ],
            },
        }
    )
    assert c.links == {4: 'https://d'}
    assert c.text == 'streamed [4]'
    assert [p.code for p in c.problems] == ['unreadable_raw_data', 'unreadable_raw_data', 'unmapped_provider_citation']


@pytest.mark.anyio
@pytest.mark.parametrize(
    ('encoding', 'body', 'expected'),
    [
        pytest.param('gzip', gzip.compress(fixture_bytes('agent-api-stream.sse')), [], id='gzip'),
        pytest.param('br', b'\x00\x01', ['unreadable_raw_data', 'stream_incomplete'], id='br'),
        pytest.param('gzip', b'not gzip', ['unreadable_raw_data', 'stream_incomplete'], id='bad-gzip'),
    ],
)
async def test_tap_stream_encodings(encoding: str, body: bytes, expected: list[str]):
    tap = PerplexityTap()

    def handler(request: httpx2.Request) -> httpx2.Response:
        # a stream, so the mock does not decode (and reject) the body itself
        return httpx2.Response(
            200,
            headers={'content-type': 'text/event-stream', 'content-encoding': encoding},
            stream=httpx2.ByteStream(body),
        )

    client = perplexity_http_client(tap, transport=httpx2.MockTransport(handler))
    async with client, client.stream('POST', 'https://api.perplexity.ai/v1/responses', json={}) as response:
        raw = b''.join([chunk async for chunk in response.aiter_raw()])
    assert raw == body
    if not expected:
        collector = tap.collector_for('resp_pplx_tides_stream')
        assert collector is not None
        assert collector.completed
        assert collector.unresolved == [9]
    else:
        assert [p.code for p in tap.problems] == expected  # no response id: the tap keeps the problems


@pytest.mark.anyio
async def test_tap_unreadable_bodies():
    tap = PerplexityTap()
    bodies = {
        '/v1/responses': (
            b'data: [1, 2]\n\ndata: {"type": "response.created", "response": {"id": "r_sse"}}\n\ndata: {bad',
            'text/event-stream',
        ),
        '/v1/agent': (b'[1, 2]', 'application/json'),
        '/v1/other/responses': (b'plain', 'text/plain'),
    }

    def handler(request: httpx2.Request) -> httpx2.Response:
        body, content_type = bodies[request.url.path]
        return httpx2.Response(200, headers={'content-type': content_type}, content=body)

    async with perplexity_http_client(tap, transport=httpx2.MockTransport(handler)) as client:
        async with client.stream('POST', 'https://api.perplexity.ai/v1/responses', json={}) as response:
            await response.aread()
        assert (await client.post('https://api.perplexity.ai/v1/agent', json={})).content == b'[1, 2]'
        assert (await client.post('https://api.perplexity.ai/v1/other/responses', json={})).content == b'plain'
    collector = tap.collector_for('r_sse')
    assert collector is not None
    assert [p.code for p in collector.problems] == ['unreadable_raw_data', 'unreadable_raw_data', 'stream_incomplete']
    assert [p.code for p in tap.problems] == ['unreadable_raw_data']


def _conflicting_stream() -> bytes:
    """The Agent API stream fixture with a second search event that re-sends result 2 with another URL."""
    blocks = fixture_bytes('agent-api-stream.sse').decode().split('\n\n')
    at = next(i for i, b in enumerate(blocks) if 'response.reasoning.search_results' in b) + 1
    extra = search(result(2, 'https://elsewhere.example.com/other-page'))
    blocks.insert(at, f'event: {extra["type"]}\ndata: {json.dumps(extra)}')
    return '\n\n'.join(blocks).encode()


def _conflicting_handler(request: httpx2.Request) -> httpx2.Response:
    return httpx2.Response(200, headers={'content-type': 'text/event-stream'}, content=_conflicting_stream())


@pytest.mark.anyio
async def test_conflicting_urls_through_track_citations_link_neither():
    tap = PerplexityTap()
    track = TrackCitations(perplexity_tap=tap)
    client = perplexity_http_client(tap, transport=httpx2.MockTransport(_conflicting_handler))
    provider = OpenAIProvider(base_url='https://api.perplexity.ai/v1', api_key='x', http_client=client)
    agent = Agent(OpenAIResponsesModel('sonar-pro', provider=provider), capabilities=[track])
    async with agent.run_stream('What causes tides?') as result:
        await result.get_output()
    run = track.report(result)
    answer = run.answer
    linked = {source.url for source in answer.sources}
    assert 'https://ocean.example.net/spring-neap' not in linked
    assert 'https://elsewhere.example.com/other-page' not in linked
    assert 'https://tides.example.org/moon-and-tides' in linked  # the other ids are still linked
    conflicts = [p for p in run.problems if p.code == 'conflicting_source_id']
    assert len(conflicts) == 3  # the id itself, then each of the two `[2]` markers (offsets into part 0)
    for problem in conflicts[1:]:
        assert problem.part_index == 0 and problem.start is not None and problem.end is not None
        assert answer.text[problem.start : problem.end] == '[2]'


@pytest.mark.anyio
async def test_conflicting_urls_strict_tap_raises():
    tap = PerplexityTap(strict=True)
    client = perplexity_http_client(tap, transport=httpx2.MockTransport(_conflicting_handler))
    provider = OpenAIProvider(base_url='https://api.perplexity.ai/v1', api_key='x', http_client=client)
    agent = Agent(
        OpenAIResponsesModel('sonar-pro', provider=provider), capabilities=[TrackCitations(perplexity_tap=tap)]
    )
    with pytest.raises(ConflictingSourceIdError, match='two URLs'):
        async with agent.run_stream('What causes tides?') as result:
            await result.get_output()
