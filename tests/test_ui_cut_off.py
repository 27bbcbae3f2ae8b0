"""The UI streams of a response cut off inside citation markup never show the half-open markup.

A text that ends in what may open markup (`(cite index="1-1`, `【4:0†…`, `<cit`) is prose when the response completed
and the start of markup when it was cut off there: the streams hold that tail back at the text's end until they know,
and end the text (`text-end`, `TEXT_MESSAGE_END`) right after it either way, before an error is reported.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import anyio
import pytest
from _scripted import ScriptedModel, Step
from ag_ui.core import BaseEvent, CustomEvent, TextMessageContentEvent
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from pydantic_ai import (
    Agent,
    Citation,
    ContentCitationAnchor,
    ModelMessage,
    ModelResponse,
    RunContext,
    WebCitationSource,
)
from pydantic_ai import CustomEvent as RunEvent
from pydantic_ai.exceptions import RunCancelled
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.ui.vercel_ai.request_types import TextUIPart, UIMessage, UIMessagePart
from pydantic_ai.ui.vercel_ai.response_types import (
    BaseChunk,
    DataChunk,
    TextDeltaChunk,
    TextEndChunk,
)

from pydantic_ai_citations import CitedAnswer
from pydantic_ai_citations._answer import FINISH_METADATA_KEY
from pydantic_ai_citations.formats.markup import scan_markup, strip_markup
from pydantic_ai_citations.ui import (
    CITATIONS_DATA_TYPE,
    STEPS_METADATA_KEY,
    CitedAGUIEventStream,
    CitedVercelAIAdapter,
    CitedVercelAIEventStream,
)
from pydantic_ai_citations.ui._vercel_message import ui_message_of  # the useChat message, as the seam check builds it

pytestmark = pytest.mark.anyio

Protocol = Literal['vercel', 'ag-ui']
PROTOCOLS: list[Protocol] = ['vercel', 'ag-ui']
OPENINGS = ['(cite index="1-1', '<cite index="0-2', '【4:0†sou', '(cit']


@dataclass
class Seen:
    """What a UI received: its text, its events' types in order, and the run's answer when the run ended."""

    text: str
    types: list[str]
    answer: CitedAnswer | None


async def stream_to(protocol: Protocol, agent: Agent[None, str]) -> Seen:
    results: list[CitedAnswer] = []

    async def on_complete(result: Any) -> AsyncIterator[Any]:
        results.append(CitedAnswer.from_result(result))
        return
        yield

    async with agent.run_stream_events('q') as events:
        if protocol == 'vercel':
            chunks: list[BaseChunk] = [
                c async for c in CitedVercelAIEventStream[None, str]().transform_stream(events, on_complete=on_complete)
            ]
            text = ''.join(c.delta for c in chunks if isinstance(c, TextDeltaChunk))
            return Seen(text, [str(getattr(c, 'type', '')) for c in chunks], results[0] if results else None)
        agui: list[BaseEvent] = [
            e async for e in CitedAGUIEventStream[None, str]().transform_stream(events, on_complete=on_complete)
        ]
        text = ''.join(e.delta for e in agui if isinstance(e, TextMessageContentEvent))
        types = [e.name if isinstance(e, CustomEvent) else str(e.type.value) for e in agui]
        return Seen(text, types, results[0] if results else None)


TEXT_END = {'vercel': 'text-end', 'ag-ui': 'TEXT_MESSAGE_END'}
ERROR = {'vercel': 'error', 'ag-ui': 'RUN_ERROR'}


def ends_text_after_its_last_delta(protocol: Protocol, types: Sequence[str]) -> bool:
    delta = 'text-delta' if protocol == 'vercel' else 'TEXT_MESSAGE_CONTENT'
    last = len(types) - 1 - types[::-1].index(delta)
    return types[last + 1] == TEXT_END[protocol]


def CutOffModel(script: Sequence[Step]) -> ScriptedModel:
    """A scripted model of a provider that sends a finishing signal, whose stream ends without one: cut off, no error."""
    return ScriptedModel(script, provider='anthropic')


@pytest.mark.parametrize('protocol', PROTOCOLS)
@pytest.mark.parametrize('opening', OPENINGS)
async def test_a_stream_broken_inside_markup_shows_none_of_it(protocol: Protocol, opening: str):
    async def stream(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str]:
        yield 'K2 is 8,611 m tall. '
        yield opening
        raise ConnectionError('dropped')

    seen = await stream_to(protocol, Agent(FunctionModel(stream_function=stream)))
    assert seen.text == 'K2 is 8,611 m tall.'
    before = [t for t in seen.types[: seen.types.index(ERROR[protocol])] if t != 'message-metadata']
    assert before[-1] == TEXT_END[protocol]  # ended before the error (the run's verdict may go in between)
    assert ends_text_after_its_last_delta(protocol, seen.types)


@pytest.mark.parametrize('protocol', PROTOCOLS)
@pytest.mark.parametrize('opening', OPENINGS)
async def test_a_response_cut_off_inside_markup_without_an_error_shows_none_of_it(protocol: Protocol, opening: str):
    script: list[Step] = [('text', 'a', 'Few climb it. '), ('text', 'a', opening)]
    seen = await stream_to(protocol, Agent(CutOffModel(script)))
    assert seen.answer is not None and not seen.answer.complete
    assert seen.text == seen.answer.text == 'Few climb it.'
    assert ends_text_after_its_last_delta(protocol, seen.types)


@pytest.mark.parametrize('protocol', PROTOCOLS)
@pytest.mark.parametrize('opening', OPENINGS)
async def test_a_complete_response_ending_like_markup_shows_it_as_prose(protocol: Protocol, opening: str):
    script: list[Step] = [('text', 'a', 'Few climb it. '), ('text', 'a', opening)]
    seen = await stream_to(protocol, Agent(ScriptedModel(script)))
    assert seen.answer is not None and seen.answer.complete
    # Prose, unless no prose can hold it (a `【` marker is removed and reported wherever it ends).
    assert seen.text == seen.answer.text == strip_markup(f'Few climb it. {opening}').text
    assert (opening in seen.text) is (not opening.startswith('【'))
    assert ends_text_after_its_last_delta(protocol, seen.types)


@pytest.mark.parametrize('protocol', PROTOCOLS)
@pytest.mark.parametrize('cut', [False, True])
async def test_a_tail_another_part_follows_goes_on_in_the_next_text(protocol: Protocol, cut: bool):
    """The response went on after the text (a thinking part here): what may open markup at its end is shown where the
    text goes on, read with it as `CitedAnswer` reads the response's text parts (`(cite Done.` may still open a tag, so
    a response cut off after it shows none of it)."""
    script: list[Step] = [('text', 'a', 'Few climb it (cite'), ('think', 't', 'hm'), ('text', 'b', ' Done.')]
    seen = await stream_to(protocol, Agent(CutOffModel(script) if cut else ScriptedModel(script)))
    assert seen.answer is not None
    assert seen.text == seen.answer.text == ('Few climb it' if cut else 'Few climb it (cite Done.')
    assert seen.types.count(TEXT_END[protocol]) == 2


@pytest.mark.parametrize('protocol', PROTOCOLS)
@pytest.mark.parametrize('text_last', [False, True])
async def test_a_multi_step_run_ends_each_responses_text_once(protocol: Protocol, text_last: bool):
    """An earlier response whose text ends like markup, before or after its tool call: the run went on, so the stream
    shows the tail as prose (the finishing signal of a response that is not the last is not in the event stream), once
    the response's text can no longer go on."""
    text: Step = ('text', 'a', 'Let me look (cite')
    tool: Step = ('tool', 'c', 'lookup')
    agent = Agent(ScriptedModel([('text', 'b', 'Found it.')], first=[tool, text] if text_last else [text, tool]))

    @agent.tool_plain
    def lookup() -> str:
        return 'data'

    seen = await stream_to(protocol, agent)
    assert seen.text == 'Let me look (citeFound it.'
    # Each text ends right after its last delta (AG-UI also opens and ends an empty message before a first tool call).
    # Before the tool call, the tail that may open markup waits for the response's end, then shows in a text of its own.
    delta = 'text-delta' if protocol == 'vercel' else 'TEXT_MESSAGE_CONTENT'
    ends = [i for i, t in enumerate(seen.types) if t == TEXT_END[protocol] and seen.types[i - 1] == delta]
    assert len(ends) == (2 if text_last else 3)


