"""What the UI adapters share: citations of a UI text message on the text the UI shows, and the whole answer as JSON."""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Protocol, TypeVar, cast

from pydantic import JsonValue, TypeAdapter
from pydantic_ai import Citation, ModelMessage, TextPart, WebCitationSource
from pydantic_ai.exceptions import RunCancelled
from pydantic_ai.messages import PartEndEvent
from pydantic_ai.output import OutputDataT
from pydantic_ai.tools import AgentDepsT
from pydantic_ai.ui import NativeEvent, OnCancelFunc, OnCompleteFunc, UIEventStream

from .._answer import CitedAnswer, cited_answer_ta, incomplete_reason
from .._checks import require_bools, require_result
from .._redact import redact as _redact
from ..formats.markup import offset_shifter, strip_joined

__all__ = (
    'HeldTextEnds',
    'answer_json',
    'citations_json',
    'dump_citations',
    'load_citations',
    'merged_citations',
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


def merged_citations(parts: Sequence[TextPart], *, cut_off: bool = False) -> list[Citation]:
    """Citations of consecutive text parts, anchored on their joined text as the UI shows it.

    The UI shows the parts' joined text without citation markup, stripped as one text (`formats.markup.strip_joined`;
    the adapters clean the text deltas of the parts with one `StreamCleaner`, which gives the same text), so anchors
    are moved onto that text. A citation whose anchor covered nothing but markup keeps its sources, without an anchor.
    `cut_off`: the text was cut off, and the possible opening of markup that ends it is not shown either.
    """
    out: list[Citation] = []
    offset = 0
    contents = [part.content for part in parts]
    for part, cuts in zip(parts, strip_joined(contents, incomplete=cut_off)[1], strict=True):
        shift = offset_shifter(cuts)
        for citation in part.citations or []:
            anchor = citation.anchor
            if anchor is None:
                out.append(citation)
                continue
            start, end = shift(anchor.start), shift(anchor.end)
            if start >= end:
                out.append(replace(citation, anchor=None))
            else:
                out.append(replace(citation, anchor=replace(anchor, start=start + offset, end=end + offset)))
        offset += shift(len(part.content))
    return out


def dump_citations(citations: Sequence[Citation]) -> list[JsonValue]:
    """Citations as JSON values, in the shape of `providerMetadata.pydantic_ai.citations`."""
    return cast(list[JsonValue], _citations_ta.dump_python(list(citations), mode='json'))


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
class HeldTextEnds(UIEventStream[_RunInputT, _EventT, AgentDepsT, OutputDataT]):
    """The end of a response's text, held back while it decides what a reader sees: was the response cut off there?

    A text that ends in what may open citation markup (`(cite index="1-1`, `<cit`: see `StreamCleaner.holds_opening`)
    shows that tail as prose when the response completed, and not at all when it was cut off there. An adapter asks
    `_cit_hold(holds_opening, event)` at the `PartEndEvent` that ends a UI text; when it holds, the adapter's
    `_cit_end_text(event, cut_off=...)` (the tail and the protocol's text end) runs as soon as that is known: at the
    next event of the response (it went on: prose), when the response is done (cut off if the run's last response did
    not complete, `incomplete_reason`), and before an error or a cancellation is reported (cut off). A stream that
    broke is cut off.
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
        except Exception:  # what the parent reports as an error or a cancellation
            self._cit_broken = True
            raise
        finally:
            aclose = getattr(stream, 'aclose', None)
            if aclose is not None:
                await aclose()

    def _cit_hold(self, holds_opening: bool, event: PartEndEvent) -> bool:
        """Whether to hold the end of the text `event` ends (`holds_opening`: its cleaner's `holds_opening`)."""
        if holds_opening and not self._cit_broken:
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
        async for e in self._cit_release(cut_off=False):  # the response went on after the text: not cut off there
            yield e
        async for e in super().handle_event(event):
            yield e

    async def after_response(self) -> AsyncIterator[_EventT]:
        result = self._result
        last_incomplete = result is not None and incomplete_reason(result.response) is not None
        async for e in self._cit_release(cut_off=self._cit_broken or last_incomplete):
            yield e
        async for e in super().after_response():
            yield e

    async def on_error(self, error: Exception) -> AsyncIterator[_EventT]:
        async for e in self._cit_release(cut_off=True):  # before the error: a client may stop reading there
            yield e
        async for e in super().on_error(error):
            yield e

    async def on_cancelled(self, cancelled: RunCancelled) -> AsyncIterator[_EventT]:
        async for e in self._cit_release(cut_off=True):
            yield e
        async for e in super().on_cancelled(cancelled):
            yield e

    async def after_stream(self) -> AsyncIterator[_EventT]:
        async for e in self._cit_release(cut_off=self._cit_broken):  # (released earlier on every path: a safety net)
            yield e
        async for e in super().after_stream():
            yield e
