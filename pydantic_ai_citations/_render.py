"""Render a `CitedAnswer` as Markdown or HTML, safely.

Everything in an answer is untrusted: the model wrote the text (possibly steered by a prompt injection), and URLs,
titles and excerpts come from web pages and documents. So:

- every piece of text, title, excerpt and URL is escaped for the output format;
- a URL becomes a link only when its scheme is in `allowed_schemes` (default `http`, `https`), compared the way a
  browser reads it (tabs and newlines removed, leading and trailing control characters and spaces stripped,
  lowercased); anything else, or anything unparseable, is shown as text;
- the HTML has no remote resources (no images, scripts, stylesheets or frames; inline CSS only) and every link has
  `rel="noopener noreferrer nofollow"`;
- Markdown written by the model keeps its formatting, but raw HTML, autolinks, images and reference definitions are
  escaped, and its inline links survive only with an allowed scheme.

Placement: a content anchor gets its mark *after* the supported words; a marker anchor (a `[1]` or a markdown link
the model wrote) is *replaced* by our own mark. Overlapping markers are merged into one mark; a content anchor ending
inside or right at the edge of a marker joins that marker's mark. Sources without a position go in a trailing
"Sources used" list, never pinned to a sentence. `raw_only` data is never shown. Footnote numbers are
`SourceRef.number`, so they are stable across renderings.
"""

from __future__ import annotations

import html
import re
from bisect import bisect_right
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Literal
from urllib.parse import urlsplit

from pydantic_ai.exceptions import UserError

from ._answer import CitedAnswer, SourceRef
from ._checks import require_answer, require_bools
from ._problems import CitationProblem, shorten
from ._redact import clean_markup
from ._redact import redact as _redact
from ._urls import is_grounding_redirect as _is_grounding_redirect
from ._urls import url_host

__all__ = ('DEFAULT_ALLOWED_SCHEMES', 'render_html', 'render_markdown', 'safe_url', 'url_problems')

DEFAULT_ALLOWED_SCHEMES: tuple[str, ...] = ('http', 'https')
"""Schemes that become links by default."""

_NEVER_ALLOWED = frozenset({'javascript', 'vbscript', 'data', 'file', 'blob', 'filesystem', 'about'})
_SCHEME_RE = re.compile(r'[a-z][a-z0-9+.\-]*')
_REL = 'noopener noreferrer nofollow'
_MAX_LABEL = 200
_MAX_EXCERPT = 300
# C0 controls except tab/newline/carriage return, DEL, C1 controls, lone surrogates, and the bidirectional embeddings,
# overrides and isolates (U+202A-U+202E, U+2066-U+2069: a title ending in U+202E reverses the domain shown after it):
# replaced in all output.
_BAD_CHARS_RE = re.compile('[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\ud800-\udfff]')
_WS_RE = re.compile(r'[\s\x00-\x1f\x7f-\x9f]+')
# What a browser strips around an `href`: C0 controls and space. Whitespace other than a space is refused inside.
_URL_STRIP = ''.join(chr(c) for c in range(0x21))
_OTHER_SPACE_RE = re.compile(r'[^\S ]')


# --------------------------------------------------------------------------------------------------------------------
# URLs


def _check_schemes(allowed_schemes: Iterable[str]) -> frozenset[str]:
    if isinstance(allowed_schemes, str):
        raise UserError(f'`allowed_schemes` must be a sequence of schemes, not a string: {allowed_schemes!r}.')
    schemes: set[str] = set()
    for scheme in allowed_schemes:
        if not isinstance(scheme, str) or not _SCHEME_RE.fullmatch(scheme.lower()):  # pyright: ignore[reportUnnecessaryIsInstance]
            raise UserError(f'Invalid URL scheme in `allowed_schemes`: {scheme!r}. Use names like `"https"`.')
        if scheme.lower() in _NEVER_ALLOWED:
            raise UserError(
                f'URL scheme {scheme!r} can run code or load local data and cannot be allowed; remove it from '
                '`allowed_schemes`.'
            )
        schemes.add(scheme.lower())
    return frozenset(schemes)


