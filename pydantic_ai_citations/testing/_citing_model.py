"""`CitingModel`: a scripted model that answers with citations the way a named provider does.

Each style reproduces what Pydantic AI 2.68's real adapter for that provider produces (checked in the tests against
replayed real recordings): the part layout, the anchor kind, the source kinds, the raw `provider_details['citations']`
shape, the `provider_name`, and — in streams — when the citations delta arrives relative to the part's `PartEndEvent`
and to the end of the provider's response (`finish_reason`). Streams use the same parts-manager API the real adapters
use, so events go through Pydantic AI's own stream machinery.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator, Iterable, Iterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal, assert_never, cast
from urllib.parse import urlsplit

from pydantic import JsonValue
from pydantic_ai import (
    Citation,
    ContentCitationAnchor,
    DocumentCitationSource,
    MarkerCitationAnchor,
    ModelMessage,
    ModelResponse,
    ModelResponsePart,
    NativeToolCallPart,
    NativeToolReturnPart,
    RunContext,
    TextPart,
    WebCitationSource,
)
from pydantic_ai.exceptions import UserError
from pydantic_ai.messages import ModelResponseStreamEvent
from pydantic_ai.models import Model, ModelRequestParameters, StreamedResponse
from pydantic_ai.settings import ModelSettings
from pydantic_ai.usage import RequestUsage

from .._answer import shift_citation
from .._checks import require, require_at_least, shown
from .._models import ApiLabel

__all__ = ('CITING_STYLES', 'CitingModel', 'CitingStyle', 'ScriptedCitation', 'ScriptedStreamError')

CitingStyle = Literal['anthropic', 'bedrock', 'openai-responses', 'openai-chat', 'openrouter', 'google', 'xai']
"""Provider styles `CitingModel` can imitate."""

CITING_STYLES: tuple[CitingStyle, ...] = CitingStyle.__args__  # pyright: ignore[reportAttributeAccessIssue]

_STYLE_API: dict[CitingStyle, ApiLabel] = {
    'anthropic': 'anthropic-messages',
    'bedrock': 'bedrock-converse',
    'openai-responses': 'openai-responses',
    'openai-chat': 'openai-chat',
    'openrouter': 'openrouter',
    'google': 'google-gemini',
    'xai': 'xai',
}
_STYLE_PROVIDER: dict[CitingStyle, str] = {
    'anthropic': 'anthropic',
    'bedrock': 'bedrock',
    'openai-responses': 'openai',
    'openai-chat': 'openai',
    'openrouter': 'openrouter',
    'google': 'google',  # (`GoogleProvider.name` in Pydantic AI 2; `google-gla` before)
    'xai': 'xai',
}

_RAW_FINISH: dict[CitingStyle, str] = {
    'anthropic': 'end_turn',
    'bedrock': 'end_turn',
    'openai-responses': 'completed',
    'openai-chat': 'stop',
    'openrouter': 'stop',
    'google': 'STOP',
    'xai': 'stop',
}
"""The raw finish reason each provider sends (`provider_details['finish_reason']`, as Pydantic AI records it)."""

Source = WebCitationSource | DocumentCitationSource


@dataclass(frozen=True)
class ScriptedCitation:
    """A citation for `CitingModel`: the words of the answer it supports, and its sources."""

    quote: str
    """The supported words: a substring of the answer text (its first occurrence after the previous quote)."""
    sources: Sequence[Source]
    """What the words cite."""

    def __post_init__(self) -> None:
        # The script's one check of a citation: `CitingModel` takes only `ScriptedCitation`s, so it relies on this.
        require('ScriptedCitation', 'quote', self.quote, str, 'the cited words (a str)')
        if not self.quote:
            raise UserError("ScriptedCitation: `quote` must be the cited words (a non-empty str), got ''.")
        given = cast(object, self.sources)
        items = cast('Sequence[object]', given) if isinstance(given, Sequence) and not isinstance(given, str) else None
        if not items or not all(isinstance(s, (WebCitationSource, DocumentCitationSource)) for s in items):
            raise UserError(
                'ScriptedCitation: `sources` must be a non-empty list of `WebCitationSource` / '
                f"`DocumentCitationSource` (e.g. `[WebCitationSource(url='https://…')]`), got {shown(self.sources)}."
            )


class ScriptedStreamError(ConnectionError):
    """Raised by a `CitingModel` stream told to break (`break_stream_after`), like a dropped connection."""


@dataclass(frozen=True)
class _Segment:
    """One stretch of the answer as the style emits it."""

    text: str
    citations: list[Citation] | None = None
    raw: list[dict[str, JsonValue]] | None = None
    scripted: ScriptedCitation | None = None
    """The scripted citation this stretch carries (`None` for uncited text and for the merged single part)."""


@dataclass(init=False)
class CitingModel(Model):
    """A scripted `Model` that answers with `text` and citations the way the provider named by `style` does.

    - `'anthropic'`, `'bedrock'`: every cited quote is its own `TextPart` anchored `ContentCitationAnchor(0, len)`,
      with all its sources; citations arrive at the part's end (before `PartEndEvent`). Bedrock documents have no id.
    - `'openai-responses'`: one `TextPart`; after each quote the model writes a markdown link `([domain](url))` and a
      `MarkerCitationAnchor` covers it; document sources become `file_citation`s with no anchor; citations arrive
      when the text is done, before `PartEndEvent`.
    - `'openai-chat'`: like Responses (web only), but citations are flushed after the last chunk (`'response_end'`).
    - `'openrouter'`: citations without anchor (OpenRouter sends 0/0 offsets), excerpts from `content`, at response end.
    - `'google'`: `ContentCitationAnchor` over each quote; the grounding search is reported as native tool parts
      after the text, and citations are flushed at the end of the response (`'response_end'`), or after the text's
      `PartEndEvent` with `part_after_text=True` (`'after_part_end'`).
    - `'xai'`: a `[[n]](url)` marker after each quote, `MarkerCitationAnchor`, at response end.
    """

    text: str
    citations: Sequence[ScriptedCitation]
    style: CitingStyle
    chunk_size: int
    break_stream_after: int | None
    end_stream_after: int | None
    part_after_text: bool
    _model_name: str
    requests: list[list[ModelMessage]]

    def __init__(
        self,
        text: str,
        citations: Sequence[ScriptedCitation] = (),
        *,
        style: CitingStyle = 'anthropic',
        model_name: str | None = None,
        chunk_size: int = 16,
        break_stream_after: int | None = None,
        end_stream_after: int | None = None,
        part_after_text: bool = False,
    ) -> None:
        """Script the answer.

        Args:
            text: The answer text (before any markers the style writes).
            citations: What the answer cites; each quote must occur in `text`, in order.
            style: Which provider to imitate.
            model_name: The model name to report (default: `'citing-<style>'`).
            chunk_size: Characters per streamed text delta.
            break_stream_after: Raise `ScriptedStreamError` after this many text deltas (a broken stream).
            end_stream_after: End the stream quietly after this many text deltas: no error, no citations still to
                come and no finish reason, as when the connection closes before the provider's finishing event.
            part_after_text: Google style: stream the grounding search as native tool parts *before* the citations,
                so they arrive after the text's `PartEndEvent` (`'after_part_end'`), as happens when Gemini starts
                another part after the text. Default `False`: citations are flushed at the end of the response
                while the text is still the current part (`'response_end'`), as in the real Vertex recording.

        Raises:
            UserError: An argument is of the wrong type or out of range, or a quote is not found in `text` in order.
        """
        super().__init__()
        require('CitingModel', 'text', text, str, 'the answer text (a str)')
        given = cast(object, citations)
        if not isinstance(given, Sequence) or not all(
            isinstance(c, ScriptedCitation) for c in cast('Sequence[object]', given)
        ):
            raise UserError(
                "CitingModel: `citations` must be a list of `ScriptedCitation` (e.g. `[ScriptedCitation('K2 is "
                f"tall.', [WebCitationSource(url='https://…')])]`), got {shown(citations)}."
            )
        if style not in CITING_STYLES:
            raise UserError(f'Unknown CitingModel style {style!r}; use one of {", ".join(CITING_STYLES)}.')
        require_at_least('CitingModel', 'chunk_size', chunk_size, 1, int, 'an int of at least 1')
        for name, value, least in (
            ('break_stream_after', break_stream_after, 0),
            ('end_stream_after', end_stream_after, 1),
        ):
            if value is not None:
                require_at_least('CitingModel', name, value, least, int, f'an int of at least {least}, or None')
        self.text = text
        self.citations = tuple(citations)
        self.style = style
        self.chunk_size = chunk_size
        self.break_stream_after = break_stream_after
        self.end_stream_after = end_stream_after
        self.part_after_text = part_after_text
        self._model_name = model_name or f'citing-{style}'
        self.requests = []
        self._segments = _segments(text, self.citations, style)  # validates the script up front

    @property
    def model_name(self) -> str:
        """The model name."""
        return self._model_name

    @property
    def system(self) -> str:
        """The provider family of the imitated provider."""
        return _STYLE_PROVIDER[self.style]

    @property
    def api_label(self) -> ApiLabel:
        """The provider API this model imitates (read by `describe_model`)."""
        return _STYLE_API[self.style]

    async def request(
        self,
        messages: list[ModelMessage],
        model_settings: ModelSettings | None,
        model_request_parameters: ModelRequestParameters,
    ) -> ModelResponse:
        self.requests.append(messages)
        parts: list[ModelResponsePart] = []
        provider = _STYLE_PROVIDER[self.style]
        single = self.style not in ('anthropic', 'bedrock')
        for segment in [_merge(self._segments)] if single else self._segments:
            details = {'citations': segment.raw} if segment.raw else None
            parts.append(
                TextPart(
                    segment.text,
                    citations=segment.citations,
                    provider_name=provider if segment.citations else None,
                    provider_details=details,
                )
            )
        if self.style == 'google':
            parts.extend(_google_search_parts())
        return ModelResponse(
            parts=parts,
            model_name=self._model_name,
            provider_name=provider,
            provider_details=self._response_details(),
            finish_reason='stop',
            usage=RequestUsage(input_tokens=10, output_tokens=len(self.text) // 4 + 1),
        )

    @asynccontextmanager
    async def request_stream(
        self,
        messages: list[ModelMessage],
        model_settings: ModelSettings | None,
        model_request_parameters: ModelRequestParameters,
        run_context: RunContext[Any] | None = None,
    ) -> AsyncGenerator[StreamedResponse]:
        self.requests.append(messages)
        model_settings, model_request_parameters = self.prepare_request(model_settings, model_request_parameters)
        yield _CitingStream(model_request_parameters, model=self)

    def _response_details(self) -> dict[str, Any] | None:
        # The provider's own finishing signal, as the real adapter records it (xAI's is `finish_reason` only).
        details: dict[str, Any] = {'finish_reason': _RAW_FINISH[self.style]} if self.style != 'xai' else {}
        if self.style == 'openrouter':
            details['annotations'] = _merge(self._segments).raw or []
        return details or None


@dataclass
class _CitingStream(StreamedResponse):
    model: CitingModel = field(kw_only=True)
    _timestamp: datetime = field(default_factory=lambda: datetime.now(UTC), init=False)

    async def _get_event_iterator(self) -> AsyncIterator[ModelResponseStreamEvent]:
        for step in _stream_steps(self.model):
            events: Iterable[ModelResponseStreamEvent]
            if isinstance(step, _Break):
                raise ScriptedStreamError(f'scripted stream broke after {step.deltas} text deltas')
            if isinstance(step, _Delta):
                events = self._parts_manager.handle_text_delta(vendor_part_id=step.vendor_id, content=step.content)
            elif isinstance(step, _BlockCitations):
                events = self._citations_for_block(step.vendor_id, step.segment)
            else:
                events = self._finish(step.late)
            for event in events:
                yield event

    def _citations_for_block(self, vendor_id: int | str, segment: _Segment) -> list[ModelResponseStreamEvent]:
        return list(
            self._parts_manager.handle_text_delta(
                vendor_part_id=vendor_id,
                content='',
                citations=segment.citations,
                provider_name=_STYLE_PROVIDER[self.model.style],
                provider_details={'citations': segment.raw},
            )
        )

    def _finish(self, late: bool) -> Iterator[ModelResponseStreamEvent]:
        """What follows the text: late citations, Google's search parts, the finish reason, usage.

        A generator, so the finish reason is set only once the events before it have been consumed (their timing
        relative to the end of the response is what the styles differ in).
        """
        model = self.model
        style = model.style
        if style == 'openai-responses' and late:
            # Emitted at `response.output_text.done`: before the part ends and before `response.completed`.
            yield from self._citations_for_single_part()
        if style == 'google' and model.part_after_text:
            # A part started after the text ends the text part: its citations then come after its `PartEndEvent`.
            yield from _google_search_events(self)
        self.finish_reason = 'stop'
        if style in ('openai-chat', 'openrouter', 'google', 'xai') and late:
            # Flushed after the provider's last chunk.
            yield from self._citations_for_single_part()
        if style == 'google' and not model.part_after_text:
            yield from _google_search_events(self)
        self.provider_details = model._response_details()  # pyright: ignore[reportPrivateUsage]
        self._usage = RequestUsage(input_tokens=10, output_tokens=len(model.text) // 4 + 1)

    def _citations_for_single_part(self) -> list[ModelResponseStreamEvent]:
        return self._citations_for_block('text', _merge(self.model._segments))  # pyright: ignore[reportPrivateUsage]

    @property
    def model_name(self) -> str:
        return self.model.model_name

    @property
    def provider_name(self) -> str | None:
        return _STYLE_PROVIDER[self.model.style]

    @property
    def provider_url(self) -> str | None:
        return None

    @property
    def timestamp(self) -> datetime:
        return self._timestamp


@dataclass(frozen=True)
class _Delta:
    """A text delta of the stream."""

    vendor_id: int | str
    content: str


@dataclass(frozen=True)
class _BlockCitations:
    """A block's citations, sent at the block's stop (Anthropic, Bedrock)."""

    vendor_id: int | str
    segment: _Segment


@dataclass(frozen=True)
class _Break:
    """The stream breaks here (`break_stream_after`), after `deltas` text deltas."""

    deltas: int


@dataclass(frozen=True)
class _Finish:
    """The end of the response: late citations (when `late`), Google's search parts, the finish reason."""

    late: bool


