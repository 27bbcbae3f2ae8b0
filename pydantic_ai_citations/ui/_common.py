"""What the UI adapters share: citations of a UI text message on the text the UI shows, and the whole answer as JSON."""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Protocol, TypeVar, cast

from pydantic import JsonValue, TypeAdapter
from pydantic_ai import Citation, ModelMessage, TextPart, WebCitationSource
from pydantic_ai.exceptions import RunCancelled, UserError
from pydantic_ai.messages import PartEndEvent, PartStartEvent
from pydantic_ai.output import OutputDataT
from pydantic_ai.tools import AgentDepsT
from pydantic_ai.ui import NativeEvent, OnCancelFunc, OnCompleteFunc, UIEventStream

from .._answer import CitedAnswer, anchor_fits, cited_answer_ta, incomplete_reason, last_response
from .._checks import require_bools, require_result, shown
from .._redact import redact as _redact
from ..formats.markup import Cut, StreamCleaner, offset_shifter, remove_cuts, strip_joined

__all__ = (
    'HeldTextEnds',
    'ShownText',
    'TextBlock',
    'answer_json',
    'citations_json',
    'cut_off_by',
    'dump_citations',
    'load_citations',
    'merged_citations',
    'shown_texts',
    'upto',
    'web_urls',
)

_citations_ta: TypeAdapter[list[Citation]] = TypeAdapter(list[Citation])


class _HasMessages(Protocol):
    def all_messages(self) -> list[ModelMessage]: ...


def answer_json(result: _HasMessages, *, redact: bool, where: str) -> JsonValue:
    """The run's whole `CitedAnswer` as JSON (the one completeness verdict decides `complete`), for the call `where`."""
    require_result(result, where=where)
    require_bools(where, redact=redact)  # a falsy string would send the excerpts unredacted
    answer = CitedAnswer.from_result(result)
    if redact:
        answer = _redact(answer)
    return cast(JsonValue, cited_answer_ta.dump_python(answer, mode='json'))


def merged_citations(
    parts: Sequence[TextPart], *, cut_off: bool = False, part_cuts: Sequence[Sequence[Cut]] | None = None
) -> list[Citation]:
    """Citations of consecutive text parts, anchored on their joined text as the UI shows it.

    The UI shows the parts' joined text without citation markup, stripped as one text (`formats.markup.strip_joined`;
    the adapters clean the text deltas of the parts with one `StreamCleaner`, which gives the same text), so anchors
    are moved onto that text. A citation whose anchor does not make a span there keeps its sources, without an anchor,
    as in `CitedAnswer` (which reports why): one that covered nothing but markup, and one the provider got wrong (out
    of its part's text, a marker anchor on prose).
    `cut_off`: the text was cut off, and the possible opening of markup that ends it is not shown either.
    `part_cuts`: what `strip_joined` removed from each part, when the caller has it (`cut_off` is then not read).
    """
    out: list[Citation] = []
    offset = 0
    if part_cuts is None:
        part_cuts = strip_joined([part.content for part in parts], incomplete=cut_off)[1]
    for part, cuts in zip(parts, part_cuts, strict=True):
        shift = offset_shifter(cuts)
        visible = remove_cuts(part.content, cuts) if part.citations else ''
        for citation in part.citations or []:
            anchor = citation.anchor
            if anchor is None:
                out.append(citation)
                continue
            start, end = shift(anchor.start), shift(anchor.end)
            if not anchor_fits(visible, start, end, anchor.kind):  # (an offset past the text stays past it)
                out.append(replace(citation, anchor=None))
            else:
                out.append(replace(citation, anchor=replace(anchor, start=start + offset, end=end + offset)))
        offset += shift(len(part.content))
    return out


def clean_late_text(text: str, *, cut_off: bool) -> str:
    """Text that arrived for a part after its UI text ended, cleaned on its own (it is sent as a text of its own)."""
    cleaner = StreamCleaner()
    return cleaner.feed(text) + cleaner.close(incomplete=cut_off)


