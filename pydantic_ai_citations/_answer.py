"""`CitedAnswer`: one view of a run's answer, with its citations in three honest states.

Pydantic AI keeps citations on each `TextPart` (`TextPart.citations`, anchors are offsets into that part's
`content`) and builds `result.output` by joining text parts. This module joins the parts exactly the way Pydantic
AI builds text output, shifts every anchor onto the joined text, and sorts what it finds into:

- `spans`: a source *with* a position (render as an inline link or footnote mark);
- `unanchored`: a source *without* a position (render as a "sources used" card, never pinned to a sentence);
- `raw_only`: provider data in `provider_details['citations']` that maps to no normalised citation, and citations
  on text parts the answer does not show (before the last native tool call, or empty): audit only.

Anything that cannot be used as it stands (anchors past the end of their text, duplicates, unreadable raw data,
a stream that did not complete) becomes a `CitationProblem`; nothing is dropped silently.
"""

from __future__ import annotations

import bisect
import dataclasses
import functools
import heapq
import itertools
import json
import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import KW_ONLY, dataclass, field, replace
from operator import attrgetter
from typing import Literal, Protocol, TypedDict, cast

from pydantic import JsonValue, TypeAdapter
from pydantic_ai import (
    Citation,
    DocumentCitationSource,
    ModelMessage,
    ModelResponse,
    NativeToolCallPart,
    TextPart,
    ToolCallPart,
    WebCitationSource,
)
from pydantic_ai.exceptions import UserError
from pydantic_core import PydanticSerializationError

from ._checks import require_messages, require_optional_bools, require_result, shown
from ._edit import PrintKeys, copy_with, edited_parts, print_keys, shown_realigned
from ._lazy import lazy_adapter
from ._problems import CitationProblem, ProblemCode, shorten
from .formats._raw import as_map
from .formats.markup import MARKER_END, MARKER_SEPARATOR, MARKER_START, remove_cuts, strip_joined
from .formats.perplexity import recover_sonar, sonar_result_urls
from .formats.unmapped import Recovery, recover

Cut = tuple[int, int]

__all__ = (
    'FINISH_METADATA_KEY',
    'CitedAnswer',
    'CitedSpan',
    'PartSegment',
    'RawCitation',
    'SourceRef',
    'answer_parts',
    'cited_answer_ta',
    'finish_record',
    'finish_signal',
    'incomplete_reason',
    'response_answer',
    'run_messages',
    'unfinished_record',
)

SourceKind = Literal['web', 'document']
AnchorKind = Literal['content', 'marker']


@dataclass(frozen=True)
class SourceRef:
    """One source, deduplicated across the answer (same URL, or same document id)."""

    number: int
    """1-based number by first appearance in the answer: stable footnote numbers."""
    kind: SourceKind
    """`'web'` for a URL, `'document'` for a document the provider was given or searched."""
    _: KW_ONLY
    url: str | None = None
    """The URL of a web source."""
    document_id: str | None = None
    """The provider's id of a document source (not a local path); `None` when the provider gives none."""
    title: str | None = None
    """Title given by the provider."""
    excerpts: list[str] = field(default_factory=list[str])
    """Provider excerpts of the source (Anthropic `cited_text`, OpenRouter `content`, Google chunk text), deduplicated."""
    provider_name: str | None = None
    """Provider of the part that first cited this source."""


@dataclass(frozen=True)
class CitedSpan:
    """A citation with a position: offsets into `CitedAnswer.text`."""

    start: int
    """Start offset in `CitedAnswer.text` (inclusive)."""
    end: int
    """End offset in `CitedAnswer.text` (exclusive)."""
    kind: AnchorKind
    """`'content'`: the span is the supported words. `'marker'`: the span is a marker the model wrote (`[1]`, a link)."""
    sources: list[int]
    """Numbers of the cited sources (`SourceRef.number`)."""
    _: KW_ONLY
    message_index: int
    """Index of the `ModelResponse` in the messages the answer was built from."""
    part_index: int
    """Index of the `TextPart` in that response."""
    citation_index: int
    """Index of the citation in `TextPart.citations`."""


@dataclass(frozen=True)
class RawCitation:
    """Provider citation data that maps to no normalised citation: for audit logs, never shown to users."""

    data: JsonValue
    """The raw entry, as the provider adapter stored it."""
    reason: str
    """Why it maps to no normalised citation."""
    _: KW_ONLY
    provider_name: str | None = None
    """Provider of the part or response that carried it."""
    message_index: int
    """Index of the `ModelResponse` in the messages."""
    part_index: int | None = None
    """Index of the part, or `None` for response-level data (`ModelResponse.provider_details`)."""
    raw_index: int
    """Index of the entry in the raw list."""


@dataclass(frozen=True)
class PartSegment:
    """Where one `TextPart` of the answer landed in `CitedAnswer.text`."""

    start: int
    """Start offset in `CitedAnswer.text`."""
    end: int
    """End offset in `CitedAnswer.text`."""
    _: KW_ONLY
    message_index: int
    """Index of the `ModelResponse` in the messages."""
    part_index: int
    """Index of the `TextPart` in that response."""
    provider_name: str | None = None
    """`TextPart.provider_name`."""


class _Where(TypedDict):
    message_index: int
    part_index: int
    citation_index: int


class _HasMessages(Protocol):
    def all_messages(self) -> list[ModelMessage]: ...