_Step = _Delta | _BlockCitations | _Break | _Finish


def _stream_steps(model: CitingModel) -> Iterator[_Step]:
    """What a stream of `model` sends, in order: the one account of it, for the stream and for `sent_citations`.

    A stream cut by `end_stream_after` stops before `_Finish` (no finish reason, no late citations); one cut by
    `break_stream_after` ends with `_Break`.
    """
    blocks = model.style in ('anthropic', 'bedrock')
    deltas = 0
    late = False
    for index, segment in enumerate(model._segments):  # pyright: ignore[reportPrivateUsage]
        # Anthropic/Bedrock send one content block per segment; the others one text part for everything.
        vendor_id = index if blocks else 'text'
        for start in range(0, len(segment.text), model.chunk_size):
            if model.break_stream_after is not None and deltas >= model.break_stream_after:
                yield _Break(deltas)
                return
            yield _Delta(vendor_id, segment.text[start : start + model.chunk_size])
            deltas += 1
            if model.end_stream_after is not None and deltas >= model.end_stream_after:
                return  # the connection closed before the finishing event: no finish reason
        if segment.citations and blocks:
            # Buffered per block and sent at the block's stop, before the next block starts.
            yield _BlockCitations(vendor_id, segment)
        elif segment.citations:
            late = True
    yield _Finish(late)


