r"""`StripCitationMarkup`: citation markup removed from tool arguments and structured output, and kept on the side.

Pydantic AI keeps citations on text parts only. With tool, native or prompted output it stops asking providers for
citations, but some models still write their citation markup into tool arguments and JSON fields:

- Anthropic / Bedrock-Claude cite tags: `<cite index="0-1,0-2">supported text</cite>` (the opening `(cite …>` form
  some models write is accepted too). The tags go, the supported text stays.
- OpenAI private-use markers: `\ue200cite\ue202turn0search1\ue202turn0file2\ue201` (family, ids, optional line
  locator). Removed entirely.
- Assistants-style bracket markers: `【4:0†source】`. Removed entirely. A lone `【` (ordinary CJK punctuation) is not
  markup: only `【<digits>[:<digits>]†` starts a marker.

The scanner detects all three with offsets. What it cannot read unambiguously (an unterminated tag or marker, a tag
nested in a tag, a stray closing tag or `\ue201`) is reported as a `malformed_marker` / `unterminated_marker`
problem and the text around it is left exactly as it is: never guessed at. Markup split across two fields shows up
as an unterminated opening in one field and a stray closing in the other, and is reported the same way.

Whitespace: a removed *marker* takes one preceding space with it when that space follows a non-space character and
the marker is followed by whitespace, closing punctuation or the end of the string (`'Paris is big \ue200…\ue201.'`
becomes `'Paris is big.'`). Nothing else is touched, so text without markup stays byte-identical.
"""

from __future__ import annotations

import contextlib
import json
import re
import warnings
import weakref
from collections.abc import Sequence
from dataclasses import KW_ONLY, dataclass, field, replace
from typing import TYPE_CHECKING, Literal, Protocol, cast

from pydantic import JsonValue, TypeAdapter
from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.exceptions import ModelRetry, UserError
from pydantic_ai.messages import ToolCallPart
from pydantic_ai.tools import RunContext, ToolDefinition

from ._ledger import entry, lookup, record_problems
from ._problems import CitationProblem, shorten

if TYPE_CHECKING:
    from pydantic_ai.capabilities.abstract import RawOutput, RawToolArgs
    from pydantic_ai.models import ModelRequestContext
    from pydantic_ai.output import OutputContext

__all__ = (
    'STRIP_EXTRAS_KEY',
    'CitationMarkupError',
    'CitationsDisabledWarning',
    'FieldPath',
    'MarkupIssue',
    'MarkupKind',
    'MarkupMatch',
    'MarkupScan',
    'RemovedMarkup',
    'StripCitationMarkup',
    'StrippedJson',
    'StrippedText',
    'check_output_mode',
    'format_path',
    'removed_markup',
    'removed_markup_ta',
    'scan_citation_markup',
    'strip_citation_markup',
    'strip_json_markup',
    'strip_raw_markup',
)

MarkupKind = Literal['cite_tag', 'openai_marker', 'bracket_marker']
r"""`'cite_tag'`: Anthropic/Bedrock `<cite index="…">text</cite>`; `'openai_marker'`: `\ue200cite\ue202id\ue201`;
`'bracket_marker'`: `【4:0†source】`."""

FieldPath = tuple[str | int, ...]
"""Where a string sits in a JSON value: object keys and list indexes, outermost first, e.g. `('items', 2, 'body')`."""

STRIP_EXTRAS_KEY = 'strip'
"""Key of `StripCitationMarkup`'s records in the run's ledger entry (`entry(run_id).extras['strip']`)."""

# --- scanning -------------------------------------------------------------------------------------------------------

_CITE_TOKEN = re.compile(r'(?P<open>[<(]cite(?:\s[^<>]*)?>)|(?P<close></cite>)')
_INDEX_ATTR = re.compile(r'\bindex\s*=\s*["\']([^"\']*)["\']')
_OAI_START, _OAI_END, _OAI_SEP = '\ue200', '\ue201', '\ue202'
_OAI_FAMILY = re.compile(r'[A-Za-z_][A-Za-z0-9_-]*')
_OAI_ID = re.compile(r'[\w.:-]+')
_OAI_LOCATOR = re.compile(r'L\d+(?:-L\d+)?')
_BRACKET_START = re.compile(r'【(\d+(?::\d+)?)†')
_BRACKET_FULL = re.compile(r'【(\d+(?::\d+)?)†([^【】\n<>]*)】')
_CLOSING = frozenset('.,;:!?)]}…»”’')