@dataclass(frozen=True)
class CitedAnswer:
    """The answer of a run with its citations, ready for a UI, a store or a support check.

    Build it with `CitedAnswer.from_messages(messages)` or `CitedAnswer.from_result(result)`.
    """

    text: str
    """The answer text, joined from the final response's `TextPart`s the way Pydantic AI builds `result.output`."""
    _: KW_ONLY
    spans: list[CitedSpan] = field(default_factory=list[CitedSpan])
    """Citations with a position, offsets into `text`, sorted by position."""
    unanchored: list[SourceRef] = field(default_factory=list[SourceRef])
    """Sources cited without a (usable) position: a "sources used" card, never pinned to a sentence."""
    raw_only: list[RawCitation] = field(default_factory=list[RawCitation])
    """Raw provider citation data that maps to no normalised citation: audit only."""
    sources: list[SourceRef] = field(default_factory=list[SourceRef])
    """Every cited source, deduplicated, numbered by first appearance."""
    problems: list[CitationProblem] = field(default_factory=list[CitationProblem])
    """What could not be used as it stands."""
    complete: bool = True
    """`False` when the response did not complete (cancelled or broken stream): never a complete-looking answer."""
    provider_name: str | None = None
    """`ModelResponse.provider_name` of the answering response."""
    model_name: str | None = None
    """`ModelResponse.model_name` of the answering response."""
    segments: list[PartSegment] = field(default_factory=list[PartSegment])
    """Where each text part landed in `text`."""

    @classmethod
    def from_messages(cls, messages: Sequence[ModelMessage], *, complete: bool | None = None) -> CitedAnswer:
        """Build the answer from a run's messages: the last `ModelResponse` is the answer.

        Only a response that carries the provider's own finishing signal is complete; otherwise the answer gets
        `complete=False` and a `stream_incomplete` problem saying which signal is missing. A cited part whose text
        changed since it was fingerprinted (`find_stale`: edited outside `edit_text`, e.g. in a browser) is shown with
        its citations realigned on the text as it is now, as `CleanStaleCitations` realigns them, and a
        `stale_after_edit` problem; citations whose words are gone are listed without a position.

        Args:
            messages: The run's messages (`result.all_messages()` or `new_messages()`).
            complete: Pass `False` when you know the run did not complete (a `stream_incomplete` problem is added).
                `True` or `None` cannot make a response complete that lacks its finishing signal.

        Raises:
            UserError: `messages` is not a list of messages, or `complete` is not a bool or `None`.
        """
        require_messages(messages, where='CitedAnswer.from_messages')
        require_optional_bools('CitedAnswer.from_messages', complete=complete)
        found = last_response(messages)
        reason = incomplete_reason(found[1] if found is not None else None)
        if reason is None and complete is False:
            reason = 'The run did not complete; text and citations may be missing (citations often arrive last).'
        return _build(found, incomplete=reason)

    @classmethod
    def from_result(cls, result: _HasMessages) -> CitedAnswer:
        """Build the answer from the result of `run`, `run_sync`, `run_stream` (`StreamedRunResult`) or `iter` (`AgentRun`).

        A streamed result that has not completed (stopped early, broken) gives the text that arrived, with
        `complete=False` and a `stream_incomplete` problem; so does an `AgentRun` that has not reached its end.
        """
        require_result(result, where='CitedAnswer.from_result')
        messages, stopped = run_messages(result)
        return cls.from_messages(messages, complete=False if stopped else None)

    def source(self, number: int) -> SourceRef:
        """The source with this footnote number (`SourceRef.number`: 1-based, as shown to readers).

        Raises:
            UserError: `number` is not an int from 1 to `len(answer.sources)`.
        """
        count = len(self.sources)
        given = cast(object, number)
        if isinstance(given, bool) or not isinstance(given, int) or not 1 <= given <= count:
            has = f'numbered 1 to {count}' if count else 'none'
            raise UserError(
                f'CitedAnswer.source({shown(number)}): `number` must be a source number (1-based, as shown to '
                f'readers); this answer has {count} source(s): {has}.'
            )
        return self.sources[number - 1]

    def span_text(self, span: CitedSpan) -> str:
        """The text a span covers."""
        return self.text[span.start : span.end]

    def to_json(self) -> bytes:
        """JSON, readable back with `CitedAnswer.from_json`.

        Raises:
            UserError: The answer holds text that is not UTF-8 (a lone surrogate, from a JSON escape, say).
        """
        try:
            return cited_answer_ta.dump_json(self)
        except PydanticSerializationError as e:
            raise UserError(
                f'CitedAnswer.to_json: the answer cannot be written as JSON: {e}. Replace the characters first '
                "(`text.encode('utf-8', 'replace').decode()`), as for Pydantic AI's `ModelMessagesTypeAdapter`."
            ) from e

    @classmethod
    def from_json(cls, data: str | bytes) -> CitedAnswer:
        """Read JSON written by `to_json`."""
        return cited_answer_ta.validate_json(data)


cited_answer_ta: TypeAdapter[CitedAnswer] = lazy_adapter(CitedAnswer)
"""JSON round trip for `CitedAnswer`; equality holds after a round trip."""


def answer_parts(response: ModelResponse) -> list[int]:
    """Indexes of the `TextPart`s of a response that make up its text output, as Pydantic AI picks them.

    Mirrors Pydantic AI's text output: text parts after the last native tool call, joined directly; when no
    text (and no function tool call) follows the last native tool call, the text run before it (Gemini reports
    its searches after the text).
    """
    current: list[int] = []
    before: list[int] = []
    has_tool_calls = False
    for index, part in enumerate(response.parts):
        if isinstance(part, TextPart):
            current.append(index)
        elif isinstance(part, ToolCallPart):
            has_tool_calls = True
        elif isinstance(part, NativeToolCallPart):
            if _joined(response, current):
                before = current
            current = []
    if not has_tool_calls and not _joined(response, current):
        return before
    return current


def _joined(response: ModelResponse, indexes: list[int]) -> str:
    return ''.join(_text(response.parts[i]) for i in indexes)