def sent_citations(model: CitingModel, *, streamed: bool) -> list[ScriptedCitation]:
    """The scripted citations `model` sends in one response: what a check may count as sent on the wire.

    `request` sends every one. A stream sends only those it reaches before `end_stream_after` or `break_stream_after`
    cuts it: Anthropic and Bedrock send each at its block's end, the other styles all of them after the text, so a
    stream cut before then sends none (its answer is incomplete instead).
    """
    if not streamed:
        return list(model.citations)
    sent: list[ScriptedCitation] = []
    for step in _stream_steps(model):
        if isinstance(step, _BlockCitations) and step.segment.scripted is not None:
            sent.append(step.segment.scripted)
        elif isinstance(step, _Finish) and step.late:
            return list(model.citations)  # flushed together as the one part's citations
    return sent


def _segments(text: str, citations: Sequence[ScriptedCitation], style: CitingStyle) -> list[_Segment]:
    """Lay the answer out as the style's adapter does; anchors are relative to each segment's own text."""
    found = _find_quotes(text, citations)
    if style in ('openai-chat', 'openrouter', 'xai') and any(
        isinstance(s, DocumentCitationSource) for c in citations for s in c.sources
    ):
        raise UserError(f'Style {style!r} cites web sources only.')
    if style in ('anthropic', 'bedrock'):
        return _block_segments(text, found, style)
    return _single_part_segments(text, found, style)


