"""Audit reports over many answers: Markdown, standalone HTML (inline SVG curve, no external assets) and JSON.

Every string that came from a provider or a page (titles, URLs, claims, passages, reasons) is escaped: HTML
with `html.escape`, Markdown table cells with their pipes, backticks and angle brackets neutralised. Links are
only made for `http`/`https` URLs.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from dataclasses import dataclass

from pydantic import TypeAdapter

from .._answer import CitedAnswer
from .._problems import shorten
from ._claims import DEFAULT_MIN_CLAIM_WORDS
from ._decode import DEFAULT_MAX_BYTES
from ._passages import DEFAULT_MIN_PASSAGE_WORDS
from ._report import (
    VERDICTS,
    CitationCheck,
    Pages,
    SupportReport,
    SupportSummary,
    check_lexical,
    page_cache,
    summarize,
)
from ._terms import StemCache

__all__ = ('AuditReport', 'audit', 'audit_report_ta', 'audit_to_html', 'audit_to_markdown')


@dataclass(frozen=True)
class AuditedAnswer:
    """One answer of an audit and its support report."""

    text: str
    """The answer text."""
    provider_name: str | None
    """Who answered."""
    model_name: str | None
    """Which model answered."""
    report: SupportReport
    """Its support check."""


@dataclass(frozen=True)
class AuditReport:
    """Support checks of several answers, with one summary over all of them."""

    answers: list[AuditedAnswer]
    """Per answer, in input order."""
    summary: SupportSummary
    """Aggregates over every check of every answer."""
    threshold: float
    """Score at or above which a claim counts as supported."""


audit_report_ta: TypeAdapter[AuditReport] = TypeAdapter(AuditReport)
"""JSON round trip for audit reports."""


def audit(
    answers: Sequence[CitedAnswer],
    pages: Pages,
    *,
    threshold: float = 0.6,
    weak_threshold: float = 0.3,
    language: str | None = None,
) -> AuditReport:
    """Check every answer against `pages` with the lexical judge and summarise over all of them."""
    audited: list[AuditedAnswer] = []
    checks: list[CitationCheck] = []
    counts: dict[str, int] = {}
    incomplete = not_checked = 0
    cache = page_cache()  # each page is split once, not once per answer citing it
    stems = StemCache()  # and each word stemmed once
    for answer in answers:
        report = check_lexical(
            answer,
            pages,
            threshold=threshold,
            weak_threshold=weak_threshold,
            judge=None,
            language=language,
            min_passage_words=DEFAULT_MIN_PASSAGE_WORDS,
            min_claim_words=DEFAULT_MIN_CLAIM_WORDS,
            max_bytes=DEFAULT_MAX_BYTES,
            page_cache=cache,
            stems=stems,
        )
        audited.append(AuditedAnswer(answer.text, answer.provider_name, answer.model_name, report))
        checks.extend(report.checks)
        counts.update(report.page_passages)
        incomplete += not report.complete
        not_checked += len(report.not_checked)
    summary = summarize(checks, list(counts.values()), incomplete_answers=incomplete, not_checked=not_checked)
    return AuditReport(audited, summary, threshold)


def _short(text: str, limit: int = 160) -> str:
    return shorten(' '.join(text.split()), limit)


def _md(text: str, limit: int = 160) -> str:
    """A Markdown table cell: no pipes, backticks, angle brackets or newlines can break out of it."""
    out = _short(text, limit)
    for old, new in (
        ('\\', '\\\\'),
        ('|', '\\|'),
        ('`', '\\`'),
        ('<', '&lt;'),
        ('>', '&gt;'),
        ('[', '\\['),
        (']', '\\]'),
    ):
        out = out.replace(old, new)
    return out


def _fmt(value: float | None, digits: int = 2) -> str:
    return '–' if value is None else f'{value:.{digits}f}'


def _source_label(check: CitationCheck) -> str:
    return check.title or check.url or check.document_id or f'source {check.source}'


def unchecked_notes(summary: SupportSummary) -> list[str]:
    """Sentences on what the checks do not cover: answers that did not complete, and audit-only citations."""
    notes: list[str] = []
    if summary.incomplete_answers:
        notes.append(
            f'{summary.incomplete_answers} answer(s) did not complete (cut off): their text and citations may be '
            'missing, and only what arrived was checked.'
        )
    if summary.not_checked:
        notes.append(
            f'{summary.not_checked} audit-only citation(s) (raw provider data with no position) are listed with their '
            'answers, not checked.'
        )
    return notes


def _answer_notes(report: SupportReport) -> list[str]:
    """What one answer's section says besides its checks: that it did not complete, its audit-only citations."""
    notes = [] if report.complete else ['Incomplete: the answer did not complete; text and citations may be missing.']
    notes += [f'Audit-only citation (not checked): {raw.reason}.' for raw in report.not_checked]
    return notes


