"""AG-UI: every citation reaches the client (late ones too), text deltas carry no markup, completeness is honest."""

from __future__ import annotations

import json
import warnings
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import pytest
from _scripted import ScriptedModel, Step
from ag_ui.core import (
    AssistantMessage,
    BaseEvent,
    CustomEvent,
    EventType,
    TextMessageContentEvent,
    TextMessageEndEvent,
    TextMessageStartEvent,
)
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic_ai import (
    Agent,
    Citation,
    ContentCitationAnchor,
    ModelMessage,
    ModelResponse,
    RunContext,
    TextPart,
    ToolCallPart,
    WebCitationSource,
)
from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.messages import MarkerCitationAnchor
from pydantic_ai.models import ModelRequestContext
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.ui.ag_ui import AGUIEventStream

from pydantic_ai_citations import CitedAnswer, TrackCitations
from pydantic_ai_citations.formats.markup import scan_markup
from pydantic_ai_citations.testing import (
    CITING_STYLES,
    CitingModel,
    CitingStyle,
    ScriptedCitation,
    load_recording,
)
from pydantic_ai_citations.ui import (
    CITATIONS_EVENT_NAME,
    CITED_ANSWER_EVENT_NAME,
    CitedAGUIAdapter,
    CitedAGUIEventStream,
    cited_answer_event,
)

pytestmark = pytest.mark.anyio

TEXT = 'K2 is 8,611 m tall. It lies on the China–Pakistan border.'
WIKI = WebCitationSource('https://en.wikipedia.org/wiki/K2', title='K2 - Wikipedia')
BORDER = WebCitationSource('https://example.com/border', title='Border')
CITES = [ScriptedCitation('K2 is 8,611 m tall.', [WIKI]), ScriptedCitation('China–Pakistan border', [BORDER])]
PRIVATE_USE = ('\ue200', '\ue201', '\ue202')


def citing(style: CitingStyle = 'google', **kwargs: Any) -> Agent[None, str]:
    return Agent(CitingModel(TEXT, CITES, style=style, **kwargs))


async def agui_events(
    agent: Agent[Any, str], stream: AGUIEventStream[Any, str] | None = None, **kwargs: Any
) -> list[BaseEvent]:
    event_stream = stream if stream is not None else CitedAGUIEventStream[Any, str]()
    async with agent.run_stream_events('q', **kwargs) as events:
        return [event async for event in event_stream.transform_stream(events)]


def _types(events: Sequence[BaseEvent]) -> list[str]:
    return [e.name if isinstance(e, CustomEvent) else str(e.type.value) for e in events]


def citation_events(events: Sequence[BaseEvent]) -> list[CustomEvent]:
    return [e for e in events if isinstance(e, CustomEvent) and e.name == CITATIONS_EVENT_NAME]


def received_text(events: Sequence[BaseEvent], message_id: str | None = None) -> str:
    return ''.join(
        e.delta
        for e in events
        if isinstance(e, TextMessageContentEvent) and (message_id is None or e.message_id == message_id)
    )


def anchored(event: CustomEvent, text: str) -> list[tuple[str, str]]:
    """(the words each citation's anchor covers in the received text, a source's URL or document id), per source."""
    out: list[tuple[str, str]] = []
    for citation in event.value['citations']:
        anchor = citation['anchor']
        if anchor is not None:
            for source in citation['sources']:
                out.append((text[anchor['start'] : anchor['end']], source.get('url') or source.get('document_id')))
    return out


async def test_stock_stream_sends_no_citations():
    """The gap: AG-UI has no citation carrier, so the stock stream sends none of them."""
    events = await agui_events(citing('anthropic'), AGUIEventStream[Any, str]())
    assert 'CUSTOM' not in _types(events)
    assert 'citations' not in json.dumps([e.model_dump(mode='json') for e in events])