PIECES = st.sampled_from(
    ['Few ', 'climb it', '. ', ' ', '.', '(cite index="0-1">', '</cite>', '\n', '【4:0†source】', '【4:0†x.']
    + ['\ue200cite\ue202turn0\ue201', '\ue200cite\ue202turn9', '\ue200cite\ue202turn9.', *OPENINGS]
)
"""Prose, whole and unterminated markup of each kind, and the openings that may end a text."""


@settings(max_examples=150, deadline=None)
@given(st.lists(PIECES, min_size=1, max_size=8), st.sampled_from(PROTOCOLS), st.booleans())
def test_what_a_ui_receives_is_the_answers_text_cut_off_or_not(pieces: list[str], protocol: Protocol, cut: bool):
    script: list[Step] = [('text', 'a', piece) for piece in pieces]
    model = CutOffModel(script) if cut else ScriptedModel(script)
    seen = anyio.run(stream_to, protocol, Agent(model))
    assert seen.answer is not None and seen.answer.complete is not cut
    assert not scan_markup(seen.text).found
    if not cut:
        assert seen.text == seen.answer.text  # to the space
        return
    # Cut off: the same words. Where stripping the cut-off text at once forms markup from what removing markup joined,
    # the answer may remove a fragment the stream already showed as prose (`(cite index="1-1` followed by a whole tag)
    # or keep a space the stream did not.
    shown = seen.text if seen.text == seen.answer.text else strip_markup(seen.text, incomplete=True).text
    assert shown.split() == seen.answer.text.split()