_Found = list[tuple[int, int, ScriptedCitation]]


def _find_quotes(text: str, citations: Sequence[ScriptedCitation]) -> _Found:
    """Where each quote sits: its first occurrence after the previous quote."""
    found: _Found = []
    cursor = 0
    for citation in citations:  # each checked when it was made (`ScriptedCitation.__post_init__`)
        start = text.find(citation.quote, cursor)
        if start < 0:
            raise UserError(f'Quote {citation.quote!r} not found in the text after offset {cursor}.')
        found.append((start, start + len(citation.quote), citation))
        cursor = start + len(citation.quote)
    return found


def _block_segments(text: str, found: _Found, style: CitingStyle) -> list[_Segment]:
    """Anthropic/Bedrock: every cited quote is its own block, anchored over all of it."""
    segments: list[_Segment] = []
    cursor = 0
    for start, end, citation in found:
        if start > cursor:
            segments.append(_Segment(text[cursor:start]))
        quote = text[start:end]
        sources = [_block_source(s, style, quote) for s in citation.sources]
        raw = [_block_raw(s, style, quote, i) for i, s in enumerate(citation.sources)]
        anchor = ContentCitationAnchor(start=0, end=len(quote))
        segments.append(_Segment(quote, [Citation(sources, anchor=anchor)], raw, citation))
        cursor = end
    if cursor < len(text) or not segments:
        segments.append(_Segment(text[cursor:]))
    return segments