async def test_google_late_citations_reach_the_client():
    events = await agui_events(citing('google', part_after_text=True))
    types = _types(events)
    # The citations arrived after the text part ended and after the search call that followed it.
    assert types.index(CITATIONS_EVENT_NAME) > types.index('TOOL_CALL_RESULT') > types.index('TEXT_MESSAGE_END')
    assert types.count(CITATIONS_EVENT_NAME) == 1
    end = next(e for e in events if isinstance(e, TextMessageEndEvent))
    (event,) = citation_events(events)
    assert event.value['message_id'] == end.message_id
    assert event.value['provider_name'] == 'google'
    text = received_text(events)
    assert text == TEXT
    assert anchored(event, text) == [
        ('K2 is 8,611 m tall.', 'https://en.wikipedia.org/wiki/K2'),
        ('China–Pakistan border', 'https://example.com/border'),
    ]
    assert event.timestamp is not None
    # The wire encoding is valid AG-UI SSE.
    encoded = CitedAGUIEventStream[Any, str]().encode_event(event)
    assert encoded.startswith('data: ')
    assert json.loads(encoded[6:])['name'] == CITATIONS_EVENT_NAME


@pytest.mark.parametrize('style', CITING_STYLES)
async def test_every_style_citations_match_the_answer(style: CitingStyle):
    """Each style's citations reach the client once, on the text it received, as `CitedAnswer` reads them."""
    agent = citing(style)
    events = await agui_events(agent)
    answer = CitedAnswer.from_result(await citing(style).run('q'))
    text = received_text(events)
    assert text == answer.text
    (event,) = citation_events(events)
    assert _types(events).index(CITATIONS_EVENT_NAME) > _types(events).index('TEXT_MESSAGE_END')
    spans = {
        (answer.span_text(s), answer.source(s.sources[0]).url or answer.source(s.sources[0]).document_id)
        for s in answer.spans
    }
    assert set(anchored(event, text)) == spans
    unanchored = [c for c in event.value['citations'] if c['anchor'] is None]
    assert len(unanchored) == (0 if answer.spans else len(event.value['citations']))


UNRESOLVED = '\ue200cite\ue202turn0search0\ue201'  # a marker no source resolves: removed, with the space before it
MARKED_TEXTS = [
    pytest.param(f'K2 is tall. {UNRESOLVED} End, China border.', id='marker-opens-a-part'),
    pytest.param(f'K2 is tall {UNRESOLVED}China border, it is.', id='marker-ends-a-part'),
]
MARKED_CITES = [ScriptedCitation('K2 is tall', [WIKI]), ScriptedCitation('China border', [BORDER])]
MARKUP_PIECES = st.sampled_from(
    ['K2 ', 'is tall', '. ', ' ', UNRESOLVED, '\ue200cite\ue202turn9', '\ue201', '【4:0†src】', '【4:0']
    + ['(cite index="0-1">', '</cite>', '<cite>', '\n']
)
"""Pieces of text and citation markup (well-formed, cut off, stray) that make hostile answers."""


@pytest.mark.parametrize('chunk_size', [1, 5, 16])
@pytest.mark.parametrize('text', MARKED_TEXTS)
@pytest.mark.parametrize('style', CITING_STYLES)
async def test_a_removed_marker_beside_part_boundaries(style: CitingStyle, text: str, chunk_size: int):
    """Anthropic and Bedrock split the text at each cited stretch, so a removed marker sits at a part's edge: the
    client receives the answer's own text, and each anchor covers the words `CitedAnswer` anchors."""

    def model() -> CitingModel:
        return CitingModel(text, MARKED_CITES, style=style, chunk_size=chunk_size)

    events = await agui_events(Agent(model(), capabilities=[TrackCitations()]))
    answer = CitedAnswer.from_result(await Agent(model(), capabilities=[TrackCitations()]).run('q'))
    received = received_text(events)
    assert received == answer.text
    assert UNRESOLVED not in received and '  ' not in received
    spans = [(answer.span_text(s), answer.source(s.sources[0]).url) for s in answer.spans]
    assert anchored(citation_events(events)[-1], received) == spans
    if style in ('anthropic', 'bedrock', 'google'):  # these anchor the cited words (the others a marker or nothing)
        assert spans == [('K2 is tall', WIKI.url), ('China border', BORDER.url)]


