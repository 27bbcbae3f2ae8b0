"""Perplexity citations: numbered `[N]` markers resolved through search results.

Two wire formats carry them:

- **Agent API** (`POST /v1/agent`, alias `POST /v1/responses`; the live API since Sonar chat completions were
  retired on 2026-09-27). OpenAI Responses wire format plus Perplexity's own events and output items: search
  results arrive in `response.reasoning.search_results` events (one per search) or a `search_results` output
  item, each result with an `id`; the answer cites with `[N]` where `N` is a result's **`id`**, never its
  position in an array. `AgentStreamCollector` turns one response's events into citations; `collect_response`
  does the same for a non-streamed body.
- **Sonar chat completions** (legacy logs): top-level `citations` (URLs) and `search_results`; `[N]` is 1-based
  into that list. Through `OpenAIChatModel` with `openai_include_unmapped_response_data=True` they survive in
  `ModelResponse.provider_details['unmapped']['response']` (non-streamed) or
  `provider_details['unmapped']['chunks'][i]['response']` (streamed): `recover_sonar` /
  `apply_sonar`.

Markers are read by `numbered` (`NumberedScanner`, `extract_numbered`, `resolve_markers`), the package's one set of
rules for numbered markers, so a Perplexity answer is read like any other.

The Agent API's Perplexity-only data never reaches Pydantic AI's model classes; `pydantic_ai_citations.PerplexityTap`
(in `_tap.py`, next to the recovery that wires it into responses) feeds it to an `AgentStreamCollector` from the
provider's HTTP client. This module holds the pure parsers only.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import cast

from pydantic import JsonValue
from pydantic_ai.messages import Citation, ModelResponse, TextPart, WebCitationSource

from .._problems import CitationProblem, shorten
from . import numbered
from ._raw import as_list, as_map, as_str
from .numbered import (
    NumberedMarker,
    NumberedResolution,
    NumberedScanner,
    resolve_markers,
)

__all__ = (
    'PERPLEXITY_ONLY_ITEMS',
    'AgentStreamCollector',
    'ConflictingSourceIdError',
    'SearchResult',
    'TextSegment',
    'apply_sonar',
    'apply_agent_api',
    'recover_sonar',
    'collect_response',
)

PERPLEXITY_ONLY_ITEMS = frozenset({'search_results', 'fetch_url_results'})
"""Output item types only Perplexity sends (the openai SDK cannot parse them into Responses items)."""


class ConflictingSourceIdError(ValueError):
    """Raised by a collector in `strict=True` mode when one search-result id arrives with two different URLs.

    Without `strict`, the same situation is reported as a `conflicting_source_id` problem and markers citing that
    id are linked to neither URL. The `problem` attribute holds that problem.
    """

    def __init__(self, problem: CitationProblem) -> None:
        super().__init__(problem.message)
        self.problem = problem


@dataclass(frozen=True)
class SearchResult:
    """One Perplexity search result, as the Agent API or Sonar returns it."""

    id: int
    """The result's id (Agent API), or its 1-based position (Sonar). `[N]` markers cite this number."""
    url: str
    """The result's URL."""
    title: str | None = None
    """Page title, if given."""
    snippet: str | None = None
    """Text snippet from the page, if given; used as the citation's excerpt."""
    date: str | None = None
    """Publication date, if given."""
    last_updated: str | None = None
    """Last-updated date, if given."""


@dataclass(frozen=True)
class TextSegment:
    """The text of one output text content (`item_id`, `content_index`), with its resolved citations."""

    item_id: str | None
    """The message output item id, which Pydantic AI copies to `TextPart.id`."""
    content_index: int
    """Index of the content in the message item."""
    text: str
    """The accumulated text."""
    citations: list[Citation]
    """Citations for resolved markers, anchored on `text` (one per marker with a search result)."""
    markers: list[NumberedMarker]
    """The markers decided in `text` so far, resolved or not (see `numbered` for what counts as a marker).

    Until the response is final (or the collector closed), a marker at the very end of `text` is not listed yet:
    the next character decides whether it is a marker or a link (`[1](...)`).
    """