async def test_a_cut_off_answer_sent_back_from_the_ui_is_not_stale():
    """The fingerprints the Vercel stream sends are of the text the UI received: without the cut-off tail."""
    from test_ui_vercel import WIKI, _streamed_history

    from pydantic_ai_citations import CleanStaleCitations, find_stale

    cite = [Citation([WIKI], anchor=ContentCitationAnchor(start=0, end=2))]
    script: list[Step] = [('text', 'a', 'K2 is tall. '), ('text', 'a', '(cite index="1-1'), ('cite', 'a', cite)]
    agent = Agent(CutOffModel(script), capabilities=[CleanStaleCitations()])
    async with agent.run_stream_events('q') as events:
        chunks = [c async for c in CitedVercelAIEventStream[None, str]().transform_stream(events)]
    history = _streamed_history(chunks)
    response = history[-1]
    assert isinstance(response, ModelResponse) and response.text == 'K2 is tall.'
    assert find_stale(history) == []


@dataclass(kw_only=True)
class _Checked(RunEvent):
    """An event an output validator emits after the answer: it does not show whether the answer completed."""

    ok: bool = True


@pytest.mark.parametrize('protocol', PROTOCOLS)
async def test_events_after_a_cut_off_answer_do_not_make_its_tail_prose(protocol: Protocol):
    agent: Agent[None, str] = Agent(CutOffModel([('text', 'a', 'Few climb it. '), ('text', 'a', '(cite index="1-1')]))

    # (pyright matches no overload of `output_validator` for a validator taking `RunContext` here: checked at run time)
    @agent.output_validator  # pyright: ignore[reportCallIssue, reportArgumentType, reportUntypedFunctionDecorator]
    async def check(ctx: RunContext[None], output: str) -> str:
        await ctx.emit(_Checked())
        return output

    seen = await stream_to(protocol, agent)
    assert seen.answer is not None and not seen.answer.complete
    assert seen.text == seen.answer.text == 'Few climb it.'


def _cancelling(tail: str) -> Agent[None, str]:
    agent: Agent[None, str] = Agent(ScriptedModel([('text', 'a', 'Few climb it. '), ('text', 'a', tail)]))

    # (pyright matches no overload of `output_validator` for a validator taking `RunContext` here: checked at run time)
    @agent.output_validator  # pyright: ignore[reportCallIssue, reportArgumentType, reportUntypedFunctionDecorator]
    async def cancel(ctx: RunContext[None], output: str) -> str:
        ctx.cancel()
        return output

    return agent


async def test_a_cancelled_runs_text_ends_before_the_on_cancel_events_and_keeps_a_complete_tail():
    """The history `on_cancel` saves ends with a complete response: its tail is prose, as its dump shows it."""
    saved: list[list[ModelMessage]] = []

    async def on_cancel(cancelled: RunCancelled) -> AsyncIterator[BaseChunk]:
        saved.append(cancelled.all_messages())
        yield DataChunk(type='data-cancelled', data={})

    async with _cancelling('(cite').run_stream_events('q') as events:
        chunks = [c async for c in CitedVercelAIEventStream[None, str]().transform_stream(events, on_cancel=on_cancel)]
    types = [str(getattr(c, 'type', '')) for c in chunks]
    assert types.index('text-end') < types.index('data-cancelled')
    assert ends_text_after_its_last_delta('vercel', types)
    shown = ''.join(c.delta for c in chunks if isinstance(c, TextDeltaChunk))
    (dumped,) = [m for m in CitedVercelAIAdapter.dump_messages(saved[0]) if m.role == 'assistant']
    assert shown == 'Few climb it. (cite' == next(p.text for p in dumped.parts if isinstance(p, TextUIPart))