@dataclass(frozen=True)
class MarkupMatch:
    """One piece of well-formed citation markup in a string."""

    kind: MarkupKind
    """Which markup family."""
    start: int
    """Start offset of the markup in the scanned text."""
    end: int
    """End offset (exclusive); for a cite tag, the end of `</cite>`."""
    source_ids: tuple[str, ...]
    """The source ids the markup names: cite-tag `index` values (`'0-1'`), OpenAI marker ids (`'turn0search1'`;
    a line locator is not an id), the bracket marker's `'4:0'`."""
    _: KW_ONLY
    kept_start: int = 0
    """Start of the text the markup wraps and that stays (cite tags); equal to `kept_end` for markers."""
    kept_end: int = 0
    """End of the kept text."""


@dataclass(frozen=True)
class MarkupIssue:
    """Citation markup that cannot be read unambiguously; the text is left as it is."""

    code: Literal['malformed_marker', 'unterminated_marker']
    """`'unterminated_marker'`: an opening without its closing; `'malformed_marker'`: anything else (nesting, a
    stray closing, a marker whose contents do not follow the grammar)."""
    start: int
    """Start offset of the region left untouched."""
    end: int
    """End offset (exclusive) of the region left untouched."""
    reason: str
    """What is wrong, for humans."""


@dataclass(frozen=True)
class MarkupScan:
    """Everything the scanner found in one string."""

    matches: tuple[MarkupMatch, ...] = ()
    """Well-formed markup, sorted by offset, none inside an issue's region."""
    issues: tuple[MarkupIssue, ...] = ()
    """Markup left untouched, sorted by offset."""

    @property
    def found(self) -> bool:
        """Whether any markup (well-formed or not) was found."""
        return bool(self.matches or self.issues)


def _scan_openai(text: str, atomic: list[MarkupMatch], issues: list[MarkupIssue]) -> None:
    n = len(text)
    i = 0
    while i < n:
        ch = text[i]
        if ch == _OAI_START:
            j = i + 1
            while j < n and text[j] not in (_OAI_START, _OAI_END):
                j += 1
            if j >= n or text[j] == _OAI_START:
                issues.append(
                    MarkupIssue('unterminated_marker', i, j, 'OpenAI citation marker without its closing U+E201')
                )
                i = j
                continue
            ids = _openai_ids(text[i + 1 : j])
            if ids is None:
                issues.append(
                    MarkupIssue('malformed_marker', i, j + 1, 'OpenAI citation marker not of the form family, ids')
                )
            else:
                atomic.append(MarkupMatch('openai_marker', i, j + 1, ids, kept_start=i, kept_end=i))
            i = j + 1
        elif ch in (_OAI_END, _OAI_SEP):
            issues.append(MarkupIssue('malformed_marker', i, i + 1, f'stray {ch!r} outside an OpenAI citation marker'))
            i += 1
        else:
            i += 1


def _openai_ids(inner: str) -> tuple[str, ...] | None:
    family, *rest = inner.split(_OAI_SEP)
    if not _OAI_FAMILY.fullmatch(family) or not rest:
        return None
    if len(rest) > 1 and _OAI_LOCATOR.fullmatch(rest[-1]):
        rest = rest[:-1]
    if not all(_OAI_ID.fullmatch(part) for part in rest):
        return None
    return tuple(rest)


def _scan_brackets(text: str, atomic: list[MarkupMatch], issues: list[MarkupIssue]) -> None:
    for start_match in _BRACKET_START.finditer(text):
        start = start_match.start()
        full = _BRACKET_FULL.match(text, start)
        if full is not None:
            atomic.append(
                MarkupMatch('bracket_marker', start, full.end(), (full.group(1),), kept_start=start, kept_end=start)
            )
        else:
            stop = len(text)
            for stopper in ('【', '\n'):
                k = text.find(stopper, start + 1)
                if k != -1:
                    stop = min(stop, k)
            issues.append(
                MarkupIssue('unterminated_marker', start, stop, 'bracket citation marker without its closing 】')
            )


def _cite_ids(open_tag: str) -> tuple[str, ...]:
    found = _INDEX_ATTR.search(open_tag)
    if found is None:
        return ()
    return tuple(part.strip() for part in found.group(1).split(',') if part.strip())