@pytest.mark.parametrize('text', MARKED_TEXTS)
@pytest.mark.parametrize('style', CITING_STYLES)
async def test_dump_messages_strips_markup_as_the_stream_does(style: CitingStyle, text: str):
    """History shown in the client (`dump_messages`) reads as the streamed answer did: no markup, even across
    Anthropic's and Bedrock's part boundaries."""

    def agent() -> Agent[None, str]:
        return Agent(CitingModel(text, MARKED_CITES, style=style), capabilities=[TrackCitations()])

    events = await agui_events(agent())
    result = await agent().run('q')
    dumped = CitedAGUIAdapter[None, str].dump_messages(result.all_messages())
    (content,) = [m.content for m in dumped if isinstance(m, AssistantMessage) and m.content]
    assert content == received_text(events) == CitedAnswer.from_result(result).text
    assert not scan_markup(content).found
    back = CitedAGUIAdapter[None, str].load_messages(dumped)
    assert CitedAnswer.from_messages(back).text == content


async def test_dump_messages_strips_each_text_message_on_its_own():
    """Text before and after a tool call makes two AG-UI texts, stripped as the stream sends them.

    The stream holds back the space before the tool call (a marker could still follow it and take it) and passes
    it on to the next text, so the dump does too.
    """
    marker = '\ue200cite\ue202turn0search0\ue201'
    response = ModelResponse(
        parts=[
            TextPart(f'Looking it up {marker}'),
            ToolCallPart('lookup', {}, tool_call_id='c'),
            TextPart(f'Found{marker}'),
            TextPart('. It is tall.'),
        ]
    )
    dumped = CitedAGUIAdapter[None, str].dump_messages([response])
    assert [m.content for m in dumped if isinstance(m, AssistantMessage)] == ['Looking it up', ' Found. It is tall.']
    assert response.parts[0] == TextPart(f'Looking it up {marker}')  # the history given is left as it is


@pytest.mark.parametrize('state', ['complete', 'interrupted'])
def test_dump_messages_removes_the_cut_off_tail_of_an_incomplete_answer(state: Literal['complete', 'interrupted']):
    """A response that did not complete may end inside markup: that tail goes, as `CitedAnswer` removes it; a complete
    answer's tail is prose. A response is one text to `CitedAnswer`: what the text before a tool call holds back goes
    on past the call, so a complete response shows it once it ends, and an interrupted one ends inside markup."""
    tail = '(cite index="1-1'

    def _texts(response: ModelResponse) -> list[str]:
        dumped = CitedAGUIAdapter[None, str].dump_messages([response])
        return [m.content for m in dumped if isinstance(m, AssistantMessage) and m.content]

    answer = ModelResponse(parts=[TextPart('K2 is '), TextPart(f'tall. {tail}')], state=state)
    expected = 'K2 is tall.' if state == 'interrupted' else f'K2 is tall. {tail}'
    assert _texts(answer) == [expected] == [CitedAnswer.from_messages([answer]).text]
    calling = ModelResponse(
        parts=[TextPart(f'Looking {tail}'), ToolCallPart('lookup', {}, tool_call_id='c')], state=state
    )
    shown = ['Looking', f' {tail}'] if state == 'complete' else ['Looking']
    assert _texts(calling) == shown
    assert ''.join(shown) == CitedAnswer.from_messages([calling]).text


@settings(max_examples=200)
@given(st.lists(st.lists(MARKUP_PIECES, max_size=6).map(''.join), min_size=1, max_size=4))
def test_dumped_text_holds_no_markup(texts: list[str]):
    messages: list[ModelMessage] = [ModelResponse(parts=[TextPart(text) for text in texts])]
    (message,) = CitedAGUIAdapter[None, str].dump_messages(messages)
    assert isinstance(message, AssistantMessage) and message.content is not None
    assert not scan_markup(message.content).found
    assert message.content == CitedAnswer.from_messages(messages).text