def _text(part: object) -> str:
    content = cast(object, part.content) if isinstance(part, TextPart) else ''
    return content if isinstance(content, str) else ''  # (hand-built parts may hold anything: see `_readable`)


class _Builder:
    def __init__(self) -> None:
        self.sources: list[SourceRef] = []
        self.by_key: dict[str, int] = {}
        self.problems: list[CitationProblem] = []
        self.spans: list[CitedSpan] = []
        self.unanchored: list[int] = []
        self.raw_only: list[RawCitation] = []
        # What sources cited again add (excerpts, a first title), by number: applied once by `finish_sources`, so a
        # source cited n times costs n steps, not n copies of its excerpts.
        self.more_excerpts: dict[int, dict[str, None]] = {}
        self.late_titles: dict[int, str] = {}

    def add_source(self, source: object, provider_name: str | None, where: _Where) -> int | None:
        key = _source_key(source)
        if key is None:
            self.problems.append(
                CitationProblem(
                    'source_without_content',
                    'A cited source has no URL, document id, title or excerpt to show; it is left out of `sources`.',
                    detail=shorten(repr(source)),
                    **where,
                )
            )
            return None
        assert isinstance(source, (WebCitationSource, DocumentCitationSource))
        excerpts = _as_str_list(source.excerpts) if source.excerpts else []
        number = self.by_key.get(key)
        if number is not None:
            existing = self.sources[number - 1]
            if excerpts:
                merged = self.more_excerpts.get(number)
                if merged is None:
                    merged = self.more_excerpts[number] = dict.fromkeys(existing.excerpts)
                merged.update(dict.fromkeys(excerpts))
            if existing.title is None and source.title and number not in self.late_titles:
                self.late_titles[number] = source.title
            return number
        number = len(self.sources) + 1
        self.by_key[key] = number
        deduped = list(dict.fromkeys(excerpts)) if excerpts else excerpts
        if isinstance(source, WebCitationSource):
            ref = SourceRef(
                number, 'web', url=source.url, title=source.title, excerpts=deduped, provider_name=provider_name
            )
        else:
            ref = SourceRef(
                number,
                'document',
                document_id=source.document_id,
                title=source.title,
                excerpts=deduped,
                provider_name=provider_name,
            )
        self.sources.append(ref)
        return number

    def finish_sources(self) -> None:
        """Give the sources cited more than once the excerpts and title their later citations added."""
        for number in sorted(self.more_excerpts.keys() | self.late_titles.keys()):
            existing = self.sources[number - 1]
            merged = self.more_excerpts.get(number)
            excerpts = list(merged) if merged is not None else existing.excerpts
            title = existing.title or self.late_titles.get(number)
            if excerpts != existing.excerpts or title != existing.title:
                self.sources[number - 1] = replace(existing, excerpts=excerpts, title=title)
        self.more_excerpts.clear()
        self.late_titles.clear()


def shift_citation(citation: Citation, offset: int) -> Citation:
    """`citation` with its anchor moved `offset` characters on (for a part's text joined after others)."""
    anchor = citation.anchor
    if anchor is None or not offset:
        return citation
    return replace(citation, anchor=replace(anchor, start=anchor.start + offset, end=anchor.end + offset))


def response_answer(response: ModelResponse) -> CitedAnswer:
    """`CitedAnswer.from_messages([response])`, without checking the arguments of a public call.

    For a caller that holds a `ModelResponse` already: a store builds one per response it saves.
    """
    return _build((0, response), incomplete=incomplete_reason(response))


def last_response(messages: Sequence[ModelMessage]) -> tuple[int, ModelResponse] | None:
    """The last `ModelResponse` of `messages` and its index, or `None` when there is none."""
    for index in range(len(messages) - 1, -1, -1):
        message = messages[index]
        if isinstance(message, ModelResponse):
            return index, message
    return None


FINISH_METADATA_KEY = 'pydantic_ai_citations_finish'
"""`ModelResponse.metadata` key where this package records what it saw of a response's end when the response alone
cannot tell: `{'complete': False, 'reason': ...}` from a wire tap that saw no finishing event (the Perplexity Agent API
without `response.completed`), or `{'complete': True, 'reason': ...}` for a non-streamed response without a finish
reason (its body arrived whole). Metadata is never sent to a model."""


def finish_record(complete: bool, reason: str) -> dict[str, object]:
    """The value `FINISH_METADATA_KEY` holds: this package's verdict on a response's end."""
    return {'complete': complete, 'reason': reason}


def unfinished_record(response: ModelResponse) -> dict[str, object] | None:
    """`response`'s verdict as a `FINISH_METADATA_KEY` record when it is not complete (`None` when it is).

    For a copy of the response that loses what tells it, such as a UI message (no finish reason, no provider name):
    loaded back, the copy is judged by the record, not taken for complete.
    """
    reason = incomplete_reason(response)
    return None if reason is None else finish_record(False, reason)


_SIGNALS: dict[str, str] = {
    'anthropic': "Anthropic's `message_delta.stop_reason`",
    'bedrock': "Bedrock's `messageStop`",
    'openai': "OpenAI's `response.completed` (Responses) or `finish_reason` (Chat Completions)",
    'google': "Gemini's `finishReason`",
    'google-gla': "Gemini's `finishReason`",
    'google-vertex': "Gemini's `finishReason`",
    'google-cloud': "Gemini's `finishReason`",
    'xai': "xAI's finish reason",
    'perplexity': "Perplexity's `finish_reason`",
    'openrouter': "OpenRouter's `finish_reason`",
    'mistral': "Mistral's `finish_reason`",
    'groq': "Groq's `finish_reason`",
    'cohere': "Cohere's `finish_reason`",
}
"""Providers whose Pydantic AI adapter records the provider's finishing signal, and what that signal is. For any
other provider (`FunctionModel`, `TestModel`, custom models) Pydantic AI's `state` decides alone."""