def _single_part_segments(text: str, found: _Found, style: CitingStyle) -> list[_Segment]:
    """Single-part styles: one segment per cited stretch so the stream can flush them together at the end."""
    segments: list[_Segment] = []
    cursor = 0
    for number, (start, end, citation) in enumerate(found, start=1):
        stretch = _Stretch(text[cursor:end], start - cursor, end - cursor, number, citation.quote)
        for source in citation.sources:
            _cite_in_stretch(stretch, source, style)
        segments.append(_Segment(stretch.text, stretch.citations, stretch.raw, citation))
        cursor = end
    if cursor < len(text) or not segments:
        segments.append(_Segment(text[cursor:]))
    return segments


@dataclass
class _Stretch:
    """A cited stretch of a single-part answer being laid out: markers are appended to `text` as sources are cited."""

    text: str
    quote_start: int
    quote_end: int
    number: int
    quote: str
    citations: list[Citation] = field(default_factory=list[Citation])
    raw: list[dict[str, JsonValue]] = field(default_factory=list[dict[str, JsonValue]])

    def add_marker(self, marker: str) -> MarkerCitationAnchor:
        """Append `marker` (after a space) and return the anchor over it."""
        anchor_start = len(self.text) + 1
        self.text += f' {marker}'
        return MarkerCitationAnchor(start=anchor_start, end=len(self.text))