def markdown_head(answers: int, summary: SupportSummary) -> str:
    """The Markdown audit up to the per-answer sections: summary, threshold curve, dead links."""
    s = summary
    lines = ['# Citation support audit', '']
    lines.append(f'{answers} answer(s), {s.checks} citation check(s), {s.scored} scored.')
    lines += [f'{note}' for note in unchecked_notes(s)]
    lines.append('')
    lines += ['| verdict | count |', '|---|---|']
    lines += [f'| {v} | {s.verdicts.get(v, 0)} |' for v in VERDICTS]
    lines += ['', '## Threshold curve', '', '| threshold | supported | |', '|---|---|---|']
    for point in s.threshold_curve:
        bar = '█' * round(point.supported_share * 20)
        lines.append(f'| {point.threshold:.1f} | {point.supported_share:.0%} | {bar} |')
    lines.append('')
    lines.append(f'Median passages per page: {_fmt(s.median_passages_per_page, 1)}.')
    if s.matched_length_quartiles:
        q1, q2, q3 = s.matched_length_quartiles
        lines.append(f'Matched passage length (words): Q1 {q1:g}, median {q2:g}, Q3 {q3:g}.')
    if s.position_thirds:
        top, middle, bottom = s.position_thirds
        lines.append(f'Matches by page third: top {top:.0%}, middle {middle:.0%}, bottom {bottom:.0%}.')
    lines += ['', '## Dead links', '']
    lines += [f'- {_md(link, 300)}' for link in s.dead_links] or ['None.']
    return '\n'.join(lines) + '\n'


def markdown_answer(n: int, answered: AuditedAnswer) -> str:
    """The Markdown section of answer number `n` (1-based)."""
    who = ' / '.join(x for x in (answered.provider_name, answered.model_name) if x)
    lines = ['', f'## Answer {n}' + (f' ({_md(who, 80)})' if who else ''), '', f'> {_md(answered.text, 300)}', '']
    notes = _answer_notes(answered.report)
    lines += [f'- {_md(note, 400)}' for note in notes] + ([''] if notes else [])
    if not answered.report.checks:
        lines.append('No citations checked.' if answered.report.not_checked else 'No citations.')
        return '\n'.join(lines) + '\n'
    lines += [
        '| # | source | claim | kind | verdict | score | position | passage |',
        '|---|---|---|---|---|---|---|---|',
    ]
    for c in answered.report.checks:
        passage = _md(c.passage.text, 120) if c.passage else ''
        lines.append(
            f'| {c.source} | {_md(_source_label(c), 60)} | {_md(c.claim, 120)} | {c.claim_kind} | {c.verdict} '
            f'| {_fmt(c.score)} | {_fmt(c.position)} | {passage} |'
        )
    return '\n'.join(lines) + '\n'


def audit_to_markdown(report: AuditReport) -> str:
    """The audit as Markdown: summary, threshold curve (table with bars), dead links, one table per answer."""
    parts = [markdown_head(len(report.answers), report.summary)]
    parts += [markdown_answer(n, answered) for n, answered in enumerate(report.answers, 1)]
    return ''.join(parts)


def _svg_curve(summary: SupportSummary) -> str:
    """The threshold curve as an inline SVG line chart (x: threshold, y: share supported)."""
    width, height, pad = 480, 260, 40
    plot_w, plot_h = width - 2 * pad, height - 2 * pad

    def x(t: float) -> float:
        return pad + t * plot_w

    def y(v: float) -> float:
        return pad + (1 - v) * plot_h

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}" '
        'role="img" aria-label="Share of citations supported at each score threshold">',
        f'<rect x="{pad}" y="{pad}" width="{plot_w}" height="{plot_h}" fill="#fafafa" stroke="#ccc"/>',
    ]
    for tick in (0.0, 0.25, 0.5, 0.75, 1.0):
        parts.append(f'<line x1="{pad}" x2="{width - pad}" y1="{y(tick):.1f}" y2="{y(tick):.1f}" stroke="#eee"/>')
        parts.append(f'<text x="{pad - 6}" y="{y(tick) + 4:.1f}" font-size="11" text-anchor="end">{tick:.0%}</text>')
    for point in summary.threshold_curve:
        parts.append(
            f'<text x="{x(point.threshold):.1f}" y="{height - pad + 16}" font-size="11" text-anchor="middle">'
            f'{point.threshold:.1f}</text>'
        )
    coords = ' '.join(f'{x(p.threshold):.1f},{y(p.supported_share):.1f}' for p in summary.threshold_curve)
    parts.append(f'<polyline points="{coords}" fill="none" stroke="#2563eb" stroke-width="2"/>')
    for p in summary.threshold_curve:
        parts.append(
            f'<circle cx="{x(p.threshold):.1f}" cy="{y(p.supported_share):.1f}" r="3.5" fill="#2563eb">'
            f'<title>threshold {p.threshold:.1f}: {p.supported_share:.0%} supported</title></circle>'
        )
    parts.append(
        f'<text x="{width / 2:.0f}" y="{height - 6}" font-size="12" text-anchor="middle">score threshold</text>'
    )
    parts.append('</svg>')
    return ''.join(parts)