def finish_signal(response: ModelResponse) -> str | None:
    """The provider's own finishing signal carried by `response` (its raw finish / stop reason), or `None`.

    Pydantic AI records the provider's raw value in `provider_details['finish_reason']` (Anthropic
    `message_delta.stop_reason`, Responses `response.completed` status, Chat `finish_reason`, Gemini `finishReason`,
    Bedrock `messageStop`, ...). `ModelResponse.finish_reason` alone is not proof for `'stop'`: OpenAI-compatible
    chat adapters write `'stop'` themselves when a stream ends without one. xAI records no raw value.
    """
    details = as_map(response.provider_details)
    raw = details.get('finish_reason') if details is not None else None
    if isinstance(raw, str) and raw:
        return raw
    reason = response.finish_reason
    if reason is None or (reason == 'stop' and response.provider_name != 'xai'):
        return None
    return reason


def incomplete_reason(response: ModelResponse | None) -> str | None:
    """THE completeness verdict: why `response` is not a complete answer, or `None` when it is.

    A response is complete only when the provider's own finishing signal arrived (`finish_signal`), Pydantic AI
    left it `'complete'`, and no wire tap of this package recorded otherwise (`FINISH_METADATA_KEY`). Responses
    of providers whose adapter records no signal (`FunctionModel`, `TestModel`, custom models) are judged by
    `state` alone, and so is a non-streamed response that `TrackCitations` saw arrive whole.
    """
    if response is None:
        return 'No model response arrived; there is no answer.'
    recorded = _recorded_finish(response)
    if recorded is not None and not recorded[0]:
        return recorded[1]
    if response.state != 'complete':
        return (
            f'The response is {response.state!r}: it was stopped, cancelled or broke before the provider finished; '
            'text and citations may be missing (citations often arrive last).'
        )
    signal = _SIGNALS.get(response.provider_name or '')
    if signal is None or finish_signal(response) is not None:
        return None
    if recorded is not None:  # `TrackCitations` saw the whole body of a non-streamed response arrive
        return None
    return (
        f'The response ended without {signal}: the stream was cut before the provider finished; '
        'text and citations may be missing (citations often arrive last).'
    )


def _recorded_finish(response: ModelResponse) -> tuple[bool, str] | None:
    metadata = as_map(response.metadata)
    recorded = metadata.get(FINISH_METADATA_KEY) if metadata is not None else None
    if not isinstance(recorded, dict):
        return None
    record = cast('dict[str, object]', recorded)
    return bool(record.get('complete')), str(record.get('reason') or 'The response did not complete.')


def run_messages(result: _HasMessages, partial: ModelResponse | None = None) -> tuple[list[ModelMessage], bool]:
    """The messages of a run's result, and whether the run stopped before its end.

    A stopped run (`run_stream` left early or broken, an `AgentRun` that has not reached its `End` node) gets the
    response that was being streamed appended when its messages lack it, so the text that arrived is kept.

    Args:
        result: The result of `run`, `run_stream`, `iter`, ...
        partial: The response being streamed, when the caller knows it better than `result.response`.
    """
    messages = result.all_messages()
    stopped = getattr(result, 'is_complete', True) is False
    if getattr(result, 'next_node', None) is not None and getattr(result, 'result', True) is None:
        stopped = True
    if not stopped:
        return messages, False
    response = getattr(result, 'response', None)
    response = response if isinstance(response, ModelResponse) and response.parts else partial
    found = last_response(messages)
    if response is None or (found is not None and found[0] == len(messages) - 1):
        return messages, True
    return [*messages, response], True


def _build(found: tuple[int, ModelResponse] | None, *, incomplete: str | None) -> CitedAnswer:
    """The answer whose response `last_response` found; `incomplete` is the verdict's reason when it is not complete."""
    message_index = found[0] if found is not None else None
    b = _Builder()
    complete = incomplete is None
    if incomplete is not None:
        b.problems.append(CitationProblem('stream_incomplete', incomplete, message_index=message_index))
    if found is None:
        return CitedAnswer('', problems=b.problems, complete=complete)
    message_index, response = found
    response = _readable(b, response, message_index)

    text_pieces: list[str] = []
    segments: list[PartSegment] = []
    offset = 0
    indexes = answer_parts(response)
    unmapped = recover(response)
    sonar = recover_sonar(response)[0] if 'unmapped' in (response.provider_details or {}) else {}
    stale = edited_parts(response)
    keys = print_keys(response) if stale else None  # (which print is each part's, once for all of them)
    parts = [cast(TextPart, response.parts[i]) for i in indexes]
    parts = [
        _realigned(b, response, message_index, i, p, keys) if i in stale else p
        for i, p in zip(indexes, parts, strict=True)
    ]
    texts = _strip_parts(b, [part.content for part in parts], indexes, message_index, incomplete is not None)
    for part_index, part, text in zip(indexes, parts, texts, strict=True):
        content = text.content
        segments.append(
            PartSegment(
                offset,
                offset + len(content),
                message_index=message_index,
                part_index=part_index,
                provider_name=part.provider_name,
            )
        )
        if not part.citations and (recovered := [*unmapped.citations.get(part_index, ()), *sonar.get(part_index, ())]):
            # Recovery did not reach this part object (e.g. `run_stream` rebuilt it): apply it to the answer.
            part = dataclasses.replace(part, citations=recovered)
        _add_part(b, part, text, message_index, part_index, offset)
        text_pieces.append(content)
        offset += len(content)
    for part_index in cited_outside(response, indexes):
        _add_outside(b, cast(TextPart, response.parts[part_index]), message_index, part_index)
    b.finish_sources()
    _add_response_raw(b, response, message_index)
    _add_unmapped(b, unmapped, message_index)
    if sonar or 'unmapped' in (response.provider_details or {}):
        _add_sonar_uncited(b, response, message_index)

    spans = _dedupe_spans(b)
    unanchored_numbers = dict.fromkeys(b.unanchored)  # (each once)
    return CitedAnswer(
        ''.join(text_pieces),
        spans=spans,
        unanchored=[b.sources[n - 1] for n in sorted(unanchored_numbers)],
        raw_only=b.raw_only,
        sources=b.sources,
        problems=b.problems,
        complete=complete,
        provider_name=response.provider_name,
        model_name=response.model_name,
        segments=segments,
    )


