"""Vercel AI: text deltas carry no citation markup, and every citation is anchored on the text the UI received."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import Any, Literal

import pytest
from _scripted import ScriptedModel, Step, run_messages
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic_ai import (
    Agent,
    AgentRunResultEvent,
    Citation,
    ContentCitationAnchor,
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    WebCitationSource,
)
from pydantic_ai.messages import MarkerCitationAnchor
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.ui.vercel_ai import VercelAIAdapter
from pydantic_ai.ui.vercel_ai.request_types import SourceUrlUIPart, StepStartUIPart, TextUIPart, UIMessage
from pydantic_ai.ui.vercel_ai.response_types import (
    BaseChunk,
    DataChunk,
    MessageMetadataChunk,
    TextDeltaChunk,
    TextEndChunk,
)
from test_ui_ag_ui import MARKED_CITES, MARKED_TEXTS, MARKUP_PIECES, TEXT, UNRESOLVED, _AddCitationInPlace

from pydantic_ai_citations import CitedAnswer, CleanStaleCitations, TrackCitations, find_stale
from pydantic_ai_citations.formats.markup import scan_markup
from pydantic_ai_citations.testing import CITING_STYLES, CitingModel, CitingStyle, ScriptedCitation
from pydantic_ai_citations.ui import (
    CITATIONS_DATA_TYPE,
    STEPS_METADATA_KEY,
    CitedVercelAIAdapter,
    CitedVercelAIEventStream,
)

pytestmark = pytest.mark.anyio

WIKI = WebCitationSource('https://en.wikipedia.org/wiki/K2', title='K2 - Wikipedia')
BORDER = WebCitationSource('https://example.com/border', title='Border')
MARKER = '\ue200cite\ue202turn0search0\ue201'
PRIVATE_USE = ('\ue200', '\ue201', '\ue202')


async def chunks_of(agent: Agent[Any, str]) -> list[BaseChunk]:
    async with agent.run_stream_events('q') as events:
        return [chunk async for chunk in CitedVercelAIEventStream[Any, str]().transform_stream(events)]


def text_of(chunks: Sequence[BaseChunk]) -> str:
    return ''.join(c.delta for c in chunks if isinstance(c, TextDeltaChunk))


def anchored(citations: list[Any], text: str) -> list[tuple[str, str]]:
    return [(text[c['anchor']['start'] : c['anchor']['end']], c['sources'][0]['url']) for c in citations if c['anchor']]


def end_citations(chunks: Sequence[BaseChunk]) -> list[Any]:
    end = next(c for c in chunks if isinstance(c, TextEndChunk))
    return [] if end.provider_metadata is None else end.provider_metadata['pydantic_ai']['citations']


@pytest.mark.parametrize('size', [1, 3, 200])
async def test_text_deltas_carry_no_markup_and_text_end_anchors_follow_the_clean_text(size: int):
    raw = f'K2 is 8,611 m tall.{MARKER} It is remote.\ue200cite\ue202turn9search2\ue201 Few climb it.'

    async def stream(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str]:
        for start in range(0, len(raw), size):  # markers split across deltas
            yield raw[start : start + size]

    def answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        return ModelResponse(parts=[TextPart(raw)])

    track = TrackCitations(marker_sources={'turn0search0': WIKI})
    chunks = await chunks_of(Agent(FunctionModel(answer, stream_function=stream), capabilities=[track]))
    deltas = [c.delta for c in chunks if isinstance(c, TextDeltaChunk)]
    assert not any(ch in d for d in deltas for ch in PRIVATE_USE), deltas
    text = text_of(chunks)
    assert text == 'K2 is 8,611 m tall. It is remote. Few climb it.'
    # `TrackCitations` resolves the marker once the response is done: after `text-end`, sent as late citations.
    (data,) = [c for c in chunks if isinstance(c, DataChunk) and c.type == CITATIONS_DATA_TYPE]
    assert anchored(data.data['citations'], text) == [('K2 is 8,611 m tall.', WIKI.url)]


async def test_anchors_on_raw_markup_move_onto_the_clean_text():
    raw = f'Alpha.{MARKER} Beta is cited.'
    beta = raw.index('Beta')
    cites = [
        Citation([WIKI], anchor=ContentCitationAnchor(start=beta, end=len(raw))),
        Citation([BORDER], anchor=MarkerCitationAnchor(start=6, end=6 + len(MARKER))),
    ]
    script: list[Step] = [('text', 'a', raw), ('cite', 'a', cites)]
    chunks = await chunks_of(Agent(ScriptedModel(script)))
    text = text_of(chunks)
    assert text == 'Alpha. Beta is cited.'
    citations = end_citations(chunks)
    assert anchored(citations, text) == [('Beta is cited.', WIKI.url)]
    assert citations[1]['anchor'] is None  # it covered nothing but the removed marker: its source is kept
    assert CITATIONS_DATA_TYPE not in [getattr(c, 'type', '') for c in chunks]  # in time: nothing sent again


async def test_late_citations_after_the_text_ended_follow_the_clean_text():
    raw = f'K2 is tall.{MARKER} Very tall.'
    cite = [Citation([WIKI], anchor=ContentCitationAnchor(start=raw.index('Very'), end=len(raw)))]
    script: list[Step] = [('text', 'a', raw), ('think', 't', '...'), ('think', 't', 'more'), ('cite', 'a', cite)]
    chunks = await chunks_of(Agent(ScriptedModel(script)))
    text = text_of(chunks)
    assert text == 'K2 is tall. Very tall.'
    assert end_citations(chunks) == []
    (data,) = [c for c in chunks if isinstance(c, DataChunk) and c.type == CITATIONS_DATA_TYPE]
    assert anchored(data.data['citations'], text) == [('Very tall.', WIKI.url)]


async def test_a_held_back_tail_is_sent_before_text_end():
    script: list[Step] = [('text', 'a', 'Few climb it '), ('text', 'a', '(cite')]  # may open a tag: held back
    chunks = await chunks_of(Agent(ScriptedModel(script)))
    types = [getattr(c, 'type', '') for c in chunks]
    assert text_of(chunks) == 'Few climb it (cite'  # at the end it is prose
    assert types.index('text-end') == len(types) - 1 - types[::-1].index('text-delta') + 1


async def test_citations_added_in_place_after_late_ones_reach_the_ui():
    """Google's late citations made new part objects; a capability then changed the response's own part in place:
    the run's final messages are read for the last word, and only the new URL gets a `source-url` chunk."""
    from pydantic_ai.ui.vercel_ai.response_types import SourceUrlChunk

    from pydantic_ai_citations.testing import CitingModel, ScriptedCitation

    model = CitingModel(TEXT, [ScriptedCitation('K2 is 8,611 m tall.', [WIKI])], style='google', part_after_text=True)
    chunks = await chunks_of(Agent(model, capabilities=[_AddCitationInPlace()]))
    data = [c for c in chunks if isinstance(c, DataChunk) and c.type == CITATIONS_DATA_TYPE]
    assert anchored(data[-1].data['citations'], text_of(chunks)) == [
        ('K2 is 8,611 m tall.', WIKI.url),
        ('China–Pakistan border', BORDER.url),
    ]
    assert [c.url for c in chunks if isinstance(c, SourceUrlChunk)] == [WIKI.url, BORDER.url]


