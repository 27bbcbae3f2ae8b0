r"""`StripCitationMarkup`: citation markup removed from tool arguments and structured output, and kept on the side.

Pydantic AI keeps citations on text parts only. With tool, native or prompted output it stops asking providers for
citations, but some models still write their citation markup into tool arguments and JSON fields: Anthropic /
Bedrock-Claude cite tags (`(cite index="0-1">supported text</cite>`: the tags go, the text stays), OpenAI private-use
markers (`\ue200cite\ue202turn0search1\ue201`) and bracket markers (`【4:0†source】`), removed entirely. The values
(what is markup, what is removed, the problems, whitespace) are `_json_markup`'s; this module wires them into runs
(`prepare_tools`-time arguments, output validation, streamed partials) with a policy, and makes silently disabled
citations visible (`check_output_mode`).
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import KW_ONLY, dataclass, field, replace
from typing import TYPE_CHECKING, Any, Literal, Protocol, cast

from pydantic_ai.agent import AbstractAgent
from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.exceptions import ModelRetry, UserError
from pydantic_ai.messages import ToolCallPart
from pydantic_ai.tools import RunContext, ToolDefinition

from ._checks import require_agent, require_base_fields, require_bools, shown
from ._json_markup import (
    FieldPath,
    RemovedMarkup,
    clean_partial_output,
    format_path,
    strip_raw_markup,
)
from ._ledger import RunRegistry, record_problems
from ._problems import CitationProblem, shorten

if TYPE_CHECKING:
    from pydantic_ai.capabilities.abstract import RawOutput, RawToolArgs
    from pydantic_ai.models import ModelRequestContext
    from pydantic_ai.output import OutputContext

__all__ = (
    'CitationMarkupError',
    'CitationsDisabledWarning',
    'OutputModeCheck',
    'StripCitationMarkup',
    'check_output_mode',
    'removed_markup',
)


class CitationMarkupError(UserError):
    """Raised by `StripCitationMarkup(policy='error')` when tool arguments or structured output hold citation markup.

    `fields` names the fields (as paths like `'items[2].body'`, `'<root>'` for the whole output); `removed` and
    `problems` say what was found.
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

    Streamed structured output (`run_stream().stream_output()`) is cleaned at every partial, whatever the policy;
    the policy applies to the complete output.
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
            UserError: `agent` is not an agent, or it has none, or several.
        """
        require_agent(agent, where='StripCitationMarkup.of')
        found: list[StripCitationMarkup] = []

        def visit(capability: AbstractCapability[Any]) -> None:
            if isinstance(capability, cls):
                found.append(capability)

        agent.root_capability.apply(visit)
        if len(found) != 1:
            raise UserError(f'The agent has {len(found)} `StripCitationMarkup` capabilities; expected one.')
        return found[0]

    def removed_markup(self, result: _HasRunId | str) -> list[RemovedMarkup]:
        """What this capability removed during a run (pass the run's result, or its `run_id`).

        Raises:
            UserError: `result` is neither a run's result nor a `run_id`.
        """
        kept = self._runs.get(_run_id(result, 'StripCitationMarkup.removed_markup'))
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
        if r.issue is None:  # what went of bad markup is reported by its own problem (`unterminated_marker`, ...)
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

    Raises:
        UserError: `owner` is neither, or the agent has no `StripCitationMarkup` (or several); `result` is neither a
            run's result nor a `run_id`.
    """
    if not isinstance(owner, StripCitationMarkup):
        require_agent(owner, where='removed_markup', name='owner')
    run_id = _run_id(result, 'removed_markup')
    strip = owner if isinstance(owner, StripCitationMarkup) else StripCitationMarkup.of(owner)
    return strip.removed_markup(run_id)


def _run_id(result: object, where: str) -> str:
    run_id = result if isinstance(result, str) else getattr(result, 'run_id', None)
    if not isinstance(run_id, str):
        raise UserError(f"{where}: `result` must be the run's result or its `run_id` (a str), got {shown(result)}.")
    return run_id