def safe_url(url: object, allowed_schemes: Iterable[str] = DEFAULT_ALLOWED_SCHEMES) -> str | None:
    """The URL to link to, or `None` when it must be shown as text only.

    The URL is read the way a browser reads an `href`: tabs and newlines anywhere are removed and leading and trailing
    spaces and control characters are stripped, and in an `http`/`https` URL a backslash is a slash. The result must
    parse, must contain no other control characters, its lowercased scheme must be in `allowed_schemes`, and
    `http`/`https` URLs must name a host without percent escapes (a browser would decode them).

    Args:
        url: The URL, as the provider gave it.
        allowed_schemes: Schemes that may become links.

    Returns:
        The cleaned URL (what was checked is exactly what should be emitted), or `None`.
    """
    return _safe_url(url, _check_schemes(allowed_schemes))


def _safe_url(url: object, schemes: frozenset[str]) -> str | None:
    """`safe_url` with checked schemes."""
    if not isinstance(url, str):
        return None
    cleaned = re.sub('[\t\n\r]', '', url).strip(_URL_STRIP)
    if not cleaned or _BAD_CHARS_RE.search(cleaned) or _OTHER_SPACE_RE.search(cleaned):
        return None
    if '\\' in cleaned and cleaned[:6].lower().startswith(('http:', 'https:')):
        # A browser reads `\` as `/` in an http(s) URL (`https://evil.example\@docs.example/` goes to evil.example);
        # `urlsplit` does not. Written as the browser reads it, the host shown is the host linked to.
        cleaned = cleaned.replace('\\', '/')
    try:
        parts = urlsplit(cleaned)
    except ValueError:
        return None
    scheme = parts.scheme.lower()
    if not scheme or scheme not in schemes or cleaned[: len(scheme) + 1].lower() != scheme + ':':
        return None
    if scheme in ('http', 'https'):
        try:
            host = parts.hostname
        except ValueError:
            return None
        if not host or '%' in host:  # (a browser decodes `%2e` in a host: the host shown would not be the one linked)
            return None
    return cleaned


def url_problems(
    answer: CitedAnswer, *, allowed_schemes: Sequence[str] = DEFAULT_ALLOWED_SCHEMES
) -> list[CitationProblem]:
    """`disallowed_url_scheme` problems for the web sources that the renderers show as text instead of links."""
    problems: list[CitationProblem] = []
    schemes = _check_schemes(allowed_schemes)
    for source in answer.sources:
        if source.kind == 'web' and _safe_url(source.url, schemes) is None:
            problems.append(
                CitationProblem(
                    'disallowed_url_scheme',
                    f'Source {source.number} has a URL that is not an allowed link '
                    f'(schemes {", ".join(sorted(set(allowed_schemes)))}); it is shown as text.',
                    detail=shorten(repr(source.url)),
                )
            )
    return problems


# --------------------------------------------------------------------------------------------------------------------
# What a source shows


@dataclass(frozen=True)
class _Label:
    text: str
    """Main label: title, or domain, or URL text, or document id."""
    href: str | None
    """Checked URL, or `None`."""
    note: str | None
    """Secondary text: domain, or the disallowed URL shown as text."""
    excerpt: str | None


def _clean_line(text: str, limit: int = _MAX_LABEL) -> str:
    text = _WS_RE.sub(' ', _BAD_CHARS_RE.sub('\ufffd', text)).strip()
    return shorten(text, limit)


def _label(source: SourceRef, schemes: frozenset[str]) -> _Label:
    title = _clean_line(source.title) if isinstance(source.title, str) and source.title.strip() else None  # pyright: ignore[reportUnnecessaryIsInstance]
    excerpt = next((e for e in source.excerpts if isinstance(e, str) and e.strip()), None)  # pyright: ignore[reportUnnecessaryIsInstance]
    excerpt = _clean_line(excerpt, _MAX_EXCERPT) if excerpt is not None else None
    if source.kind == 'document':
        doc_id = _clean_line(source.document_id) if source.document_id else None
        text = title or doc_id or f'Document {source.number}'
        note = doc_id if title and doc_id else None
        return _Label(text, None, note, excerpt)
    url = source.url if isinstance(source.url, str) else ''  # pyright: ignore[reportUnnecessaryIsInstance]
    href = _safe_url(url, schemes)
    if href is None:
        # Shown as text so the reader can still see where it claimed to come from.
        shown = _clean_line(url) or '(no URL)'
        return _Label(title or shown, None, shown if title else None, excerpt)
    if _is_grounding_redirect(href):
        # Google grounding redirects are opaque: show the title (Google gives the site's domain there).
        return _Label(title or 'Google Search result', href, None, excerpt)
    host = url_host(href)
    if title is None:
        return _Label(host or _clean_line(href), href, None, excerpt)
    return _Label(title, href, host if host and host != title else None, excerpt)


