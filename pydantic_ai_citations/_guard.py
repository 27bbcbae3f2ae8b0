r"""`StripCitationMarkup`: citation markup removed from tool arguments and structured output, and kept on the side.

Pydantic AI keeps citations on text parts only. With tool, native or prompted output it stops asking providers for
citations, but some models still write their citation markup into tool arguments and JSON fields: Anthropic /
Bedrock-Claude cite tags (`(cite index="0-1">supported text</cite>`: the tags go, the text stays), OpenAI private-use
markers (`\ue200cite\ue202turn0search1\ue201`) and bracket markers (`【4:0†source】`), removed entirely. What counts as
markup, and what is prose (`Always (cite sources) when the error rate is > 5%.`), is decided by the package's one
grammar, `formats.markup`.

What cannot be read as well-formed markup (an unterminated tag or marker, a tag nested in a tag, a stray closing tag
or `\ue201`) is reported as a `malformed_marker` / `unterminated_marker` problem, and its markup characters are removed
too (the text they surround stays): a reader never sees half a cite tag or a private-use character. Markup split
across two fields shows up as an unterminated opening in one field and a stray closing in the other, and is reported
the same way.

Whitespace: a removed *marker* takes one preceding space with it when that space follows a non-space character and
the marker is followed by whitespace, closing punctuation or the end of the string (`'Paris is big \ue200…\ue201.'`
becomes `'Paris is big.'`). Nothing else is touched, so text without markup stays byte-identical.

Streamed structured output is cleaned at every partial too (`run_stream().stream_output()`): each partial is read as
partial JSON, and a marker still open at the end of a string is held back until it closes.
"""

from __future__ import annotations

import json
import re
import warnings
from collections.abc import Sequence
from dataclasses import KW_ONLY, dataclass, field, replace
from typing import TYPE_CHECKING, Any, Literal, Protocol, cast

import pydantic_core
from pydantic import JsonValue, TypeAdapter
from pydantic_ai.agent import AbstractAgent
from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.exceptions import ModelRetry, UserError
from pydantic_ai.messages import ToolCallPart
from pydantic_ai.tools import RunContext, ToolDefinition

from ._checks import require_base_fields, require_bools
from ._ledger import RunRegistry, record_problems
from ._problems import CitationProblem, shorten
from .formats.markup import (
    MARKER_END,
    MARKER_SEPARATOR,
    MARKER_START,
    MarkupIssue,
    MarkupKind,
    MarkupMatch,
    MarkupScan,
    StreamCleaner,
    scan_markup,
    strip_markup,
)

if TYPE_CHECKING:
    from pydantic_ai.capabilities.abstract import RawOutput, RawToolArgs
    from pydantic_ai.models import ModelRequestContext
    from pydantic_ai.output import OutputContext