def _cite_in_stretch(stretch: _Stretch, source: Source, style: CitingStyle) -> None:
    if isinstance(source, DocumentCitationSource):
        if style == 'openai-responses':
            stretch.citations.append(Citation([source]))
            stretch.raw.append(
                {
                    'type': 'file_citation',
                    'file_id': source.document_id,
                    'filename': source.title,
                    'index': len(stretch.text),
                }
            )
        else:  # google retrieved context
            anchor = ContentCitationAnchor(start=stretch.quote_start, end=stretch.quote_end)
            stretch.citations.append(Citation([source], anchor=anchor))
            stretch.raw.append(_google_raw(stretch.text, stretch.quote_start, stretch.quote_end, source))
        return
    url = source.url
    if style in ('openai-responses', 'openai-chat'):
        anchor = stretch.add_marker(f'([{urlsplit(url).netloc or url}]({url}))')
        stretch.citations.append(Citation([WebCitationSource(url, title=source.title)], anchor=anchor))
        entry: dict[str, JsonValue] = {
            'type': 'url_citation',
            'url': url,
            'title': source.title,
            'start_index': anchor.start,
            'end_index': anchor.end,
        }
        stretch.raw.append(entry if style == 'openai-responses' else {'type': 'url_citation', 'url_citation': entry})
    elif style == 'xai':
        anchor = stretch.add_marker(f'[[{stretch.number}]]({url})')
        stretch.citations.append(Citation([WebCitationSource(url)], anchor=anchor))
        stretch.raw.append(
            {
                'id': str(stretch.number),
                'start_index': anchor.start,
                'end_index': anchor.end,
                'web_citation': {'url': url},
            }
        )
    elif style == 'openrouter':
        excerpts = list(source.excerpts) or [stretch.quote]
        stretch.citations.append(Citation([WebCitationSource(url, title=source.title, excerpts=excerpts)]))
        stretch.raw.append(
            {
                'type': 'url_citation',
                'url_citation': {
                    'url': url,
                    'title': source.title,
                    'content': excerpts[0],
                    'start_index': 0,
                    'end_index': 0,
                },
            }
        )
    elif style == 'google':
        anchor = ContentCitationAnchor(start=stretch.quote_start, end=stretch.quote_end)
        stretch.citations.append(Citation([WebCitationSource(url, title=source.title)], anchor=anchor))
        stretch.raw.append(_google_raw(stretch.text, stretch.quote_start, stretch.quote_end, source))
    else:  # pragma: no cover - exhaustive: `assert_never` closes the styles
        assert_never(style)  # pyright: ignore[reportArgumentType]


def _merge(segments: Sequence[_Segment]) -> _Segment:
    """Single-part styles put the whole answer in one part: join the segments, shifting anchors and raw offsets."""
    citations: list[Citation] = []
    raw: list[dict[str, JsonValue]] = []
    shift = byte_shift = 0
    for segment in segments:
        citations.extend(shift_citation(citation, shift) for citation in segment.citations or [])
        raw.extend(_shift_raw(segment.raw or [], shift, byte_shift))
        shift += len(segment.text)
        byte_shift += len(segment.text.encode('utf-8', 'surrogatepass'))
    return _Segment(''.join(s.text for s in segments), citations or None, raw or None)