def _readable(b: _Builder, response: ModelResponse, message_index: int) -> ModelResponse:
    """`response` with text parts the rest of the build can read, each repair reported.

    A `content` that is not a str is read as `''`, `provider_details` that are not a mapping are left out (hand-built
    parts may hold anything). The response itself is not changed.
    """
    parts: list[object] | None = None
    for index, part in enumerate(response.parts):
        if not isinstance(part, TextPart):
            continue
        content, details = cast(object, part.content), cast(object, part.provider_details)
        changes: dict[str, object] = {}
        if not isinstance(content, str):
            changes['content'] = ''
            what = '`TextPart.content` is not a str; it was read as empty text'
            b.problems.append(_unreadable(f'{what}.', message_index, index, content))
        if details is not None and not isinstance(details, Mapping):
            changes['provider_details'] = None
            b.problems.append(
                _unreadable(
                    '`TextPart.provider_details` is not a dict; it was not read.', message_index, index, details
                )
            )
        if changes:
            parts = list(response.parts) if parts is None else parts
            parts[index] = copy_with(part, **changes)
    return response if parts is None else copy_with(response, parts=parts)


def _unreadable(message: str, message_index: int, part_index: int, value: object) -> CitationProblem:
    return CitationProblem(
        'unreadable_raw_data', message, message_index=message_index, part_index=part_index, detail=shorten(repr(value))
    )


def cited_outside(response: ModelResponse, indexes: Sequence[int]) -> list[int]:
    """The text parts of `response` that carry citations (normalised or raw) but that the answer does not show.

    `indexes` are the parts it shows (`answer_parts`); the others are text before the last native tool call, or
    empty text.
    """
    shown = set(indexes)
    return [
        index
        for index, part in enumerate(response.parts)
        if index not in shown
        and isinstance(part, TextPart)
        and (part.citations or (isinstance(part.provider_details, Mapping) and part.provider_details.get('citations')))
    ]


def _add_outside(b: _Builder, part: TextPart, message_index: int, part_index: int) -> None:
    """A cited part the answer does not show: each citation listed in `raw_only` (audit only), and one problem."""
    content = cast(object, part.content)
    where = (
        'is empty'
        if not content
        else "comes before the response's last native tool call (Pydantic AI's output, and this answer, is the text "
        'after it)'
    )
    reason = f'a citation on text the answer does not show: response {message_index}, part {part_index} {where}'
    identities: set[str] = set()
    named: dict[str, None] = {}
    citations = list(_readable_citations(b, part, message_index, part_index))
    for index, citation in citations:
        for source in _iter_list(citation.sources):
            identities.update(_identities(source))
            key = _source_key(source)  # (`url:...`, `doc:...`: the source's name after the kind)
            if key is not None:
                named[key.partition(':')[2]] = None
        b.raw_only.append(
            RawCitation(
                _citation_data(citation),
                f'{reason} (`TextPart.citations[{index}]`)',
                provider_name=part.provider_name,
                message_index=message_index,
                part_index=part_index,
                raw_index=index,
            )
        )
    raw = _add_part_raw(b, part, identities, message_index, part_index)  # (those naming none of these sources)
    counted = f'{len(citations)} citation(s)' + (f' and {raw} raw provider citation(s)' if raw else '')
    b.problems.append(
        CitationProblem(
            'citation_outside_answer',
            f'Response {message_index}, part {part_index} carries {counted} on text that {where}: they are not shown '
            'with the answer, and are listed in `raw_only`.',
            message_index=message_index,
            part_index=part_index,
            detail=shorten(', '.join(named)) if named else None,
        )
    )


def _citation_data(citation: Citation) -> JsonValue:
    """A citation as JSON data for `RawCitation.data` (its repr when it cannot be written as JSON)."""
    try:
        return _citation_ta().dump_python(citation, mode='json', warnings=False)
    except (ValueError, TypeError):  # `PydanticSerializationError` included: hand-built parts may hold anything
        return shorten(repr(citation))


@functools.cache
def _citation_ta() -> TypeAdapter[Citation]:
    return TypeAdapter(Citation)  # built when first needed: most answers have no citation outside them


def _realigned(
    b: _Builder, response: ModelResponse, message_index: int, part_index: int, part: TextPart, keys: PrintKeys | None
) -> TextPart:
    """A part whose text changed since its citations were made (its fingerprint does not match), as the answer shows it.

    Its citations are realigned on the text as it is now by their anchor prints, as `CleanStaleCitations` realigns
    them before the next request; one whose words are no longer found once is kept as a source without a position.
    Reported as `stale_after_edit`. The history itself is not changed.
    """
    shown, lost = shown_realigned(response, part_index, part, keys)
    unplaced = f'; {lost} whose words were not found are listed without a position' if lost else ''
    b.problems.append(
        CitationProblem(
            'stale_after_edit',
            f'The text of response {message_index}, part {part_index} changed since its citations were made '
            f'(fingerprint mismatch): they were realigned on the text as it is now{unplaced}.',
            message_index=message_index,
            part_index=part_index,
        )
    )
    return shown