class _Segment:
    """One output text content: its text so far and the markers its scanner has decided.

    Linear in the text however it arrives: pieces are joined only when the text is read, and text after the end (a
    protocol slip) goes on through the same scanner; the markers pending at its end are decided on a copy of the
    scanner, so the text is never read again from its start.
    """

    def __init__(self, item_id: str | None, content_index: int) -> None:
        self.item_id = item_id
        self.content_index = content_index
        self.streamed = False
        self.closed = False
        self._pieces: list[str] = []
        self._scanner = NumberedScanner()
        self._decided: list[NumberedMarker] = []  # markers the text so far decides, whatever follows
        self._tail: list[NumberedMarker] = []  # after the end: the markers only the end of the text decides

    @property
    def text(self) -> str:
        pieces = self._pieces
        if len(pieces) > 1:
            pieces[:] = [''.join(pieces)]
        return pieces[0] if pieces else ''

    @property
    def markers(self) -> list[NumberedMarker]:
        return self._decided + self._tail if self._tail else self._decided

    def feed(self, piece: str) -> None:
        self._pieces.append(piece)
        self._decided.extend(self._scanner.feed(piece))
        if self.closed:
            self._tail = copy.copy(self._scanner).close()

    def close(self) -> None:
        if not self.closed:
            self._tail = copy.copy(self._scanner).close()
            self.closed = True


def _short(value: object, limit: int = 120) -> str:
    return shorten(repr(value), limit)


def _result_id(value: object) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.isascii() and value.isdigit() and len(value) <= 18:
        return int(value)
    return None