def _scan_cites(
    text: str, atomic: list[MarkupMatch], pairs: list[MarkupMatch], issues: list[MarkupIssue]
) -> list[tuple[int, int]]:
    """Match cite tags; returns the regions left untouched (nested, unterminated)."""
    bad: list[tuple[int, int]] = []
    stack: list[tuple[re.Match[str], list[bool]]] = []
    taken = [(m.start, m.end) for m in atomic] + [(i.start, i.end) for i in issues]
    for token in _CITE_TOKEN.finditer(text):
        if any(start <= token.start() < end for start, end in taken):
            continue  # inside an OpenAI or bracket marker, or text left as it is: not a tag of its own
        if token.group('open') is not None:
            stack.append((token, [False]))
            continue
        if not stack:
            issues.append(MarkupIssue('malformed_marker', token.start(), token.end(), '</cite> without an opening tag'))
            continue
        opened, nested = stack.pop()
        if stack:
            stack[-1][1][0] = True
        if nested[0]:
            issues.append(MarkupIssue('malformed_marker', opened.start(), token.end(), 'cite tag nested in a cite tag'))
            bad.append((opened.start(), token.end()))
        else:
            pairs.append(
                MarkupMatch(
                    'cite_tag',
                    opened.start(),
                    token.end(),
                    _cite_ids(opened.group()),
                    kept_start=opened.end(),
                    kept_end=token.start(),
                )
            )
    for opened, _nested in stack:
        issues.append(MarkupIssue('unterminated_marker', opened.start(), len(text), 'cite tag without its </cite>'))
        bad.append((opened.start(), len(text)))
    return bad


def scan_citation_markup(text: str) -> MarkupScan:
    """Find citation markup in one string, with offsets; never raises.

    Every offset lies inside `text`. Well-formed markup inside a region reported as an issue is not listed as a
    match: that region is left exactly as it is.
    """
    atomic: list[MarkupMatch] = []
    issues: list[MarkupIssue] = []
    if _OAI_START in text or _OAI_END in text or _OAI_SEP in text:
        _scan_openai(text, atomic, issues)
    if '【' in text:
        _scan_brackets(text, atomic, issues)
    pairs: list[MarkupMatch] = []
    bad: list[tuple[int, int]] = []
    if 'cite' in text:
        bad = _scan_cites(text, atomic, pairs, issues)

    bad += [(i.start, i.end) for i in issues]  # markup inside text left as it is stays too

    def touches_bad(m: MarkupMatch) -> bool:
        # What would be removed must not cut into a region left as it is: for a cite tag that is its two tags (the
        # text it wraps stays anyway), for a marker all of it.
        removed = ((m.start, m.kept_start), (m.kept_end, m.end)) if m.kind == 'cite_tag' else ((m.start, m.end),)
        return any(
            (b_start <= m.start and m.end <= b_end)
            or any(r_start < b_end and b_start < r_end for r_start, r_end in removed)
            for b_start, b_end in bad
        )

    matches = sorted((m for m in (*atomic, *pairs) if not touches_bad(m)), key=lambda m: (m.start, -m.end))
    # A nested region inside another nested region is one problem, reported once (the outermost).
    outer = [
        i
        for i in issues
        if not any(
            o is not i and o.start <= i.start and i.end <= o.end and (o.start, o.end) != (i.start, i.end)
            for o in issues
        )
        or i.code == 'unterminated_marker'
    ]
    return MarkupScan(tuple(matches), tuple(sorted(outer, key=lambda i: (i.start, i.end))))


@dataclass(frozen=True)
class StrippedText:
    """A string with its well-formed citation markup removed."""

    text: str
    """The text without markup (cite tags keep the text they wrap)."""
    scan: MarkupScan
    """What was found, offsets into the original text."""


def strip_citation_markup(text: str) -> StrippedText:
    """Remove well-formed citation markup from one string; leave issues as they are (see the module docstring)."""
    scan = scan_citation_markup(text)
    if not scan.matches:
        return StrippedText(text, scan)
    # Character ranges to delete: markers whole, cite tags' opening and closing tags only.
    cuts: list[tuple[int, int, bool]] = []  # (start, end, is_marker)
    for m in scan.matches:
        if m.kind == 'cite_tag':
            cuts.append((m.start, m.kept_start, False))
            cuts.append((m.kept_end, m.end, False))
        else:
            cuts.append((m.start, m.end, True))
    cuts.sort()
    out: list[str] = []
    pos = 0
    for index, (start, end, is_marker) in enumerate(cuts):
        out.append(text[pos:start])
        pos = end
        if is_marker:
            _drop_space_before(out, text, cuts, index)
    out.append(text[pos:])
    return StrippedText(''.join(out), scan)


