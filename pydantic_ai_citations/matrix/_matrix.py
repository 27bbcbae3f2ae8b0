"""`CapabilityMatrix`: what each provider API does with citations, measured, with the evidence behind every cell.

Observations come from four kinds of evidence: built-in probes over the package's wire fixtures (`'probe'`),
recordings (`'recording'`), live providers (`'live'`), and a user's own runs through `TrackCitations(matrix=...)`
(`'observed'`). Each observation is one value for one cell; the matrix counts them per value and evidence. Merging
is a sum of counts, so it is deterministic whatever the order observations arrive in, and safe under concurrent
runs (one lock around the counts).

JSON schema (`to_json()`, `SCHEMA_VERSION` 1):

```
{"schema": "pydantic-ai-citations/capability-matrix", "version": 1,
 "columns": [{"key", "title", "description", "values": {value: meaning}}],
 "rows": [{"api", "title", "family"?, "models": [str], "failures": [{"evidence", "source", "reason"}],
           "cells": {column key: {"value": str, "evidence": {evidence: {value: runs}}, "notes": [str]}}}],
 "unusable_inputs": [{"evidence", "source", "reason"}]}
```

`family` is present only on a row for one model family or gateway of an API (e.g. Bedrock's `"anthropic"` and
`"meta"` rows, whose models answer differently; `"via HOST"` for a gateway probed live); a row without it holds all
of the API's runs.

`unusable_inputs` lists the inputs a user named (recording files or folders, `--live` models) that could not be
used at all -- missing, malformed, an unknown provider, no API key -- with the reason (absent in older files).

A cell's `value` is the single value seen, values joined by `' / '` when runs disagree (e.g. Google's
`'after_part_end / response_end'`), or `'n/a'` when nothing could be measured (its `notes` say why).
"""

from __future__ import annotations

import html
import json
import re
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import TypeAdapter

from .._models import API_LABELS, API_TITLES, ApiLabel, family_title, model_family
from .._render import md_code
from .._track import RequestObservation

__all__ = (
    'COLUMNS',
    'EVIDENCE',
    'SCHEMA_VERSION',
    'API_TITLES',
    'CapabilityMatrix',
    'Column',
    'Evidence',
    'Failure',
    'MatrixRow',
)

SCHEMA_VERSION = 1

Evidence = Literal['probe', 'recording', 'live', 'observed']
"""Where a value came from: built-in probes, recordings, live providers, or a user's own runs."""

EVIDENCE: tuple[Evidence, ...] = ('probe', 'recording', 'live', 'observed')


@dataclass(frozen=True)
class Column:
    """One column of the matrix and the meaning of each value it can hold."""

    key: str
    title: str
    description: str
    values: dict[str, str]