def final_citations(chunks: Sequence[BaseChunk]) -> list[Any]:
    """The citations the UI ends up with: `text-end`'s, replaced by the last late-citations chunk if any."""
    data = [c for c in chunks if isinstance(c, DataChunk) and c.type == CITATIONS_DATA_TYPE]
    return data[-1].data['citations'] if data else end_citations(chunks)


@pytest.mark.parametrize('chunk_size', [1, 5, 16])
@pytest.mark.parametrize('text', MARKED_TEXTS)
@pytest.mark.parametrize('style', CITING_STYLES)
async def test_a_removed_marker_beside_part_boundaries(style: CitingStyle, text: str, chunk_size: int):
    """Anthropic and Bedrock split the text at each cited stretch, so a removed marker sits at a part's edge: the
    UI receives the answer's own text, and each anchor (on `text-end` or sent late) covers the words `CitedAnswer`
    anchors."""

    def model() -> CitingModel:
        return CitingModel(text, MARKED_CITES, style=style, chunk_size=chunk_size)

    chunks = await chunks_of(Agent(model(), capabilities=[TrackCitations()]))
    answer = CitedAnswer.from_result(await Agent(model(), capabilities=[TrackCitations()]).run('q'))
    received = text_of(chunks)
    assert received == answer.text
    assert UNRESOLVED not in received and '  ' not in received
    spans = [(answer.span_text(s), answer.source(s.sources[0]).url) for s in answer.spans]
    assert anchored(final_citations(chunks), received) == spans
    if style in ('anthropic', 'bedrock', 'google'):  # these anchor the cited words (the others a marker or nothing)
        assert spans == [
            ('K2 is tall', 'https://en.wikipedia.org/wiki/K2'),
            ('China border', 'https://example.com/border'),
        ]


# --- dump_messages / load_messages ------------------------------------------------------------------------------------

ROUND_TRIP_TEXT = 'K2 is 8,611 m tall. It lies on the China-Pakistan border.'
CONTENT_ANCHORED: tuple[CitingStyle, ...] = ('anthropic', 'bedrock', 'google')
"""Styles whose citations anchor the cited words (the others anchor a marker, or nothing)."""


async def _round_trip_history(style: CitingStyle) -> tuple[list[ModelMessage], CitedAnswer]:
    model = CitingModel(ROUND_TRIP_TEXT, [ScriptedCitation('China-Pakistan border', [BORDER])], style=style)
    result = await Agent(model, capabilities=[TrackCitations(), CleanStaleCitations()]).run('q')
    return result.all_messages(), CitedAnswer.from_result(result)


async def _sent_anchors(
    history: list[ModelMessage], on_edit: Literal['realign', 'clear']
) -> tuple[list[str], list[str]]:
    """(the words each anchor covers in the history sent to the next model, the problems reported for the run)."""
    sent: list[str] = []

    def answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        sent.extend(
            part.content[c.anchor.start : c.anchor.end]
            for m in messages
            if isinstance(m, ModelResponse)
            for part in m.parts
            if isinstance(part, TextPart)
            for c in part.citations or []
            if c.anchor is not None
        )
        return ModelResponse(parts=[TextPart('ok')])

    track = TrackCitations()
    agent = Agent(FunctionModel(answer), capabilities=[track, CleanStaleCitations(on_edit=on_edit)])
    result = await agent.run('next', message_history=history)
    return sent, [p.code for p in track.report(result).problems]


