r"""Citation markup removed from JSON values (tool arguments, structured output) and kept on the side, as values.

The pure half of `StripCitationMarkup` (`_guard`), also used by `VerifyEvidence` and the testing helpers. What counts
as markup, and what is prose (`Always (cite sources) when the error rate is > 5%.`), is decided by the package's one
grammar, `formats.markup`: cite tags lose their tags and keep their text, OpenAI private-use markers and `【…†…】`
markers go entirely.

What cannot be read as well-formed markup (an unterminated tag or marker, a tag nested in a tag, a stray closing tag
or `\ue201`) is reported as a `malformed_marker` / `unterminated_marker` problem, and its markup characters are removed
too (the text they surround stays): a reader never sees half a cite tag or a private-use character. Markup split
across two fields shows up as an unterminated opening in one field and a stray closing in the other, and is reported
the same way.

Whitespace: a removed *marker* takes one preceding space with it when that space follows a non-space character and
the marker is followed by whitespace, closing punctuation or the end of the string (`'Paris is big \ue200…\ue201.'`
becomes `'Paris is big.'`). Nothing else is touched, so text without markup stays byte-identical.

Streamed structured output is cleaned at every partial too (`clean_partial_output`): each partial is read as partial
JSON, and a marker still open at the end of a string is held back until it closes.
"""

from __future__ import annotations

import json
import re
from dataclasses import KW_ONLY, dataclass, field, replace
from typing import Literal, cast

import pydantic_core
from pydantic import JsonValue, TypeAdapter

from ._lazy import lazy_adapter
from ._problems import CitationProblem, shorten
from .formats.markup import (
    MARKER_END,
    MARKER_SEPARATOR,
    MARKER_START,
    IssueCode,
    MarkupKind,
    StreamCleaner,
    remove_cuts,
    scan_markup,
    strip_markup,
)

__all__ = (
    'FieldPath',
    'RemovedMarkup',
    'StrippedJson',
    'clean_partial_output',
    'format_path',
    'removed_markup_ta',
    'strip_json_markup',
    'strip_raw_markup',
)

FieldPath = tuple[str | int, ...]
"""Where a string sits in a JSON value: object keys and list indexes, outermost first, e.g. `('items', 2, 'body')`."""

# --- JSON values ----------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RemovedMarkup:
    """Citation markup removed from one field of tool arguments or structured output: kept, not thrown away."""

    path: FieldPath
    """Where the string sat: object keys and list indexes, e.g. `('items', 2, 'body')`; `()` for a top-level string."""
    markup: str
    """The markup exactly as the model wrote it (for a cite tag, the whole `<cite …>text</cite>`)."""
    source_ids: tuple[str, ...]
    """The source ids the markup named (see `MarkupMatch.source_ids`)."""
    kind: MarkupKind
    """Which markup family."""
    _: KW_ONLY
    start: int
    """Start offset of the markup in the original string value."""
    end: int
    """End offset (exclusive) in the original string value."""
    kept: str = ''
    """The text that stayed: a cite tag's supported text; `''` for markers."""
    target: Literal['tool_args', 'output'] | None = None
    """Where it was found: a function tool's arguments, or the structured output (output tool args or JSON text)."""
    tool_name: str | None = None
    """Name of the tool (or output tool) whose arguments held it."""
    tool_call_id: str | None = None
    """Id of that tool call."""
    issue: IssueCode | None = None
    """Set when the markup could not be read as well-formed (`'unterminated_marker'`, `'malformed_marker'`; also
    reported as a problem with that code): `markup` is then what was removed of it, its markup characters, and `kept`
    the text between them that stayed. `None` for well-formed markup."""


removed_markup_ta: TypeAdapter[list[RemovedMarkup]] = lazy_adapter(list[RemovedMarkup])
"""JSON round trip for lists of `RemovedMarkup`."""