async def test_released_ag_ui_events_are_stamped():
    async with _cancelling('(cite').run_stream_events('q') as events:
        sent = [e async for e in CitedAGUIEventStream[None, str]().transform_stream(events)]
    assert [e.type.value for e in sent if e.timestamp is None] == []


def test_messages_sharing_one_list_of_steps_get_no_fingerprints():
    """(Only messages built in Python share objects.) Whose list it is cannot be told: none is given, nothing fails."""
    steps: list[object] = [None, {'fingerprints': {'0': 'x'}}]
    user = UIMessage(id='u', role='user', parts=[TextUIPart(text='q')])
    answer: list[UIMessagePart] = [TextUIPart(text='K2 is tall.')]
    messages = [
        user,
        UIMessage(id='a', role='assistant', metadata={STEPS_METADATA_KEY: steps}, parts=answer),
        UIMessage(id='u2', role='user', parts=[TextUIPart(text='again')]),
        UIMessage(id='b', role='assistant', metadata={STEPS_METADATA_KEY: steps}, parts=answer),
    ]
    loaded = CitedVercelAIAdapter.load_messages(messages)
    assert [m.metadata.get('pydantic_ai_citations') if m.metadata else None for m in loaded] == [None] * 4


@pytest.mark.parametrize('protocol', PROTOCOLS)
async def test_a_retried_responses_late_citations_reach_the_ui(protocol: Protocol):
    """An output validator's retry starts the next response with no turn between: the first one's citations, mapped
    by `TrackCitations` after its end, were dropped with its parts (only the second text got its citations)."""
    from pydantic_ai import ModelRetry, WebCitationSource

    from pydantic_ai_citations import TrackCitations
    from pydantic_ai_citations.ui import CITATIONS_EVENT_NAME

    tries: list[int] = []
    mark = '\ue200cite\ue202turn0search0\ue201'

    async def stream(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str]:
        tries.append(1)
        text = f'K2 is tall (try {len(tries)}).{mark} Done.'
        for piece in (text[:10], text[10:]):
            yield piece

    track = TrackCitations(marker_sources={'turn0search0': WebCitationSource('https://en.wikipedia.org/wiki/K2')})
    agent = Agent(FunctionModel(stream_function=stream), capabilities=[track])

    @agent.output_validator
    def again(output: str) -> str:
        if 'try 1' in output:
            raise ModelRetry('once more')
        return output

    seen = await stream_to(protocol, agent)
    assert seen.text == 'K2 is tall (try 1). Done.K2 is tall (try 2). Done.'
    name = CITATIONS_DATA_TYPE if protocol == 'vercel' else CITATIONS_EVENT_NAME
    assert seen.types.count(name) == 2  # one per response's text


@settings(max_examples=150, deadline=None)
@given(st.lists(st.one_of(PIECES, st.just(None)), min_size=1, max_size=10), st.sampled_from(PROTOCOLS), st.booleans())
def test_markup_split_around_another_part_reaches_no_ui(pieces: list[str | None], protocol: Protocol, cut: bool):
    """A thinking part (`None`) between two pieces of the text: `CitedAnswer` reads the response's text parts as one
    text, and the UI shows the same text, markup split around the thinking part removed, in as many UI texts."""
    assume(any(piece is not None for piece in pieces))  # (a response without text is no answer: the run fails)
    script: list[Step] = []
    vendor = 0
    for piece in pieces:
        if piece is None:
            vendor += 1
            script.append(('think', f't{vendor}', 'hm'))  # (a thinking part of its own: see the next test's note)
        else:
            script.append(('text', vendor, piece))
    model = CutOffModel(script) if cut else ScriptedModel(script)
    seen = anyio.run(stream_to, protocol, Agent(model))
    assert seen.answer is not None and seen.answer.complete is not cut
    assert not scan_markup(seen.text).found
    # To the space, but for spaces that end the response's text after another part (no UI text of their own).
    assert seen.answer.text[: len(seen.text)] == seen.text or cut
    if seen.text.rstrip() == seen.answer.text.rstrip():
        return
    assert cut
    # Cut off: the same words, as in `test_what_a_ui_receives_is_the_answers_text_cut_off_or_not`.
    assert strip_markup(seen.text, incomplete=True).text.split() == seen.answer.text.split()