async def test_text_deltas_carry_no_markup_and_anchors_follow_the_clean_text():
    resolved = '\ue200cite\ue202turn0search0\ue201'
    raw = f'K2 is 8,611 m tall.{resolved} It is remote.\ue200cite\ue202turn9search2\ue201 Few climb it.'

    async def stream(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str]:
        for start in range(0, len(raw), 3):  # markers split across deltas
            yield raw[start : start + 3]

    def answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        return ModelResponse(parts=[TextPart(raw)])

    web = WebCitationSource('https://example.com/k2', title='K2')
    agent = Agent(
        FunctionModel(answer, stream_function=stream),
        capabilities=[TrackCitations(marker_sources={'turn0search0': web})],
    )
    events = await agui_events(agent)
    deltas = [e.delta for e in events if isinstance(e, TextMessageContentEvent)]
    assert not any(c in d for d in deltas for c in PRIVATE_USE), deltas
    text = received_text(events)
    assert text == 'K2 is 8,611 m tall. It is remote. Few climb it.'
    (event,) = citation_events(events)
    assert anchored(event, text) == [('K2 is 8,611 m tall.', 'https://example.com/k2')]


async def test_anchors_on_raw_markup_move_onto_the_clean_text():
    """Citations anchored on the raw text (markers still in it) land on the text the client received; one that
    covered nothing but a removed marker keeps its sources, without an anchor."""
    marker = '\ue200cite\ue202turn0search0\ue201'
    raw = f'Alpha.{marker} Beta is cited.'
    beta = raw.index('Beta')
    cites = [
        Citation([WIKI], anchor=ContentCitationAnchor(start=beta, end=len(raw))),
        Citation([BORDER], anchor=MarkerCitationAnchor(start=6, end=6 + len(marker))),
    ]
    events = await agui_events(Agent(ScriptedModel([('text', 'a', raw), ('cite', 'a', cites)])))
    text = received_text(events)
    assert text == 'Alpha. Beta is cited.'
    (event,) = citation_events(events)
    assert anchored(event, text) == [('Beta is cited.', WIKI.url)]
    assert [c['anchor'] for c in event.value['citations']][1] is None
    assert event.value['citations'][1]['sources'][0]['url'] == BORDER.url


@dataclass
class _AddCitationInPlace(AbstractCapability[Any]):
    """Adds a citation to the final response's first text part in place, as `TrackCitations`' recovery does."""

    async def after_model_request(
        self, ctx: RunContext[Any], *, request_context: ModelRequestContext, response: ModelResponse
    ) -> ModelResponse:
        part = response.parts[0]
        assert isinstance(part, TextPart)
        part.citations = [*(part.citations or []), Citation([BORDER], anchor=ContentCitationAnchor(start=35, end=56))]
        return response


async def test_citations_added_in_place_after_late_ones_reach_the_client():
    """Google's late citations made new part objects; a capability then changed the response's own part in place:
    the run's final messages are read for the last word."""
    agent = Agent(
        CitingModel(TEXT, CITES[:1], style='google', part_after_text=True), capabilities=[_AddCitationInPlace()]
    )
    events = await agui_events(agent)
    last = citation_events(events)[-1]
    assert anchored(last, received_text(events)) == [
        ('K2 is 8,611 m tall.', WIKI.url),
        ('China–Pakistan border', BORDER.url),
    ]


async def test_late_citation_for_an_earlier_part_of_a_merged_message():
    """Part 0 gets its citations while text part 1 is open: one message, its citations after its end."""
    cite = [Citation([WIKI], anchor=ContentCitationAnchor(start=0, end=2))]
    events = await agui_events(
        Agent(ScriptedModel([('text', 'a', 'K2 is tall. '), ('text', 'b', 'Very tall.'), ('cite', 'a', cite)]))
    )
    types = _types(events)
    assert types.count('TEXT_MESSAGE_START') == 1
    assert types.count('TEXT_MESSAGE_END') == 1
    assert types.index(CITATIONS_EVENT_NAME) == types.index('TEXT_MESSAGE_END') + 1
    (event,) = citation_events(events)
    assert anchored(event, received_text(events)) == [('K2', WIKI.url)]