COLUMNS: tuple[Column, ...] = (
    Column(
        'citations',
        'Produces citations',
        'Whether Pydantic AI ends up with citations on the answer text, and whether the request has to ask for them '
        '(`Citations()` changes what is sent).',
        {
            'yes': 'cites whenever its tools or grounding produce sources; asking changes nothing on the wire',
            'recovered': 'Pydantic AI maps none; this package recovers them from raw data (`TrackCitations`)',
            'when asked': 'cites; asking for citations (`Citations()`) changes the request (e.g. documents get '
            '`citations.enabled`)',
            'no': 'never produced normalised citations, even when the wire held citation data',
        },
    ),
    Column(
        'anchor',
        'Anchor',
        'What a citation points at in the text.',
        {
            'content': 'the supported words (`ContentCitationAnchor`)',
            'marker': 'a marker the model wrote, e.g. `[1]` or a markdown link (`MarkerCitationAnchor`)',
            'none': 'no position: show as a "sources used" card',
            'mixed': 'more than one of the above',
        },
    ),
    Column(
        'sources',
        'Source kinds',
        'Kinds of sources cited.',
        {
            'web': 'URLs',
            'document': 'documents (uploaded files, file search, retrieved context)',
            'web+document': 'both',
            'none': 'no sources seen',
        },
    ),
    Column(
        'stream',
        'Stream arrival',
        "When a streamed text part's citations arrive.",
        {
            'part_end': "in a citations-only delta before the part's `PartEndEvent`",
            'after_part_end': "after the part's `PartEndEvent` (another part had started): keep listening",
            'response_end': 'before `PartEndEvent`, but only once the whole response finished',
            'with_text': 'together with text',
        },
    ),
    Column(
        'replay',
        'Replayed to same provider',
        'Whether citations are sent back when the history is replayed to the same provider (from the outgoing '
        'request body).',
        {
            'yes': 'sent back even after the text was edited',
            'only when untouched': 'sent back only while the cited text is unchanged',
            'no': 'never sent back; the provider gets plain text',
        },
    ),
    Column(
        'handoff',
        'Another provider receives',
        'What another provider receives when this answer is in the history sent to it.',
        {
            'plain text': 'plain text without citation data or markers',
            'raw markers in text': "the text with this provider's citation markers / links still in it",
            'text + citation data': 'the text plus citation data',
        },
    ),
    Column(
        'structured',
        'With structured output',
        'With a structured `output_type` and `Citations()`: are citations still asked for, and does citation markup '
        'reach tool arguments?',
        {
            'not requested': 'Pydantic AI silently stops asking for citations (this package records '
            '`citations_disabled_by_output_mode`)',
            'no switch': 'the API has no citations switch; it cites whenever it searches',
            'requested': 'still asked for',
        },
    ),
    Column(
        'wire',
        'Wire accounting',
        "The provider's own citation objects in the response bodies, and what became of each: normalised by Pydantic "
        'AI, recovered by this package, or listed with a reason (raw-only / unmapped).',
        {
            '100%': 'every wire citation is normalised, recovered or listed with a reason',
            'no wire citations': 'the responses held no citation objects',
        },
    ),
)

_COLUMN_KEYS = tuple(c.key for c in COLUMNS)


@dataclass(frozen=True)
class Failure:
    """A source of evidence that could not be used for a row (bad recording, unknown provider, rejected fixture)."""

    evidence: Evidence
    source: str
    reason: str


@dataclass
class _Row:
    api: ApiLabel
    family: str = ''
    models: set[str] = field(default_factory=set[str])
    counts: dict[tuple[str, Evidence, str], int] = field(default_factory=dict[tuple[str, Evidence, str], int])
    notes: dict[str, list[str]] = field(default_factory=dict[str, list[str]])
    failures: list[Failure] = field(default_factory=list[Failure])

    def empty(self) -> bool:
        return not (self.models or self.counts or self.notes or self.failures)


Family = str | tuple[str, ...] | None
"""Which runs of an API a read covers: one model family, several (a shown row's `families`), or `None`: all."""


@dataclass(frozen=True)
class MatrixRow:
    """One row as shown: a provider API, or one model family (or gateway) of it where their behaviour differs."""

    api: ApiLabel
    family: str | None
    """The model family (`'anthropic'`, `'meta'`, ...) or gateway (`'via HOST'`) the row is for; `None`: the API."""
    title: str
    """The row's name for people, e.g. `'Bedrock Converse (Meta Llama)'`."""
    families: tuple[str, ...]
    """The families whose runs the row shows (several that agree on every cell are shown as one row)."""