@dataclass(frozen=True)
class StrippedJson:
    """A JSON value with citation markup removed from its strings (keys are left alone)."""

    value: JsonValue
    """The value without markup; the very same object when nothing was removed."""
    removed: list[RemovedMarkup] = field(default_factory=list[RemovedMarkup])
    """What was removed, in document order."""
    problems: list[CitationProblem] = field(default_factory=list[CitationProblem])
    """Markup that could not be read (malformed, unterminated, nested, split across fields; its markup characters are
    removed from string values) and markup in object keys (keys are never rewritten)."""
    problem_paths: list[FieldPath] = field(default_factory=list[FieldPath])
    """The field each of `problems` was found in (same order)."""
    fields: list[FieldPath] = field(default_factory=list[FieldPath])
    """Paths of the fields that held markup (removed or left), in document order, without repeats."""
    edited: bool = False
    """Whether a string value was edited (well-formed markup removed, or the markup of what could not be read)."""

    @property
    def changed(self) -> bool:
        """Whether anything was removed."""
        return bool(self.removed) or self.edited


def format_path(path: FieldPath) -> str:
    """`('items', 2, 'body')` → `'items[2].body'`; `()` → `'<root>'`."""
    if not path:
        return '<root>'
    out = ''
    for key in path:
        if isinstance(key, int):
            out += f'[{key}]'
        else:
            out += ('.' if out else '') + key
    return out


_Found = list[tuple[FieldPath, CitationProblem]]


@dataclass
class _Acc:
    removed: list[RemovedMarkup] = field(default_factory=list[RemovedMarkup])
    found: _Found = field(default_factory=list[tuple[FieldPath, CitationProblem]])
    order: dict[FieldPath, None] = field(default_factory=dict[FieldPath, None])
    changed: bool = False


def strip_json_markup(value: JsonValue) -> StrippedJson:
    """Remove citation markup from every string in a JSON value, at any depth; keys are left alone.

    Returns new containers only along the paths that changed; the value itself when nothing was removed.
    """
    acc = _Acc()
    new = _strip_value(cast(object, value), (), acc)
    _link_split_markup(acc.found)
    return StrippedJson(
        cast(JsonValue, new),
        acc.removed,
        [p for _, p in acc.found],
        [path for path, _ in acc.found],
        list(acc.order),
        acc.changed,
    )


def _strip_value(value: object, path: FieldPath, acc: _Acc) -> object:
    if isinstance(value, str):
        return _strip_string(value, path, acc)
    if isinstance(value, list):
        items = cast('list[object]', value)
        new_items = [_strip_value(item, (*path, i), acc) for i, item in enumerate(items)]
        return items if all(a is b for a, b in zip(new_items, items, strict=True)) else new_items
    if isinstance(value, dict):
        mapping = cast('dict[object, object]', value)
        new_map: dict[object, object] = {}
        changed = False
        for key, item in mapping.items():
            key_path: FieldPath = (*path, key if isinstance(key, (str, int)) else str(key))
            if isinstance(key, str) and scan_markup(key).found:
                message = f'citation markup in the object key {key!r} at {format_path(path)}: keys are never rewritten'
                acc.found.append(
                    (key_path, CitationProblem('malformed_marker', message, detail=shorten(format_path(key_path))))
                )
                acc.order.setdefault(key_path, None)
            child = _strip_value(item, key_path, acc)
            changed = changed or child is not item
            new_map[key] = child
        return new_map if changed else mapping
    return value


def _strip_string(text: str, path: FieldPath, acc: _Acc) -> str:
    stripped = strip_markup(text)
    if stripped.scan.found:
        acc.order.setdefault(path, None)
    removed: list[RemovedMarkup] = []
    for m in stripped.scan.matches:
        removed.append(
            RemovedMarkup(
                path,
                text[m.start : m.end],
                m.source_ids,
                m.kind,
                start=m.start,
                end=m.end,
                kept=text[m.kept_start : m.kept_end],
            )
        )
    where = format_path(path)
    for issue in stripped.issues:
        if issue.cuts:  # what of it was removed: kept like well-formed markup, so nothing goes without a trace
            first, last = issue.cuts[0][0], issue.cuts[-1][1]
            removed.append(
                RemovedMarkup(
                    path,
                    ''.join(text[a:b] for a, b in issue.cuts),
                    (),
                    issue.kind,
                    start=first,
                    end=last,
                    kept=remove_cuts(text[first:last], [(a - first, b - first) for a, b in issue.cuts]),
                    issue=issue.code,
                )
            )
        problem = CitationProblem(
            issue.code,
            f'{issue.reason} in {where}; its markup was removed',
            start=issue.start,
            end=issue.end,
            detail=shorten(f'{where}: {text[issue.start : issue.end]}'),
        )
        acc.found.append((path, problem))
    acc.removed += sorted(removed, key=lambda r: r.start) if stripped.issues else removed  # in text order
    if stripped.cuts:
        acc.changed = True
    return stripped.text