async def test_citations_after_the_message_ended_are_sent_again_with_the_same_message_id():
    """More citations arrive after the message ended (a thinking part followed it): the full list is sent again."""
    first = [Citation([WIKI], anchor=ContentCitationAnchor(start=0, end=2))]
    second = [Citation([BORDER], anchor=ContentCitationAnchor(start=0, end=4))]
    both = [*first, *second]
    # A citations delta replaces the part's list: the same list again changes nothing and is not sent again.
    script: list[Step] = [
        ('text', 'a', 'K2 is tall. '),
        ('cite', 'a', first),
        ('think', 't', '...'),
        ('cite', 'a', both),
        ('cite', 'a', both),
    ]
    events = await agui_events(Agent(ScriptedModel(script)))
    sent = citation_events(events)
    assert len(sent) == 2
    assert sent[0].value['message_id'] == sent[1].value['message_id']
    text = received_text(events)
    assert anchored(sent[0], text) == [('K2', WIKI.url)]
    assert anchored(sent[1], text) == [('K2', WIKI.url), ('K2 i', BORDER.url)]


async def test_multi_step_run_keeps_track_per_response():
    """Part indexes start over in each model response: the stream's own bookkeeping must too."""
    cite = [Citation([WIKI], anchor=ContentCitationAnchor(start=0, end=2))]
    first: list[Step] = [('text', 't', 'Checking. '), ('tool', 'c', 'lookup')]
    agent = Agent(
        ScriptedModel([('text', 'a', 'K2 is tall. '), ('text', 'b', 'Very.'), ('cite', 'a', cite)], first=first)
    )

    @agent.tool_plain
    def lookup() -> str:
        return 'data'

    events = await agui_events(agent)
    (event,) = citation_events(events)
    ends = [e for e in events if isinstance(e, TextMessageEndEvent)]
    assert event.value['message_id'] == ends[-1].message_id
    assert anchored(event, received_text(events, ends[-1].message_id)) == [('K2', WIKI.url)]


async def test_broken_stream_ends_the_message_cleanly():
    raw = 'K2 is 8,611 m tall.\ue200cite\ue202turn0'

    async def stream(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str]:
        yield raw
        raise ConnectionError('dropped')

    agent = Agent(FunctionModel(stream_function=stream))
    events = await agui_events(agent)
    types = _types(events)
    assert types[-2:] == ['TEXT_MESSAGE_END', 'RUN_ERROR']
    assert received_text(events) == 'K2 is 8,611 m tall.'


@pytest.mark.parametrize('cut', [1, 3, None])
async def test_cited_answer_event_is_honest_about_completeness(cut: int | None):
    agent = citing('anthropic', end_stream_after=cut)
    finished: list[CustomEvent] = []

    async def on_complete(result: Any) -> AsyncIterator[BaseEvent]:
        event = cited_answer_event(result)
        finished.append(event)
        yield event

    async with agent.run_stream_events('q') as stream:
        events = [e async for e in CitedAGUIEventStream[Any, str]().transform_stream(stream, on_complete=on_complete)]
    (event,) = finished
    assert event in events
    assert _types(events)[-2:] == [CITED_ANSWER_EVENT_NAME, 'RUN_FINISHED']
    answer = CitedAnswer.from_json(json.dumps(event.value))
    assert answer.complete is (cut is None)
    assert [p.code for p in answer.problems] == ([] if cut is None else ['stream_incomplete'])
    assert answer.text == received_text(events)