@pytest.mark.parametrize('style', CITING_STYLES)
async def test_an_unedited_round_trip_reports_nothing_stale(style: CitingStyle):
    """Anthropic and Bedrock answer in several text parts, which the UI joins into one: the fingerprints follow."""
    messages, answer = await _round_trip_history(style)
    back = CitedVercelAIAdapter.load_messages(CitedVercelAIAdapter.dump_messages(messages))
    assert find_stale(back) == []
    again = CitedAnswer.from_messages(back)
    assert [p.code for p in again.problems] == [p.code for p in answer.problems]
    assert (again.text, [again.span_text(s) for s in again.spans]) == (
        answer.text,
        [answer.span_text(s) for s in answer.spans],
    )
    assert 'stale_after_edit' not in (await _sent_anchors(back, 'realign'))[1]
    # Dumped again (the browser sends the history back each turn), it still loads true.
    assert find_stale(CitedVercelAIAdapter.load_messages(CitedVercelAIAdapter.dump_messages(back))) == []


@pytest.mark.parametrize('style', CITING_STYLES)
async def test_text_edited_in_the_browser_is_stale_and_realigned_or_cleared(style: CitingStyle):
    messages, answer = await _round_trip_history(style)
    ui = CitedVercelAIAdapter.dump_messages(messages)
    (text_part,) = [p for p in ui[-1].parts if isinstance(p, TextUIPart)]
    text_part.text = 'Note: ' + text_part.text  # the user edits the answer in the browser
    back = CitedVercelAIAdapter.load_messages(ui)
    assert [p.code for p in find_stale(back)] == ['stale_after_edit']
    # Rendered: realigned on the edited text and reported, never left on the words it pointed at before.
    edited = CitedAnswer.from_messages(back)
    assert 'stale_after_edit' in [p.code for p in edited.problems]
    assert [edited.span_text(s) for s in edited.spans] == [answer.span_text(s) for s in answer.spans]
    assert edited.sources == answer.sources
    # Sent on: realigned or cleared, and reported.
    realigned, problems = await _sent_anchors(back, 'realign')
    assert 'stale_after_edit' in problems
    if style in CONTENT_ANCHORED:
        assert [edited.span_text(s) for s in edited.spans] == ['China-Pakistan border']
        assert realigned == ['China-Pakistan border']
    cleared, problems = await _sent_anchors(back, 'clear')
    assert (cleared, 'stale_after_edit' in problems) == ([], True)


async def test_a_history_edited_before_the_dump_stays_stale():
    """A part edited on the server (outside `edit_text`) before the dump: the joined UI part is not vouched for."""
    messages, _ = await _round_trip_history('anthropic')
    response = messages[-1]
    assert isinstance(response, ModelResponse) and len(response.parts) == 3
    cited = response.parts[1]
    assert isinstance(cited, TextPart)
    cited.content = 'China-Pakistan frontier'  # the anchored words changed: a repair cannot find them
    back = CitedVercelAIAdapter.load_messages(CitedVercelAIAdapter.dump_messages(messages))
    assert [(p.code, p.part_index) for p in find_stale(back)] == [('stale_after_edit', 0)]
    sent, problems = await _sent_anchors(back, 'realign')
    # The dump showed the citation without a position, as `CitedAnswer` does: nothing is left to drop.
    assert (sent, problems) == ([], ['stale_after_edit'])
    answer = CitedAnswer.from_messages(back)
    assert (answer.spans, [s.url for s in answer.unanchored]) == ([], [BORDER.url])  # its source is kept


async def test_a_part_edited_before_the_dump_is_shown_realigned():
    """A part edited on the server whose cited words moved: the UI shows its citation on those words, as
    `CitedAnswer` does, and the history that comes back is still reported as edited."""
    messages, _ = await _round_trip_history('anthropic')
    before = CitedAnswer.from_messages(messages)
    words = [before.span_text(s) for s in before.spans]
    response = messages[-1]
    assert isinstance(response, ModelResponse)
    cited = response.parts[1]
    assert isinstance(cited, TextPart) and words
    cited.content = 'the ' + cited.content  # the anchored words moved
    (message,) = [m for m in CitedVercelAIAdapter.dump_messages(messages) if m.role == 'assistant']
    text = _ui_text(message).text
    anchors = [c['anchor'] for c in _ui_citations(_ui_text(message)) if c.get('anchor')]
    assert [text[a['start'] : a['end']] for a in anchors] == words
    back = CitedVercelAIAdapter.load_messages(CitedVercelAIAdapter.dump_messages(messages))
    assert [p.code for p in find_stale(back)] == ['stale_after_edit']
    assert [CitedAnswer.from_messages(back).span_text(s) for s in CitedAnswer.from_messages(back).spans] == words


def _ui_text(message: UIMessage) -> TextUIPart:
    (part,) = [p for p in message.parts if isinstance(p, TextUIPart)]
    return part