@pytest.mark.parametrize('protocol', PROTOCOLS)
@pytest.mark.parametrize(
    ('first', 'second'),
    [
        ('K2 is (cite index="1-1', '">tall</cite>.'),
        ('K2 is\ue200cite\ue202turn0', '\ue201 tall.'),
        ('K2 is【4:0†sou', 'rce】 tall.'),
    ],
)
async def test_markup_split_by_a_thinking_part_is_removed_where_the_text_goes_on(
    protocol: Protocol, first: str, second: str
):
    script: list[Step] = [('text', 'a', first), ('think', 't', 'hm'), ('text', 'b', second)]
    seen = await stream_to(protocol, Agent(ScriptedModel(script)))
    assert seen.answer is not None
    assert seen.text == seen.answer.text == 'K2 is tall.'
    assert seen.types.count(TEXT_END[protocol]) == 2


@pytest.mark.parametrize('protocol', PROTOCOLS)
@pytest.mark.parametrize('cut', [False, True])
async def test_a_tail_passed_on_that_no_text_takes_is_shown_once_the_response_ends(protocol: Protocol, cut: bool):
    """The response ends after the thinking part: the tail is prose (shown in a UI text of its own), or, cut off, not
    shown at all."""
    script: list[Step] = [('text', 'a', 'Few climb it (cite'), ('think', 't', 'hm')]
    seen = await stream_to(protocol, Agent(CutOffModel(script) if cut else ScriptedModel(script)))
    assert seen.answer is not None
    assert seen.text == seen.answer.text == ('Few climb it' if cut else 'Few climb it (cite')
    assert seen.types.count(TEXT_END[protocol]) == (1 if cut else 2)


@pytest.mark.parametrize(
    'script',
    [
        [('text', 'a', 'K2 is (cite index="1-1'), ('think', 't', 'hm'), ('text', 'b', '">tall</cite>. Few climb it. ')],
        [('text', 'a', 'Looking it up '), ('tool', 'c', 'lookup')],
        [('text', 'a', 'K2 is【4:0†sou'), ('think', 't', 'hm'), ('text', 'b', 'rce】 tall. '), ('think', 'u', 'hm')],
    ],
    ids=['markup-split', 'space-before-a-tool-call', 'tail-after-the-last-text'],
)
async def test_texts_a_response_streams_in_pieces_are_its_dump_and_come_back_not_stale(script: list[Step]):
    """Text a thinking part or a tool call splits: the UI texts the stream sends are the texts `dump_messages` gives
    for the same history, and the history the UI sends back is not stale."""
    from test_ui_vercel import _streamed_history

    from pydantic_ai_citations import CleanStaleCitations, find_stale

    first = [step for step in script if step[0] != 'tool']
    tool = [step for step in script if step[0] == 'tool']
    model = ScriptedModel([('text', 'z', 'Done.')], first=script) if tool else ScriptedModel(first)
    agent = Agent(model, capabilities=[CleanStaleCitations()])

    @agent.tool_plain
    def lookup() -> str:  # pyright: ignore[reportUnusedFunction]
        return 'K2'

    results: list[Any] = []
    chunks = await vercel_chunks(agent, results)
    streamed = [
        ''.join(c.delta for c in chunks if isinstance(c, TextDeltaChunk) and c.id == end.id)
        for end in chunks
        if isinstance(end, TextEndChunk)
    ]
    (result,) = results
    dumped = [
        part.text
        for message in CitedVercelAIAdapter.dump_messages(result.all_messages())
        if message.role == 'assistant'
        for part in message.parts
        if isinstance(part, TextUIPart)
    ]
    assert dumped == streamed
    assert not any(scan_markup(text).found for text in streamed)
    assert find_stale(_streamed_history(chunks)) == []