def _link_split_markup(found: _Found) -> None:
    """Say so when an unterminated opening in one field and a stray closing in another look like split markup."""
    openings = [(path, p) for path, p in found if p.code == 'unterminated_marker']
    for index, (path, p) in enumerate(found):
        if p.code != 'malformed_marker' or not p.message.startswith(('</cite>', 'stray')):
            continue
        other = next((o_path for o_path, _ in openings if o_path != path), None)
        if other is not None:
            message = f'{p.message} (markup split across fields {format_path(other)} and {format_path(path)}?)'
            found[index] = (path, replace(p, message=message))


# --- raw tool arguments and structured output -----------------------------------------------------------------------

# Same pattern Pydantic AI uses to read JSON out of a fenced block in prompted output (`pydantic_ai._utils`, private).
_MARKDOWN_FENCES = re.compile(r'```(?:\w+)?\r?\n(\{.*?\})\s*(?:\r?\n?```|\Z)', flags=re.DOTALL)


def _parse_raw(raw: str) -> tuple[bool, object]:
    """Parse raw JSON text the way Pydantic AI will read it; `(False, None)` when it is not valid JSON."""
    text = raw
    if not raw.startswith('{'):
        fenced = _MARKDOWN_FENCES.search(raw)
        if fenced is not None:
            text = fenced.group(1)
    try:
        return True, json.loads(text)
    except (ValueError, RecursionError):
        return False, None


def strip_raw_markup(raw: str | dict[str, object]) -> tuple[str | dict[str, object], StrippedJson | None]:
    """Strip raw tool arguments or structured output: a dict, or JSON text (optionally in a fenced block).

    Returns the new raw value (re-serialised JSON text when the input was text and something was removed; the input
    itself when nothing was) and what was found. Invalid JSON text is returned untouched with `None`: Pydantic AI's
    own validation retries it.
    """
    if isinstance(raw, str):
        if not _may_hold_markup(raw):
            return raw, None  # fast path: nothing that could be markup, not even JSON-escaped
        ok, parsed = _parse_raw(raw)
        if not ok:
            return raw, None
        try:
            result = strip_json_markup(cast(JsonValue, parsed))
        except RecursionError:
            return raw, None
        if not result.changed:
            return raw, result
        return json.dumps(result.value, ensure_ascii=False), result
    try:
        result = strip_json_markup(cast(JsonValue, raw))
    except RecursionError:
        return raw, None
    return cast('dict[str, object]', result.value), result


def _may_hold_markup(raw: str) -> bool:
    return any(c in raw for c in ('cite', MARKER_START, MARKER_END, MARKER_SEPARATOR, '【', '\\u'))


def clean_partial_output(raw: str | dict[str, object]) -> str | dict[str, object]:
    """Clean one streamed partial of tool arguments or structured output, for display while it streams.

    The partial JSON is read as Pydantic AI reads partials (`pydantic_core.from_json(..., allow_partial=...)`), every
    string is cleaned as `formats.markup.StreamCleaner` cleans streamed text (a marker or tag still open at the end
    of a string is held back), and the value is written back as JSON. Nothing is recorded: the final output is
    stripped, and reported, once it is complete. Text that cannot be read as partial JSON is returned as it is.
    """
    if isinstance(raw, str):
        if not _may_hold_markup(raw):
            return raw
        start = raw.find('{')
        if start < 0:
            return raw
        body = raw[start:]
        fenced = _MARKDOWN_FENCES.search(raw)
        if fenced is not None:
            body = fenced.group(1)
        try:
            parsed = pydantic_core.from_json(body, allow_partial='trailing-strings')
            return json.dumps(_clean_strings(parsed), ensure_ascii=False)
        except (ValueError, RecursionError):
            return raw
    try:
        return cast('dict[str, object]', _clean_strings(raw))
    except RecursionError:
        return raw


def _clean_strings(value: object) -> object:
    if isinstance(value, str):
        return StreamCleaner().feed(value)
    if isinstance(value, list):
        return [_clean_strings(item) for item in cast('list[object]', value)]
    if isinstance(value, dict):
        return {key: _clean_strings(item) for key, item in cast('dict[object, object]', value).items()}
    return value