async def test_adapter_uses_the_cited_stream_and_redacts_on_request():
    body = json.dumps(
        {
            'threadId': 't1',
            'runId': 'r1',
            'state': None,
            'messages': [{'id': 'm1', 'role': 'user', 'content': 'How tall is K2?'}],
            'tools': [],
            'context': [],
            'forwardedProps': None,
        }
    ).encode()
    doc = CITES[0].sources[0]
    agent = Agent(
        CitingModel(TEXT, [ScriptedCitation('K2 is 8,611 m tall.', [doc])], style='google', part_after_text=True)
    )
    adapter = CitedAGUIAdapter(agent=agent, run_input=CitedAGUIAdapter.build_run_input(body))
    assert isinstance(adapter.build_event_stream(), CitedAGUIEventStream)

    async def on_complete(result: Any) -> AsyncIterator[BaseEvent]:
        yield cited_answer_event(result, redact=True)

    events = [e async for e in adapter.run_stream(on_complete=on_complete)]
    types = _types(events)
    assert CITATIONS_EVENT_NAME in types
    assert CITED_ANSWER_EVENT_NAME in types
    event = next(e for e in events if isinstance(e, CustomEvent) and e.name == CITED_ANSWER_EVENT_NAME)
    answer = CitedAnswer.from_json(json.dumps(event.value))
    assert answer.text == TEXT
    assert answer.complete
    assert CitedAnswer.from_json(json.dumps(cited_answer_event(await agent.run('q')).value)).spans == answer.spans


async def test_dispatch_request_serves_a_starlette_route():
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import Response
    from starlette.routing import Route
    from starlette.testclient import TestClient

    agent = citing('google', part_after_text=True)

    async def chat(request: Request) -> Response:
        return await CitedAGUIAdapter[None, str].dispatch_request(request, agent=agent)

    app = Starlette(routes=[Route('/chat', chat, methods=['POST'])])
    body = {'threadId': 't', 'runId': 'r', 'messages': [{'id': 'm', 'role': 'user', 'content': 'q'}], 'tools': []}
    body |= {'context': [], 'state': None, 'forwardedProps': None}
    with warnings.catch_warnings(), TestClient(app) as client:
        warnings.simplefilter('ignore', DeprecationWarning)
        response = client.post('/chat', json=body, headers={'accept': 'text/event-stream'})
    lines = [json.loads(line[6:]) for line in response.text.splitlines() if line.startswith('data: ')]
    custom = [line for line in lines if line['type'] == EventType.CUSTOM.value]
    assert [line['name'] for line in custom] == [CITATIONS_EVENT_NAME]
    assert [c['anchor']['start'] for c in custom[0]['value']['citations']] == [0, 35]


@pytest.mark.parametrize(
    'name',
    [
        'test_google/test_google_vertex_web_search_citations_stream.yaml',
        'test_openai/test_openai_responses_web_search_citations_stream.yaml',
        'test_anthropic/test_anthropic_document_citations_stream.yaml',
        'test_bedrock/test_bedrock_document_citations_live_stream.yaml',
    ],
)
async def test_real_recorded_streams(corpus: Path, name: str):
    recording = load_recording(corpus / 'pydantic-ai-cassettes/tests/models/cassettes' / name)
    agent = Agent(recording.model(), capabilities=[TrackCitations()])
    results: list[Any] = []

    async def on_complete(result: Any) -> AsyncIterator[BaseEvent]:
        results.append(result)
        yield cited_answer_event(result)

    prompt = recording.prompt or 'q'
    async with agent.run_stream_events(prompt, model_settings=recording.model_settings) as stream:
        events = [e async for e in CitedAGUIEventStream[Any, str]().transform_stream(stream, on_complete=on_complete)]
    answer = CitedAnswer.from_result(results[0])
    assert answer.spans or answer.unanchored
    sent = citation_events(events)
    assert sent
    last = {e.value['message_id']: e for e in sent}  # the client keeps the last event per message
    ends = [e for e in events if isinstance(e, TextMessageEndEvent)]
    final = last[ends[-1].message_id]
    text = received_text(events, ends[-1].message_id)
    assert not any(c in text for c in PRIVATE_USE)
    assert text == answer.text
    urls = {answer.source(n).url or answer.source(n).document_id for s in answer.spans for n in s.sources}
    assert {url for _, url in anchored(final, text)} == urls
    assert {answer.span_text(s) for s in answer.spans} == {words for words, _ in anchored(final, text)}