class CapabilityMatrix:
    """Rows per provider API (per model family where it matters); each cell a value plus the evidence behind it.

    Fill it with `add(...)`, with `TrackCitations(matrix=matrix)` (observed evidence from real runs), or with the
    probes in `pydantic_ai_citations.matrix` (`build_matrix`). Safe to share between concurrent runs.

    Runs are kept per API and model family (read from the model id: on Bedrock, Anthropic models cite documents and
    other families do not). An API whose families agree on every cell is shown as one row; otherwise each family is its
    own row. A gateway in front of a provider (`'via HOST'`, from `--live URL#MODEL`) is always its own row.
    """

    def __init__(self) -> None:
        self._rows: dict[tuple[ApiLabel, str], _Row] = {}
        self._unusable: list[Failure] = []
        self._lock = threading.Lock()
        self._family: str | None = None

    def __getstate__(self) -> dict[str, object]:
        # Picklable (e.g. sent back by the process that probed half the rows): everything but the lock.
        with self._lock:
            return {'rows': self._rows, 'unusable': self._unusable, 'family': self._family}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self._rows, self._unusable, self._family = state['rows'], state['unusable'], state['family']
        self._lock = threading.Lock()

    def for_family(self, family: str) -> CapabilityMatrix:
        """A view of this matrix (same rows, same lock) whose calls default to one model family's runs."""
        view = CapabilityMatrix.__new__(CapabilityMatrix)
        view._rows, view._unusable, view._lock, view._family = self._rows, self._unusable, self._lock, family
        return view

    # --- filling -------------------------------------------------------------------------------------------------

    def add(
        self, api: ApiLabel, column: str, value: str, evidence: Evidence, *, runs: int = 1, family: str | None = None
    ) -> None:
        """Count `runs` observations of `value` for one cell."""
        if column not in _COLUMN_KEYS:
            raise ValueError(f'Unknown matrix column {column!r}; expected one of {", ".join(_COLUMN_KEYS)}.')
        with self._lock:
            row = self._row(api, self._fill_family(family))
            key = (column, evidence, value)
            row.counts[key] = row.counts.get(key, 0) + runs

    def note(self, api: ApiLabel, column: str, text: str, *, family: str | None = None) -> None:
        """Attach an explanation to a cell (why it cannot apply, wire accounting details, …)."""
        with self._lock:
            notes = self._row(api, self._fill_family(family)).notes.setdefault(column, [])
            if text not in notes:
                notes.append(text)

    def add_model(self, api: ApiLabel, model_name: str, *, family: str | None = None) -> None:
        """Record a model name seen for a row (its family read from the name unless given)."""
        if model_name:
            if family is None and self._family is None:
                family = model_family(api, model_name)
            with self._lock:
                self._row(api, self._fill_family(family)).models.add(model_name)

    def fail(self, api: ApiLabel, evidence: Evidence, source: str, reason: str, *, family: str | None = None) -> None:
        """Record that a source of evidence failed for a row; the rest of the matrix is still produced."""
        with self._lock:
            self._row(api, self._fill_family(family)).failures.append(Failure(evidence, source, reason))

    def unusable(self, evidence: Evidence, source: str, reason: str) -> None:
        """Record that an input the user named (a recording, a live model) could not be used at all, and why."""
        with self._lock:
            failure = Failure(evidence, source, reason)
            if failure not in self._unusable:
                self._unusable.append(failure)

    def ensure_row(self, api: ApiLabel, *, family: str | None = None) -> None:
        """Make sure a row exists, even with nothing measured yet."""
        with self._lock:
            self._row(api, self._fill_family(family))

    def add_observation(self, observation: RequestObservation) -> None:
        """Called by `TrackCitations(matrix=...)` for each request: a user's real run becomes `'observed'` evidence."""
        self.observe(observation, 'observed')

    def observe(self, observation: RequestObservation, evidence: Evidence, *, family: str | None = None) -> None:
        """Fill the cells a single request observation can tell: citations, anchor, sources, stream arrival."""
        api = observation.api
        if family is None:
            family = self._family if self._family is not None else model_family(api, observation.model_name)
        self.add_model(api, observation.model_name, family=family)
        cited = [p for p in observation.parts if p.citations]
        if not observation.complete:
            self.note(api, 'stream', f'an incomplete {evidence} run was left out', family=family)
            return
        if not observation.text_output:
            return
        if cited:
            if evidence in ('observed', 'live'):  # probes and recordings decide 'yes' / 'when asked' themselves
                self.add(api, 'citations', 'yes', evidence, family=family)
            self.add(api, 'anchor', _anchor_value({k for p in cited for k in p.anchor_kinds}), evidence, family=family)
            self.add(
                api, 'sources', _sources_value({k for p in cited for k in p.source_kinds}), evidence, family=family
            )
            if observation.streamed:
                for arrival in sorted({p.arrival for p in cited}):
                    self.add(api, 'stream', arrival, evidence, family=family)

    def merge(self, other: CapabilityMatrix) -> CapabilityMatrix:
        """A new matrix holding both matrices' observations (counts add up; order does not matter)."""
        out = CapabilityMatrix()
        for source in (self, other):
            with source._lock:
                for (api, family), row in source._rows.items():
                    target = out._row(api, family)
                    target.models |= row.models
                    for key, n in row.counts.items():
                        target.counts[key] = target.counts.get(key, 0) + n
                    for column, notes in row.notes.items():
                        existing = target.notes.setdefault(column, [])
                        existing.extend(n for n in notes if n not in existing)
                    target.failures.extend(row.failures)
                out._unusable.extend(f for f in source._unusable if f not in out._unusable)
        return out

    # --- reading -------------------------------------------------------------------------------------------------

    @property
    def apis(self) -> list[ApiLabel]:
        """The provider APIs with a row, in the fixed order of `API_LABELS`."""
        with self._lock:
            present = {api for api, _ in self._rows}
        return [api for api in API_LABELS if api in present]

    @property
    def rows(self) -> list[MatrixRow]:
        """The rows as shown: one per API, or one per model family where the families' cells differ."""
        out: list[MatrixRow] = []
        for api in self.apis:
            with self._lock:
                stored = {f: r for (a, f), r in self._rows.items() if a == api}
            families = sorted(f for f, r in stored.items() if not r.empty()) or sorted(stored)
            models = [f for f in families if not f.startswith('via ')]
            if len(models) > 1 and len({self._signature(api, f) for f in models}) > 1:
                out.extend(MatrixRow(api, f, _title(api, f), (f,)) for f in models)
            elif models:
                shown = models[0] if len(models) == 1 and models[0] else None
                out.append(MatrixRow(api, shown, _title(api, shown), tuple(models)))
            out.extend(MatrixRow(api, f, _title(api, f), (f,)) for f in families if f.startswith('via '))
        return out

    def _signature(self, api: ApiLabel, family: str) -> tuple[str, ...]:
        return tuple(self.cell(api, c.key, family=family) for c in COLUMNS)

    def _selected(self, api: ApiLabel, family: Family) -> list[_Row]:
        """The stored rows a read covers (call with the lock held): some families, or all of the API's."""
        if family is None:
            family = self._family
        wanted = (family,) if isinstance(family, str) else family
        return [r for (a, f), r in self._rows.items() if a == api and (wanted is None or f in wanted)]

    def cell(
        self, api: ApiLabel, column: str, *, evidence: Iterable[Evidence] = EVIDENCE, family: Family = None
    ) -> str:
        """The cell's value from the given evidence: one value, values joined by `' / '`, or `'n/a'`.

        `family` reads one model family's runs (or several: a shown row's `families`); by default, all of the API's.
        """
        values = sorted(self.values(api, column, evidence=evidence, family=family))
        return combine(column, values) if values else 'n/a'

    def values(
        self, api: ApiLabel, column: str, *, evidence: Iterable[Evidence] = EVIDENCE, family: Family = None
    ) -> set[str]:
        """The distinct values runs gave for a cell, before they are combined into one."""
        wanted = set(evidence)
        with self._lock:
            return {v for r in self._selected(api, family) for (c, e, v) in r.counts if c == column and e in wanted}

    def evidence(self, api: ApiLabel, column: str, *, family: Family = None) -> dict[Evidence, dict[str, int]]:
        """Runs behind each value of a cell, per evidence."""
        totals: dict[tuple[str, Evidence, str], int] = {}
        with self._lock:
            for row in self._selected(api, family):
                for key, n in row.counts.items():
                    totals[key] = totals.get(key, 0) + n
        out: dict[Evidence, dict[str, int]] = {}
        for (c, e, v), n in sorted(totals.items()):
            if c == column:
                out.setdefault(e, {})[v] = n
        return {e: out[e] for e in EVIDENCE if e in out}

    @property
    def unusable_inputs(self) -> list[Failure]:
        """The inputs a user named that could not be used at all (missing or malformed recordings, unknown models)."""
        with self._lock:
            return list(self._unusable)

    def failures(self, api: ApiLabel, *, family: Family = None) -> list[Failure]:
        """What could not be used for a row."""
        with self._lock:
            return [f for row in self._selected(api, family) for f in row.failures]

    def _shown(self, row: MatrixRow) -> tuple[list[str], dict[str, list[str]], list[Failure]]:
        """Models, notes per column and failures of a shown row (its families' together)."""
        models: set[str] = set()
        notes: dict[str, list[str]] = {}
        failures: list[Failure] = []
        with self._lock:
            for family in row.families:
                stored = self._rows[row.api, family]  # rows are never removed
                models |= stored.models
                for column, texts in stored.notes.items():
                    existing = notes.setdefault(column, [])
                    existing.extend(t for t in texts if t not in existing)
                failures.extend(stored.failures)
        return sorted(models), notes, failures

    def to_dict(self) -> dict[str, object]:
        """The stable JSON-ready form (see the module docstring)."""
        rows: list[dict[str, object]] = []
        for row in self.rows:
            models, notes, failures = self._shown(row)
            cells: dict[str, object] = {}
            for column in COLUMNS:
                cells[column.key] = {
                    'value': self.cell(row.api, column.key, family=row.families),
                    'evidence': self.evidence(row.api, column.key, family=row.families),
                    'notes': notes.get(column.key, []),
                }
            data: dict[str, object] = {'api': row.api, 'title': row.title}
            if row.family is not None:
                data['family'] = row.family
            data['models'] = models
            data['failures'] = [{'evidence': f.evidence, 'source': f.source, 'reason': f.reason} for f in failures]
            data['cells'] = cells
            rows.append(data)
        return {
            'schema': 'pydantic-ai-citations/capability-matrix',
            'version': SCHEMA_VERSION,
            'columns': [
                {'key': c.key, 'title': c.title, 'description': c.description, 'values': c.values} for c in COLUMNS
            ],
            'rows': rows,
            'unusable_inputs': [
                {'evidence': f.evidence, 'source': f.source, 'reason': f.reason} for f in self.unusable_inputs
            ],
        }

    def to_json(self, *, indent: int | None = 2) -> str:
        """JSON in the stable schema (module docstring)."""
        return json.dumps(self.to_dict(), indent=indent, ensure_ascii=False, sort_keys=False)

    @classmethod
    def from_json(cls, data: str | bytes) -> CapabilityMatrix:
        """Read a matrix written by `to_json` (e.g. to merge reports from several machines)."""
        document = _document_ta.validate_json(data)
        matrix = cls()
        for row in document.rows:
            family = row.family or ''
            matrix.ensure_row(row.api, family=family)
            for model in row.models:
                matrix.add_model(row.api, model, family=family)
            for failure in row.failures:
                matrix.fail(row.api, failure.evidence, failure.source, failure.reason, family=family)
            for column, cell in row.cells.items():
                for evidence, values in cell.evidence.items():
                    for value, runs in values.items():
                        matrix.add(row.api, column, value, evidence, runs=runs, family=family)
                for note in cell.notes:
                    matrix.note(row.api, column, note, family=family)
        for failure in document.unusable_inputs:
            matrix.unusable(failure.evidence, failure.source, failure.reason)
        return matrix

    def _display(self, row: MatrixRow, column: str) -> tuple[str, str]:
        """Cell text and its evidence summary, e.g. `('part_end', 'probe 2, recording 3')`."""
        value = self.cell(row.api, column, family=row.families)
        parts = [f'{e} {sum(v.values())}' for e, v in self.evidence(row.api, column, family=row.families).items()]
        return value, ', '.join(parts)

    def to_markdown(self) -> str:
        """A Markdown table (values, with the evidence behind each in small print), then notes and failures."""
        header = ['API', *[c.title for c in COLUMNS]]
        lines = ['| ' + ' | '.join(header) + ' |', '|' + '---|' * len(header)]
        for row in self.rows:
            models = ', '.join(self._shown(row)[0])
            cells = [_md(row.title) + (f' <sub>{_md(models)}</sub>' if models else '')]
            for column in COLUMNS:
                value, evidence = self._display(row, column.key)
                cells.append(_md(value) + (f' <sub>{_md(evidence)}</sub>' if evidence else ''))
            lines.append('| ' + ' | '.join(cells) + ' |')
        lines.append('')
        extra = self._notes_lines()
        if extra:
            lines.extend(['Notes:', '', *[f'- {_md(line)}' for line in extra], ''])
        lines.extend(['Legend:', ''])
        for column in COLUMNS:
            meanings = '; '.join(f'`{v}`: {m}' for v, m in column.values.items())
            lines.append(f'- **{column.title}**: {column.description} {meanings}.')
        return '\n'.join(lines) + '\n'

    def unusable_lines(self) -> list[str]:
        """One line per unusable input: what it was and why it could not be used."""
        return [f'{f.evidence} {f.source!r} could not be used: {f.reason}' for f in self.unusable_inputs]

    def _notes_lines(self) -> list[str]:
        out: list[str] = self.unusable_lines()
        for row in self.rows:
            _, notes, failures = self._shown(row)
            for column, texts in sorted(notes.items()):
                out.extend(f'{row.title} / {column}: {t}' for t in texts)
            out.extend(f'{row.title}: {f.evidence} {f.source!r} failed: {f.reason}' for f in failures)
        return out

    def to_html(self) -> str:
        """One standalone HTML page (no external assets): the table, a legend explaining every value, notes."""
        rows_html: list[str] = []
        for row in self.rows:
            models, _, failures = self._shown(row)
            cells = [
                f'<th scope="row">{_h(row.title)}'
                + (f'<br><span class="ev">{_h(", ".join(models))}</span>' if models else '')
                + '</th>'
            ]
            for column in COLUMNS:
                value, evidence = self._display(row, column.key)
                css = 'na' if value == 'n/a' else ('mixed' if ' / ' in value else 'ok')
                cells.append(
                    f'<td class="{css}"><span class="v">{_h(value)}</span>'
                    + (f'<br><span class="ev">{_h(evidence)}</span>' if evidence else '')
                    + '</td>'
                )
            if failures:
                cells[0] = cells[0].replace('</th>', ' <span class="fail" title="see failures">&#9888;</span></th>')
            rows_html.append('<tr>' + ''.join(cells) + '</tr>')
        head = ''.join(f'<th scope="col">{_h(c.title)}</th>' for c in COLUMNS)
        legend = ''.join(
            f'<dt>{_h(c.title)}</dt><dd>{_h_code(c.description)}<ul>'
            + ''.join(f'<li><code>{_h(v)}</code>: {_h_code(m)}</li>' for v, m in c.values.items())
            + '</ul></dd>'
            for c in COLUMNS
        )
        notes = ''.join(f'<li>{_h_code(n)}</li>' for n in self._notes_lines())
        evidence_legend = f'<p class="ev">{_h_code(EVIDENCE_LEGEND)}</p>'
        return (
            '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
            '<meta name="viewport" content="width=device-width, initial-scale=1">'
            '<title>Citation capability matrix</title><style>'
            'body{font:14px/1.45 system-ui,sans-serif;margin:2rem;color:#1a1a1a;background:#fff}'
            'table{border-collapse:collapse;width:100%}th,td{border:1px solid #ccc;padding:.4rem .5rem;'
            'vertical-align:top;text-align:left}thead th{background:#f3f3f3}td.na{color:#888}td.mixed{background:#fff8e1}'
            '.ev{color:#666;font-size:.8em}.fail{color:#b00}dt{font-weight:600;margin-top:.6rem}code{font-size:.9em}'
            '</style></head><body><h1>Citation capability matrix</h1>'
            f'<table><thead><tr><th scope="col">API</th>{head}</tr></thead><tbody>{"".join(rows_html)}</tbody></table>'
            f'{evidence_legend}<h2>Legend</h2><dl>{legend}</dl>'
            + (f'<h2>Notes and failures</h2><ul>{notes}</ul>' if notes else '')
            + '</body></html>\n'
        )

    def to_rich_table(self) -> object:
        """A `rich.table.Table` for the terminal (needs the `cli` extra)."""
        try:
            from rich.table import Table
        except ImportError as e:  # pragma: no cover - exercised only without the extra
            from pydantic_ai.exceptions import UserError

            raise UserError('The terminal table needs `rich`: pip install "pydantic-ai-citations[cli]"') from e
        table = Table(title='Citation capability matrix', show_lines=True)
        table.add_column('API', style='bold')
        for column in COLUMNS:
            table.add_column(column.title)
        for row in self.rows:
            cells: list[str] = []
            for column in COLUMNS:
                value, evidence = self._display(row, column.key)
                cells.append(_rich_escape(value) + (f'\n[dim]{_rich_escape(evidence)}[/dim]' if evidence else ''))
            models = ', '.join(self._shown(row)[0])
            title = _rich_escape(row.title) + (f'\n[dim]{_rich_escape(models)}[/dim]' if models else '')
            table.add_row(title, *cells)
        table.caption = '\n'.join(
            _rich_escape(line) for line in [EVIDENCE_LEGEND.replace('`', ''), *self.unusable_lines()]
        )
        table.caption_justify = 'left'
        return table

    def _fill_family(self, family: str | None) -> str:
        return family if family is not None else (self._family or '')

    def _row(self, api: ApiLabel, family: str) -> _Row:
        row = self._rows.get((api, family))
        if row is None:
            row = self._rows[api, family] = _Row(api, family)
        return row