__all__ = (
    'CitationMarkupError',
    'CitationsDisabledWarning',
    'FieldPath',
    'MarkupIssue',
    'MarkupKind',
    'MarkupMatch',
    'MarkupScan',
    'OutputModeCheck',
    'RemovedMarkup',
    'StripCitationMarkup',
    'StrippedJson',
    'check_output_mode',
    'clean_partial_output',
    'format_path',
    'removed_markup',
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
        items = cast(list[object], value)
        new_items = [_strip_value(item, (*path, i), acc) for i, item in enumerate(items)]
        return items if all(a is b for a, b in zip(new_items, items, strict=True)) else new_items
    if isinstance(value, dict):
        mapping = cast(dict[object, object], value)
        new_map: dict[object, object] = {}
        changed = False
        for key, item in mapping.items():
            key_path: FieldPath = (*path, key if isinstance(key, str | int) else str(key))
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
    for issue in stripped.issues:
        problem = CitationProblem(
            issue.code,
            f'{issue.reason} in {where}; its markup was removed',
            start=issue.start,
            end=issue.end,
            detail=shorten(f'{where}: {text[issue.start : issue.end]}'),
        )
        acc.found.append((path, problem))
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
    return cast(dict[str, object], result.value), result


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
        return cast(dict[str, object], _clean_strings(raw))
    except RecursionError:
        return raw


def _clean_strings(value: object) -> object:
    if isinstance(value, str):
        return StreamCleaner().feed(value)
    if isinstance(value, list):
        return [_clean_strings(item) for item in cast(list[object], value)]
    if isinstance(value, dict):
        return {key: _clean_strings(item) for key, item in cast(dict[object, object], value).items()}
    return value


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


def check_output_mode(
    ctx: RunContext[object], request_context: ModelRequestContext, *, warn: bool = True
) -> CitationProblem | None:
    """Make silent disabling of citations visible; call it from a `prepare_model_request` hook.

    When the effective `citations` model setting is true (`Citations()` or `model_settings={'citations': True}`;
    an explicit run-level `False` wins, as in Pydantic AI) but the request's output mode is not text, hands a
    `citations_disabled_by_output_mode` problem to the run's `TrackCitations` (which keeps one per run however many
    callers find it), warns `CitationsDisabledWarning` (unless `warn=False`, or the run's `TrackCitations` already had
    the problem; `OutputModeCheck` warns once per agent),
    and returns the problem. Returns `None` otherwise.
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
    if record_problems(ctx, [problem]) and warn:  # once per run when the run has a `TrackCitations`
        warnings.warn(problem.message, CitationsDisabledWarning, stacklevel=2)
    return problem


@dataclass
class OutputModeCheck:
    """`check_output_mode` that warns once per capability instance, i.e. once per agent.

    A capability holds one, used by all its runs; no state outlives the capability.
    """

    warned: bool = False
    """Whether `CitationsDisabledWarning` was given."""

    def __call__(self, ctx: RunContext[Any], request_context: ModelRequestContext) -> CitationProblem | None:
        """Check one request (see `check_output_mode`); warn only the first time a problem is found."""
        problem = check_output_mode(ctx, request_context, warn=not self.warned)
        self.warned = self.warned or problem is not None
        return problem


@dataclass
class StripCitationMarkup(AbstractCapability[object]):
    """Removes citation markup from tool arguments and structured output before validation, and keeps it.

    Runs in `before_tool_validate` (function tools) and `before_output_validate` (output tools, native and prompted
    output). What was removed is recorded: one `markup_in_output` problem per field for the run's `TrackCitations`,
    and the `RemovedMarkup` list, kept by this capability (read it with `strip.removed_markup(result)` or
    `removed_markup(agent, result)`; only runs where something was removed are kept, at most `MAX_RUNS`, oldest
    released first). The message history keeps the model's arguments as they were. Invalid JSON arguments are left
    untouched for Pydantic AI's own retry. Markup that cannot be read is reported, and its markup characters are removed.

    Streamed structured output (`run_stream().stream_output()`) is cleaned at every partial, whatever the policy
    (`clean_partial_output`); the policy applies to the complete output.
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
        require_bools(
            'StripCitationMarkup', tools=self.tools, output=self.output, warn_when_disabled=self.warn_when_disabled
        )
        require_base_fields(self)

    _output_mode: OutputModeCheck = field(default_factory=OutputModeCheck, init=False, repr=False, compare=False)
    _runs: RunRegistry[list[RemovedMarkup]] = field(
        default_factory=RunRegistry[list[RemovedMarkup]], init=False, repr=False, compare=False
    )
    """Removed markup of this instance's runs, by `run_id`; only runs where something was removed."""

    @classmethod
    def of(cls, agent: AbstractAgent[Any, Any]) -> StripCitationMarkup:
        """The `StripCitationMarkup` instance of `agent` (e.g. one built with `Agent.from_spec`).

        Raises:
            UserError: the agent has none, or several.
        """
        found: list[StripCitationMarkup] = []

        def visit(capability: AbstractCapability[Any]) -> None:
            if isinstance(capability, cls):
                found.append(capability)

        agent.root_capability.apply(visit)
        if len(found) != 1:
            raise UserError(f'The agent has {len(found)} `StripCitationMarkup` capabilities; expected one.')
        return found[0]

    def removed_markup(self, result: _HasRunId | str) -> list[RemovedMarkup]:
        """What this capability removed during a run (pass the run's result, or its `run_id`)."""
        kept = self._runs.get(result if isinstance(result, str) else result.run_id)
        return list(kept) if kept is not None else []

    async def for_run(self, ctx: RunContext[object]) -> StripCitationMarkup:
        return self  # no per-run copy (see `_ledger`): a run's removed markup is kept by `run_id` in `_runs`

    async def prepare_model_request(
        self, ctx: RunContext[object], request_context: ModelRequestContext
    ) -> ModelRequestContext:
        if self.warn_when_disabled:
            self._output_mode(ctx, request_context)
        return request_context

    async def before_tool_validate(
        self, ctx: RunContext[object], *, call: ToolCallPart, tool_def: ToolDefinition, args: RawToolArgs
    ) -> RawToolArgs:
        if not self.tools:
            return args
        return self._handle(ctx, cast('str | dict[str, object]', args), 'tool_args', call)  # pyright: ignore[reportReturnType]

    async def before_output_validate(
        self, ctx: RunContext[object], *, output_context: OutputContext, output: RawOutput
    ) -> RawOutput:
        if not self.output:
            return output
        if ctx.partial_output:  # a streamed partial: cleaned for display, neither recorded nor rejected
            return clean_partial_output(cast('str | dict[str, object]', output))  # pyright: ignore[reportReturnType]
        return self._handle(ctx, cast('str | dict[str, object]', output), 'output', output_context.tool_call)  # pyright: ignore[reportReturnType]

    def _handle(
        self,
        ctx: RunContext[object],
        raw: str | dict[str, object],
        target: Literal['tool_args', 'output'],
        call: ToolCallPart | None,
    ) -> str | dict[str, object]:
        new, result = strip_raw_markup(raw)
        if result is None or not (result.removed or result.problems):
            return raw
        tool_name = call.tool_name if call is not None else None
        call_id = call.tool_call_id if call is not None else None
        removed = [replace(r, target=target, tool_name=tool_name, tool_call_id=call_id) for r in result.removed]
        where = f'tool {tool_name!r} arguments' if tool_name and target == 'tool_args' else 'structured output'
        fields = [format_path(p) for p in result.fields]
        problems = _field_problems(removed, where, self.policy) + result.problems
        record_problems(ctx, problems)
        if self.policy == 'strip':
            self._keep(ctx, removed)
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

    def _keep(self, ctx: RunContext[object], removed: list[RemovedMarkup]) -> None:
        if not removed or ctx.run_id is None:
            return
        self._runs.setdefault(ctx.run_id, list[RemovedMarkup]).extend(removed)


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


def removed_markup(
    owner: StripCitationMarkup | AbstractAgent[Any, Any], result: _HasRunId | str
) -> list[RemovedMarkup]:
    """What `StripCitationMarkup` removed during a run.

    Args:
        owner: The `StripCitationMarkup` instance given to the agent, or the agent itself.
        result: The run's result, or its `run_id`.
    """
    strip = owner if isinstance(owner, StripCitationMarkup) else StripCitationMarkup.of(owner)
    return strip.removed_markup(result)