def _drop_space_before(out: list[str], text: str, cuts: list[tuple[int, int, bool]], index: int) -> None:
    """Drop one space before a removed marker when it separated a word from punctuation, whitespace or the end."""
    # The character after the marker, skipping markup removed right after it.
    after = cuts[index][1]
    for start, end, _is_marker in cuts[index + 1 :]:
        if start != after:
            break
        after = end
    nxt = text[after] if after < len(text) else ''
    if nxt and not nxt.isspace() and nxt not in _CLOSING:
        return
    tail = _tail(out, 2)
    if len(tail) == 2 and tail[1] == ' ' and not tail[0].isspace():
        _pop_last_char(out)


def _tail(out: list[str], n: int) -> str:
    acc = ''
    for piece in reversed(out):
        acc = piece + acc
        if len(acc) >= n:
            break
    return acc[-n:]


def _pop_last_char(out: list[str]) -> None:
    while out and not out[-1]:
        out.pop()
    if out:
        out[-1] = out[-1][:-1]


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


removed_markup_ta: TypeAdapter[list[RemovedMarkup]] = TypeAdapter(list[RemovedMarkup])
"""JSON round trip for lists of `RemovedMarkup`."""


@dataclass(frozen=True)
class StrippedJson:
    """A JSON value with citation markup removed from its strings (keys are left alone)."""

    value: JsonValue
    """The value without markup; the very same object when nothing was removed."""
    removed: list[RemovedMarkup] = field(default_factory=list[RemovedMarkup])
    """What was removed, in document order."""
    problems: list[CitationProblem] = field(default_factory=list[CitationProblem])
    """Markup left as it is (malformed, unterminated, nested, split across fields, in keys)."""
    problem_paths: list[FieldPath] = field(default_factory=list[FieldPath])
    """The field each of `problems` was found in (same order)."""
    fields: list[FieldPath] = field(default_factory=list[FieldPath])
    """Paths of the fields that held markup (removed or left), in document order, without repeats."""

    @property
    def changed(self) -> bool:
        """Whether anything was removed."""
        return bool(self.removed)


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
    )


