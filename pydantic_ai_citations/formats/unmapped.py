"""Citations Pydantic AI 2.68 leaves unmapped although their raw data is present.

What survives where (read from the installed 2.68 source):

- **OpenAI `container_file_citation`** (code interpreter files): `map_responses_citations` skips it and
  `provider_details['citations']` keeps only URL/file citations. The raw annotation survives only with
  `openai_include_raw_annotations=True`, in `TextPart.provider_details['annotations']` (streamed and not).
  Recovered as a `DocumentCitationSource(document_id=file_id, title=filename)` with a `MarkerCitationAnchor`
  over `start_index:end_index` (the `sandbox:/mnt/data/...` link target), when that range is a non-empty range
  inside the text; a `0/0` range (seen in real recordings) is raw-only.
- **xAI tool-output citations**: `XaiModel` puts X-search result URLs on the `NativeToolReturnPart.content`
  as `{'citations': [...]}`. They are what the tool found, with no position in the answer: raw-only.
- **Cohere `citations`**: `CohereModel` drops them completely; no raw data survives in `ModelResponse` (its
  `provider_details` hold only `finish_reason`). `recover_cohere_from_body` parses a raw Cohere v2 chat body
  instead; its `start`/`end` mark the supported text and are checked against the citation's own `text`.
- **Anthropic `search_result_location`**: ignored by `map_citations` (`_CITATION_TYPES`). The raw dict survives
  in `TextPart.provider_details['citations']` *only when the same text block also carried a citation type
  Pydantic AI maps*; a block cited only by search results gets no `provider_details` at all, and then only the
  raw body helps (`recover_search_result_locations_from_body`; `TrackCitations(anthropic_tap=...)` reads it through
  `AnthropicTap`). Anthropic cites whole blocks, so a recovered citation gets `ContentCitationAnchor(0, len(text))`
  like Pydantic AI's own Anthropic citations. The
  `search_result_index` counts `search_result` blocks across the whole *request*; it is kept raw on the source's
  `document_id` and resolving it is left to `formats.anthropic_search_results`.

Everything here is pure: inputs are never modified, and positions are never guessed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import KW_ONLY, dataclass, field
from typing import cast

from pydantic import JsonValue
from pydantic_ai.messages import (
    Citation,
    ContentCitationAnchor,
    DocumentCitationSource,
    MarkerCitationAnchor,
    ModelResponse,
    NativeToolCallPart,
    NativeToolReturnPart,
    TextPart,
    WebCitationSource,
)

from .._problems import CitationProblem
from ._raw import as_int, as_map, as_maps, as_str
from .anthropic_search_results import search_result_source

__all__ = (
    'RAW_ANNOTATIONS_SETTING',
    'RawOnlyCitation',
    'Recovery',
    'recover_search_result_locations',
    'recover_search_result_locations_from_body',
    'search_result_block_citations',
    'recover_cohere_from_body',
    'recover_container_files',
    'recover',
    'recover_xai_tool_output',
)


@dataclass(frozen=True)
class RawOnlyCitation:
    """Provider citation data that cannot become a positioned `Citation`: kept for audit, never shown to users."""

    provider: str
    """Which provider sent it (`'openai'`, `'xai'`, `'cohere'`, `'anthropic'`)."""
    kind: str
    """The provider's own citation type, e.g. `'container_file_citation'`."""
    reason: str
    """Why it is raw-only (no position, a position outside the text, a text mismatch...)."""
    raw: JsonValue
    """The raw citation data as received."""
    _: KW_ONLY
    part_index: int | None = None
    """Index of the part in `ModelResponse.parts` it belongs to, if any."""
    url: str | None = None
    """The cited URL, if any."""


@dataclass(frozen=True)
class Recovery:
    """What `recover` (or a per-format function) found."""

    citations: dict[int, list[Citation]] = field(default_factory=dict[int, list[Citation]])
    """Recovered citations by part index, anchored on that part's text. They are *in addition* to what the part
    already has."""
    raw_only: list[RawOnlyCitation] = field(default_factory=list[RawOnlyCitation])
    """Citation data without a trustworthy position."""
    problems: list[CitationProblem] = field(default_factory=list[CitationProblem])
    """Data that could not be read."""

    def merged(self, other: Recovery) -> Recovery:
        """Both recoveries together (citations for the same part are concatenated)."""
        citations = {k: list(v) for k, v in self.citations.items()}
        for k, v in other.citations.items():
            citations.setdefault(k, []).extend(v)
        return Recovery(citations, [*self.raw_only, *other.raw_only], [*self.problems, *other.problems])