def _link(url: str | None, label: str) -> str:
    text = html.escape(label)
    if url and url.lower().startswith(('http://', 'https://')):
        return f'<a href="{html.escape(url, quote=True)}" rel="noopener noreferrer nofollow">{text}</a>'
    return text


_CSS = """
body{font:14px/1.45 system-ui,sans-serif;margin:2em auto;max-width:72em;color:#111;padding:0 1em}
table{border-collapse:collapse;margin:1em 0;width:100%}th,td{border:1px solid #ddd;padding:4px 6px;
vertical-align:top;text-align:left}th{background:#f3f3f3}blockquote{color:#444;border-left:3px solid #ccc;
margin:0;padding-left:1em}.supported{background:#e7f7e7}.weak{background:#fff7dd}.unsupported{background:#fde8e8}
.unreachable,.unreadable{background:#eee}.num{text-align:right;white-space:nowrap}
"""


def html_head(answers: int, summary: SupportSummary, threshold: float) -> str:
    """The HTML audit up to the per-answer sections (the page is closed by `HTML_FOOT`)."""
    s = summary
    out = [
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">',
        '<title>Citation support audit</title>',
        f'<style>{_CSS}</style></head><body>',
        '<h1>Citation support audit</h1>',
        f'<p>{answers} answer(s), {s.checks} citation check(s), {s.scored} scored; '
        f'supported at score ≥ {threshold:g}.</p>',
        *(f'<p>{html.escape(note)}</p>' for note in unchecked_notes(s)),
        '<table><tr><th>verdict</th><th>count</th></tr>',
    ]
    out += [f'<tr><td>{v}</td><td class="num">{s.verdicts.get(v, 0)}</td></tr>' for v in VERDICTS]
    out.append('</table><h2>Threshold curve</h2>')
    out.append(_svg_curve(s))
    stats = [f'Median passages per page: {_fmt(s.median_passages_per_page, 1)}.']
    if s.matched_length_quartiles:
        q1, q2, q3 = s.matched_length_quartiles
        stats.append(f'Matched passage length (words): Q1 {q1:g}, median {q2:g}, Q3 {q3:g}.')
    if s.position_thirds:
        top, middle, bottom = s.position_thirds
        stats.append(f'Matches by page third: top {top:.0%}, middle {middle:.0%}, bottom {bottom:.0%}.')
    out += [f'<p>{html.escape(line)}</p>' for line in stats]
    out.append('<h2>Dead links</h2>')
    if s.dead_links:
        out.append('<ul>' + ''.join(f'<li>{html.escape(link)}</li>' for link in s.dead_links) + '</ul>')
    else:
        out.append('<p>None.</p>')
    return '\n'.join(out) + '\n'


def html_answer(n: int, answered: AuditedAnswer) -> str:
    """The HTML section of answer number `n` (1-based)."""
    who = ' / '.join(x for x in (answered.provider_name, answered.model_name) if x)
    out = [f'<h2>Answer {n}' + (f' ({html.escape(who)})' if who else '') + '</h2>']
    out.append(f'<blockquote>{html.escape(_short(answered.text, 600))}</blockquote>')
    notes = _answer_notes(answered.report)
    if notes:
        out.append('<ul>' + ''.join(f'<li>{html.escape(_short(note, 400))}</li>' for note in notes) + '</ul>')
    if not answered.report.checks:
        out.append('<p>No citations checked.</p>' if answered.report.not_checked else '<p>No citations.</p>')
        return '\n'.join(out) + '\n'
    out.append(
        '<table><tr><th>#</th><th>source</th><th>claim</th><th>kind</th><th>verdict</th><th>score</th>'
        '<th>position</th><th>best passage</th><th>reason</th></tr>'
    )
    for c in answered.report.checks:
        passage = html.escape(_short(c.passage.text, 240)) if c.passage else ''
        out.append(
            f'<tr class="{c.verdict}"><td class="num">{c.source}</td><td>{_link(c.url, _source_label(c))}</td>'
            f'<td>{html.escape(_short(c.claim, 240))}</td><td>{c.claim_kind}</td><td>{c.verdict}</td>'
            f'<td class="num">{_fmt(c.score)}</td><td class="num">{_fmt(c.position)}</td><td>{passage}</td>'
            f'<td>{html.escape(c.reason)}</td></tr>'
        )
    out.append('</table>')
    return '\n'.join(out) + '\n'


HTML_FOOT = '</body></html>\n'
"""The end of an HTML audit page."""


def audit_to_html(report: AuditReport) -> str:
    """The audit as one standalone HTML page (inline CSS and SVG, no scripts, no external assets)."""
    parts = [html_head(len(report.answers), report.summary, report.threshold)]
    parts += [html_answer(n, answered) for n, answered in enumerate(report.answers, 1)]
    return ''.join(parts) + HTML_FOOT