def _strip_value(value: object, path: FieldPath, acc: _Acc) -> object:
    if isinstance(value, str):
        return _strip_string(value, path, acc)
    if isinstance(value, list):
        items = cast(list[object], value)
        new_items = [_strip_value(item, (*path, i), acc) for i, item in enumerate(items)]
        return items if all(a is b for a, b in zip(new_items, items, strict=True)) else new_items
    if isinstance(value, dict):
        mapping = cast(dict[object, object], value)
        new_map: dict[object, object] = {}
        changed = False
        for key, item in mapping.items():
            key_path: FieldPath = (*path, key if isinstance(key, str | int) else str(key))
            if isinstance(key, str) and scan_citation_markup(key).found:
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
    stripped = strip_citation_markup(text)
    if stripped.scan.found:
        acc.order.setdefault(path, None)
    for m in stripped.scan.matches:
        acc.removed.append(
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
    for issue in stripped.scan.issues:
        problem = CitationProblem(
            issue.code,
            f'{issue.reason} in {where}; left as it is',
            start=issue.start,
            end=issue.end,
            detail=shorten(f'{where}: {text[issue.start : issue.end]}'),
        )
        acc.found.append((path, problem))
    return stripped.text if stripped.scan.matches else text


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
        if not any(c in raw for c in ('cite', _OAI_START, _OAI_END, _OAI_SEP, '【', '\\u')):
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
    return cast(dict[str, object], result.value), result


class CitationMarkupError(UserError):
    """Raised by `StripCitationMarkup(policy='error')` when tool arguments or structured output hold citation markup.

    `fields` names the fields (as `format_path` strings); `removed` and `problems` say what was found.
    """

    def __init__(
        self,
        message: str,
        *,
        fields: Sequence[str] = (),
        removed: Sequence[RemovedMarkup] = (),
        problems: Sequence[CitationProblem] = (),
    ):
        super().__init__(message)
        self.fields = list(fields)
        self.removed = list(removed)
        self.problems = list(problems)


class CitationsDisabledWarning(UserWarning):
    """Citations were asked for, but the output is not text, so Pydantic AI does not ask providers for them."""


_DISABLED_HINT = (
    'Pydantic AI only asks providers for citations when the output is text. Two ways out: '
    '(1) evidence as fields: put `Claim`/`Evidence` (pydantic_ai_citations) in your output type and add '
    '`VerifyEvidence()` to check every source id and quote against what this run retrieved; '
    '(2) two steps: keep the structured output, then call `verify_claims(...)` for a text-output, provider-cited '
    'check of each claim. See docs/structured-output.md.'
)

_warned_ids: set[int] = set()
_OUTPUT_MODE_KEY = 'output_mode_checked'


def check_output_mode(ctx: RunContext[object], request_context: ModelRequestContext) -> CitationProblem | None:
    """Make silent disabling of citations visible; call it from a `prepare_model_request` hook.

    When the effective `citations` model setting is true (`Citations()` or `model_settings={'citations': True}`;
    an explicit run-level `False` wins, as in Pydantic AI) but the request's output mode is not text, records one
    `citations_disabled_by_output_mode` problem per run in the ledger, warns `CitationsDisabledWarning` once per
    agent, and returns the problem (also on later calls in the same run). Returns `None` otherwise.
    """
    settings = request_context.model_settings or {}
    if not settings.get('citations'):
        return None
    mode = request_context.model_request_parameters.output_mode
    if mode in ('text', 'image'):
        return None
    resolved = 'structured output (auto: the model picks tool, native or prompted)' if mode == 'auto' else f'{mode!r}'
    problem = CitationProblem(
        'citations_disabled_by_output_mode',
        f'Citations were asked for but the output mode is {resolved}, so providers were not asked for citations. '
        + _DISABLED_HINT,
        detail=mode,
    )
    if ctx.run_id is not None:
        run = entry(ctx.run_id)
        with run.lock:
            earlier = run.extras.get(_OUTPUT_MODE_KEY)
            if isinstance(earlier, CitationProblem):
                return earlier
            run.extras[_OUTPUT_MODE_KEY] = problem
            run.problems.append(problem)
    _warn_once(ctx, problem)
    return problem


def _warn_once(ctx: RunContext[object], problem: CitationProblem) -> None:
    agent = ctx.agent
    if agent is not None:
        key = id(agent)
        if key in _warned_ids:
            return
        _warned_ids.add(key)
        # Agents are unhashable (no WeakSet): key by id, and forget the id when the agent is collected so a new
        # agent that reuses it still gets its warning. Not weak-referenceable: the id stays (a rare missed warning).
        with contextlib.suppress(TypeError):
            weakref.finalize(agent, _warned_ids.discard, key)
    warnings.warn(problem.message, CitationsDisabledWarning, stacklevel=2)


@dataclass
class StripCitationMarkup(AbstractCapability[object]):
    """Removes citation markup from tool arguments and structured output before validation, and keeps it.

    Runs in `before_tool_validate` (function tools) and `before_output_validate` (output tools, native and prompted
    output). What was removed is recorded in the run's ledger: one `markup_in_output` problem per field, and the
    `RemovedMarkup` list under `entry(run_id).extras['strip']` (read it with `removed_markup(result)`). The message
    history keeps the model's arguments as they were. Invalid JSON arguments are left untouched for Pydantic AI's
    own retry. Malformed markup is reported and left as it is.
    """

    _: KW_ONLY
    policy: Literal['strip', 'retry', 'error'] = 'strip'
    """`'strip'` (default): remove well-formed markup, validate the rest, record what was removed.
    `'retry'`: raise `ModelRetry` naming the fields, so the model resends without markup.
    `'error'`: raise `CitationMarkupError` naming the fields. Under `'retry'` and `'error'`, malformed markup counts too."""
    tools: bool = True
    """Check function tool arguments (default `True`)."""
    output: bool = True
    """Check structured output: output tool arguments, native and prompted JSON (default `True`)."""
    warn_when_disabled: bool = True
    """Record a `citations_disabled_by_output_mode` problem and warn `CitationsDisabledWarning` (once per agent) when
    citations were asked for but the output is not text (default `True`)."""

    def __post_init__(self) -> None:
        if self.policy not in ('strip', 'retry', 'error'):
            raise UserError(f"StripCitationMarkup(policy={self.policy!r}): use 'strip', 'retry' or 'error'")

    async def for_run(self, ctx: RunContext[object]) -> StripCitationMarkup:
        return replace(self)

    async def prepare_model_request(
        self, ctx: RunContext[object], request_context: ModelRequestContext
    ) -> ModelRequestContext:
        if self.warn_when_disabled:
            check_output_mode(ctx, request_context)
        return request_context

    async def before_tool_validate(
        self, ctx: RunContext[object], *, call: ToolCallPart, tool_def: ToolDefinition, args: RawToolArgs
    ) -> RawToolArgs:
        if not self.tools:
            return args
        return self._handle(ctx, cast('str | dict[str, object]', args), 'tool_args', call, final=True)  # pyright: ignore[reportReturnType]

    async def before_output_validate(
        self, ctx: RunContext[object], *, output_context: OutputContext, output: RawOutput
    ) -> RawOutput:
        if not self.output:
            return output
        final = not ctx.partial_output  # streamed partial outputs are stripped but neither recorded nor rejected
        return self._handle(
            ctx, cast('str | dict[str, object]', output), 'output', output_context.tool_call, final=final
        )  # pyright: ignore[reportReturnType]

    def _handle(
        self,
        ctx: RunContext[object],
        raw: str | dict[str, object],
        target: Literal['tool_args', 'output'],
        call: ToolCallPart | None,
        *,
        final: bool,
    ) -> str | dict[str, object]:
        new, result = strip_raw_markup(raw)
        if result is None or not (result.removed or result.problems):
            return raw
        if not final:
            return new if self.policy == 'strip' else raw
        tool_name = call.tool_name if call is not None else None
        call_id = call.tool_call_id if call is not None else None
        removed = [replace(r, target=target, tool_name=tool_name, tool_call_id=call_id) for r in result.removed]
        where = f'tool {tool_name!r} arguments' if tool_name and target == 'tool_args' else 'structured output'
        fields = [format_path(p) for p in result.fields]
        problems = _field_problems(removed, where, self.policy) + result.problems
        if ctx.run_id is not None:
            record_problems(ctx.run_id, problems)
            if self.policy == 'strip':
                run = entry(ctx.run_id)
                with run.lock:
                    kept = run.extras.setdefault(STRIP_EXTRAS_KEY, [])
                    cast(list[RemovedMarkup], kept).extend(removed)
        if self.policy == 'strip':
            return new
        listed = ', '.join(f'`{f}`' for f in fields)
        if self.policy == 'retry':
            raise ModelRetry(
                f'Your {"arguments" if target == "tool_args" else "output"} contain citation markup in {listed}. '
                'Send them again as plain text: no <cite> tags, no \\ue200…\\ue201 markers, no 【…†…】 markers. '
                'Citations are not supported in structured fields.'
            )
        raise CitationMarkupError(
            f'Citation markup in {where}, fields {listed}. Use policy="strip" to remove it, or "retry" to ask the '
            'model again.',
            fields=fields,
            removed=removed,
            problems=problems,
        )


def _field_problems(removed: list[RemovedMarkup], where: str, policy: str) -> list[CitationProblem]:
    by_field: dict[FieldPath, list[RemovedMarkup]] = {}
    for r in removed:
        by_field.setdefault(r.path, []).append(r)
    action = {'strip': 'removed', 'retry': 'model asked to retry', 'error': 'run stopped'}[policy]
    out: list[CitationProblem] = []
    for path, items in by_field.items():
        ids = sorted({i for r in items for i in r.source_ids})
        out.append(
            CitationProblem(
                'markup_in_output',
                f'{len(items)} citation markup item(s) in {where}, field {format_path(path)} ({action}); '
                f'source ids named: {", ".join(ids) or "none"}',
                detail=shorten(format_path(path)),
            )
        )
    return out


class _HasRunId(Protocol):
    @property
    def run_id(self) -> str: ...


def removed_markup(result: _HasRunId | str) -> list[RemovedMarkup]:
    """What `StripCitationMarkup` removed during a run (pass the run's result, or its `run_id`)."""
    run_id = result if isinstance(result, str) else result.run_id
    run = lookup(run_id)
    if run is None:
        return []
    with run.lock:
        kept = run.extras.get(STRIP_EXTRAS_KEY)
        return list(cast(list[RemovedMarkup], kept)) if isinstance(kept, list) else []