RAW_ANNOTATIONS_SETTING = 'openai_include_raw_annotations'
"""The OpenAI model setting without which Pydantic AI drops `container_file_citation` annotations
(`TrackCitations` turns it on unless the application set it)."""


def _json(value: object) -> JsonValue:
    return cast(JsonValue, value)


def recover(response: ModelResponse) -> Recovery:
    """Recover every citation format this module knows from one `ModelResponse` (pure; `response` is unchanged)."""
    container, tool, search = _may_hold_unmapped(response)
    # (A recovery added here reads what `_may_hold_unmapped` checks for, or that check is extended with it.)
    found = [
        recovery
        for recovery in (
            recover_container_files(response) if container else None,
            recover_xai_tool_output(response) if tool else None,
            recover_search_result_locations(response) if search else None,
        )
        if recovery is not None and (recovery.citations or recovery.raw_only or recovery.problems)
    ]
    out = found[0] if found else Recovery({}, [], [])
    for recovery in found[1:]:
        out = out.merged(recovery)
    return out


def _may_hold_unmapped(response: ModelResponse) -> tuple[bool, bool, bool]:
    """Whether each recovery below can find anything in `response`: (container files, tool output, search results).

    Most responses hold nothing any of them reads; this one pass over the parts tells so. Container files are read
    from text parts with raw `annotations`; tool output from native tool returns holding an object (xAI, Groq), or
    from an xAI response (search results dropped); search result locations from an Anthropic text part with raw data
    whose `citations` are not a list (reported) or hold a `search_result_location`.
    """
    container = search = False
    tool = response.provider_name == 'xai'
    for part in response.parts:
        if isinstance(part, NativeToolReturnPart):
            tool = tool or as_map(cast(object, part.content)) is not None
        elif isinstance(part, TextPart) and (details := part.provider_details):
            container = container or 'annotations' in details
            if not search and part.provider_name == 'anthropic':
                raw = details.get('citations')
                search = not isinstance(raw, (list, tuple)) or _any_of_type(
                    cast('Sequence[object]', raw), 'search_result_location'
                )
    return container, tool, search


# -- OpenAI container_file_citation ---------------------------------------------------------------------------


def recover_container_files(response: ModelResponse) -> Recovery:
    """Recover `container_file_citation` annotations kept by `openai_include_raw_annotations=True`."""
    citations: dict[int, list[Citation]] = {}
    raw_only: list[RawOnlyCitation] = []
    problems: list[CitationProblem] = []
    for part_index, part in enumerate(response.parts):
        if not isinstance(part, TextPart) or not part.provider_details:
            continue
        raw_annotations = part.provider_details.get('annotations')
        if raw_annotations is None:
            continue
        if not isinstance(raw_annotations, (list, tuple)):
            problems.append(
                CitationProblem(
                    'unreadable_raw_data', '`provider_details["annotations"]` is not a list.', part_index=part_index
                )
            )
            continue
        for ann in as_maps(cast(object, raw_annotations)):
            if ann.get('type') != 'container_file_citation':
                continue
            start, end = as_int(ann.get('start_index')), as_int(ann.get('end_index'))
            file_id, filename = as_str(ann.get('file_id')), as_str(ann.get('filename'))
            if file_id is None and filename is None:
                raw_only.append(
                    RawOnlyCitation(
                        'openai',
                        'container_file_citation',
                        'no file id or filename',
                        _json(dict(ann)),
                        part_index=part_index,
                    )
                )
                continue
            if start is None or end is None or not 0 <= start < end <= len(part.content):
                raw_only.append(
                    RawOnlyCitation(
                        'openai',
                        'container_file_citation',
                        f'no usable position in the text (start_index={start!r}, end_index={end!r}, '
                        f'text length {len(part.content)})',
                        _json(dict(ann)),
                        part_index=part_index,
                    )
                )
                continue
            source = DocumentCitationSource(document_id=file_id, title=filename)
            citations.setdefault(part_index, []).append(
                Citation([source], anchor=MarkerCitationAnchor(start=start, end=end))
            )
    return Recovery(citations, raw_only, problems)


# -- xAI tool-output citations --------------------------------------------------------------------------------


