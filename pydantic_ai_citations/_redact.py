"""Redact private excerpts from a `CitedAnswer` before it goes to logs or persisted reports.

Excerpts of user documents (Anthropic `cited_text`, Bedrock `sourceContent`, Google retrieved-context text, xAI
collection chunks) can hold private text. `redact` replaces them with a placeholder that keeps only their length;
URLs, titles and document ids are kept so the report still says *what* was cited. Raw provider data kept for audit
(`raw_only`) is redacted the same way: any entry that is not clearly a web citation is treated as a document one.

`clean_markup` removes the citation markup a reader must never see (cite tags, OpenAI private-use markers, `【…†…】`
markers, as `formats.markup` reads them) from an answer's text, shifts every offset onto the new text and reports
each removal as a problem; `redact` and the renderers apply it to every answer, hand-built or loaded from JSON too.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from pydantic import JsonValue

from ._answer import CitedAnswer, RawCitation, SourceRef
from ._checks import require_answer, require_bools
from ._problems import CitationProblem, shorten
from .formats.markup import MarkupIssue, MarkupMatch, offset_shifter, remove_cuts, scan_markup, strip_markup

__all__ = ('clean_markup', 'placeholder', 'redact')

# Keys of raw provider citation data that hold quoted text (not URLs, titles or ids).
_TEXT_KEYS = frozenset(
    {
        'cited_text',
        'text',
        'content',
        'chunk_content',
        'sourceContent',
        'source_content',
        'snippet',
        'excerpt',
        'excerpts',
        'quote',
        'chunk',
        'rag_chunk',
    }
)
_WEB_TYPES = frozenset({'web_search_result_location', 'url_citation', 'web_citation', 'x_citation'})
# Problems whose `detail` may quote raw provider data.
_DETAIL_PROBLEMS = frozenset({'unreadable_raw_data', 'source_without_content', 'unmapped_provider_citation'})


def placeholder(text: str) -> str:
    """What a redacted excerpt becomes: `'[redacted: 123 chars]'`."""
    return f'[redacted: {len(text)} chars]'


def redact(answer: CitedAnswer, *, documents: bool = True, web: bool = False) -> CitedAnswer:
    """A copy of the answer with private excerpts replaced by `'[redacted: N chars]'`.

    The answer text is kept, with any citation markup left in it (cite tags, OpenAI private-use markers, `【…†…】`)
    removed, offsets shifted and each removal reported as a problem, as the renderers do; URLs, titles and document
    ids are kept.

    Args:
        answer: The answer to redact (not modified).
        documents: Redact excerpts of document sources, the quoted text in raw data of document citations, and
            problem details that may quote raw data. On by default: these are the user's documents.
        web: Also redact excerpts of web sources and the quoted text in raw web citation data.

    Raises:
        UserError: `answer` is not a `CitedAnswer`, or `documents` / `web` is not a bool.
    """
    require_answer(answer, where='redact')
    require_bools('redact', documents=documents, web=web)
    answer = clean_markup(answer)
    if not documents and not web:
        return answer

    def source(ref: SourceRef) -> SourceRef:
        if (ref.kind == 'document' and documents) or (ref.kind == 'web' and web):
            return replace(ref, excerpts=[placeholder(e) for e in ref.excerpts])
        return ref

    def raw(entry: RawCitation) -> RawCitation:
        is_web = _looks_web(entry.data)
        if (is_web and web) or (not is_web and documents):
            return replace(entry, data=_redact_json(entry.data))
        return entry

    def problem(p: CitationProblem) -> CitationProblem:
        if documents and p.detail is not None and p.code in _DETAIL_PROBLEMS:
            return replace(p, detail=placeholder(p.detail))
        return p

    sources = [source(s) for s in answer.sources]
    by_number = {s.number: s for s in sources}
    return replace(
        answer,
        sources=sources,
        unanchored=[by_number.get(s.number, source(s)) for s in answer.unanchored],
        raw_only=[raw(r) for r in answer.raw_only],
        problems=[problem(p) for p in answer.problems],
    )


def _looks_web(data: JsonValue) -> bool:
    """Whether a raw entry is clearly a web citation; anything unknown counts as a document (privacy first)."""
    if not isinstance(data, dict):
        return False
    kind = data.get('type')
    if isinstance(kind, str) and kind in _WEB_TYPES:
        return True
    for key in ('url', 'uri'):
        value = data.get(key)
        if isinstance(value, str) and value.lower().startswith(('http://', 'https://')):
            return True
    web = data.get('web')
    return isinstance(web, dict) and isinstance(web.get('uri'), str)


def _redact_json(data: JsonValue, depth: int = 0) -> JsonValue:
    if depth > 50:
        return '[redacted]'
    if isinstance(data, dict):
        out: dict[str, JsonValue] = {}
        for key, value in data.items():
            out[key] = _redact_text(value) if key in _TEXT_KEYS else _redact_json(value, depth + 1)
        return out
    if isinstance(data, list):
        return [_redact_json(v, depth + 1) for v in data]
    return data


def _redact_text(value: JsonValue) -> JsonValue:
    if isinstance(value, str):
        return placeholder(value)
    if isinstance(value, list):
        return [_redact_text(v) for v in value]
    if isinstance(value, dict):
        return {k: _redact_text(v) for k, v in value.items()}
    return value


def clean_markup(answer: CitedAnswer) -> CitedAnswer:
    """A copy of the answer without the citation markup left in its text, each removal reported as a problem.

    Cite tags lose their tags (their words stay); OpenAI private-use markers and `【…†…】` markers go whole, and what
    cannot be read as markup loses its markup characters. Markup a citation is anchored on as a marker (the renderers
    replace it with their own mark) stays. Span, part-segment and problem offsets are moved onto the new text. Each
    removal adds a problem (`markup_in_output` for well-formed markup, `malformed_marker` / `unterminated_marker`
    otherwise) at the place it was, with the markup as `detail`. The answer itself when there is nothing to remove.
    """
    text = answer.text
    scan = scan_markup(text)
    if not scan.found:
        return answer
    anchored = [(s.start, s.end) for s in answer.spans if s.kind == 'marker']

    def free(item: MarkupMatch | MarkupIssue) -> bool:
        return not any(a < e and s < b for a, b in item.cuts for s, e in anchored)

    items = [item for item in (*scan.matches, *scan.issues) if free(item)]
    if not items:
        return answer
    if len(items) == len(scan.matches) + len(scan.issues):
        stripped = strip_markup(text)
        cuts, new_text = stripped.cuts, stripped.text
    else:
        cuts = tuple(sorted(c for item in items for c in item.cuts))
        new_text = remove_cuts(text, cuts)
    shift = offset_shifter(cuts)
    problems = [_moved(p, shift) for p in answer.problems]
    problems += [_removal_problem(item, text, shift(item.start)) for item in sorted(items, key=lambda i: i.start)]
    return replace(
        answer,
        text=new_text,
        spans=[replace(s, start=shift(s.start), end=shift(s.end)) for s in answer.spans],
        segments=[replace(g, start=shift(g.start), end=shift(g.end)) for g in answer.segments],
        problems=problems,
    )


def _moved(problem: CitationProblem, shift: Callable[[int], int]) -> CitationProblem:
    if problem.start is None and problem.end is None:
        return problem
    start = None if problem.start is None else shift(problem.start)
    end = None if problem.end is None else shift(problem.end)
    return replace(problem, start=start, end=end)


def _removal_problem(item: MarkupMatch | MarkupIssue, text: str, at: int) -> CitationProblem:
    raw = shorten(text[item.start : item.end])
    if isinstance(item, MarkupMatch):
        message = f'citation markup ({item.kind}) left in the answer text was removed: it is not a citation here'
        return CitationProblem('markup_in_output', message, start=at, end=at, detail=raw)
    return CitationProblem(
        item.code, f'{item.reason}; its markup was removed from the answer text', start=at, end=at, detail=raw
    )