def _ui_citations(part: TextUIPart) -> list[Any]:
    return (part.provider_metadata or {}).get('pydantic_ai', {}).get('citations', [])


@pytest.mark.parametrize('text', MARKED_TEXTS)
@pytest.mark.parametrize('style', CITING_STYLES)
async def test_dump_messages_strips_markup_as_the_stream_does(style: CitingStyle, text: str):
    """History loaded into the UI (`useChat`'s initial messages) shows what the stream showed: no markup, even across
    Anthropic's and Bedrock's part boundaries, and each anchor on the words `CitedAnswer` anchors."""

    def agent() -> Agent[None, str]:
        return Agent(
            CitingModel(text, MARKED_CITES, style=style), capabilities=[TrackCitations(), CleanStaleCitations()]
        )

    chunks = await chunks_of(agent())
    result = await agent().run('q')
    answer = CitedAnswer.from_result(result)
    part = _ui_text(CitedVercelAIAdapter.dump_messages(result.all_messages())[-1])
    assert part.text == text_of(chunks) == answer.text
    assert not scan_markup(part.text).found
    spans = [(answer.span_text(s), answer.source(s.sources[0]).url) for s in answer.spans]
    assert anchored(_ui_citations(part), part.text) == anchored(final_citations(chunks), part.text) == spans
    # Sent back unedited: nothing stale, the same answer (the marker named no source; the run reported it).
    back = CitedVercelAIAdapter.load_messages(CitedVercelAIAdapter.dump_messages(result.all_messages()))
    assert find_stale(back) == []
    again = CitedAnswer.from_messages(back)
    assert (again.text, [again.span_text(s) for s in again.spans]) == (answer.text, [s for s, _ in spans])
    assert [p.code for p in again.problems] == [p.code for p in answer.problems if p.code != 'unresolved_marker']
    assert 'stale_after_edit' not in (await _sent_anchors(back, 'realign'))[1]


async def test_dump_messages_keeps_the_citation_of_a_removed_marker():
    """OpenAI-style private-use markers in the model's text: gone from the UI text, and a citation anchored on one
    (as OpenAI Chat and xAI anchor theirs) keeps its source in the UI message, without a position."""
    raw = f'K2 is 8,611 m tall.{MARKER} It is remote.\ue200cite\ue202turn9search2\ue201 Few climb it.'
    second = raw.index('\ue200cite\ue202turn9')
    cites = [
        Citation([WIKI], anchor=ContentCitationAnchor(start=0, end=len('K2 is 8,611 m tall.'))),
        Citation([BORDER], anchor=MarkerCitationAnchor(start=second, end=raw.index('\ue201', second) + 1)),
    ]

    def answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        return ModelResponse(parts=[TextPart(raw, citations=cites)])

    result = await Agent(FunctionModel(answer), capabilities=[TrackCitations(), CleanStaleCitations()]).run('q')
    original = CitedAnswer.from_result(result)
    ui = CitedVercelAIAdapter.dump_messages(result.all_messages())
    part = _ui_text(ui[-1])
    assert part.text == original.text == 'K2 is 8,611 m tall. It is remote. Few climb it.'
    citations = _ui_citations(part)
    assert anchored(citations, part.text) == [('K2 is 8,611 m tall.', WIKI.url)]
    assert [(c['sources'][0]['url'], c['anchor']) for c in citations[1:]] == [(BORDER.url, None)]
    assert [p.url for p in ui[-1].parts if isinstance(p, SourceUrlUIPart)] == [WIKI.url, BORDER.url]
    back = CitedVercelAIAdapter.load_messages(ui)
    assert find_stale(back) == []
    again = CitedAnswer.from_messages(back)
    assert [again.span_text(s) for s in again.spans] == ['K2 is 8,611 m tall.']
    assert [s.url for s in again.unanchored] == [s.url for s in original.unanchored] == [BORDER.url]
    # Edited in the browser: found, realigned, and the marker's source still listed.
    part.text = 'Note: ' + part.text
    edited_history = CitedVercelAIAdapter.load_messages(ui)
    assert [p.code for p in find_stale(edited_history)] == ['stale_after_edit']
    edited = CitedAnswer.from_messages(edited_history)
    assert [edited.span_text(s) for s in edited.spans] == ['K2 is 8,611 m tall.']
    assert [s.url for s in edited.unanchored] == [BORDER.url]
    assert (await _sent_anchors(edited_history, 'realign')) == (['K2 is 8,611 m tall.'], ['stale_after_edit'])


async def test_dump_messages_strips_history_without_fingerprints():
    """Without `CleanStaleCitations` nothing is fingerprinted, and the text is stripped all the same."""

    def answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        return ModelResponse(parts=[TextPart(f'Tall.{MARKER} Remote.')])

    result = await Agent(FunctionModel(answer)).run('q')
    (message,) = [m for m in CitedVercelAIAdapter.dump_messages(result.all_messages()) if m.role == 'assistant']
    assert _ui_text(message).text == 'Tall. Remote.'
    assert 'pydantic_ai_citations' not in (message.metadata or {})