class AgentStreamCollector:
    """Collects one Perplexity Agent API response (streamed events or a JSON body) into citations.

    Use one collector per response: never share it between requests or users. Feed events in order with
    `feed_event`; read `citations()`, `markers`, `links`, `unresolved`, `problems` and `segments()` at any time
    (they reflect what has arrived so far). Search results are kept by their `id`: a later search event adds to
    them, re-sorted results keep their ids, and an id arriving again with a *different* URL is a
    `conflicting_source_id` problem: which page `[N]` meant cannot be told, so its markers are linked to neither
    URL (each such marker is a `conflicting_source_id` problem with its offsets; the id is listed in `conflicts`).
    `strict=True` raises `ConflictingSourceIdError` instead.

    Markers are found by `numbered.NumberedScanner`, with the package's one set of rules (no markers in code or in
    Markdown links). A marker at the very end of the text so far is held back until the next character decides it
    (`[1](` is a link), so a read before the response is final may lack the last marker. `response.completed` (or
    any final response: a non-streamed body, a failed response) and `close()` end every text and add those
    pending markers.
    """

    def __init__(self, *, strict: bool = False) -> None:
        """Create an empty collector.

        Args:
            strict: Raise `ConflictingSourceIdError` on a conflicting search-result id instead of reporting it.
        """
        self.strict = strict
        self.response_id: str | None = None
        """The response `id`, once an event or the body has carried it."""
        self.results: dict[int, SearchResult] = {}
        """Search results by id, in order of first arrival (for an id in `conflicts`, the first one that arrived)."""
        self.conflicts: dict[int, tuple[str, ...]] = {}
        """Ids that arrived with different URLs, each with every URL seen (in order). Never linked."""
        self.completed = False
        """True only after `response.completed` (or a non-streamed body with status `completed`)."""
        self.closed = False
        """True once `close()` was called: no more input will come."""
        self._segments: dict[tuple[str | None, int], _Segment] = {}
        self._problems: list[CitationProblem] = []
        self._ended = False  # a final response arrived or close() was called: texts are complete

    # -- input -----------------------------------------------------------------------------------------------

    def feed_event(self, event: Mapping[str, JsonValue]) -> None:
        """Feed one decoded stream event (the SSE `data` object). Unknown event types are ignored."""
        ev = as_map(event)
        if ev is None:
            self._problems.append(CitationProblem('unreadable_raw_data', 'A stream event is not a JSON object.'))
            return
        kind = ev.get('type')
        if kind == 'response.output_text.delta':
            delta = ev.get('delta')
            if isinstance(delta, str):
                seg = self._segment(ev.get('item_id'), ev.get('content_index'))
                seg.streamed = True
                seg.feed(delta)
                if self._ended:
                    seg.close()  # text after the end: nothing more will decide a trailing marker
        elif kind == 'response.reasoning.search_results':
            self._add_results(ev.get('results'))
        elif kind in ('response.output_item.added', 'response.output_item.done'):
            item = as_map(ev.get('item'))
            if item is not None and item.get('type') == 'search_results':
                self._add_results(item.get('results'))
        elif kind in ('response.created', 'response.in_progress'):
            self._take_response(ev.get('response'), final=False)
        elif kind == 'response.completed':
            self._take_response(ev.get('response'), final=True)
            self.completed = True
        elif kind in ('response.failed', 'response.incomplete', 'error'):
            response = as_map(ev.get('response'))
            if response is not None:
                self._take_response(response, final=True)
            error = as_map(ev.get('error')) or (as_map(response.get('error')) if response else None)
            message = error.get('message') if error else ev.get('message')
            self._problems.append(
                CitationProblem(
                    'provider_error',
                    f'Perplexity reported {kind!r}: {message if isinstance(message, str) else "no message"}.',
                    detail=_short(error or dict(ev)),
                )
            )

    def feed_response(self, body: Mapping[str, JsonValue]) -> None:
        """Feed a complete non-streamed response body (`{'id', 'status', 'output': [...]}`)."""
        body_map = as_map(body)
        if body_map is None:
            self._problems.append(CitationProblem('unreadable_raw_data', 'The response body is not a JSON object.'))
            return
        self._take_response(body_map, final=True)
        error = as_map(body_map.get('error'))
        if error is not None:
            message = error.get('message')
            self._problems.append(
                CitationProblem(
                    'provider_error',
                    f'Perplexity returned an error: {message if isinstance(message, str) else "no message"}.',
                    detail=_short(error),
                )
            )
        if body_map.get('status') == 'completed':
            self.completed = True

    def close(self) -> None:
        """Mark the end of input. A stream closed before `response.completed` is reported as incomplete.

        Ends every text, so a marker at the very end of the last delta is added to `markers` (and resolved).
        """
        self.closed = True
        self._end_texts()

    def report(self, problem: CitationProblem) -> None:
        """Record a problem found outside the events (for example by the transport tap)."""
        self._problems.append(problem)

    def _segment(self, item_id: object, content_index: object) -> _Segment:
        key = (item_id if isinstance(item_id, str) else None, content_index if type(content_index) is int else 0)
        seg = self._segments.get(key)
        if seg is None:
            seg = self._segments[key] = _Segment(key[0], key[1])
        return seg

    def _end_texts(self) -> None:
        self._ended = True
        for seg in self._segments.values():
            seg.close()

    def _take_response(self, response: object, *, final: bool) -> None:
        """Take a response object; a final one (completed, failed, a whole body) also ends every text."""
        resp = as_map(response)
        if resp is not None and self.response_id is None and isinstance(rid := resp.get('id'), str) and rid:
            self.response_id = rid
        if not final:
            return
        for item_obj in as_list(resp.get('output') if resp is not None else None):
            item = as_map(item_obj)
            if item is None:
                continue
            if item.get('type') == 'search_results':
                self._add_results(item.get('results'))
            elif item.get('type') == 'message':
                for index, content_obj in enumerate(as_list(item.get('content'))):
                    content = as_map(content_obj)
                    text = content.get('text') if content else None
                    if not isinstance(text, str) or not content or content.get('type', 'output_text') != 'output_text':
                        continue
                    seg = self._segment(item.get('id'), index)
                    if not seg.streamed and not seg.text:
                        # Text that was not streamed (a non-streamed body, or a final snapshot) is taken whole.
                        seg.feed(text)
                        seg.close()
                    elif seg.text != text:
                        self._problems.append(
                            CitationProblem(
                                'unmapped_provider_citation',
                                'The final response text differs from the streamed text; markers stay on the streamed text.',
                                detail=_short(item.get('id')),
                            )
                        )
        # The response is final: no delta will follow, so markers pending at the end of a text are decided now.
        self._end_texts()

    def _add_results(self, results: object) -> None:
        if not isinstance(results, (list, tuple)):
            self._problems.append(
                CitationProblem('invalid_search_result', 'Search results are not a list.', detail=_short(results))
            )
            return
        for index, raw_obj in enumerate(cast('Sequence[object]', results)):
            raw = as_map(raw_obj)
            rid = _result_id(raw.get('id')) if raw else None
            url = as_str(raw.get('url')) if raw else None
            if raw is None or rid is None or url is None:
                self._problems.append(
                    CitationProblem(
                        'invalid_search_result',
                        'A search result has no usable integer `id` or `url`; it cannot be cited.',
                        citation_index=index,
                        detail=_short(raw_obj),
                    )
                )
                continue
            result = SearchResult(
                id=rid,
                url=url,
                title=as_str(raw.get('title')),
                snippet=as_str(raw.get('snippet')),
                date=as_str(raw.get('date')),
                last_updated=as_str(raw.get('last_updated')),
            )
            self._merge_result(result)

    def _merge_result(self, result: SearchResult) -> None:
        known = self.results.get(result.id)
        if known is None:
            self.results[result.id] = result
            return
        urls = self.conflicts.get(result.id, (known.url,))
        if result.url in urls:
            return
        problem = CitationProblem(
            'conflicting_source_id',
            f'Search result id {result.id} arrived with two URLs ({urls[-1]!r}, then {result.url!r}); '
            f'markers citing [{result.id}] are linked to neither.',
            detail=str(result.id),
        )
        if self.strict:
            raise ConflictingSourceIdError(problem)
        self.conflicts[result.id] = (*urls, result.url)
        self._problems.append(problem)

    # -- output ----------------------------------------------------------------------------------------------

    @property
    def text(self) -> str:
        """All output text so far, the segments joined in order of arrival."""
        return ''.join(seg.text for seg in self._segments.values())

    @property
    def markers(self) -> list[NumberedMarker]:
        """The markers decided so far, with offsets into `text`.

        A marker at the very end of the text is listed once the next character, the final response or `close()`
        has decided it.
        """
        out: list[NumberedMarker] = []
        offset = 0
        for seg in self._segments.values():
            out.extend(NumberedMarker(m.raw, m.numbers, m.start + offset, m.end + offset) for m in seg.markers)
            offset += len(seg.text)
        return out

    @property
    def links(self) -> dict[int, str]:
        """Cited id → URL, for every number of every decided marker that resolved to a search result."""
        return {
            number: self.results[number].url
            for seg in self._segments.values()
            for m in seg.markers
            for number in m.numbers
            if number in self.results and number not in self.conflicts
        }

    @property
    def unresolved(self) -> list[int]:
        """Cited ids with no search result (in order of first citation). They are kept, never re-pointed.

        (Ids in `conflicts` have results, so they are not listed here; they are not linked either.)
        """
        seen: dict[int, None] = {}
        for seg in self._segments.values():
            for m in seg.markers:
                for number in m.numbers:
                    if number not in self.results:
                        seen.setdefault(number, None)
        return list(seen)

    @property
    def problems(self) -> list[CitationProblem]:
        """Problems so far: bad results, conflicts, provider errors, unresolved markers, an incomplete stream.

        `unresolved_marker` problems are for the decided markers (see `markers`), with offsets into `text`.
        """
        out = list(self._problems)
        out.extend(self.resolve(self.markers).problems)
        if self.closed and not self.completed:
            out.append(CitationProblem('stream_incomplete', 'The response ended before `response.completed`.'))
        return out

    def segments(self) -> list[TextSegment]:
        """The output text per message content, each with the citations of its decided markers.

        Anchors are offsets into the segment's own text (not into `text`).
        """
        return [
            TextSegment(
                seg.item_id,
                seg.content_index,
                seg.text,
                self.resolve(seg.markers).citations,
                list(seg.markers),
            )
            for seg in self._segments.values()
        ]

    def citations(self) -> list[Citation]:
        """One `Citation` per decided marker with a search result, `MarkerCitationAnchor` over the marker in `text`.

        A marker citing several ids (`[1, 2]`) gives one citation with a source per resolved id.
        """
        return self.resolve(self.markers).citations

    def resolve(self, markers: Sequence[NumberedMarker]) -> NumberedResolution:
        """Resolve markers (offsets kept) by search-result id, never by position.

        A number in `conflicts` is linked to no source: it is left out of its marker's citation and reported as a
        `conflicting_source_id` problem at the marker's offsets.
        """
        if not self.conflicts:
            return resolve_markers(markers, self._sources())
        kept: list[NumberedMarker] = []
        problems: list[CitationProblem] = []
        for m in markers:
            for number in dict.fromkeys(n for n in m.numbers if n in self.conflicts):
                urls = ', '.join(repr(u) for u in self.conflicts[number])
                problems.append(
                    CitationProblem(
                        'conflicting_source_id',
                        f'marker cites [{number}], but search result {number} arrived with different URLs ({urls}); '
                        'linked to neither',
                        start=m.start,
                        end=m.end,
                        detail=m.raw,
                    )
                )
            kept.append(replace(m, numbers=tuple(n for n in m.numbers if n not in self.conflicts)))
        resolution = resolve_markers(kept, self._sources())
        return replace(resolution, problems=sorted([*resolution.problems, *problems], key=_problem_start))

    def _sources(self) -> dict[int, WebCitationSource]:
        return {rid: _web_source(r) for rid, r in self.results.items() if rid not in self.conflicts}