@pytest.mark.parametrize('late', [False, True])
@pytest.mark.parametrize(
    'anchor',
    [
        pytest.param(ContentCitationAnchor(start=5, end=500), id='past-the-end'),
        pytest.param(ContentCitationAnchor(start=40, end=45), id='wholly-outside'),
        pytest.param(MarkerCitationAnchor(start=0, end=2), id='marker-anchor-on-prose'),
    ],
)
async def test_an_anchor_the_answer_cannot_place_reaches_the_client_without_it(
    anchor: ContentCitationAnchor | MarkerCitationAnchor, late: bool
):
    """Offsets past the received text (or a marker anchor pinned on words), which the answer keeps as a source card
    with a problem, reach the client as the source without the anchor."""
    citations = [Citation([WIKI], anchor=ContentCitationAnchor(start=0, end=2)), Citation([BORDER], anchor=anchor)]
    script: list[Step] = [('text', 'a', 'K2 is tall. \ue200cite\ue202turn0search0\ue201 End.')]
    if late:  # after another part started: after the text part's end
        script.append(('think', 't', 'hm'))
    script.append(('cite', 'a', citations))
    events = await agui_events(Agent(ScriptedModel(script)))
    assert received_text(events) == 'K2 is tall. End.'
    last = citation_events(events)[-1]
    assert [(c['anchor'], c['sources'][0]['url']) for c in last.value['citations']] == [
        ({'start': 0, 'end': 2, 'kind': 'content'}, WIKI.url),
        (None, BORDER.url),
    ]


async def test_text_for_a_part_after_its_message_ended_reaches_the_client_in_a_message_of_its_own():
    """Text applied to a part after another part started (its message has ended) is sent as a message of its own,
    after the reasoning (it was dropped). A citation on it keeps its source, without the anchor."""
    late = [
        Citation([WIKI], anchor=ContentCitationAnchor(start=0, end=5)),
        Citation([BORDER], anchor=ContentCitationAnchor(start=6, end=11)),
    ]
    script: list[Step] = [
        ('text', 'a', 'Hello '),
        ('think', 't', 'hm'),
        ('text', 'a', 'wor'),
        ('text', 'a', 'ld \ue200cite\ue202turn0search0\ue201.'),
        ('cite', 'a', late),
    ]
    events = await agui_events(Agent(ScriptedModel(script)))
    assert received_text(events) == 'Hello world.'
    starts = [e.message_id for e in events if isinstance(e, TextMessageStartEvent)]
    # (The space that ended 'Hello ' waited for what followed it: it goes on with the late text.)
    assert len(starts) == 2 and received_text(events, starts[1]) == ' world.'
    types = _types(events)
    assert types.index('REASONING_END') < types.index('TEXT_MESSAGE_START', types.index('REASONING_END'))
    last = citation_events(events)[-1]
    assert last.value['message_id'] == starts[0]
    assert [(c['anchor'], c['sources'][0]['url']) for c in last.value['citations']] == [
        ({'start': 0, 'end': 5, 'kind': 'content'}, WIKI.url),
        (None, BORDER.url),
    ]


async def test_anchors_after_markup_split_around_a_thinking_part_are_on_the_text_each_message_holds():
    """The first text passes what may open a tag on to the second (see `TextBlock`): each message's citations are
    anchored on the text it received, the second's after the tail it starts with."""
    first = [Citation([WIKI], anchor=ContentCitationAnchor(start=0, end=2))]  # 'K2'
    second = [Citation([BORDER], anchor=ContentCitationAnchor(start=15, end=19))]  # 'Many', raw offsets of part 'b'
    script: list[Step] = [
        ('text', 'a', 'K2 is (cite index="1-1'),
        ('cite', 'a', first),
        ('think', 't', 'hm'),
        ('text', 'b', '">tall</cite>. Many try.'),
        ('cite', 'b', second),
    ]
    events = await agui_events(Agent(ScriptedModel(script)))
    assert received_text(events) == 'K2 is tall. Many try.'
    starts = [e.message_id for e in events if isinstance(e, TextMessageStartEvent)]
    assert [received_text(events, m) for m in starts] == ['K2 is', ' tall. Many try.']
    by_message = {e.value['message_id']: e for e in citation_events(events)}
    assert anchored(by_message[starts[0]], 'K2 is') == [('K2', WIKI.url)]
    assert anchored(by_message[starts[1]], ' tall. Many try.') == [('Many', BORDER.url)]