def _title(api: ApiLabel, family: str | None) -> str:
    return f'{API_TITLES[api]} ({family_title(family)})' if family else API_TITLES[api]


def combine(column: str, values: Sequence[str]) -> str:
    """One cell value from the values runs gave, the way the column reads them (deterministic: order-free)."""
    distinct = sorted(set(values))
    if len(distinct) == 1:
        return distinct[0]
    if column == 'anchor':
        return 'mixed'
    if column == 'citations':
        # A provider that cites in some runs cites; 'when asked' is the most telling of those.
        return next(v for v in ('when asked', 'yes', 'recovered', 'no', *distinct) if v in distinct)
    if column == 'sources':
        return _sources_value({k for v in distinct for k in v.split('+') if k != 'none'})
    if column == 'wire':
        shares = [int(v.rstrip('%')) for v in distinct if v.endswith('%') and v.rstrip('%').isdigit()]
        return f'{min(shares)}%' if shares else ' / '.join(distinct)
    return ' / '.join(distinct)


def _anchor_value(kinds: set[str]) -> str:
    return next(iter(kinds)) if len(kinds) == 1 else 'mixed'


def _sources_value(kinds: set[str]) -> str:
    if not kinds:
        return 'none'
    return 'web+document' if len(kinds) > 1 else next(iter(kinds))