# --------------------------------------------------------------------------------------------------------------------
# Where marks go


@dataclass
class _Edit:
    start: int
    end: int
    """`start == end` for an inserted mark (after a content anchor); otherwise a replaced marker."""
    found: set[int] = field(default_factory=set[int])
    sources: list[int] = field(default_factory=list[int])
    """The source numbers of the mark, ascending (set once the plan is complete)."""


def _holding(markers: list[_Edit], starts: list[int], position: int) -> _Edit | None:
    """The first of the sorted, disjoint `markers` with `start <= position <= end` (two may touch at `position`)."""
    k = bisect_right(starts, position) - 1
    if k > 0 and markers[k - 1].end == position:
        return markers[k - 1]
    return markers[k] if k >= 0 and position <= markers[k].end else None


def _plan(answer: CitedAnswer) -> list[_Edit]:
    """Non-overlapping edits in text order; overlapping and nested spans are merged, never nested.

    Sorting and bisection only: linear (up to a log factor) in the number of spans and their sources.
    """
    n = len(answer.text)
    numbers = {s.number for s in answer.sources}
    markers: list[_Edit] = []
    for span in sorted((s for s in answer.spans if s.kind == 'marker'), key=lambda s: (s.start, s.end)):
        if not (0 <= span.start < span.end <= n):
            continue
        if not markers or span.start >= markers[-1].end:
            markers.append(_Edit(span.start, span.end))
        markers[-1].end = max(markers[-1].end, span.end)
        markers[-1].found.update(x for x in span.sources if x in numbers)
    starts = [m.start for m in markers]
    inserts: dict[int, _Edit] = {}
    for span in answer.spans:
        if span.kind == 'marker' or not (0 <= span.start < span.end <= n):
            continue
        target = _holding(markers, starts, span.end)
        if target is None:
            target = inserts.setdefault(span.end, _Edit(span.end, span.end))
        target.found.update(x for x in span.sources if x in numbers)
    # A marker naming no known source keeps its text: nothing the model wrote is dropped without a mark.
    edits = [e for e in [*markers, *inserts.values()] if e.found]
    edits.sort(key=lambda e: (e.start, e.end))
    for e in edits:
        e.sources = sorted(e.found)
    return edits


def _segments(text: str, plan: list[_Edit]) -> list[str | _Edit]:
    out: list[str | _Edit] = []
    pos = 0
    for edit in plan:
        if edit.start > pos:
            out.append(text[pos : edit.start])
        out.append(edit)
        pos = max(pos, edit.end)
    if pos < len(text):
        out.append(text[pos:])
    return out


def _anchored_numbers(plan: list[_Edit]) -> list[int]:
    return sorted({n for edit in plan for n in edit.sources})


class _Labels:
    """Each source's label, worked out once per rendering (a source may be marked many times)."""

    def __init__(self, schemes: frozenset[str]) -> None:
        self.schemes = schemes
        self._done: dict[int, _Label] = {}  # by `id(source)`: the sources live as long as the rendering

    def of(self, source: SourceRef) -> _Label:
        label = self._done.get(id(source))
        if label is None:
            label = self._done[id(source)] = _label(source, self.schemes)
        return label


def _prepare(
    where: str, answer: CitedAnswer, allowed_schemes: Sequence[str], redact: bool
) -> tuple[CitedAnswer, frozenset[str]]:
    require_answer(answer, where=where)
    schemes = _check_schemes(allowed_schemes)
    # Readers never see raw citation markup, whatever built the answer; each removal is a problem (see `_removed_note`).
    return _unplaced_listed(_redact(answer) if redact else clean_markup(answer)), schemes