@pytest.mark.parametrize('protocol', PROTOCOLS)
@pytest.mark.parametrize(
    ('first', 'late'),
    [
        ('K2 is (cite index="1-1', '">tall</cite>.'),  # the text's end waits: the late text is not late yet
        ('K2 is tall. ', '\ue200cite\ue202turn0search0\ue201 Few climb it.'),  # the space before went on
        ('K2 is tall. ', '(cite index="1-1">Few</cite> climb it.'),
    ],
)
async def test_late_text_after_a_tail_passed_on_goes_through_its_cleaner(protocol: Protocol, first: str, late: str):
    """The text's own part goes on after the thinking part (late text, as an OpenAI-compatible stream may send it):
    it goes through the cleaner that holds the tail, so markup is removed with its spacing, as `CitedAnswer` removes
    it."""
    script: list[Step] = [('text', 'a', first), ('think', 't', 'hm'), ('text', 'a', late)]
    seen = await stream_to(protocol, Agent(ScriptedModel(script)))
    assert seen.answer is not None
    assert seen.text == seen.answer.text
    assert not scan_markup(seen.text).found


@pytest.mark.parametrize('protocol', PROTOCOLS)
@pytest.mark.parametrize(
    ('late', 'shown'), [('(cite index="1-1">Late</cite>.', 'Late.'), ('\ue200cite\ue202turn0search0\ue201', '')]
)
async def test_late_text_after_the_next_text_took_the_tail_is_cleaned_on_its_own(
    protocol: Protocol, late: str, shown: str
):
    """The next text took the tail on, so text arriving late for the first is a UI text of its own, cleaned alone
    (none when it was markup only)."""
    script: list[Step] = [
        ('text', 'a', 'K2 is tall.'),
        ('think', 't', 'hm'),
        ('text', 'b', ' Few climb it.'),
        ('think', 'u', 'hm'),
        ('text', 'a', late),
    ]
    seen = await stream_to(protocol, Agent(ScriptedModel(script)))
    assert seen.text == 'K2 is tall. Few climb it.' + shown
    assert seen.types.count(TEXT_END[protocol]) == (3 if shown else 2)


@pytest.mark.parametrize('protocol', PROTOCOLS)
@pytest.mark.parametrize('cut', [False, True])
async def test_late_text_while_the_next_texts_end_waits_is_cleaned_on_its_own(protocol: Protocol, cut: bool):
    """The next text holds a possible opening at the response's end (its end waits for whether the response was cut
    off): the late text of the first is sent before, cleaned alone; the letters are the answer's, in the UI's order."""
    script: list[Step] = [
        ('text', 'a', 'K2 is tall.'),
        ('think', 't', 'hm'),
        ('text', 'b', ' Few (cite'),
        ('text', 'a', '(cite index="1-1">Late</cite>.'),
    ]
    seen = await stream_to(protocol, Agent(CutOffModel(script) if cut else ScriptedModel(script)))
    assert seen.answer is not None
    assert seen.text == 'K2 is tall. FewLate.' + ('' if cut else ' (cite')
    assert sorted(seen.text.replace(' ', '')) == sorted(seen.answer.text.replace(' ', ''))  # (the same letters)
    assert seen.types.count(TEXT_END[protocol]) == 3


CITED = [
    Citation(
        [WebCitationSource('https://en.wikipedia.org/wiki/K2', title='K2')],
        anchor=ContentCitationAnchor(start=0, end=2),
    )
]
LATER = [
    Citation([WebCitationSource('https://k2.example/few', title='Few')], anchor=ContentCitationAnchor(start=1, end=4))
]


@pytest.mark.parametrize(
    'script',
    [
        [('text', 'a', 'K2 is tall.'), ('cite', 'a', CITED), ('think', 't', 'hm'), ('text', 'b', ' Few climb it.')],
        [('text', 'a', 'K2 is tall. '), ('cite', 'a', CITED), ('think', 't', 'hm'), ('text', 'b', 'Few climb it.')],
        [
            ('text', 'a', 'K2 is (cite index="1-1'),
            ('cite', 'a', CITED),
            ('think', 't', 'hm'),
            ('text', 'b', '">tall</cite>. Few climb it.'),
            ('cite', 'b', LATER),
        ],
        [('text', 'a', 'K2 is tall.'), ('cite', 'a', CITED), ('think', 't', 'hm'), ('text', 'a', ' Late.')],
        [
            ('text', 'a', 'K2 is tall.'),
            ('cite', 'a', CITED),
            ('think', 't', 'hm'),
            ('text', 'b', ' Few climb it.'),
            ('cite', 'b', LATER),
            ('think', 'u', 'hm'),
            ('text', 'a', ' Late.'),
        ],
    ],
    ids=['two-texts', 'space-passed-on', 'markup-split', 'late-text', 'late-text-after-the-next'],
)
async def test_a_cited_response_streamed_in_pieces_comes_back_not_stale(script: list[Step]):
    """The message `useChat` builds (a text part per UI text, with its citations) loads back with nothing stale, and
    with the answer's citations on the same words."""
    from pydantic_ai_citations import CleanStaleCitations, find_stale

    results: list[Any] = []
    chunks = await vercel_chunks(Agent(ScriptedModel(script), capabilities=[CleanStaleCitations()]), results)
    user = UIMessage(id='u', role='user', parts=[TextUIPart(text='q')])
    history = CitedVercelAIAdapter.load_messages([user, ui_message_of(chunks)])
    assert find_stale(history) == []
    (result,) = results
    sent, answer = CitedAnswer.from_messages(history), CitedAnswer.from_result(result)
    assert [(sent.span_text(s), sent.source(s.sources[0]).url) for s in sent.spans] == [
        (answer.span_text(s), answer.source(s.sources[0]).url) for s in answer.spans
    ]


