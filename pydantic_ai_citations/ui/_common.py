"""What the UI adapters share: citations of a UI text message on the text the UI shows, and the whole answer as JSON."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Protocol, cast

from pydantic import JsonValue, TypeAdapter
from pydantic_ai import Citation, ModelMessage, TextPart, WebCitationSource

from .._answer import CitedAnswer, cited_answer_ta
from .._checks import require_bools, require_result
from .._redact import redact as _redact
from ..formats.markup import offset_shifter, strip_joined

__all__ = ('answer_json', 'citations_json', 'dump_citations', 'load_citations', 'merged_citations', 'web_urls')

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


def merged_citations(parts: Sequence[TextPart]) -> list[Citation]:
    """Citations of consecutive text parts, anchored on their joined text as the UI shows it.

    The UI shows the parts' joined text without citation markup, stripped as one text (`formats.markup.strip_joined`;
    the adapters clean the text deltas of the parts with one `StreamCleaner`, which gives the same text), so anchors
    are moved onto that text. A citation whose anchor covered nothing but markup keeps its sources, without an anchor.
    """
    out: list[Citation] = []
    offset = 0
    for part, cuts in zip(parts, strip_joined([part.content for part in parts])[1], strict=True):
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