def _problem_start(problem: CitationProblem) -> int:
    return problem.start or 0


def _web_source(result: SearchResult) -> WebCitationSource:
    return WebCitationSource(result.url, title=result.title, excerpts=[result.snippet] if result.snippet else [])


def collect_response(body: Mapping[str, JsonValue], *, strict: bool = False) -> AgentStreamCollector:
    """Map a non-streamed Agent API response body (with its `search_results` output item) like a stream."""
    collector = AgentStreamCollector(strict=strict)
    collector.feed_response(body)
    collector.close()
    return collector


# -- applying to Pydantic AI messages ------------------------------------------------------------------------


def apply_agent_api(response: ModelResponse, collector: AgentStreamCollector) -> list[CitationProblem]:
    """Fill `TextPart.citations` of `response` from `collector`, IN PLACE, where Pydantic AI left them empty.

    In-place on purpose: `run_stream` keeps the `ModelResponse` objects it already handed out in its history, so
    only changes to those same objects show up there. Each part is matched to the collector's text by its `id`
    (the message item id) and its content; anchors are offsets into the part's own text. A part whose text
    differs from what the collector saw gets no citations and a problem.

    Returns:
        The collector's problems (with `part_index` where they belong to one part) plus matching problems.
    """
    segments = [seg for seg in collector.segments() if seg.text]
    # Marker problems are reported per part below, with its index and offsets into the part's own text.
    marker_problems = collector.resolve(collector.markers).problems
    problems: list[CitationProblem] = [p for p in collector.problems if p not in marker_problems]
    used: set[int] = set()
    for part_index, part in enumerate(response.parts):
        if not isinstance(part, TextPart):
            continue
        match = _match_segment(part, segments, used)
        if match is None:
            if any(seg.item_id is not None and seg.item_id == part.id for seg in segments):
                problems.append(
                    CitationProblem(
                        'unmapped_provider_citation',
                        'The text part differs from the text Perplexity sent, so its markers cannot be anchored.',
                        part_index=part_index,
                    )
                )
            continue
        used.add(match)
        seg = segments[match]
        resolution = collector.resolve(seg.markers)
        problems.extend(replace(p, part_index=part_index) for p in resolution.problems)
        if part.citations or not resolution.citations:
            continue
        part.citations = resolution.citations
        details = dict(part.provider_details or {})
        details.setdefault(
            'citations',
            [
                {
                    'type': 'perplexity_search_result',
                    'id': number,
                    'url': collector.results[number].url,
                    'start': m.start,
                    'end': m.end,
                }
                for m in resolution.markers
                for number in dict.fromkeys(m.numbers)  # (a conflicting id is no longer among them)
                if number in collector.results
            ],
        )
        part.provider_details = details
    return problems