def upto(part: TextPart, length: int | None) -> TextPart:
    """`part` with its text cut to `length`, its citations as they are (`None`, or no shorter: `part` itself).

    A UI text ends at its end event; text that arrives for its parts after that is sent apart, and the citations of the
    UI text are anchored on what it holds (`merged_citations` leaves those on the later text without their anchor).
    """
    return part if length is None or length >= len(part.content) else replace(part, content=part.content[:length])


def dump_citations(citations: Sequence[Citation]) -> list[JsonValue]:
    """Citations as JSON values, in the shape of `providerMetadata.pydantic_ai.citations`."""
    return cast('list[JsonValue]', _citations_ta.dump_python(list(citations), mode='json'))


def citations_json(citations: Sequence[Citation]) -> str:
    """Citations as one JSON string (to tell whether the UI already has them)."""
    return _citations_ta.dump_json(list(citations)).decode()


def web_urls(citations: Sequence[Citation]) -> list[str]:
    """The web URLs cited, each once, in order."""
    urls = [s.url for c in citations for s in c.sources if isinstance(s, WebCitationSource)]
    return list(dict.fromkeys(urls))


def load_citations(data: object) -> list[Citation]:
    """Citations from their JSON values (as `dump_citations` writes them; `None`: none)."""
    return _citations_ta.validate_python(data or [])


_RunInputT = TypeVar('_RunInputT')
_EventT = TypeVar('_EventT')


@dataclass
class TextBlock:
    """One UI text (a Vercel UI text part, an AG-UI text message): consecutive text parts of a response.

    Its deltas go through `cleaner`, which the response's texts share: `CitedAnswer` reads a response's text parts as
    one text, so markup split around another part (a thinking part, a tool call) is removed, and a space before markup
    goes, as there. A text that ends while its response goes on shows none of what its cleaner holds back (what may
    open markup, markup or spaces whose spacing the next character decides): that tail passes on, with the cleaner,
    to the response's next text, which starts with it (`HeldTextEnds._cit_close`), or is shown on its own once the
    response ends (`HeldTextEnds._cit_release`; spaces alone are not).
    """

    indexes: list[int]
    """The response's parts the text holds."""
    cleaner: StreamCleaner
    carried: str = ''
    """The raw tail the response's previous text passed on (see the class): this text starts with it, cleaned."""
    id: str = ''
    """The UI text's id (Vercel `text-start`, AG-UI `TEXT_MESSAGE_START`)."""
    closed: bool = False
    sent: str | None = None
    """JSON of the citations the UI has (`None`: nothing sent yet)."""
    cut_off: bool = False
    """The text was cut off (its tail, a possible opening of markup, was not shown)."""
    shown: dict[int, int] = field(default_factory=lambda: {})
    """How much of each part's text the UI text holds (set when it ends); text after it is late, or passed on."""
    late: str = ''
    """Text that arrived for a part after the UI text ended, not sent yet (`HeldTextEnds._cit_late_text`)."""

    def held_parts(self, parts: Mapping[int, TextPart]) -> list[TextPart]:
        """The text parts as far as the UI text holds them (`shown`), after the tail passed to it.

        Citations on text the UI text does not hold keep their sources, without the anchor (`merged_citations`).
        """
        held = [upto(parts[i], self.shown.get(i)) for i in self.indexes]
        return [TextPart(self.carried), *held] if self.carried else held


@dataclass(frozen=True)
class ShownText:
    """What a UI stream shows of one UI text of a response (see `shown_texts`)."""

    text: str
    """The clean text the UI text shows."""
    carried: str
    """The raw tail the response's previous text passed on to it (see `TextBlock`)."""
    kept: int
    """How much of its own raw text (its parts' texts joined) it shows: the rest passed on."""

    def held_parts(self, parts: Sequence[TextPart]) -> list[TextPart]:
        """`parts` (the UI text's parts, in order) as far as it shows them, after the tail passed to it."""
        out = [TextPart(self.carried)] if self.carried else []
        keep = self.kept
        for part in parts:
            out.append(upto(part, keep))
            keep -= min(keep, len(part.content))
        return out