_MARKUP_HINTS = (MARKER_START, MARKER_END, MARKER_SEPARATOR, '【', 'cite')
"""Characters without which a text holds no citation markup (`formats.markup`'s forms, numbered markers aside)."""


def _strip_parts(
    b: _Builder, contents: list[str], indexes: list[int], message_index: int, cut_off: bool
) -> list[_Text]:
    """The answer parts' texts without citation markup a reader must never see, and the ranges removed from each.

    The parts are stripped as the one text they make (`strip_joined`), as a reader sees it and as a stream of them is
    cleaned: a marker that opens a part takes the space that ends the one before. Markup that was resolved was already
    turned into citations (`TrackCitations(marker_sources=...)`); what is left names no source this answer knows, so it
    is removed and reported with its offsets into the text of the part it starts in. `cut_off`: the text was cut off
    (the response did not complete), so it may end in the middle of markup.
    """
    joined = ''.join(contents)
    if not cut_off and not any(hint in joined for hint in _MARKUP_HINTS):
        return [_Text(content, ()) for content in contents]
    stripped, cuts = strip_joined(contents, incomplete=cut_off)
    if not stripped.changed:
        return [_Text(content, ()) for content in contents]
    starts = list(itertools.accumulate((len(content) for content in contents[:-1]), initial=0))

    found: list[tuple[ProblemCode, int, int, str, tuple[str, ...], str | None]] = [
        *(('unresolved_marker', m.start, m.end, m.kind, m.source_ids, None) for m in stripped.matches),
        *((i.code, i.start, i.end, i.kind, (), i.reason) for i in stripped.issues),
    ]
    for code, start, end, kind, ids, reason in found:
        k = bisect.bisect_right(starts, start) - 1  # the part the markup starts in
        where = f'in response {message_index}, part {indexes[k]}'
        if reason is None:
            kept = ' (the text it wraps is kept)' if kind == 'cite_tag' else ''
            message = (
                f'Citation markup ({kind}, ids {", ".join(ids) or "none"}) {where} names no source this answer knows; '
                f'it was removed from the text{kept}.'
            )
        else:
            message = f'{reason} {where}; its markup was removed from the text.'
        b.problems.append(
            CitationProblem(
                code,
                f"{message} Offsets are into the part's text.",
                message_index=message_index,
                part_index=indexes[k],
                start=start - starts[k],
                end=min(end - starts[k], len(contents[k])),  # markup going on into the next part: to this one's end
                detail=shorten(repr(joined[start:end])),
            )
        )
    return [_Text(remove_cuts(content, part), part) for content, part in zip(contents, cuts, strict=True)]


@dataclass(frozen=True)
class _Text:
    """A part's text as shown in the answer, and the ranges of `TextPart.content` removed to make it."""

    content: str
    cuts: tuple[Cut, ...]

    def shift(self, position: object) -> object:
        """`position` (an offset into `TextPart.content`) as an offset into `content`; non-integers pass through."""
        if not self.cuts or not isinstance(position, int):
            return position
        removed = 0
        for start, end in self.cuts:
            if end <= position:
                removed += end - start
            elif start < position:  # inside a removed range: lands where it was
                removed += position - start
            else:
                break
        return position - removed


def _add_part(b: _Builder, part: TextPart, text: _Text, message_index: int, part_index: int, offset: int) -> None:
    content = text.content
    details = part.provider_details
    # What the sources are known by: only needed to check raw provider data against them.
    identities: set[str] | None = set() if details is not None and 'citations' in details else None
    for citation_index, citation in _readable_citations(b, part, message_index, part_index):
        where = _Where(message_index=message_index, part_index=part_index, citation_index=citation_index)
        found: dict[int, None] = {}  # the citation's source numbers, each once, in order
        for source in _iter_list(citation.sources):
            if identities is not None:
                identities.update(_identities(source))
            number = b.add_source(source, part.provider_name, where)
            if number is not None:
                found[number] = None
        if not found:
            continue
        numbers = list(found)
        anchor = citation.anchor
        if anchor is None:
            b.unanchored.extend(numbers)
            continue
        # Read defensively: parts built with `model_construct` or by hand may hold anything.
        start, end = cast(object, anchor.start), cast(object, anchor.end)
        if text.cuts:
            start, end = text.shift(start), text.shift(end)
        kind: AnchorKind = 'marker' if getattr(anchor, 'kind', None) == 'marker' else 'content'
        problem = _anchor_problem(content, start, end, kind, where)
        if problem is not None:
            b.problems.append(problem)
            b.unanchored.extend(numbers)
            continue
        start, end = cast(int, start), cast(int, end)  # `_anchor_problem` checked them
        b.spans.append(
            CitedSpan(
                offset + start,
                offset + end,
                kind,
                numbers,
                message_index=message_index,
                part_index=part_index,
                citation_index=citation_index,
            )
        )
        if kind == 'content' and identities is not None:
            identities.add(content[start:end])
    if identities is not None:
        _add_part_raw(b, part, identities, message_index, part_index)


def _readable_citations(
    b: _Builder, part: TextPart, message_index: int, part_index: int
) -> Iterator[tuple[int, Citation]]:
    """`(index, citation)` for each `Citation` of `part.citations`; what is not one (or not a list) is a problem."""
    citations = cast(object, part.citations)  # read defensively: hand-built parts may hold anything
    if citations is not None and not isinstance(citations, list):
        b.problems.append(
            _unreadable('`TextPart.citations` is not a list; it was not read.', message_index, part_index, citations)
        )
        return
    for index, citation in enumerate(_iter_list(cast(object, citations))):
        if isinstance(citation, Citation):
            yield index, citation
            continue
        problem = _unreadable(
            'An entry of `TextPart.citations` is not a `Citation`; it was not read.',
            message_index,
            part_index,
            citation,
        )
        b.problems.append(dataclasses.replace(problem, citation_index=index))