def _unplaced_listed(answer: CitedAnswer) -> CitedAnswer:
    """`answer` with the sources of spans that fit no place in its text listed as sources used, if shown nowhere else.

    Answers loaded from JSON may hold anything; `CitedAnswer.from_messages` never makes such spans. A source a
    reader cannot see pinned is still listed, never dropped.
    """
    n = len(answer.text)
    bad = [s for s in answer.spans if not (0 <= s.start < s.end <= n)]
    if not bad:
        return answer
    by_number = {s.number: s for s in answer.sources}
    shown = {x for s in answer.spans if 0 <= s.start < s.end <= n for x in s.sources}
    shown.update(s.number for s in answer.unanchored)
    extra = dict.fromkeys(x for s in bad for x in s.sources if x in by_number and x not in shown)
    return replace(answer, unanchored=[*answer.unanchored, *(by_number[x] for x in extra)]) if extra else answer


def _removed_markup(original: CitedAnswer, shown: CitedAnswer) -> int:
    """How many pieces of citation markup `clean_markup` removed from the text shown."""
    return len(shown.problems) - len(original.problems)


_REMOVED_NOTE = 'citation markup the model left in the text was removed and recorded as problems'


# --------------------------------------------------------------------------------------------------------------------
# Markdown

# Labels never start a line, so line-start syntax (`#`, `-`, `1.`) needs no escape.
_MD_LABEL_SPECIAL = re.compile(r'([\\`*_\[\]()<>!|~&])')
_MD_BODY_SPECIAL = '[]<>'
_ASCII_PUNCT = frozenset('!"#$%&\'()*+,-./:;<=>?@[\\]^_`{|}~')
_MD_LINK_RE = re.compile(r'(?<![\\!])\[([^\[\]\\\n]{1,300})\]\(([^\s()<>\\]{1,2000})\)')
_MD_DEST_ENCODE = {c: f'%{ord(c):02X}' for c in '\\<>`()"\' ' + ''.join(map(chr, [*range(0x20), 0x7F]))}
# Model text right after a mark must not continue its syntax: `[^1](https://evil)` would read as a link to the
# model's destination, `[^1]: …` at a line start as a definition. Such a first character is escaped.
_MD_AFTER_MARK = frozenset('(:')


def _md_label(text: str) -> str:
    """Escape one-line text (titles, domains, excerpts) so it is plain text in Markdown."""
    return _MD_LABEL_SPECIAL.sub(r'\\\1', _clean_line(text, 10_000))


def _md_dest(url: str) -> str:
    """A checked URL as a Markdown link destination that nothing in it can end early or turn into other syntax.

    Backslashes, angle brackets, backticks, spaces, parentheses, quotes and control characters are percent-encoded
    (a backtick left in would let a code span swallow the link syntax and expose the rest of the URL as Markdown);
    an `&` that would read as an entity is escaped.
    """
    dest = ''.join(_MD_DEST_ENCODE.get(c, c) for c in url)
    return re.sub(r'&(?=#?[0-9A-Za-z]+;)', r'\\&', dest)


def _md_body_plain(text: str) -> str:
    """Escape model-written Markdown so it has no HTML, autolinks, images, links or reference definitions."""
    out: list[str] = []
    i = 0
    n = len(text)
    while i < n:
        c = text[i]
        if c == '\\':
            if i + 1 < n and text[i + 1] in _ASCII_PUNCT:
                out.append(text[i : i + 2])  # an existing escape stays an escape
                i += 2
                continue
            out.append('\\\\' if i + 1 == n else '\\')
        elif c in _MD_BODY_SPECIAL or (c == '!' and i + 1 == n):
            out.append('\\' + c)
        else:
            out.append(c)
        i += 1
    return _BAD_CHARS_RE.sub('\ufffd', ''.join(out))


def _md_body(text: str, schemes: frozenset[str]) -> str:
    """Model-written Markdown with its safe inline links kept and everything else escaped."""
    out: list[str] = []
    pos = 0
    for m in _MD_LINK_RE.finditer(text):
        href = _safe_url(m.group(2), schemes)
        if href is None:
            continue
        out.append(_md_body_plain(text[pos : m.start()]))
        out.append(f'[{_md_body_plain(m.group(1))}]({_md_dest(href)})')
        pos = m.end()
    out.append(_md_body_plain(text[pos:]))
    return ''.join(out)