@pytest.mark.parametrize('state', ['complete', 'interrupted'])
def test_dump_messages_removes_the_cut_off_tail_of_an_incomplete_answer(state: Literal['complete', 'interrupted']):
    """A response that did not complete may end inside markup: that tail goes, as `CitedAnswer` removes it; a complete
    answer's tail is prose. A response is one text to `CitedAnswer`: what the text before a tool call holds back goes
    on past the call, so a complete response shows it once it ends, and an interrupted one ends inside markup."""
    tail = '(cite index="1-1'

    def _texts(response: ModelResponse) -> list[str]:
        (message,) = CitedVercelAIAdapter.dump_messages([response])
        return [p.text for p in message.parts if isinstance(p, TextUIPart)]

    answer = ModelResponse(parts=[TextPart('K2 is '), TextPart(f'tall. {tail}')], state=state)
    expected = 'K2 is tall.' if state == 'interrupted' else f'K2 is tall. {tail}'
    assert _texts(answer) == [expected] == [CitedAnswer.from_messages([answer]).text]
    calling = ModelResponse(
        parts=[TextPart(f'Looking {tail}'), ToolCallPart('lookup', {}, tool_call_id='c')], state=state
    )
    shown = ['Looking', f' {tail}'] if state == 'complete' else ['Looking']
    assert _texts(calling) == shown
    assert ''.join(shown) == CitedAnswer.from_messages([calling]).text
    # A citation anchored up to the end keeps an anchor on the text shown, as `CitedAnswer` anchors it.
    text = f'tall. {tail}'
    cited = TextPart(text, citations=[Citation([WIKI], anchor=ContentCitationAnchor(start=0, end=len(text)))])
    answer = ModelResponse(parts=[cited], state=state)
    (message,) = CitedVercelAIAdapter.dump_messages([answer])
    part = _ui_text(message)
    expected_answer = CitedAnswer.from_messages([answer])
    assert all(c['anchor']['end'] <= len(part.text) for c in _ui_citations(part))
    assert anchored(_ui_citations(part), part.text) == [
        (expected_answer.span_text(s), WIKI.url) for s in expected_answer.spans
    ]


def _streamed_history(chunks: Sequence[BaseChunk]) -> list[ModelMessage]:
    """The history `useChat` sends back: the message it built from the chunks (late citations merged, as
    `docs/ui.md` shows), loaded on the server."""
    end = next(c for c in chunks if isinstance(c, TextEndChunk))
    ours = dict((end.provider_metadata or {}).get('pydantic_ai', {}))
    if citations := final_citations(chunks):
        ours['citations'] = citations
    (metadata,) = [c.message_metadata for c in chunks if isinstance(c, MessageMetadataChunk)]
    text = TextUIPart(text=text_of(chunks), provider_metadata={'pydantic_ai': ours} if ours else None)
    user = UIMessage(id='u', role='user', parts=[TextUIPart(text='q')])
    return CitedVercelAIAdapter.load_messages(
        [user, UIMessage(id='a', role='assistant', metadata=metadata, parts=[text])]
    )


@pytest.mark.parametrize('text', [pytest.param(f'{ROUND_TRIP_TEXT} K2 is tall.', id='no-markup'), *MARKED_TEXTS])
@pytest.mark.parametrize('style', CITING_STYLES)
async def test_a_streamed_history_sent_back_reports_nothing_stale(style: CitingStyle, text: str):
    """The message-metadata chunk carries the fingerprints of the text the UI received, keyed to its one text part."""
    cites = MARKED_CITES if 'China border' in text else [ScriptedCitation('China-Pakistan border', [BORDER])]
    model = CitingModel(text, cites, style=style)
    chunks = await chunks_of(Agent(model, capabilities=[TrackCitations(), CleanStaleCitations()]))
    history = _streamed_history(chunks)
    assert find_stale(history) == []
    answer = CitedAnswer.from_messages(history)
    assert 'stale_after_edit' not in [p.code for p in answer.problems]
    # Edited in the browser: stale, and realigned before it is shown or sent.
    response = history[-1]
    assert isinstance(response, ModelResponse)
    (part,) = response.parts
    assert isinstance(part, TextPart)
    part.content = 'Note: ' + part.content
    assert [p.code for p in find_stale(history)] == ['stale_after_edit']
    edited = CitedAnswer.from_messages(history)
    assert [edited.span_text(s) for s in edited.spans] == [answer.span_text(s) for s in answer.spans]
    realigned, problems = await _sent_anchors(history, 'realign')
    assert 'stale_after_edit' in problems
    if style in CONTENT_ANCHORED:
        assert realigned == [answer.span_text(s) for s in answer.spans] != []


def _two_step_agent(text: str) -> Agent[None, str]:
    cite = [Citation([WIKI], anchor=ContentCitationAnchor(start=0, end=2))]
    model = ScriptedModel([('text', 'a', text), ('cite', 'a', cite)], first=[('tool', 'c', 'lookup')])
    agent = Agent(model, capabilities=[CleanStaleCitations()])

    @agent.tool_plain
    def lookup() -> str:
        return 'data'

    return agent