def _shift_raw(raw: list[dict[str, JsonValue]], shift: int, byte_shift: int) -> list[dict[str, JsonValue]]:
    """Raw entries moved on by `shift` characters; Google's `segment` offsets, UTF-8 bytes, by `byte_shift`."""
    out: list[dict[str, JsonValue]] = []
    for entry in raw:
        entry = dict(entry)
        for key in ('start_index', 'end_index'):
            value = entry.get(key)
            if isinstance(value, int):
                entry[key] = value + shift
        nested = entry.get('url_citation')
        if isinstance(nested, dict) and isinstance(nested.get('start_index'), int) and nested.get('end_index'):
            nested = dict(nested)
            for key in ('start_index', 'end_index'):
                value = nested.get(key)
                if isinstance(value, int):
                    nested[key] = value + shift
            entry['url_citation'] = nested
        segment = entry.get('segment')
        if isinstance(segment, dict):
            segment = dict(segment)
            for key in ('start_index', 'end_index'):
                value = segment.get(key)
                if isinstance(value, int):
                    segment[key] = value + byte_shift
            entry['segment'] = segment
        out.append(entry)
    return out


def _block_source(source: Source, style: CitingStyle, quote: str) -> Source:
    if isinstance(source, WebCitationSource):
        if style == 'bedrock':
            return WebCitationSource(source.url)
        return WebCitationSource(source.url, title=source.title, excerpts=list(source.excerpts) or [quote])
    excerpts = list(source.excerpts) or [quote]
    if style == 'bedrock':
        return DocumentCitationSource(title=source.title or 'Document 1', excerpts=excerpts)
    return DocumentCitationSource(document_id=source.document_id, title=source.title, excerpts=excerpts)


def _block_raw(source: Source, style: CitingStyle, quote: str, index: int) -> dict[str, JsonValue]:
    excerpt = (list(source.excerpts) or [quote])[0]
    if style == 'bedrock':
        if isinstance(source, WebCitationSource):
            return {'location': {'web': {'url': source.url, 'domain': urlsplit(source.url).netloc}}}
        return {
            'title': source.title or 'Document 1',
            'sourceContent': [{'text': excerpt}],
            'location': {'documentChar': {'documentIndex': index, 'start': 0, 'end': len(excerpt)}},
        }
    if isinstance(source, WebCitationSource):
        return {
            'type': 'web_search_result_location',
            'url': source.url,
            'title': source.title,
            'cited_text': excerpt,
            'encrypted_index': f'enc-{index}',
        }
    return {
        'type': 'char_location',
        'cited_text': excerpt,
        'document_index': index,
        'document_title': source.title,
        'file_id': source.document_id,
        'start_char_index': 0,
        'end_char_index': len(excerpt),
    }


def _google_raw(text: str, start: int, end: int, source: Source) -> dict[str, JsonValue]:
    chunk: dict[str, JsonValue]
    if isinstance(source, WebCitationSource):
        chunk = {'web': {'uri': source.url, 'title': source.title}}
    else:
        chunk = {'retrieved_context': {'document_name': source.document_id, 'title': source.title}}
    return {
        'segment': {
            'start_index': len(text[:start].encode()),
            'end_index': len(text[:end].encode()),
            'text': text[start:end],
        },
        'grounding_chunk_indices': [0],
        'grounding_chunks': [chunk],
    }


def _google_search_parts() -> list[ModelResponsePart]:
    call = NativeToolCallPart(
        'web_search', args={'queries': ['scripted']}, tool_call_id='search-1', provider_name='google'
    )
    result = NativeToolReturnPart('web_search', content=[], tool_call_id='search-1', provider_name='google')
    return [call, result]


def _google_search_events(stream: _CitingStream) -> list[ModelResponseStreamEvent]:
    return [stream._parts_manager.handle_part(vendor_part_id=None, part=part) for part in _google_search_parts()]  # pyright: ignore[reportPrivateUsage]