def _add_part_raw(b: _Builder, part: TextPart, identities: set[str], message_index: int, part_index: int) -> int:
    """The entries of `provider_details['citations']` that name none of `identities`, in `raw_only`; their count."""
    raw = (part.provider_details or {}).get('citations')
    if raw is None:
        return 0
    if not isinstance(raw, list):
        what = "`provider_details['citations']` is not a list; it was not read."
        b.problems.append(_unreadable(what, message_index, part_index, raw))
        return 0
    entries = _iter_list(cast(object, raw))
    for raw_index, entry in enumerate(entries):
        _check_raw_entry(b, entry, identities, part.provider_name, message_index, part_index, raw_index)
    return len(entries)


def _add_response_raw(b: _Builder, response: ModelResponse, message_index: int) -> None:
    """Response-level annotations (OpenRouter keeps every annotation, file ones included, here)."""
    details = response.provider_details
    if not details or 'annotations' not in details:
        return
    raw = details['annotations']
    if not isinstance(raw, list):
        b.problems.append(
            CitationProblem(
                'unreadable_raw_data',
                "`ModelResponse.provider_details['annotations']` is not a list; it was not read.",
                message_index=message_index,
                detail=shorten(repr(raw)),
            )
        )
        return
    identities: set[str] = set()
    for source in b.sources:
        identities.update(s for s in (source.url, source.document_id, source.title, *source.excerpts) if s)
    for raw_index, entry in enumerate(_iter_list(cast(object, raw))):
        _check_raw_entry(b, entry, identities, response.provider_name, message_index, None, raw_index)


def _add_unmapped(b: _Builder, recovery: Recovery, message_index: int) -> None:
    """Raw citation data Pydantic AI keeps outside `provider_details['citations']` (tool-output lists, raw annotations)."""
    seen = {json.dumps(r.data, sort_keys=True, default=str) for r in b.raw_only}
    for index, entry in enumerate(recovery.raw_only):
        key = json.dumps(entry.raw, sort_keys=True, default=str)
        if key in seen:
            continue
        seen.add(key)
        b.raw_only.append(
            RawCitation(
                entry.raw,
                f'{entry.kind}: {entry.reason}',
                provider_name=entry.provider,
                message_index=message_index,
                part_index=entry.part_index,
                raw_index=index,
            )
        )
    for problem in recovery.problems:
        b.problems.append(dataclasses.replace(problem, message_index=message_index))


def _add_sonar_uncited(b: _Builder, response: ModelResponse, message_index: int) -> None:
    """Perplexity Sonar search results no `[N]` marker cites: kept as `raw_only` data (they have no position)."""
    known = {source.url for source in b.sources if source.url}
    for number, url in sonar_result_urls(response):
        if url not in known:
            b.raw_only.append(
                RawCitation(
                    {'url': url, 'position': number},
                    'a Perplexity Sonar search result that no [N] marker cites',
                    provider_name=response.provider_name,
                    message_index=message_index,
                    raw_index=number - 1,
                )
            )


def _check_raw_entry(
    b: _Builder,
    entry: object,
    identities: set[str],
    provider_name: str | None,
    message_index: int,
    part_index: int | None,
    raw_index: int,
) -> None:
    json_entry = _to_json_value(entry)
    if json_entry is None and entry is not None:
        b.problems.append(
            CitationProblem(
                'unreadable_raw_data',
                'A raw provider citation entry is not JSON data; it was not read.',
                message_index=message_index,
                part_index=part_index,
                citation_index=raw_index,
                detail=shorten(repr(entry)),
            )
        )
        return
    if any(s in identities for s in _strings(json_entry)):
        return
    kind = json_entry.get('type') if isinstance(json_entry, dict) else None
    reason = (
        f'{kind!r} is not mapped to a citation by Pydantic AI'
        if isinstance(kind, str)
        else 'names no source among the normalised citations'
    )
    b.raw_only.append(
        RawCitation(
            json_entry,
            reason,
            provider_name=provider_name,
            message_index=message_index,
            part_index=part_index,
            raw_index=raw_index,
        )
    )


def _dedupe_spans(b: _Builder) -> list[CitedSpan]:
    if len(b.spans) < 2:
        return list(b.spans)  # nothing to sort, repeat or overlap
    spans = sorted(b.spans, key=_span_order)
    kept: list[CitedSpan] = []
    seen: set[tuple[int, int, str, tuple[int, ...]]] = set()
    for span in spans:
        key = (span.start, span.end, span.kind, tuple(sorted(span.sources)))
        if key in seen:
            b.problems.append(
                CitationProblem(
                    'duplicate_citation',
                    f'The same citation ({span.kind} anchor {span.start}..{span.end}) appears twice; kept once.',
                    message_index=span.message_index,
                    part_index=span.part_index,
                    citation_index=span.citation_index,
                    start=span.start,
                    end=span.end,
                )
            )
            continue
        seen.add(key)
        kept.append(span)
    # A span overlaps another partially when that one starts before it and ends inside it (spans that start together
    # nest): one problem per such span (naming the earliest-ending one), found with a heap of the ends of the spans
    # that start before it (one that ends before a span starts ends inside no later one), so many nested or staggered
    # anchors cost n log n, not a pass per pair.
    ends: list[tuple[int, int]] = []  # (end, start) of spans that started before, and may end inside a later one
    pending: list[tuple[int, int]] = []  # the same, for the spans that start where the current one does
    for other in kept:
        if pending and pending[0][1] != other.start:
            for item in pending:
                heapq.heappush(ends, item)
            pending.clear()
        while ends and ends[0][0] <= other.start:
            heapq.heappop(ends)
        if ends and ends[0][0] < other.end:
            end, start = ends[0]
            b.problems.append(
                CitationProblem(
                    'overlapping_citations',
                    f'Anchors {start}..{end} and {other.start}..{other.end} overlap partially; '
                    'renderers must not nest them.',
                    message_index=other.message_index,
                    part_index=other.part_index,
                    citation_index=other.citation_index,
                    start=other.start,
                    end=other.end,
                )
            )
        pending.append((other.end, other.start))
    return kept