def _cited_two_step_agent(text: str) -> Agent[None, str]:
    """Answers with cited text and calls the `lookup` tool, then answers with `text`."""
    cite = [Citation([WIKI], anchor=ContentCitationAnchor(start=0, end=2))]
    first_cite = [Citation([BORDER], anchor=ContentCitationAnchor(start=0, end=5))]
    first: list[Step] = [('text', 'x', f'Let me{MARKER} look.'), ('cite', 'x', first_cite), ('tool', 'c', 'lookup')]
    agent = Agent(
        ScriptedModel([('text', 'a', text), ('cite', 'a', cite)], first=first), capabilities=[CleanStaleCitations()]
    )

    @agent.tool_plain
    def lookup() -> str:
        return 'data'

    return agent


async def _multi_step_ui(agent: Agent[None, str]) -> tuple[list[UIMessage], Any]:
    """The history `useChat` holds after a streamed run of several responses: the user's message, and one assistant
    message with every response's parts (each after a `step-start`), text as streamed, and the streamed metadata."""
    async with agent.run_stream_events('q') as events:
        chunks = [c async for c in CitedVercelAIEventStream[Any, str]().transform_stream(events)]
    (metadata,) = [c.message_metadata for c in chunks if isinstance(c, MessageMetadataChunk)]
    async with agent.run_stream_events('q') as events:
        (result,) = [e.result async for e in events if isinstance(e, AgentRunResultEvent)]
    dumped = CitedVercelAIAdapter.dump_messages(result.all_messages())
    steps = [p for m in dumped[1:] for p in [StepStartUIPart(type='step-start'), *m.parts]]
    return [dumped[0], UIMessage(id='a', role='assistant', metadata=metadata, parts=steps)], metadata


@pytest.mark.parametrize('cited_first', [False, True])
async def test_a_streamed_run_of_several_responses_keeps_each_ones_fingerprints(cited_first: bool):
    """The UI message holds every response of the run and loads with the metadata on the first: the stream lists
    each response's fingerprints, and `load_messages` gives each its own, so an edit in any of them is found."""
    text = f'K2 is tall.{MARKER} Few climb it.'
    agent = _cited_two_step_agent(text) if cited_first else _two_step_agent(text)
    ui, metadata = await _multi_step_ui(agent)
    assert 'pydantic_ai_citations' not in metadata  # (keyed to one response's parts: it would point at the wrong ones)
    steps = metadata[STEPS_METADATA_KEY]
    assert len(steps) == 2 and steps[1] is not None and (steps[0] is not None) is cited_first
    history = CitedVercelAIAdapter.load_messages(ui)
    assert find_stale(history) == []
    responses = [i for i, m in enumerate(history) if isinstance(m, ModelResponse)]
    assert all(STEPS_METADATA_KEY not in (history[i].metadata or {}) for i in responses)
    texts = [p for p in ui[1].parts if isinstance(p, TextUIPart)]
    for part in texts:  # edited in the browser, each in turn
        original = part.text
        part.text = 'Note: ' + original
        (problem,) = find_stale(CitedVercelAIAdapter.load_messages(ui))
        assert problem.code == 'stale_after_edit'
        assert problem.message_index == responses[texts.index(part) - len(texts)]
        part.text = original
    assert len(texts) == (2 if cited_first else 1)


async def test_a_multi_step_message_the_ui_changed_gets_no_fingerprints():
    """Entries that no longer match the responses the UI message loads as are dropped, never put on the wrong one."""
    ui, _ = await _multi_step_ui(_cited_two_step_agent('K2 is tall.'))
    second = next(i for i, p in enumerate(ui[1].parts) if i and isinstance(p, StepStartUIPart))
    ui[1] = ui[1].model_copy(update={'parts': ui[1].parts[second:]})  # the first response's parts removed
    history = CitedVercelAIAdapter.load_messages(ui)
    assert all(not (m.metadata or {}).get('pydantic_ai_citations') for m in history if isinstance(m, ModelResponse))
    assert find_stale(history) == []
    # The stock loader leaves the list on the first response, where nothing reads it as a fingerprint.
    assert find_stale(VercelAIAdapter.load_messages(ui)) == []


async def test_a_multi_step_history_dumped_by_the_server_keeps_its_fingerprints():
    """`dump_messages` writes one UI message per response, so a run of several keeps its fingerprints there."""
    async with _two_step_agent(f'K2 is tall.{MARKER} Few climb it.').run_stream_events('q') as events:
        (result,) = [e.result async for e in events if isinstance(e, AgentRunResultEvent)]
    ui = CitedVercelAIAdapter.dump_messages(result.all_messages())
    assert [m.role for m in ui] == ['user', 'assistant', 'assistant']
    assert find_stale(CitedVercelAIAdapter.load_messages(ui)) == []
    part = _ui_text(ui[-1])
    assert part.text == 'K2 is tall. Few climb it.'
    part.text = 'Note: ' + part.text
    assert [(p.code, p.message_index) for p in find_stale(CitedVercelAIAdapter.load_messages(ui))] == [
        ('stale_after_edit', 3)
    ]