# --- the verdict on the answer's end travels with the UI message ------------------------------------------------------


async def vercel_chunks(agent: Agent[None, str], results: list[Any] | None = None) -> list[BaseChunk]:
    """The chunks the Vercel AI stream sends of a run of `agent`; its result is appended to `results`."""

    async def on_complete(result: Any) -> AsyncIterator[BaseChunk]:
        if results is not None:
            results.append(result)
        return
        yield

    async with agent.run_stream_events('q') as events:
        stream = CitedVercelAIEventStream[None, str]().transform_stream(events, on_complete=on_complete)
        return [c async for c in stream]


def sent_back(ui: UIMessage) -> list[ModelMessage]:
    """The history a UI sends back with `ui`, loaded by the adapter."""
    user = UIMessage(id='u', role='user', parts=[TextUIPart(text='q')])
    return CitedVercelAIAdapter.load_messages([user, ui])


def lookup_agent(model: ScriptedModel) -> Agent[None, str]:
    agent = Agent(model)

    @agent.tool_plain
    def lookup() -> str:
        return 'data'

    return agent


@pytest.mark.parametrize('steps', [1, 2])
async def test_a_cut_off_answer_sent_back_from_the_ui_is_not_complete(steps: int):
    """A UI message holds no finish reason: the stream sends the run's verdict in its message metadata, and the history
    loaded back is judged by it (the message's last response), not taken for complete."""
    script: list[Step] = [('text', 'a', 'K2 is 8,611 m tall.')]
    model = CutOffModel(script) if steps == 1 else ScriptedModel(script, first=[('tool', 'c', 'lookup')])
    if steps == 2:
        model.stream_provider = 'anthropic'  # both responses end without Anthropic's finishing signal
    history = sent_back(ui_message_of(await vercel_chunks(lookup_agent(model))))
    answer = CitedAnswer.from_messages(history)
    assert answer.text == 'K2 is 8,611 m tall.'
    assert answer.complete is False
    assert [p.code for p in answer.problems] == ['stream_incomplete']
    responses = [m for m in history if isinstance(m, ModelResponse)]
    assert len(responses) == steps
    assert [FINISH_METADATA_KEY in (r.metadata or {}) for r in responses] == [False] * (steps - 1) + [True]


async def test_a_complete_answer_sent_back_from_the_ui_stays_complete():
    chunks = await vercel_chunks(Agent(ScriptedModel([('text', 'a', 'K2 is 8,611 m tall.')])))
    history = sent_back(ui_message_of(chunks))
    assert CitedAnswer.from_messages(history).complete is True
    assert all(FINISH_METADATA_KEY not in (m.metadata or {}) for m in history)


async def test_an_answer_whose_stream_broke_sent_back_from_the_ui_is_not_complete():
    """The run raised: no run result, so the verdict goes in a message-metadata chunk before the error chunk."""

    async def stream(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str]:
        yield 'K2 is 8,611 m tall.'
        raise ConnectionError('dropped')

    chunks = await vercel_chunks(Agent(FunctionModel(stream_function=stream)))
    types = [str(getattr(c, 'type', '')) for c in chunks]
    assert types.index('message-metadata') < types.index('error')
    answer = CitedAnswer.from_messages(sent_back(ui_message_of(chunks)))
    assert answer.text == 'K2 is 8,611 m tall.'
    assert answer.complete is False
    (problem,) = answer.problems
    assert 'ConnectionError: dropped' in problem.message