def _match_segment(part: TextPart, segments: Sequence[TextSegment], used: set[int]) -> int | None:
    for i, seg in enumerate(segments):
        if i not in used and seg.item_id is not None and seg.item_id == part.id and seg.text == part.content:
            return i
    same_text = [i for i, seg in enumerate(segments) if i not in used and seg.text == part.content]
    return same_text[0] if len(same_text) == 1 else None


# -- Sonar chat completions (legacy) ------------------------------------------------------------------------


def _sonar_results(data: Mapping[str, object]) -> tuple[dict[int, SearchResult], list[CitationProblem]]:
    """Sonar `citations` / `search_results` → results keyed by 1-based position."""
    problems: list[CitationProblem] = []
    urls = [u if isinstance(u, str) else None for u in as_list(data.get('citations'))]
    search = [as_map(r) for r in as_list(data.get('search_results'))]
    results: dict[int, SearchResult] = {}
    for i in range(max(len(urls), len(search))):
        info = search[i] if i < len(search) else None
        url = urls[i] if i < len(urls) else None
        info_url = as_str(info.get('url')) if info else None
        url = url or info_url
        if not url:
            problems.append(
                CitationProblem(
                    'invalid_search_result', f'Sonar source {i + 1} has no URL.', citation_index=i, detail=_short(info)
                )
            )
            continue
        if info is not None and info_url is not None and info_url != url:
            problems.append(
                CitationProblem(
                    'conflicting_source_id',
                    f'Sonar source {i + 1} has URL {url!r} in `citations` but {info_url!r} in `search_results`; '
                    'the `citations` URL is kept and the search result details are not used.',
                    citation_index=i,
                    detail=str(i + 1),
                )
            )
            info = None
        results[i + 1] = SearchResult(
            id=i + 1,
            url=url,
            title=as_str(info.get('title')) if info else None,
            snippet=as_str(info.get('snippet')) if info else None,
            date=as_str(info.get('date')) if info else None,
            last_updated=as_str(info.get('last_updated')) if info else None,
        )
    return results, problems