def shown_texts(texts: Sequence[str], *, ends_with_text: bool, cut_off: bool) -> tuple[list[ShownText], str]:
    """What the UI streams show of a response's UI texts (`texts`, raw, in order), and of the tail shown after them.

    The streams clean a response's texts with one `StreamCleaner`; a text followed by another part passes the tail
    its cleaner holds back on to the next (see `TextBlock`). `ends_with_text`: the response's last part is text (which
    shows the cleaner's rest; else the rest is shown after the response's parts: the tail returned, `''` for spaces
    alone). `cut_off`: the response did not complete (the rest goes as `close(incomplete=True)` removes it).
    The dumps of history give the UI texts as the streams sent them with this.
    """
    cleaner = StreamCleaner()
    out: list[ShownText] = []
    carried = ''
    for k, text in enumerate(texts):
        shown = cleaner.feed(text)
        raw = carried + text
        if ends_with_text and k == len(texts) - 1:
            out.append(ShownText(shown + cleaner.close(incomplete=cut_off), carried, len(text)))
            return out, ''
        kept = len(raw) - cleaner.held_length
        out.append(ShownText(shown, carried[:kept], max(0, kept - len(carried))))
        carried = raw[kept:]
    tail = cleaner.close(incomplete=cut_off)
    return out, tail if tail.strip() else ''


@dataclass(frozen=True)
class _StreamBroke:
    """Put into the event stream by `HeldTextEnds` when it raised while a text end was held: release it first."""

    error: Exception