_FENCE_RE = re.compile(r' {0,3}(`{3,}|~{3,})(.*)')
_TICKS_RE = re.compile(r'(?<!\\)`+')


def md_code(text: str) -> tuple[list[tuple[int, int, bool]], str | None]:
    """The code in model-written Markdown, as CommonMark reads it, and the fence a cut-off code block needs.

    Returns `(start, end, fenced)` regions in order, and the fence that closes a fenced block the text ends inside
    (`None` if it ends in none). One pass over the lines for fences, then one over the backtick runs outside them for
    code spans (a run of n backticks opens a span that the next run of exactly n closes; a run with no such partner
    is text).
    """
    regions: list[tuple[int, int, bool]] = []
    outside: list[tuple[int, int]] = []  # text between fenced blocks
    pos = start = 0
    fence: str | None = None  # the opening run of the block the line is in
    fence_start = 0
    for line in re.findall(r'[^\n]*\n|[^\n]+\Z', text):  # (lines end at `\n` only, as in CommonMark; `\r` is blank)
        found = _FENCE_RE.match(line)
        if fence is None:
            if found and not (found[1][0] == '`' and '`' in found[2]):
                fence, fence_start = found[1], pos
                outside.append((start, pos))
        elif found and found[1][0] == fence[0] and len(found[1]) >= len(fence) and not found[2].strip():
            regions.append((fence_start, pos + len(line), True))
            fence, start = None, pos + len(line)
        pos += len(line)
    if fence is not None:
        regions.append((fence_start, len(text), True))
    else:
        outside.append((start, len(text)))
    for lo, hi in outside:
        runs = [(m.start(), m.end()) for m in _TICKS_RE.finditer(text, lo, hi)]
        following: list[int | None] = [None] * len(runs)  # the next run of the same length, by index
        last: dict[int, int] = {}
        for k in range(len(runs) - 1, -1, -1):
            size = runs[k][1] - runs[k][0]
            following[k] = last.get(size)
            last[size] = k
        k = 0
        while k < len(runs):
            partner = following[k]
            if partner is None:
                k += 1
                continue
            regions.append((runs[k][0], runs[partner][1], False))
            k = partner + 1
    regions.sort()
    return regions, fence


def _marks_out_of_code(plan: list[_Edit], text: str, regions: list[tuple[int, int, bool]]) -> list[_Edit]:
    """`plan` with each mark placed inside code moved out of it, where Markdown shows it as a mark.

    Out of a code span to just after it, out of a fenced block to the end of the line before it. A replaced marker
    is left where it is (its text is the model's).
    """
    if not regions:
        return plan
    starts = [r[0] for r in regions]
    moved: dict[int, _Edit] = {}
    kept: list[_Edit] = []
    for edit in plan:
        k = bisect_right(starts, edit.start - 1) - 1  # the last region starting before the mark
        if edit.start != edit.end or k < 0 or not regions[k][0] < edit.start < regions[k][1]:
            kept.append(edit)
            continue
        start, end, fenced = regions[k]
        at = (start - 1 if start and text[start - 1] == '\n' else start) if fenced else end
        target = moved.setdefault(at, _Edit(at, at))
        target.found.update(edit.found)
    if not moved:
        return plan
    by_place = {e.start: e for e in kept if e.start == e.end}
    for at, edit in moved.items():
        if at in by_place:
            by_place[at].found.update(edit.found)
        else:
            kept.append(edit)
    for edit in kept:
        edit.sources = sorted(edit.found)
    kept.sort(key=lambda e: (e.start, e.end))
    return kept


def _md_source_line(source: SourceRef, labels: _Labels) -> str:
    label = labels.of(source)
    if label.href is not None:
        line = f'[{_md_label(label.text)}]({_md_dest(label.href)})'
    else:
        # Starts with `*`: never a valid link destination, even where `[^1]: ...` is read as a link definition.
        line = f'*{_md_label(label.text)}*'
    if label.note:
        line += f' ({_md_label(label.note)})'
    if label.excerpt:
        line += f' — “{_md_label(label.excerpt)}”'
    return line