def _sonar_source_data(response: ModelResponse) -> Mapping[str, object] | None:
    unmapped = as_map((response.provider_details or {}).get('unmapped'))
    if unmapped is None:
        return None
    whole = as_map(unmapped.get('response'))
    if whole is not None and ('citations' in whole or 'search_results' in whole):
        return whole
    # Streamed: every chunk repeats the (growing) lists; the last chunk that has them is the final state.
    for chunk in reversed(as_list(unmapped.get('chunks'))):
        chunk_map = as_map(chunk)
        data = as_map(chunk_map.get('response')) if chunk_map is not None else None
        if data is not None and ('citations' in data or 'search_results' in data):
            return data
    return None


def recover_sonar(
    response: ModelResponse,
) -> tuple[dict[int, list[Citation]], list[CitationProblem]]:
    """Resolve Sonar `[N]` markers using the data `openai_include_unmapped_response_data=True` kept.

    Markers are those `numbered.extract_numbered` finds in each text part (so `[1, 2]` is one marker, and
    nothing in code or Markdown links counts); `N` is the 1-based position in Sonar's `citations` list.

    Returns:
        Citations by part index (only text parts with resolved markers), and the problems found (unresolved
        markers, sources without URLs). Empty when the response carries no Sonar data.
    """
    data = _sonar_source_data(response)
    if data is None:
        return {}, []
    results, problems = _sonar_results(data)
    # Keyed by 1-based position, not a list: a source without URL is dropped but keeps its number.
    by_position = {n: _web_source(r) for n, r in results.items()}
    by_part: dict[int, list[Citation]] = {}
    for part_index, part in enumerate(response.parts):
        if not isinstance(part, TextPart):
            continue
        resolution = numbered.resolve(part.content, by_position)
        problems.extend(replace(p, part_index=part_index) for p in resolution.problems)
        if resolution.citations:
            by_part[part_index] = resolution.citations
    return by_part, problems


def sonar_result_urls(response: ModelResponse) -> list[tuple[int, str]]:
    """Every Sonar search result of `response` as (1-based position, URL); empty without Sonar data."""
    data = _sonar_source_data(response)
    if data is None:
        return []
    results, _ = _sonar_results(data)
    return [(n, r.url) for n, r in sorted(results.items())]


def apply_sonar(response: ModelResponse) -> list[CitationProblem]:
    """Fill `TextPart.citations` from Sonar data, IN PLACE, on parts Pydantic AI left without citations.

    In place because `run_stream` history holds these very objects (see `apply_agent_api`).
    """
    by_part, problems = recover_sonar(response)
    for part_index, cites in by_part.items():
        part = response.parts[part_index]
        if isinstance(part, TextPart) and not part.citations:
            part.citations = cites
    return problems