@st.composite
def _cited_parts(draw: st.DrawFn) -> list[TextPart]:
    parts: list[TextPart] = []
    for _ in range(draw(st.integers(1, 4))):
        text = ''.join(draw(st.lists(MARKUP_PIECES, max_size=6)))
        citations: list[Citation] = []
        for source in draw(st.lists(st.sampled_from([WIKI, BORDER]), max_size=2)):
            anchor = None
            if text:
                start = draw(st.integers(0, len(text) - 1))
                kind = draw(st.sampled_from([ContentCitationAnchor, MarkerCitationAnchor]))
                anchor = kind(start=start, end=draw(st.integers(start + 1, len(text))))
            citations.append(Citation([source], anchor=anchor))
        parts.append(TextPart(text, citations=citations or None))
    return parts


@settings(max_examples=200)
@given(_cited_parts())
def test_dumped_text_parts_hold_no_markup_and_keep_every_citation(parts: list[TextPart]):
    messages: list[ModelMessage] = [ModelRequest.user_text_prompt('q'), ModelResponse(parts=parts)]
    ui = CitedVercelAIAdapter.dump_messages(messages)
    texts = [p for m in ui for p in m.parts if isinstance(p, TextUIPart) and m.role == 'assistant']
    (part,) = texts
    assert not scan_markup(part.text).found
    assert part.text == CitedAnswer.from_messages(messages).text
    citations = _ui_citations(part)
    assert len(citations) == sum(len(p.citations or []) for p in parts)  # nothing disappears
    for citation in citations:
        anchor = citation['anchor']
        assert anchor is None or 0 <= anchor['start'] < anchor['end'] <= len(part.text)
    loaded = CitedVercelAIAdapter.load_messages(ui)[-1]
    assert isinstance(loaded, ModelResponse)
    assert [len(p.citations or []) for p in loaded.parts if isinstance(p, TextPart)] == [len(citations)]


RAW_LINK = ' ([k2.org](https://k2.org/))'


def _openai_part(text: str) -> TextPart:
    """An OpenAI Responses answer part: a marker before an inline link, and the link's raw `url_citation`."""
    start = text.index(RAW_LINK) + 1
    raw = {
        'type': 'url_citation',
        'url': 'https://k2.org/',
        'title': 'K2',
        'start_index': start,
        'end_index': len(text),
    }
    cite = Citation(
        [WebCitationSource('https://k2.org/', title='K2')], anchor=ContentCitationAnchor(start=start, end=len(text))
    )
    # (`annotations`: OpenAI's own, kept with `openai_include_raw_annotations`, which `TrackCitations` turns on)
    details = {'citations': [raw], 'annotations': [raw]}
    return TextPart(text, citations=[cite], provider_name='openai', provider_details=details)


def _raw_ranges(provider_metadata: Any, text: str, key: str = 'citations') -> list[str]:
    raw = provider_metadata['pydantic_ai']['provider_details'][key]
    return [text[entry['start_index'] : entry['end_index']] for entry in raw]


def test_dumped_raw_provider_offsets_follow_the_text_as_shown():
    """OpenAI's `url_citation` ranges, which Pydantic AI replays only while they still cover the link, are moved with
    the markup removed before them, as the citations are."""
    part = _openai_part(f'K2 is tall.{MARKER} It lies in Asia{RAW_LINK}')
    (ui,) = [m for m in CitedVercelAIAdapter.dump_messages([ModelResponse(parts=[part])]) if m.role == 'assistant']
    shown = _ui_text(ui)
    assert shown.text == f'K2 is tall. It lies in Asia{RAW_LINK}'
    assert _raw_ranges(shown.provider_metadata, shown.text) == [RAW_LINK.strip()]
    assert _raw_ranges(shown.provider_metadata, shown.text, 'annotations') == [RAW_LINK.strip()]
    (loaded,) = [m for m in CitedVercelAIAdapter.load_messages([ui]) if isinstance(m, ModelResponse)]
    (text,) = [p for p in loaded.parts if isinstance(p, TextPart)]
    assert text.content == shown.text
    assert shown.provider_metadata is not None
    assert text.provider_details == shown.provider_metadata['pydantic_ai']['provider_details']


async def test_streamed_raw_provider_offsets_follow_the_text_as_shown():
    raw = f'K2 is tall.{MARKER} It lies in Asia{RAW_LINK}'
    part = _openai_part(raw)
    assert part.provider_details is not None and part.citations is not None
    script: list[Step] = [('text', 'a', raw), ('raw', 'a', part.provider_details), ('cite', 'a', part.citations)]
    chunks = await chunks_of(Agent(ScriptedModel(script)))
    text = text_of(chunks)
    assert text == f'K2 is tall. It lies in Asia{RAW_LINK}'
    end = next(c for c in chunks if isinstance(c, TextEndChunk))
    assert _raw_ranges(end.provider_metadata, text) == [RAW_LINK.strip()]
    assert _raw_ranges(end.provider_metadata, text, 'annotations') == [RAW_LINK.strip()]
    assert anchored(end_citations(chunks), text) == [(RAW_LINK.strip(), 'https://k2.org/')]


BAD_ANCHORS = [
    pytest.param(ContentCitationAnchor(start=5, end=500), id='past-the-end'),
    pytest.param(ContentCitationAnchor(start=40, end=45), id='wholly-outside'),
    pytest.param(MarkerCitationAnchor(start=0, end=2), id='marker-anchor-on-prose'),
]
"""Anchors a provider got wrong on `'K2 is tall. <marker> End.'`: `CitedAnswer` keeps their sources unanchored."""