def render_markdown(
    answer: CitedAnswer,
    style: Literal['inline', 'footnotes'] = 'inline',
    *,
    allowed_schemes: Sequence[str] = DEFAULT_ALLOWED_SCHEMES,
    redact: bool = False,
) -> str:
    """Render an answer as Markdown with its citations.

    Args:
        answer: The answer to render.
        style: `'inline'`: each mark is a link to its source (`[[1]](https://…)`); sources that cannot be linked
            (documents, disallowed URLs) are listed under "Sources". `'footnotes'`: marks are GFM footnotes (`[^1]`)
            with one definition per anchored source.
        allowed_schemes: URL schemes that may become links; anything else is shown as text.
        redact: Hide document excerpts first (see `redact`), for logs and stored reports.

    Returns:
        Markdown. Sources without a position are listed under "Sources used"; raw-only provider data is not shown.

    Raises:
        UserError: `answer` is not a `CitedAnswer`, `style` is not one of the two, `allowed_schemes` is not a list of
            safe schemes, or `redact` is not a bool.
    """
    if style not in ('inline', 'footnotes'):
        raise UserError(f'Unknown Markdown citation style {style!r}; use `"inline"` or `"footnotes"`.')
    require_bools('render_markdown', redact=redact)
    original = answer
    answer, schemes = _prepare('render_markdown', answer, allowed_schemes, redact)
    refs = {s.number: s for s in answer.sources}
    labels = _Labels(schemes)
    code, open_fence = md_code(answer.text)
    plan = _marks_out_of_code(_plan(answer), answer.text, code)  # (a mark in code is shown as code)
    body: list[str] = []
    for seg in _segments(answer.text, plan):
        if isinstance(seg, str):
            text = _md_body(seg, schemes)
            if body and text[:1] in _MD_AFTER_MARK:
                text = '\\' + text
            body.append(text)
            continue
        for number in seg.sources:
            if style == 'footnotes':
                body.append(f'[^{number}]')
                continue
            href = labels.of(refs[number]).href
            body.append(f'[[{number}]]({_md_dest(href)})' if href else f'\\[{number}\\]')
    blocks = [''.join(body).rstrip()]
    if open_fence is not None:  # the text ends in a code block (cut off): closed, or all that follows would be code
        blocks[0] += '\n' + open_fence
    if not answer.complete:
        blocks.append(
            '*⚠ This answer is incomplete: the response did not finish, so text and citations may be missing.*'
        )
    if removed := _removed_markup(original, answer):
        blocks.append(f'*Note: {removed} piece(s) of {_REMOVED_NOTE}.*')
    anchored = [refs[n] for n in _anchored_numbers(plan)]
    if style == 'footnotes' and anchored:
        blocks.append('\n'.join(f'[^{s.number}]: {_md_source_line(s, labels)}' for s in anchored))
    elif style == 'inline':
        unlinked = [s for s in anchored if labels.of(s).href is None]
        if unlinked:
            lines = '\n'.join(f'- \\[{s.number}\\] {_md_source_line(s, labels)}' for s in unlinked)
            blocks.append(f'**Sources**\n\n{lines}')
    if answer.unanchored:
        lines = '\n'.join(f'- \\[{s.number}\\] {_md_source_line(s, labels)}' for s in answer.unanchored)
        blocks.append(f'**Sources used**\n\n{lines}')
    return '\n\n'.join(b for b in blocks if b) + '\n'


# --------------------------------------------------------------------------------------------------------------------
# HTML


def _h(text: str) -> str:
    return html.escape(_BAD_CHARS_RE.sub('\ufffd', text), quote=True)


def _html_mark(number: int, label: _Label) -> str:
    tip = label.text + (f' ({label.note})' if label.note else '')
    href = label.href if label.href is not None else f'#cite-source-{number}'
    extra = f' rel="{_REL}" target="_blank"' if label.href is not None else ''
    return f'<a class="cite-mark" href="{_h(href)}"{extra} title="{_h(tip)}">[{number}]</a>'