def recover_xai_tool_output(response: ModelResponse) -> Recovery:
    """Search results on native tool returns: raw-only, they have no position in the answer.

    xAI puts X/web search URLs on `NativeToolReturnPart.content['citations']`; Groq's compound models put their web
    search results on `content['results']` (each with `url`, `title`, `content`). An xAI search call with no return
    part (the tool's `include_output` off) lost its results: a problem says so.
    """
    raw_only: list[RawOnlyCitation] = []
    problems: list[CitationProblem] = []
    if (dropped := _xai_results_dropped(response)) is not None:
        problems.append(dropped)
    for part_index, part in enumerate(response.parts):
        if not isinstance(part, NativeToolReturnPart):
            continue
        content = as_map(cast(object, part.content))
        key = 'citations' if content is not None and 'citations' in content else 'results'
        if content is None or key not in content:
            continue
        entries = content.get(key)
        if not isinstance(entries, (list, tuple)):
            problems.append(
                CitationProblem(
                    'unreadable_raw_data',
                    f'`{part.tool_name}` return `{key}` is not a list.',
                    part_index=part_index,
                )
            )
            continue
        for entry in cast('Sequence[object]', entries):
            url = _entry_url(entry)
            if key == 'results' and url is None:
                continue  # not a search result (Groq lists other tool results here too)
            raw_only.append(
                RawOnlyCitation(
                    part.provider_name or 'xai',
                    'tool_output_citation' if key == 'citations' else 'tool_output_search_result',
                    f'a result of the `{part.tool_name}` tool, not tied to a position in the answer',
                    _json(entry),
                    part_index=part_index,
                    url=url,
                )
            )
    return Recovery({}, raw_only, problems)


def _xai_results_dropped(response: ModelResponse) -> CitationProblem | None:
    """An xAI response that searched but kept no search results: Pydantic AI dropped the ones not cited inline.

    xAI sends every search result the model used with the response (`citations`); `XaiModel` keeps them only on a
    tool return part (the tool's `include_output`). A search shows as a search call part or as inline citations (a
    streamed response has no call part).
    """
    # (Only a response xAI's API sent, which carries its id: a scripted xAI-style answer searched nothing.)
    if (
        response.provider_name != 'xai'
        or response.provider_response_id is None
        or any(
            isinstance(p, NativeToolReturnPart) and 'citations' in (as_map(cast(object, p.content)) or {})
            for p in response.parts
        )
    ):
        return None
    searched = any(
        (isinstance(p, NativeToolCallPart) and 'search' in p.tool_name) or (isinstance(p, TextPart) and p.citations)
        for p in response.parts
    )
    if not searched:
        return None
    return CitationProblem(
        'unmapped_provider_citation',
        'This xAI response searched, but no tool output was kept, so Pydantic AI dropped the search results xAI sent '
        "with it (its `search_result_url` citations) except those cited inline. Turn on the search tool's "
        '`include_output` to keep them.',
    )


def _entry_url(entry: object) -> str | None:
    if isinstance(entry, str):
        return entry or None
    entry_map = as_map(entry)
    if entry_map is None:
        return None
    if (url := as_str(entry_map.get('url'))) is not None:
        return url
    for kind in ('x_citation', 'web_citation'):
        if (inner := as_map(entry_map.get(kind))) is not None and (url := as_str(inner.get('url'))) is not None:
            return url
    return None


# -- Cohere ---------------------------------------------------------------------------------------------------


def _cohere_source(source: Mapping[str, object]) -> DocumentCitationSource | WebCitationSource | None:
    document = as_map(source.get('document')) or {}
    tool_output = as_map(source.get('tool_output')) or {}
    url = as_str(document.get('url'))
    excerpt = as_str(document.get('text')) or as_str(document.get('snippet')) or as_str(tool_output.get('content'))
    excerpts = [excerpt] if excerpt else []
    title = as_str(document.get('title'))
    if url is not None:
        return WebCitationSource(url, title=title, excerpts=excerpts)
    doc_id = as_str(source.get('id')) or as_str(document.get('id'))
    if doc_id is None and title is None and not excerpts:
        return None
    return DocumentCitationSource(document_id=doc_id, title=title, excerpts=excerpts)


def recover_cohere_from_body(body: Mapping[str, JsonValue]) -> tuple[str, Recovery]:
    """Parse a raw Cohere v2 chat body (`CohereModel` keeps none of its citations).

    Returns:
        The answer text (its text content parts joined) and a `Recovery` whose citations are keyed by part index
        0 (the single text part `CohereModel` makes). A citation is anchored with `ContentCitationAnchor` only when
        `text[start:end]` equals its own `text`; otherwise it is raw-only.
    """
    message = as_map(body.get('message')) or {}
    text = ''.join(
        as_str(c.get('text')) or '' for c in as_maps(message.get('content')) if c.get('type', 'text') == 'text'
    )
    citations: list[Citation] = []
    raw_only: list[RawOnlyCitation] = []
    for raw in as_maps(message.get('citations')):
        kind = (as_str(raw.get('type')) or 'citation').lower()
        sources = [s for s in (_cohere_source(src) for src in as_maps(raw.get('sources'))) if s is not None]
        start, end, cited = as_int(raw.get('start')), as_int(raw.get('end')), as_str(raw.get('text'))
        if not sources:
            raw_only.append(RawOnlyCitation('cohere', kind, 'no usable source', _json(dict(raw)), part_index=0))
            continue
        if start is None or end is None or not 0 <= start < end <= len(text) or text[start:end] != cited:
            raw_only.append(
                RawOnlyCitation(
                    'cohere',
                    kind,
                    f'start/end ({start!r}, {end!r}) do not select the cited text {cited!r} in the answer',
                    _json(dict(raw)),
                    part_index=0,
                )
            )
            continue
        citations.append(Citation(list(sources), anchor=ContentCitationAnchor(start=start, end=end)))
    return text, Recovery({0: citations} if citations else {}, raw_only, [])