@dataclass
class HeldTextEnds(UIEventStream[_RunInputT, _EventT, AgentDepsT, OutputDataT]):
    """The end of a response's text, held back while it decides what a reader sees: was the response cut off there?

    A response whose text ends in what may open citation markup (`(cite index="1-1`, `<cit`: see
    `StreamCleaner.holds_opening`) shows that tail as prose when it completed, and not at all when it was cut off
    there. An adapter asks `_cit_hold(holds_opening, event)` at the `PartEndEvent` that ends a UI text; only the last
    part of a response is held (a part after it shows the response went on). The adapter's
    `_cit_end_text(event, cut_off=...)` (the tail and the protocol's text end) then runs once the stream knows:

    - at the run's end, from the completeness of its last response (`incomplete_reason`, as `CitedAnswer` and the
      dumps judge it); events in between (custom events, capability events) do not decide it;
    - when the event stream raises, before the parent reports the error or cancellation (and before an `on_cancel`
      callback's events): cut off, unless a cancellation's history ends with a complete response;
    - when the run goes on to another step (tool calls, a retry) before it ends: the stream cannot see that response's
      finishing signal there, and shows the tail as prose (`dump_messages` judges each response by its own).
    """

    _cit_broken: bool = field(default=False, init=False, repr=False)
    """The event stream raised: the response being streamed was cut off."""
    _cit_held: PartEndEvent | None = field(default=None, init=False, repr=False)
    _cit_carried: tuple[StreamCleaner, str] | None = field(default=None, init=False, repr=False)
    """The cleaner and raw tail a text passed on (see `TextBlock`), until the response's next text or its end."""

    def transform_stream(
        self,
        stream: AsyncIterator[NativeEvent],
        on_complete: OnCompleteFunc[_EventT] | None = None,
        on_cancel: OnCancelFunc[_EventT] | None = None,
    ) -> AsyncIterator[_EventT]:
        return super().transform_stream(self._cit_watched(stream), on_complete, on_cancel)

    async def _cit_watched(self, stream: AsyncIterator[NativeEvent]) -> AsyncIterator[NativeEvent]:
        try:
            async for event in stream:
                yield event
        except Exception as error:  # what the parent reports as an error or a cancellation
            self._cit_broken = True
            if self._cit_held is not None:
                # Handed to `handle_event` before the error reaches the parent's handling of it, so the text ends
                # before an `on_cancel` callback or the error chunk (a client may stop reading at the error).
                yield cast(NativeEvent, _StreamBroke(error))
            raise
        finally:
            aclose = getattr(stream, 'aclose', None)
            if aclose is not None:
                await aclose()

    def _cit_hold(self, holds_opening: bool, event: PartEndEvent) -> bool:
        """Whether to hold the end of the text `event` ends (`holds_opening`: its cleaner's `holds_opening`)."""
        if holds_opening and event.next_part_kind is None and not self._cit_broken:
            self._cit_held = event
            return True
        return False

    def _cit_new_block(self, *, sent: str | None = None) -> TextBlock:
        """The block of a UI text that follows no text in its response: it starts with the tail passed on, if any."""
        carried, self._cit_carried = self._cit_carried, None
        if carried is None:
            return TextBlock([], StreamCleaner(), sent=sent)
        return TextBlock([], carried[0], carried[1], sent=sent)

    def _cit_close(
        self, block: TextBlock, parts: Mapping[int, TextPart], event: PartEndEvent, *, cut_off: bool
    ) -> tuple[str, list[TextPart]]:
        """End `block` at its last part's end: the rest of its text to show, and its parts as the UI text holds them.

        When the response goes on after it, its cleaner and the tail it holds back pass on (see `TextBlock`): the UI
        text holds the parts without that tail, and nothing more is shown now.
        """
        texts = [block.carried, *(parts[i].content for i in block.indexes)]
        keep = sum(map(len, texts))
        rest = ''
        if not cut_off and event.next_part_kind is not None:
            keep -= block.cleaner.held_length
            joined = ''.join(texts)
            self._cit_carried = (block.cleaner, joined[keep:])
        else:
            block.cut_off = cut_off
            rest = block.cleaner.close(incomplete=cut_off)
        block.carried = block.carried[:keep]
        keep -= len(block.carried)
        for i, text in zip(block.indexes, texts[1:], strict=True):
            block.shown[i] = min(len(text), keep)
            keep -= block.shown[i]
        return rest, block.held_parts(parts)

    @abstractmethod
    def _cit_text_events(self, text: str, block: TextBlock | None) -> list[_EventT]:
        """The events of a UI text of its own holding `text` (start, content, end), text of `block`'s parts."""
        ...

    @abstractmethod
    def _cit_blocks(self) -> Iterable[TextBlock]:
        """The UI texts of the response being streamed (each once)."""
        ...

    def _cit_late_text(self, *, cut_off: bool = False) -> list[_EventT]:
        """The text that arrived for parts after their UI text ended, each text's in a UI text of its own.

        Pydantic AI applies a text delta to the part its provider id names, even after another part started (an
        OpenAI-compatible stream interleaving its text with reasoning or a tool call). The UI text it belongs to has
        ended, so the late text is sent once that other part is done (at the next part, or the response's end), as one
        text, cleaned on its own (or, after a tail its UI text passed on, with that tail's cleaner); citations anchored
        on it reach the UI with their sources, without the anchor.
        """
        events: list[_EventT] = []
        for block in self._cit_blocks():
            if not block.late:
                continue
            late, block.late = block.late, ''
            carried = self._cit_carried
            if carried is not None and carried[0] is block.cleaner:
                # The late text goes on from the tail passed on: through its cleaner, which holds what may open markup.
                raw = carried[1] + late
                text = block.cleaner.feed(late)
                self._cit_carried = (block.cleaner, raw[len(raw) - block.cleaner.held_length :])
            else:
                text = clean_late_text(late, cut_off=cut_off)
            if text:
                events += self._cit_text_events(text, block)
        return events

    @abstractmethod
    def _cit_end_text(self, event: PartEndEvent, *, cut_off: bool) -> AsyncIterator[_EventT]:
        """The events that end the text `event` ends: its cleaner's tail (`close(incomplete=cut_off)`), then the rest."""
        ...

    async def _cit_release(self, *, cut_off: bool, carried: bool = True) -> AsyncIterator[_EventT]:
        """Release the held text end, and (`carried`: the response ended) a tail passed on that no text took."""
        if (event := self._cit_held) is not None:
            self._cit_held = None
            async for e in self._cit_end_text(event, cut_off=cut_off):
                yield e
        if carried and (passed := self._cit_carried) is not None:
            self._cit_carried = None
            # (Spaces alone end the response's text: no UI text of their own.)
            if (text := passed[0].close(incomplete=cut_off)).strip():
                # (The text that passed it on is the last one whose cleaner it is: a next text takes the cleaner on.)
                owner = next((b for b in reversed(list(self._cit_blocks())) if b.cleaner is passed[0]), None)
                for e in self._cit_text_events(text, owner):
                    yield e

    async def handle_event(self, event: NativeEvent) -> AsyncIterator[_EventT]:
        broke = cast(object, event)
        if isinstance(broke, _StreamBroke):
            async for e in self._cit_release(cut_off=cut_off_by(broke.error)):
                yield e
            return
        if isinstance(event, PartStartEvent):  # a next response with no turn in between (a retry): the run went on
            # (Any part after a held end starts a next response; a part after a tail passed on does when it is the
            # first: part indexes start over.)
            async for e in self._cit_release(cut_off=False, carried=event.index == 0):
                yield e
        async for e in super().handle_event(event):
            yield e

    async def after_response(self) -> AsyncIterator[_EventT]:
        # At the run's end the held text ends its last response; before it, the run goes on to another step. (A
        # stream that broke released its held text already: `_StreamBroke`; nothing is held after that.)
        result = self._result
        async for e in self._cit_release(cut_off=result is not None and incomplete_reason(result.response) is not None):
            yield e
        async for e in super().after_response():
            yield e

    async def on_error(self, error: Exception) -> AsyncIterator[_EventT]:
        async for e in self._cit_release(cut_off=True):  # (released when the stream raised: a safety net)
            yield e
        async for e in super().on_error(error):
            yield e

    async def on_cancelled(self, cancelled: RunCancelled) -> AsyncIterator[_EventT]:
        async for e in self._cit_release(cut_off=cut_off_by(cancelled)):  # (as `on_error`)
            yield e
        async for e in super().on_cancelled(cancelled):
            yield e

    async def after_stream(self) -> AsyncIterator[_EventT]:
        # A stream of events that ends without the run's result (a standalone encoder): nothing says it was cut off.
        async for e in self._cit_release(cut_off=False):
            yield e
        async for e in super().after_stream():
            yield e


def cut_off_by(error: Exception) -> bool:
    """Whether the response being streamed when `error` ended the stream was cut off.

    Yes, unless a cancellation's history ends with a complete response (an output validator cancelled the run after it).
    """
    if not isinstance(error, RunCancelled):
        return True
    found = last_response(error.all_messages())
    return found is None or incomplete_reason(found[1]) is not None


def require_ui_messages(where: str, messages: object, kinds: tuple[type, ...], what: str) -> None:
    """Raise `UserError` unless `messages` is a list of a UI protocol's messages (`kinds`), naming a bad item.

    Pydantic AI's adapters fail on anything else with an `AttributeError` or an assertion, or (AG-UI) load nothing.
    """
    if isinstance(messages, (str, bytes)) or not isinstance(messages, Sequence):
        raise UserError(f'{where}: `messages` must be a list of {what}, got {shown(messages)}.')
    items: Sequence[object] = cast('Sequence[object]', messages)
    for index, message in enumerate(items):
        if not isinstance(message, kinds):
            got = shown(message)
            hint = ' (validate JSON into them first)' if isinstance(message, dict) else ''
            raise UserError(f'{where}: `messages[{index}]` must be one of {what}{hint}, got {got}.')