def _html_source_item(source: SourceRef, labels: _Labels) -> str:
    label = labels.of(source)
    if label.href is not None:
        main = f'<a href="{_h(label.href)}" rel="{_REL}" target="_blank">{_h(label.text)}</a>'
    else:
        main = f'<span class="cite-title">{_h(label.text)}</span>'
    note = f' <span class="cite-note" style="color:#555">({_h(label.note)})</span>' if label.note else ''
    excerpt = (
        f'<blockquote class="cite-excerpt" style="margin:0.25em 0 0.5em 1em;color:#444">{_h(label.excerpt)}</blockquote>'
        if label.excerpt
        else ''
    )
    return f'<li value="{source.number}" id="cite-source-{source.number}">{main}{note}{excerpt}</li>'


def render_html(
    answer: CitedAnswer,
    *,
    allowed_schemes: Sequence[str] = DEFAULT_ALLOWED_SCHEMES,
    redact: bool = False,
    document: bool = False,
) -> str:
    """Render an answer as an HTML fragment (or a standalone page) with its citations.

    All text is escaped; links only for `allowed_schemes`, each with `rel="noopener noreferrer nofollow"`; no remote
    resources and no scripts; inline CSS only. Marks sit after the supported words (content anchors) or replace the
    marker the model wrote (marker anchors) and link to the source, or to its entry in the list below when it has no
    allowed URL. Sources without a position are listed under "Sources used".

    Args:
        answer: The answer to render.
        allowed_schemes: URL schemes that may become links; anything else is shown as text.
        redact: Hide document excerpts first (see `redact`), for logs and stored reports.
        document: Return a complete HTML page with a Content-Security-Policy that forbids scripts and remote loads.

    Raises:
        UserError: `answer` is not a `CitedAnswer`, `allowed_schemes` is not a list of safe schemes, or `redact` /
            `document` is not a bool.
    """
    require_bools('render_html', redact=redact, document=document)
    original = answer
    answer, schemes = _prepare('render_html', answer, allowed_schemes, redact)
    refs = {s.number: s for s in answer.sources}
    labels = _Labels(schemes)
    plan = _plan(answer)
    body: list[str] = []
    for seg in _segments(answer.text, plan):
        if isinstance(seg, str):
            body.append(_h(seg))
        else:
            marks = ''.join(_html_mark(n, labels.of(refs[n])) for n in seg.sources)
            body.append(f'<sup class="cite">{marks}</sup>')
    out = [
        '<article class="cited-answer" style="font-family:system-ui,sans-serif;line-height:1.5;max-width:48em">',
        f'<div class="cited-answer-text" style="white-space:pre-wrap">{"".join(body)}</div>',
    ]
    if not answer.complete:
        out.append(
            '<p class="cited-answer-incomplete" role="status" style="color:#8a4b00">'
            '⚠ This answer is incomplete: the response did not finish, so text and citations may be missing.</p>'
        )
    if removed := _removed_markup(original, answer):
        out.append(
            f'<p class="cited-answer-markup-removed" role="note">Note: {removed} piece(s) of {_REMOVED_NOTE}.</p>'
        )
    anchored = [refs[n] for n in _anchored_numbers(plan)]
    if anchored:
        items = ''.join(_html_source_item(s, labels) for s in anchored)
        out.append(
            '<section class="cited-answer-sources"><h2 style="font-size:1em">Sources</h2>'
            f'<ol style="padding-left:2em">{items}</ol></section>'
        )
    if answer.unanchored:
        items = ''.join(_html_source_item(s, labels) for s in answer.unanchored)
        out.append(
            '<section class="cited-answer-sources-used"><h2 style="font-size:1em">Sources used</h2>'
            f'<ol style="padding-left:2em">{items}</ol></section>'
        )
    out.append('</article>')
    fragment = '\n'.join(out) + '\n'
    if not document:
        return fragment
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta http-equiv="Content-Security-Policy" content="default-src \'none\'; style-src \'unsafe-inline\'">'
        '<meta name="referrer" content="no-referrer"><title>Answer</title></head>\n'
        f'<body style="margin:1.5em">\n{fragment}</body></html>\n'
    )