_span_order = attrgetter('start', 'end', 'message_index', 'part_index', 'citation_index')


def _anchor_problem(
    content: str, start: object, end: object, kind: AnchorKind, where: _Where
) -> CitationProblem | None:
    """Why an anchor cannot be a span of `content` (its sources are then kept as unanchored), or `None`."""
    if not (isinstance(start, int) and isinstance(end, int) and 0 <= start < end <= len(content)):
        return CitationProblem(
            'anchor_out_of_range',
            f'Anchor {start}..{end} does not fit the text of its part (length {len(content)}); '
            'its sources are kept as unanchored.',
            start=start if isinstance(start, int) else None,
            end=end if isinstance(end, int) else None,
            **where,
        )
    if kind == 'marker' and not covers_a_marker(content, start, end):
        return CitationProblem(
            'anchor_not_on_marker',
            f'Marker anchor {start}..{end} covers {shorten(repr(content[start : min(end, start + 200)]))}, not a '
            'marker the model wrote (a `[1]` or a markdown link): a renderer would replace those words. Its sources '
            'are kept as unanchored.',
            start=start,
            end=end,
            **where,
        )
    return None


def anchor_fits(content: str, start: object, end: object, kind: AnchorKind) -> bool:
    """Whether an anchor `start..end` of `kind` is a span of `content` as `CitedAnswer` shows spans (else unanchored).

    For a view of the answer built elsewhere (the UI adapters): the same verdict, without the problem it reports.
    """
    return _anchor_problem(content, start, end, kind, _Where(message_index=0, part_index=0, citation_index=0)) is None


_LINK_TARGET_LIMIT = 2048
"""The longest link target `covers_a_marker` takes for a marker (a URL; the check stays O(1) per anchor)."""


def covers_a_marker(text: str, start: int, end: int) -> bool:
    """Whether `text[start:end]` (a `MarkerCitationAnchor`'s range, inside `text`) is a marker the model wrote.

    A marker is a bracketed or parenthesised unit, as every provider's marker anchors cover it: `[1]`, `[1, 2]`,
    `[title](url)`, OpenAI's `([domain](url))`, xAI's `[[1]](url)`, `【4:0†source】`; or the target of a markdown
    link, as OpenAI's `container_file_citation` anchors the `sandbox:/…` of `[chart](sandbox:/…)`. Anything else
    (offsets that are off, an anchor on prose) is not: renderers replace a marker's text with their own mark, so
    such an anchor would delete the words it covers.
    """
    if text[start] in '[(【' and text[end - 1] in '])】':
        return True
    return (
        end - start <= _LINK_TARGET_LIMIT
        and start > 0
        and text[start - 1] == '('
        and text.startswith(')', end)
        and not any(c.isspace() for c in text[start:end])
    )


def _source_key(source: object) -> str | None:
    if isinstance(source, WebCitationSource):
        url = cast(object, source.url)
        if isinstance(url, str) and url.strip():
            return 'url:' + url.strip()
        return None
    if isinstance(source, DocumentCitationSource):
        if source.document_id:
            return 'doc:' + source.document_id
        if source.title:
            return 'doc-title:' + source.title
        excerpts = _as_str_list(source.excerpts)
        if excerpts:
            return 'doc-excerpt:' + excerpts[0]
        return None
    return None


def _identities(source: object) -> set[str]:
    if isinstance(source, WebCitationSource):
        return {s for s in (source.url, source.title, *_as_str_list(source.excerpts)) if isinstance(s, str) and s}
    if isinstance(source, DocumentCitationSource):
        return {
            s for s in (source.document_id, source.title, *_as_str_list(source.excerpts)) if isinstance(s, str) and s
        }
    return set()


def _as_str_list(value: object) -> list[str]:
    return [v for v in _iter_list(value) if isinstance(v, str)]


def _iter_list(value: object) -> Sequence[object]:
    """`value` when it is a list or tuple, else nothing (read defensively: hand-built parts may hold anything)."""
    if isinstance(value, (list, tuple)):
        return cast('Sequence[object]', value)
    return ()


def _to_json_value(value: object, depth: int = 0) -> JsonValue:
    """A JSON copy of raw data, or `None` when it is not JSON-like (depth-limited against cycles)."""
    if depth > 50:
        return None
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)  # JSON has no `inf` or `nan`: kept as their names, so a JSON round trip keeps the answer
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, Mapping):
        out: dict[str, JsonValue] = {}
        for k, v in value.items():  # pyright: ignore[reportUnknownVariableType]
            v = cast(object, v)
            if not isinstance(k, str):
                return None
            converted = _to_json_value(v, depth + 1)
            if converted is None and v is not None:
                return None
            out[k] = converted
        return out
    if isinstance(value, (list, tuple)):
        items: list[JsonValue] = []
        for v in value:  # pyright: ignore[reportUnknownVariableType]
            v = cast(object, v)
            converted = _to_json_value(v, depth + 1)
            if converted is None and v is not None:
                return None
            items.append(converted)
        return items
    return None


def _strings(value: JsonValue) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from _strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from _strings(v)