async def test_a_cut_off_answer_dumped_for_the_ui_is_not_complete_when_loaded_back():
    """`dump_messages` of stored history (one response per UI message) carries the verdict too."""
    async with Agent(CutOffModel([('text', 'a', 'K2 is tall.')])).run_stream('q') as stream:
        await stream.get_output()
        messages = stream.all_messages()
    assert CitedAnswer.from_messages(messages).complete is False
    loaded = CitedVercelAIAdapter.load_messages(CitedVercelAIAdapter.dump_messages(messages))
    assert CitedAnswer.from_messages(loaded).complete is False
    complete = (await Agent(ScriptedModel([('text', 'a', 'K2 is tall.')])).run('q')).all_messages()
    loaded = CitedVercelAIAdapter.load_messages(CitedVercelAIAdapter.dump_messages(complete))
    assert CitedAnswer.from_messages(loaded).complete is True


@pytest.mark.parametrize('cut', [False, True])
async def test_a_cancelled_answer_sent_back_from_the_ui_is_judged_by_its_last_response(cut: bool):
    """A run cancelled after its answer arrived whole stays complete; one whose answer was cut off is sent the verdict."""
    model = CutOffModel([('text', 'a', 'Few climb it.')]) if cut else ScriptedModel([('text', 'a', 'Few climb it.')])
    agent: Agent[None, str] = Agent(model)

    @agent.output_validator  # pyright: ignore[reportCallIssue, reportArgumentType, reportUntypedFunctionDecorator]
    async def cancel(ctx: RunContext[None], output: str) -> str:
        ctx.cancel()
        return output

    chunks = await vercel_chunks(agent)
    answer = CitedAnswer.from_messages(sent_back(ui_message_of(chunks)))
    assert answer.text == 'Few climb it.'
    assert answer.complete is not cut


async def test_a_retried_cited_answer_comes_back_from_the_ui_not_stale():
    """An output validator's retry: the UI message holds both responses' texts and no retry prompt, so it loads as
    one response, not the two the stream sent; the fingerprints are then keyed from each response's dump, and the
    history sent back is still not taken for edited."""
    from pydantic_ai import ModelRetry

    from pydantic_ai_citations import CleanStaleCitations, find_stale

    tries: list[str] = []
    agent = Agent(
        ScriptedModel([('text', 'a', 'K2 is tall.'), ('cite', 'a', CITED)]), capabilities=[CleanStaleCitations()]
    )

    @agent.output_validator
    def again(output: str) -> str:
        tries.append(output)
        if len(tries) == 1:
            raise ModelRetry('once more')
        return output

    chunks = await vercel_chunks(agent)
    assert len(tries) == 2
    history = sent_back(ui_message_of(chunks))
    assert len([m for m in history if isinstance(m, ModelResponse)]) == 1  # (the two responses load as one)
    assert find_stale(history) == []
    answer = CitedAnswer.from_messages(history)
    assert answer.text == 'K2 is tall.K2 is tall.'
    assert [answer.span_text(s) for s in answer.spans] == ['K2', 'K2']


async def test_an_answer_sent_back_after_its_on_complete_callback_raised_stays_complete():
    """The run ended whole and then the stream's `on_complete` raised: the message the UI keeps is judged by the run's
    answer (complete), not taken for a stream that broke off."""

    async def on_complete(result: Any) -> AsyncIterator[BaseChunk]:
        raise RuntimeError('callback failed')
        yield  # pragma: no cover - makes this an async generator

    async with Agent(ScriptedModel([('text', 'a', 'K2 is 8,611 m tall.')])).run_stream_events('q') as events:
        stream = CitedVercelAIEventStream[None, str]().transform_stream(events, on_complete=on_complete)
        chunks = [c async for c in stream]
    assert 'error' in [str(getattr(c, 'type', '')) for c in chunks]
    answer = CitedAnswer.from_messages(sent_back(ui_message_of(chunks)))
    assert (answer.text, answer.complete) == ('K2 is 8,611 m tall.', True)
    cut = CutOffModel([('text', 'a', 'K2 is 8,611 m tall.')])
    async with Agent(cut).run_stream_events('q') as events:
        stream = CitedVercelAIEventStream[None, str]().transform_stream(events, on_complete=on_complete)
        chunks = [c async for c in stream]
    assert CitedAnswer.from_messages(sent_back(ui_message_of(chunks))).complete is False
