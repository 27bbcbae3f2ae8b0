"""Recovery: map citation data Pydantic AI leaves raw onto `TextPart.citations`, in place, after each model request.

`TrackCitations` calls `recover_in_place` from its `after_model_request` hook, and for a streamed response already when
its events have been read to their end (under `run_stream`, inside the `async with` block); recovery is on by default,
so the one-line setup keeps working. It is idempotent: it adds no citation or raw entry a part already holds, so a
second run on the same parts, or on copies of them, changes nothing. What it does, in order:

- OpenAI-style private-use markers (`\\ue200cite\\ue202<id>\\ue201`), when the application gave their sources
  (`TrackCitations(marker_sources=...)`): each marker becomes a citation on the sentence it closes and is removed from
  the text;
- raw formats (`formats.unmapped.recover`: Anthropic `search_result_location`, container-file citations, xAI
  tool-output lists, ...), and what only a tapped body holds (`AnthropicTap`: text blocks cited only by
  `search_result_location`; `CohereTap`: Cohere v2 citations), Perplexity Sonar `[N]` markers (`formats.perplexity.apply_sonar`), and the Perplexity Agent
  API through the HTTP tap's collector (`formats.perplexity.apply_agent_api`). When the tap saw the stream end
  without `response.completed`, its verdict is recorded on the response (`FINISH_METADATA_KEY`) so that every answer
  built from these messages says `complete=False`.

Everything is in place on purpose: `agent.run_stream()` rebuilds its history from the parts manager, so only changes to
the very part objects are visible there.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from pydantic import JsonValue
from pydantic_ai import Citation, DocumentCitationSource, ModelResponse, RunContext, TextPart, WebCitationSource

from ._answer import FINISH_METADATA_KEY, finish_record, incomplete_reason
from ._models import ApiLabel
from ._problems import CitationProblem, shorten
from ._tap import AnthropicTap, CohereTap, MistralTap, PerplexityTap
from .formats import openai_markers
from .formats._raw import as_maps
from .formats.openai_markers import MARKER_START
from .formats.perplexity import apply_agent_api, apply_sonar
from .formats.unmapped import (
    RAW_ANNOTATIONS_SETTING,
    recover,
    recover_cohere_from_body,
    search_result_block_citations,
)

__all__ = (
    'MarkerSources',
    'Recovery',
    'raw_annotations_problem',
    'recover_anthropic_in_place',
    'recover_cohere_in_place',
    'recover_mistral_in_place',
    'record_whole_body',
    'recover_in_place',
)

Sources = Mapping[str, WebCitationSource | DocumentCitationSource]

MarkerSources = (
    Mapping[str, WebCitationSource | DocumentCitationSource]
    | Callable[[RunContext[Any]], Mapping[str, WebCitationSource | DocumentCitationSource]]
)
"""Sources by marker id, or a function of the run context returning them (see `TrackCitations.marker_sources`)."""


@dataclass
class Recovery:
    """What `recover_in_place` did to one response."""

    added: dict[int, int] = field(default_factory=dict[int, int])
    """Citations added, by text part index."""
    problems: list[CitationProblem] = field(default_factory=list[CitationProblem])
    """What could not be recovered (unresolved markers, unreadable raw data, ...)."""


def recover_in_place(
    response: ModelResponse,
    *,
    api: ApiLabel,
    marker_sources: Sources | None = None,
    raw: bool = True,
    tap: PerplexityTap | None = None,
    cohere_tap: CohereTap | None = None,
    anthropic_tap: AnthropicTap | None = None,
    mistral_tap: MistralTap | None = None,
) -> Recovery:
    """Fill `response`'s `TextPart.citations` from data Pydantic AI left raw, IN PLACE (see the module docstring).

    Args:
        response: The response, changed in place.
        api: The provider API that served it (Perplexity Sonar data is only read for Sonar, or when unmapped data
            was kept).
        marker_sources: Sources by id for private-use markers; `None` leaves markers to the answer's own cleaning.
        raw: Recover raw formats.
        tap: The Perplexity Agent API tap the provider's HTTP client was made with.
        cohere_tap: The Cohere tap the cohere client's HTTP client was made with.
        anthropic_tap: The Anthropic tap the provider's HTTP client was made with.
        mistral_tap: The Mistral tap the Mistral client's async HTTP client was made with.
    """
    before = {i: len(p.citations or []) for i, p in enumerate(response.parts) if isinstance(p, TextPart)}
    recovery = Recovery({}, [])  # (given, not left to the fields' factories: see `RequestRecord.start`)
    if marker_sources is not None:
        recovery.problems.extend(_markers_in_place(response, marker_sources))
    if raw:
        recovery.problems.extend(_raw_in_place(response, api, tap))
    if raw and cohere_tap is not None:
        recovery.problems.extend(recover_cohere_in_place(response, cohere_tap))
    if raw and anthropic_tap is not None:
        recovery.problems.extend(recover_anthropic_in_place(response, anthropic_tap))
    if raw and mistral_tap is not None:
        recovery.problems.extend(recover_mistral_in_place(response, mistral_tap))
    elif raw and api == 'mistral' and any(isinstance(p, TextPart) for p in response.parts):
        recovery.problems.append(_MISTRAL_REFERENCES)
    for index, count in before.items():
        part = response.parts[index]
        assert isinstance(part, TextPart)
        added = len(part.citations or []) - count
        if added > 0:
            recovery.added[index] = added
    return recovery


_MISTRAL_REFERENCES = CitationProblem(
    'unmapped_provider_citation',
    'Without `TrackCitations(mistral_tap=...)`, Mistral `reference` content chunks (the citations of an answer '
    "grounded in tool results) cannot be seen: Pydantic AI's MistralModel drops them without a trace, so any this "
    'response carried were lost. Build the Mistral client with `async_client=mistral_http_client(tap)`.',
)


def _markers_in_place(response: ModelResponse, sources: Sources) -> list[CitationProblem]:
    """Private-use markers become citations on the text without them; the markers are removed."""
    problems: list[CitationProblem] = []
    for index, part in enumerate(response.parts):
        if not isinstance(part, TextPart) or part.citations or MARKER_START not in part.content:
            continue
        conversion = openai_markers.resolve(part.content, sources)
        problems.extend(dataclasses.replace(p, part_index=index) for p in conversion.problems)
        part.content = conversion.clean_text
        part.id = None  # the text changed: a provider must not reuse its stored copy of this item
        if conversion.citations:
            part.citations = conversion.citations
    return problems


def _raw_in_place(response: ModelResponse, api: ApiLabel, tap: PerplexityTap | None) -> list[CitationProblem]:
    recovery = recover(response)
    for part_index, citations in recovery.citations.items():
        part = response.parts[part_index]
        if isinstance(part, TextPart) and citations:
            _add_citations(part, citations)
    problems = list(recovery.problems)
    details = response.provider_details or {}
    if api == 'perplexity-sonar' or 'unmapped' in details:
        problems.extend(apply_sonar(response))
    if tap is not None and response.provider_response_id is not None:
        collector = tap.collector_for(response.provider_response_id)
        if collector is not None:
            for problem in apply_agent_api(response, collector):
                if problem.code == 'stream_incomplete':  # the tap's verdict: kept on the response, reported once
                    _record_finish(response, False, problem.message)
                else:
                    problems.append(problem)
    return problems


def _record_finish(response: ModelResponse, complete: bool, reason: str) -> None:
    """Record what this package saw of the response's end, in `ModelResponse.metadata` (never sent to a model).

    In place into an existing dict: under `run_stream` the history's response shares the stream's metadata dict.
    """
    record = finish_record(complete, reason)
    if response.metadata is None:
        response.metadata = {FINISH_METADATA_KEY: record}
    else:
        response.metadata[FINISH_METADATA_KEY] = record


def record_whole_body(response: ModelResponse) -> None:
    """A non-streamed response arrived as one whole body: record that, when it carries no finishing signal itself.

    (OpenAI-compatible chat endpoints may omit `finish_reason`; a non-streamed body cannot have been cut.)
    """
    if response.state == 'complete' and incomplete_reason(response) is not None:
        _record_finish(response, True, 'The non-streamed response body arrived whole.')


_OPENAI_APIS = frozenset({'openai-responses', 'openai-chat'})


def raw_annotations_problem(api: ApiLabel, settings: Mapping[str, object] | None) -> CitationProblem | None:
    """An `unmapped_provider_citation` problem when an OpenAI request ran without raw annotations kept.

    Pydantic AI drops `container_file_citation` annotations (code interpreter files) unless
    `openai_include_raw_annotations=True`; `TrackCitations` turns it on, so this only fires when the application
    turned it off (or a model was called without the agent's settings).
    """
    if api not in _OPENAI_APIS or (settings is not None and settings.get(RAW_ANNOTATIONS_SETTING)):
        return None
    return CitationProblem(
        'unmapped_provider_citation',
        f'`{RAW_ANNOTATIONS_SETTING}` was off for this OpenAI request: Pydantic AI drops `container_file_citation` '
        'annotations (code interpreter files) without it, so any such citation in this response was lost. '
        f'Leave the setting to `TrackCitations` or set `{RAW_ANNOTATIONS_SETTING}=True`.',
    )


def recover_cohere_in_place(response: ModelResponse, tap: CohereTap) -> list[CitationProblem]:
    """Turn the Cohere v2 citations of `response`'s tapped body into `TextPart.citations`, in place.

    Citations whose start/end select their cited text become anchored citations on the (single) text part; the
    others go to that part's `provider_details['citations']` (raw-only). Returns what could not be applied.
    """
    body = tap.body_for(response.provider_response_id)
    if body is None:
        return []
    text, recovery = recover_cohere_from_body(body)
    texts = [(i, p) for i, p in enumerate(response.parts) if isinstance(p, TextPart)]
    if not recovery.citations and not recovery.raw_only:
        return list(recovery.problems)
    if len(texts) != 1 or texts[0][1].content != text:
        return [
            *recovery.problems,
            CitationProblem(
                'unmapped_provider_citation',
                'The Cohere response text differs from the tapped body, so its citations cannot be placed.',
            ),
        ]
    _, part = texts[0]
    citations = recovery.citations.get(0, [])
    if citations:
        _add_citations(part, citations)
    if recovery.raw_only:
        _add_raw(part, [r.raw for r in recovery.raw_only])
    return list(recovery.problems)


def recover_mistral_in_place(response: ModelResponse, tap: MistralTap) -> list[CitationProblem]:
    """List the Mistral `reference` chunks of `response`'s tapped body as raw-only data of its text part, in place.

    A reference chunk names tool-result ids, not sources, so it cannot become a citation on its own: each goes to the
    text part's `provider_details['citations']` (so every answer lists it in `raw_only`), with the `offset` in the
    text where it stood. A response the tap did not see, or whose text differs from the tapped one, is a problem.
    """
    if not any(isinstance(p, TextPart) for p in response.parts):
        return []
    record = tap.references_for(response.provider_response_id)
    if record is None:
        return [
            CitationProblem(
                'unmapped_provider_citation',
                'The Mistral tap did not see this response (another client, or evicted), so its `reference` chunks '
                'cannot be seen.',
            )
        ]
    if not record.references:
        return []
    texts = [p for p in response.parts if isinstance(p, TextPart)]
    if len(texts) != 1 or texts[0].content != record.text:
        return [
            CitationProblem(
                'unmapped_provider_citation',
                'The Mistral response text differs from the tapped body, so its `reference` chunks cannot be placed.',
                detail=shorten(repr(record.references)),
            )
        ]
    part = texts[0]
    _add_raw(part, record.references)
    part.provider_name = part.provider_name or 'mistral'
    return []


def recover_anthropic_in_place(response: ModelResponse, tap: AnthropicTap) -> list[CitationProblem]:
    """Recover `search_result_location` citations of text blocks Pydantic AI kept nothing of, in place.

    Pydantic AI 2.68 drops a text block's citations, raw data included, when none is of a type it maps. The tapped
    body's text blocks are matched to the response's text parts in order, by their text; a matched block cited by
    `search_result_location` gets its citation over the whole part (Anthropic cites whole blocks) and its raw
    citations in `provider_details['citations']` (those without a usable source become raw-only data there). A
    cited block that cannot be matched is an `unmapped_provider_citation` problem. Parts whose raw data Pydantic AI
    kept are left to `formats.unmapped.recover`.
    """
    blocks = tap.text_blocks_for(response.provider_response_id)
    if not blocks:
        return []
    problems: list[CitationProblem] = []
    for block, part_index in zip(blocks, _align_text_blocks(blocks, response), strict=True):
        raw = list(as_maps(block.get('citations')))
        if not any(c.get('type') == 'search_result_location' for c in raw):
            continue
        part = response.parts[part_index] if part_index is not None else None
        if not isinstance(part, TextPart):
            problems.append(
                CitationProblem(
                    'unmapped_provider_citation',
                    'An Anthropic text block cited by `search_result_location` matches no text part of the response '
                    '(in order, by its text), so its citations cannot be placed.',
                    detail=shorten(repr(block.get('text'))),
                )
            )
            continue
        if part.provider_details and 'citations' in part.provider_details:
            continue  # Pydantic AI kept the raw list: `formats.unmapped.recover` read it
        citations, _ = search_result_block_citations(raw, part.content, part_index)
        if citations:
            _add_citations(part, citations)
        part.provider_details = {**(part.provider_details or {}), 'citations': block.get('citations')}
        part.provider_name = part.provider_name or 'anthropic'  # raw provider data names its provider
    return problems


def _add_citations(part: TextPart, citations: Sequence[Citation]) -> None:
    """Append `citations` to `part.citations`, IN PLACE, leaving out those the part already holds.

    So recovery is idempotent: run again on a part it already filled (a copy of it, or after `run_stream` ran it when
    the stream ended), it adds nothing. Citations are compared by `repr` (dataclasses: equal values, equal reprs), so
    the check stays linear however many citations a part holds.
    """
    have = part.citations or []
    if have:
        seen = set(map(repr, have))
        citations = [c for c in citations if repr(c) not in seen]
    if citations:
        part.citations = [*have, *citations]


def _add_raw(part: TextPart, entries: Sequence[object]) -> None:
    """Append raw citation data to `part.provider_details['citations']` (a new dict), leaving out entries already there."""
    details = dict(part.provider_details or {})
    kept = details.get('citations')
    kept_list: list[object] = list(cast('list[object]', kept)) if isinstance(kept, list) else []
    seen = set(map(repr, kept_list))
    new = [e for e in entries if repr(e) not in seen]
    if not new:
        return
    details['citations'] = [*kept_list, *new]
    part.provider_details = details


def _align_text_blocks(blocks: list[dict[str, JsonValue]], response: ModelResponse) -> list[int | None]:
    """The text part index of each text block, matched in order by text; `None` from the first mismatch on.

    Every non-empty text block becomes one text part, in order (an empty one may become none).
    """
    parts = [(i, p.content) for i, p in enumerate(response.parts) if isinstance(p, TextPart)]
    out: list[int | None] = []
    cursor = 0
    broken = False
    for block in blocks:
        text = block.get('text')
        if not broken and cursor < len(parts) and parts[cursor][1] == text:
            out.append(parts[cursor][0])
            cursor += 1
            continue
        out.append(None)
        broken = broken or text != ''
    return out
