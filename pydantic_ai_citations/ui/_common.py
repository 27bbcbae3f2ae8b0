"""What the UI adapters share: citations of a UI text message on the text the UI shows, and the whole answer as JSON."""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import AsyncIterator, Sequence
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
    'answer_json',
    'citations_json',
    'dump_citations',
    'load_citations',
    'merged_citations',
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

    @abstractmethod
    def _cit_end_text(self, event: PartEndEvent, *, cut_off: bool) -> AsyncIterator[_EventT]:
        """The events that end the text `event` ends: its cleaner's tail (`close(incomplete=cut_off)`), then the rest."""
        ...

    async def _cit_release(self, *, cut_off: bool) -> AsyncIterator[_EventT]:
        if (event := self._cit_held) is not None:
            self._cit_held = None
            async for e in self._cit_end_text(event, cut_off=cut_off):
                yield e

    async def handle_event(self, event: NativeEvent) -> AsyncIterator[_EventT]:
        broke = cast(object, event)
        if isinstance(broke, _StreamBroke):
            async for e in self._cit_release(cut_off=_cut_off_by(broke.error)):
                yield e
            return
        if isinstance(event, PartStartEvent):  # a next response with no turn in between (a retry): the run went on
            async for e in self._cit_release(cut_off=False):
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
        async for e in self._cit_release(cut_off=_cut_off_by(cancelled)):  # (as `on_error`)
            yield e
        async for e in super().on_cancelled(cancelled):
            yield e

    async def after_stream(self) -> AsyncIterator[_EventT]:
        # A stream of events that ends without the run's result (a standalone encoder): nothing says it was cut off.
        async for e in self._cit_release(cut_off=False):
            yield e
        async for e in super().after_stream():
            yield e


def _cut_off_by(error: Exception) -> bool:
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