def _md(text: str) -> str:
    """Text as a Markdown table cell: its `code` spans stay code, and nothing else can make a link, an image or a row.

    The text may hold a recording's model name or file name: no link, image, HTML or line break can come from it.
    """
    text = text.replace('\r', ' ').replace('\n', ' ')
    out: list[str] = []
    pos = 0
    for start, end, _ in md_code(text)[0]:  # (CommonMark's code spans: inside them nothing is markup)
        out += [_md_plain(text[pos:start]), text[start:end]]
        pos = end
    out.append(_md_plain(text[pos:]))
    return ''.join(out).replace('|', '\\|')


def _md_plain(text: str) -> str:
    return _MD_SYNTAX.sub(r'\\\1', text).replace('<', '&lt;').replace('>', '&gt;')


_MD_SYNTAX = re.compile(r'([\\\[\]!])')
"""What makes a link or an image (`[`, `]`, `!`) or undoes an escape (`\\`) in Markdown text."""


def _h(text: str) -> str:
    return html.escape(text, quote=True)


_BACKTICKS = re.compile(r'`([^`<>]+)`')


EVIDENCE_LEGEND = (
    'Under each value: the evidence behind it and how many runs back it (`probe`: built-in wire fixtures through the '
    'real model classes; `recording`: recorded provider responses; `live`: live provider calls; `observed`: your own '
    'runs through `TrackCitations`). `a / b`: runs disagreed; `n/a`: nothing could be measured (see notes).'
)
"""The key to the evidence shown under each value, in the HTML report and under the terminal table."""


def _h_code(text: str) -> str:
    """Escaped text with `code` spans as `<code>` (applied after escaping, so nothing from `text` becomes markup)."""
    return _BACKTICKS.sub(r'<code>\1</code>', _h(text))


def _rich_escape(text: str) -> str:
    from rich.markup import escape  # (rich's own: a backslash before `[` cannot undo it; `rich` is the `cli` extra)

    return escape(text)


@dataclass
class _CellDoc:
    value: str
    evidence: dict[Evidence, dict[str, int]]
    notes: list[str]


@dataclass
class _FailureDoc:
    evidence: Evidence
    source: str
    reason: str


@dataclass
class _RowDoc:
    api: ApiLabel
    title: str
    models: list[str]
    failures: list[_FailureDoc]
    cells: Mapping[str, _CellDoc]
    family: str | None = None


@dataclass
class _Document:
    schema: Literal['pydantic-ai-citations/capability-matrix']
    version: Literal[1]
    rows: list[_RowDoc]
    unusable_inputs: list[_FailureDoc] = field(default_factory=list[_FailureDoc])


_document_ta: TypeAdapter[_Document] = TypeAdapter(_Document)