# -- Anthropic search_result_location -------------------------------------------------------------------------


def _anthropic_search_source(raw: Mapping[str, object]) -> DocumentCitationSource | WebCitationSource | None:
    return search_result_source(as_str(raw.get('source')), as_str(raw.get('title')), as_str(raw.get('cited_text')))


def search_result_block_citations(
    raw_citations: Sequence[Mapping[str, object]], text: str, part_index: int | None
) -> tuple[list[Citation], list[RawOnlyCitation]]:
    """The `search_result_location` citations of one Anthropic text block (other types are left out).

    Returns:
        One citation over the whole block (`ContentCitationAnchor(0, len(text))`) with a source per usable citation,
        or none; and the citations that cannot be one (no source, title or cited text; an empty block).
    """
    sources: list[DocumentCitationSource | WebCitationSource] = []
    raw_only: list[RawOnlyCitation] = []
    for raw in raw_citations:
        if raw.get('type') != 'search_result_location':
            continue
        source = _anthropic_search_source(raw)
        if source is None or not text:
            raw_only.append(
                RawOnlyCitation(
                    'anthropic',
                    'search_result_location',
                    'no source, title or cited text' if source is None else 'the cited block has no text',
                    _json(dict(raw)),
                    part_index=part_index,
                )
            )
            continue
        sources.append(source)
    # Anthropic cites whole text blocks: one citation covering the block, as Pydantic AI does for its other types.
    citations = [Citation(list(sources), anchor=ContentCitationAnchor(start=0, end=len(text)))] if sources else []
    return citations, raw_only


def recover_search_result_locations(response: ModelResponse) -> Recovery:
    """Recover `search_result_location` citations that survived in `TextPart.provider_details['citations']`."""
    citations: dict[int, list[Citation]] = {}
    raw_only: list[RawOnlyCitation] = []
    problems: list[CitationProblem] = []
    for part_index, part in enumerate(response.parts):
        if not isinstance(part, TextPart) or not part.provider_details or part.provider_name != 'anthropic':
            continue
        raw = part.provider_details.get('citations')
        if not isinstance(raw, (list, tuple)):
            problems.append(
                CitationProblem(
                    'unreadable_raw_data', '`provider_details["citations"]` is not a list.', part_index=part_index
                )
            )
            continue
        entries = cast('Sequence[object]', raw)
        if not _any_of_type(entries, 'search_result_location'):
            continue  # the common case: every citation was mapped by Pydantic AI
        found, raw_part = search_result_block_citations(as_maps(entries), part.content, part_index)
        if found:
            citations[part_index] = found
        raw_only.extend(raw_part)
    return Recovery(citations, raw_only, problems)


def _any_of_type(entries: Sequence[object], wanted: str) -> bool:
    """Whether any entry is a mapping whose `type` is `wanted` (runs on every raw citation of every response)."""
    for entry in entries:
        found = cast('Mapping[str, object]', entry) if entry.__class__ is dict else as_map(entry)
        if found is not None and found.get('type') == wanted:
            return True
    return False


def recover_search_result_locations_from_body(body: Mapping[str, JsonValue]) -> Recovery:
    """Recover `search_result_location` citations from a raw Messages body, keyed by content block index.

    Use this when Pydantic AI kept no raw data (a block cited only by search results). The keys are *content
    block* indexes of the body, which match `ModelResponse.parts` indexes only when every block became one part.
    """
    citations: dict[int, list[Citation]] = {}
    raw_only: list[RawOnlyCitation] = []
    for index, block in enumerate(as_maps(body.get('content'))):
        if block.get('type') != 'text':
            continue
        found, raw_block = search_result_block_citations(
            as_maps(block.get('citations')), as_str(block.get('text')) or '', index
        )
        if found:
            citations[index] = found
        raw_only.extend(raw_block)
    return Recovery(citations, raw_only, [])