@pytest.mark.parametrize('late', [False, True])
@pytest.mark.parametrize('anchor', BAD_ANCHORS)
async def test_an_anchor_the_answer_cannot_place_reaches_the_ui_without_it(
    anchor: ContentCitationAnchor | MarkerCitationAnchor, late: bool
):
    """The UI got offsets past its text (or pinned a marker anchor on words), where the answer keeps the sources as a
    card and reports `anchor_out_of_range` / `anchor_not_on_marker`: the UI gets the sources, without the anchor."""
    good = Citation([WIKI], anchor=ContentCitationAnchor(start=0, end=2))
    citations = [good, Citation([BORDER], anchor=anchor)]
    script: list[Step] = [('text', 'a', f'K2 is tall. {MARKER} End.')]
    if late:  # after another part started: after the text part's end
        script.append(('think', 't', 'hm'))
    script.append(('cite', 'a', citations))
    agent = Agent(ScriptedModel(script))
    chunks = await chunks_of(agent)
    text = text_of(chunks)
    assert text == 'K2 is tall. End.'
    ui = final_citations(chunks)
    assert [(c['anchor'], c['sources'][0]['url']) for c in ui] == [
        ({'start': 0, 'end': 2, 'kind': 'content'}, WIKI.url),
        (None, BORDER.url),
    ]
    messages = await run_messages(agent, 'q', streamed=True)
    answer = CitedAnswer.from_messages(messages)
    assert [s.number for s in answer.unanchored] == [2]
    assert {p.code for p in answer.problems} & {'anchor_out_of_range', 'anchor_not_on_marker'}
    (dumped,) = [m for m in CitedVercelAIAdapter.dump_messages(messages) if m.role == 'assistant']
    assert [c['anchor'] for c in _ui_citations(_ui_text(dumped))] == [{'start': 0, 'end': 2, 'kind': 'content'}, None]


LATE_CITES = [
    Citation([WIKI], anchor=ContentCitationAnchor(start=0, end=5)),
    Citation([BORDER], anchor=ContentCitationAnchor(start=6, end=11)),
]


async def test_text_for_a_part_after_its_text_end_reaches_the_ui_in_a_text_part_of_its_own():
    """Pydantic AI applies text to the part its provider id names after another part started (an OpenAI-compatible
    stream interleaving text and reasoning): the UI text part has ended, so the late text gets one of its own, after
    the reasoning (it was dropped: the UI showed 'Hello' of 'Hello world.'). A citation on it keeps its source."""
    script: list[Step] = [
        ('text', 'a', 'Hello '),
        ('think', 't', 'hm'),
        ('text', 'a', 'wor'),
        ('text', 'a', f'ld {MARKER}.'),
        ('cite', 'a', LATE_CITES),
    ]
    agent = Agent(ScriptedModel(script))
    chunks = await chunks_of(agent)
    types = [str(getattr(c, 'type', '')) for c in chunks]
    assert types[types.index('reasoning-end') :].count('text-start') == 1
    assert text_of(chunks) == 'Hello world.'
    late_id = [c.id for c in chunks if isinstance(c, TextDeltaChunk)][-1]
    # (The space that ended 'Hello ' waited for what followed it: it goes on with the late text.)
    assert [c.delta for c in chunks if isinstance(c, TextDeltaChunk) and c.id == late_id] == [' world.']
    ui = final_citations(chunks)
    assert [(c['anchor'], c['sources'][0]['url']) for c in ui] == [
        ({'start': 0, 'end': 5, 'kind': 'content'}, WIKI.url),
        (None, BORDER.url),  # on the late text: its own UI text part carries no citations
    ]
    answer = CitedAnswer.from_messages(await run_messages(agent, 'q', streamed=True))
    assert answer.text == 'Hello world.'


async def test_anchors_after_markup_split_around_a_thinking_part_are_on_the_text_each_ui_text_holds():
    """As the AG-UI test of the same name: `text-end` anchors each UI text's citations on the text it received."""
    first = [Citation([WIKI], anchor=ContentCitationAnchor(start=0, end=2))]
    second = [Citation([BORDER], anchor=ContentCitationAnchor(start=15, end=19))]
    script: list[Step] = [
        ('text', 'a', 'K2 is (cite index="1-1'),
        ('cite', 'a', first),
        ('think', 't', 'hm'),
        ('text', 'b', '">tall</cite>. Many try.'),
        ('cite', 'b', second),
    ]
    chunks = await chunks_of(Agent(ScriptedModel(script)))
    assert text_of(chunks) == 'K2 is tall. Many try.'
    ends = [c for c in chunks if isinstance(c, TextEndChunk)]
    texts = [''.join(c.delta for c in chunks if isinstance(c, TextDeltaChunk) and c.id == end.id) for end in ends]
    assert texts == ['K2 is', ' tall. Many try.']
    cited: list[list[Any]] = [
        [] if e.provider_metadata is None else e.provider_metadata['pydantic_ai']['citations'] for e in ends
    ]
    assert [anchored(c, t) for c, t in zip(cited, texts, strict=True)] == [[('K2', WIKI.url)], [('Many', BORDER.url)]]
