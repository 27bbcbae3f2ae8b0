r"""Failure-path scenarios: run the ways citations go wrong against *your* agent, on every provider style.

You give a factory that builds your agent — your instructions, tools, output validators, history processors — around
the model and the extra capabilities a scenario injects:

```python
from collections.abc import Sequence

from pydantic_ai import Agent
from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.models import Model
from pydantic_ai.models.fallback import FallbackModel


def make_agent(model: Model, capabilities: Sequence[AbstractCapability[object]]) -> Agent[None, str]:
    return Agent(model, instructions='Answer with sources.', tools=[lookup], capabilities=[*MY_CAPS, *capabilities])
```

Each scenario (see `SCENARIOS`) builds a scripted model (`CitingModel` imitating a provider `style`, or a
`FunctionModel` where the model must call a tool), calls your factory, runs the agent and checks what must hold.
It raises `ScenarioFailed` (an `AssertionError`) saying what was expected and what happened, or `ScenarioSkipped`
when the style cannot express the scenario (OpenRouter has no citation positions, for instance).

- In plain code: `await run_scenarios(make_agent)` runs them all on every style and raises one `ScenarioFailed`
  listing every failure (`raise_on_failure=False` returns the results instead).
- With pytest: the plugin this package registers gives `citation_scenarios`, `run_citation_scenario` and
  parametrises any test asking for `citation_scenario` and `citing_style`; define `citing_agent_factory` in your
  `conftest.py` (see `examples/failure_paths_test.py`):

  ```python
  @pytest.mark.anyio
  async def test_citation_failure_paths(run_citation_scenario, citation_scenario, citing_style):
      await run_citation_scenario(citation_scenario, citing_style)
  ```

  or parametrise yourself with `@pytest.mark.parametrize(('scenario', 'style'), scenario_params())`.

What the factory must do: pass `model` as the agent's model and every one of `capabilities` to the agent (anywhere in
its capability list), keep text output (`output_type=str`, the default; the structured-output scenario sets a
run-level `output_type`), and return a new agent per call. A factory that drops the capabilities, ignores the model,
or an agent that rewrites its text output makes the scenarios fail with a message saying so.

The structured-output scenario makes its runs structured with a run-level `output_type` (`agent.run(...,
output_type=...)`, supported by Pydantic AI 2.68), so your factory keeps text output. Pydantic AI rejects a run-level
`output_type` on an agent with output validators: for such an agent that scenario is skipped, saying so.

Scenarios catch warnings with `warnings.catch_warnings`, which is process-global: run them one at a time, not in
parallel threads.
"""

from __future__ import annotations

import dataclasses
import uuid
import warnings
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Never, Protocol, cast

from pydantic import BaseModel
from pydantic_ai import (
    DocumentCitationSource,
    FunctionToolset,
    ModelMessage,
    ModelRequest,
    ModelResponse,
    PromptedOutput,
    TextPart,
    Tool,
    ToolCallPart,
    ToolReturnPart,
    WebCitationSource,
)
from pydantic_ai.agent import AbstractAgent
from pydantic_ai.capabilities import AbstractCapability, Citations, Toolset
from pydantic_ai.exceptions import ModelHTTPError, UserError
from pydantic_ai.models import Model
from pydantic_ai.models.fallback import FallbackModel
from pydantic_ai.models.function import AgentInfo, FunctionModel

from .._answer import CitedAnswer, last_response
from .._edit import find_stale
from .._guard import CitationsDisabledWarning, StripCitationMarkup, removed_markup
from .._history import CleanStaleCitations
from .._problems import CitationProblem, shorten
from .._render import render_html, render_markdown
from .._track import CitedRun, TrackCitations
from ..formats.markup import scan_markup
from ._citing_model import CITING_STYLES, CitingModel, CitingStyle, ScriptedCitation, ScriptedStreamError

if TYPE_CHECKING:
    # `ParameterSet` is what `pytest.param` returns; pytest does not export the class itself.
    from _pytest.mark.structures import ParameterSet

__all__ = (
    'SCENARIOS',
    'CitingAgentFactory',
    'RunCitationScenario',
    'Scenario',
    'ScenarioFailed',
    'ScenarioOutcome',
    'ScenarioResult',
    'ScenarioSkipped',
    'run_scenarios',
    'scenario_params',
)

ScenarioOutcome = Literal['passed', 'skipped', 'failed']


class CitingAgentFactory(Protocol):
    """Builds your agent around the model and the capabilities a scenario injects.

    ```python
    def make_agent(model: Model, capabilities: Sequence[AbstractCapability[object]]) -> Agent[MyDeps, str]:
        return Agent(model, deps_type=MyDeps, instructions=..., tools=[...], capabilities=[*mine, *capabilities])
    ```

    Return a new agent on every call, with `model` as its model, every capability in `capabilities`, and text
    output. The injected capabilities need no deps (they accept any), so they fit an agent of any deps type.
    """

    def __call__(
        self, model: Model, capabilities: Sequence[AbstractCapability[object]], /
    ) -> AbstractAgent[Never, object]:
        """Build the agent."""
        ...


class RunCitationScenario(Protocol):
    """The pytest plugin's `run_citation_scenario` fixture: `await run_citation_scenario(scenario, style)`."""

    def __call__(self, scenario: Scenario | str, style: CitingStyle = 'anthropic', /) -> Awaitable[ScenarioResult]:
        """Run `scenario` (or the scenario with that id) on `style` against your `citing_agent_factory` fixture.

        A combination the style cannot express is skipped (`pytest.skip`) with the reason.
        """
        ...


class ScenarioFailed(AssertionError):
    """A scenario's check did not hold. The message says what was expected, what happened and, often, why."""

    def __init__(
        self,
        message: str,
        *,
        scenario_id: str,
        style: CitingStyle | None,
        expected: str = '',
        actual: str = '',
    ) -> None:
        super().__init__(message)
        self.scenario_id = scenario_id
        """The scenario's `id` (for a summary of several failures, the first one's)."""
        self.style: CitingStyle | None = style
        """The `CitingModel` style it ran with."""
        self.expected = expected
        """What should have held."""
        self.actual = actual
        """What happened instead."""


class ScenarioSkipped(Exception):
    """The scenario cannot be expressed with this style; `reason` says why."""

    def __init__(self, reason: str, *, scenario_id: str, style: CitingStyle) -> None:
        super().__init__(reason)
        self.reason = reason
        """Why the scenario does not apply."""
        self.scenario_id = scenario_id
        """The scenario's `id`."""
        self.style: CitingStyle = style
        """The style it was asked to run with."""


@dataclass(frozen=True)
class ScenarioResult:
    """The outcome of one scenario on one style."""

    scenario_id: str
    """The scenario's `id`."""
    style: CitingStyle
    """The `CitingModel` style it ran with."""
    outcome: ScenarioOutcome
    """`'passed'`, `'skipped'` (the style cannot express it) or `'failed'` (only from `run_scenarios`)."""
    checked: list[str] = field(default_factory=list[str])
    """Every check that held, in order, as sentences."""
    answer: CitedAnswer | None = None
    """The answer the scenario checked last, if any."""
    problems: list[CitationProblem] = field(default_factory=list[CitationProblem])
    """The problems the runs reported (ledger and answer), in order."""
    message: str | None = None
    """The skip reason or the failure message."""


# --- scripted material ----------------------------------------------------------------------------------------------

_PROMPT = 'What is the capital of France, and how many people live there?'
_TEXT = 'Paris is the capital of France. It has about 2.1 million residents. The Seine flows through it.'
_QUOTES = ('Paris is the capital of France', 'about 2.1 million residents')
_WEB = (
    WebCitationSource('https://example.com/paris', title='Paris - Example Encyclopedia'),
    WebCitationSource('https://example.org/population', title='Population of Paris'),
)
_DOCS = (
    DocumentCitationSource(document_id='file-handbook', title='handbook.pdf'),
    DocumentCitationSource(document_id='file-census', title='census.pdf'),
)
_PLAIN_TEXT = 'Paris is the capital of France. It has about 2.1 million residents.'
_OPENAI_MARKER = '\ue200cite\ue202turn0search0\ue201'
_TOOL_NAME = 'citation_scenario_save_note'
_ANCHORED_STYLES: frozenset[CitingStyle] = frozenset(s for s in CITING_STYLES if s != 'openrouter')


def _citations(sources: Sequence[WebCitationSource | DocumentCitationSource] = _WEB) -> list[ScriptedCitation]:
    return [ScriptedCitation(quote, [source]) for quote, source in zip(_QUOTES, sources, strict=True)]


def _other_style(style: CitingStyle) -> CitingStyle:
    """A style served by another provider than `style`, to send its history to."""
    return 'openai-chat' if style == 'anthropic' else 'anthropic'


def _markup_for(style: CitingStyle) -> tuple[str, str]:
    """Citation markup the style's models write into text or arguments, and the text left once it is removed."""
    if style in ('anthropic', 'bedrock'):
        return '<cite index="0-1">Paris is the capital of France</cite>.', 'Paris is the capital of France.'
    if style in ('openai-responses', 'openai-chat'):
        return f'Paris is the capital of France {_OPENAI_MARKER}.', 'Paris is the capital of France.'
    # OpenRouter, Google and xAI front several model families: expect either kind.
    return (
        f'<cite index="0-1">Paris is the capital of France</cite> {_OPENAI_MARKER}.',
        'Paris is the capital of France.',
    )


def _short(value: object, limit: int = 300) -> str:
    return shorten(value if isinstance(value, str) else repr(value), limit)


def _codes(problems: Iterable[CitationProblem]) -> list[str]:
    return [p.code for p in problems]


# --- checks and runs ------------------------------------------------------------------------------------------------

_CAPS_HINT = (
    'Pass every injected capability to the agent: Agent(model, ..., capabilities=[*yours, *capabilities]) '
    '(or agent spec / run-level capabilities that end up on the same run).'
)
_RUN_HINT = (
    'Does your agent need deps? Pass them as `deps=` (pytest: a `citing_agent_deps` fixture). '
    'Does it declare a structured `output_type`? Scenarios need text output.'
)
_MODEL_HINT = 'Build the agent with the `model` the factory receives (not a model of its own, not a model override).'


class _Check:
    """Collects the checks that held; raises `ScenarioFailed` on the first that does not."""

    def __init__(self, scenario: Scenario, style: CitingStyle) -> None:
        self.scenario = scenario
        self.style: CitingStyle = style
        self.checked: list[str] = []
        self.answer: CitedAnswer | None = None
        self.problems: list[CitationProblem] = []

    def fail(self, expected: str, actual: str, hint: str | None = None) -> Never:
        __tracebackhide__ = True  # pytest shows the scenario's message, not this helper
        s = self.scenario
        lines = [
            f'citation scenario {s.id!r} [{self.style}] failed: {s.title}',
            f'  must hold: {s.what_must_hold}',
            f'  expected:  {expected}',
            f'  actual:    {actual}',
        ]
        if hint:
            lines.append(f'  hint:      {hint}')
        raise ScenarioFailed('\n'.join(lines), scenario_id=s.id, style=self.style, expected=expected, actual=actual)

    def that(self, ok: bool, expected: str, actual: str | Callable[[], str], hint: str | None = None) -> None:
        __tracebackhide__ = True  # pytest shows the scenario's message, not this helper
        if not ok:
            self.fail(expected, actual() if callable(actual) else actual, hint)
        self.checked.append(expected)

    def saw(self, run: CitedRun) -> None:
        self.answer = run.answer
        self.problems.extend(p for p in run.problems if p not in self.problems)

    def result(self) -> ScenarioResult:
        return ScenarioResult(
            self.scenario.id,
            self.style,
            'passed',
            checked=list(self.checked),
            answer=self.answer,
            problems=list(self.problems),
        )


def _report(track: TrackCitations, result: Any) -> CitedRun:
    """`track.report(result)`, or `report_run` for a run id.

    A run `track` never saw gives an empty `CitedRun`, so the scenario says the capabilities were not applied.
    """
    try:
        return track.report_run(result) if isinstance(result, str) else track.report(result)
    except UserError:
        run_id = result if isinstance(result, str) else result.run_id
        return CitedRun(run_id, CitedAnswer(''))


@dataclass
class _Runner:
    """Builds agents with the user's factory and runs them, turning surprises into readable failures."""

    factory: CitingAgentFactory
    deps: object
    check: _Check

    def agent(self, model: Model, capabilities: Sequence[AbstractCapability[object]]) -> AbstractAgent[Any, Any]:
        __tracebackhide__ = True  # pytest shows the scenario's message, not this helper
        try:
            agent = cast(object, self.factory(model, list(capabilities)))
        except Exception as exc:
            self.check.fail(
                'the factory builds an agent', f'it raised {type(exc).__name__}: {_short(str(exc))}', _CAPS_HINT
            )
        if not isinstance(agent, AbstractAgent):
            self.check.fail('the factory returns a Pydantic AI agent', f'it returned {_short(agent)}')
        return cast('AbstractAgent[Any, Any]', agent)

    async def run(self, agent: AbstractAgent[Any, Any], prompt: str, **kwargs: Any) -> Any:
        __tracebackhide__ = True  # pytest shows the scenario's message, not this helper
        try:
            return await agent.run(prompt, deps=self.deps, **kwargs)
        except UserError as exc:
            if 'output_type' in kwargs and 'output_type' in str(exc):
                # Pydantic AI 2.68 rejects a run-level `output_type` on an agent with output validators.
                raise ScenarioSkipped(
                    f'a structured run cannot be made from this agent: {exc}',
                    scenario_id=self.check.scenario.id,
                    style=self.check.style,
                ) from exc
            self.check.fail('the agent run completes', f'it raised {type(exc).__name__}: {_short(str(exc))}', _RUN_HINT)
        except Exception as exc:
            self.check.fail(
                'the agent run completes',
                f'it raised {type(exc).__name__}: {_short(str(exc))}',
                _RUN_HINT,
            )

    def used(self, model: CitingModel | _Recorder) -> None:
        __tracebackhide__ = True  # pytest shows the scenario's message, not this helper
        self.check.that(
            bool(model.requests),
            'the agent sends its requests to the injected model',
            'the injected model received no request',
            _MODEL_HINT,
        )

    def tracked(self, run: CitedRun) -> None:
        __tracebackhide__ = True  # pytest shows the scenario's message, not this helper
        self.check.that(
            bool(run.requests),
            'the injected capabilities run (TrackCitations saw the model request)',
            'TrackCitations saw no model request: the injected capabilities were not applied',
            _CAPS_HINT,
        )
        self.check.saw(run)

    def output_is_answer(self, output: object, answer: CitedAnswer) -> None:
        __tracebackhide__ = True  # pytest shows the scenario's message, not this helper
        self.check.that(
            isinstance(output, str) and output == answer.text,
            'result.output equals the CitedAnswer text (citations offsets point into what you show)',
            lambda: f'result.output = {_short(output)!r}\n             answer.text   = {_short(answer.text)!r}',
            'Something between the model and result.output rewrites the text (an output validator or output '
            'function); citation offsets then point at the wrong words. Keep text output unchanged, or rebuild '
            'citations with `edit_text` after rewriting.',
        )


@dataclass
class _Recorder:
    """What a `FunctionModel` was sent, to check like `CitingModel.requests`."""

    requests: list[list[ModelMessage]] = field(default_factory=list[list[ModelMessage]])


def _anchored_texts(response: ModelResponse) -> list[str]:
    """The text each anchor of each text part covers (`'<out of range>'` for one that does not fit)."""
    out: list[str] = []
    for part in response.parts:
        if not isinstance(part, TextPart):
            continue
        for citation in part.citations or []:
            anchor = citation.anchor
            if anchor is None:
                continue
            if 0 <= anchor.start < anchor.end <= len(part.content):
                out.append(part.content[anchor.start : anchor.end])
            else:
                out.append('<out of range>')
    return out


def _text_parts(messages: Sequence[ModelMessage]) -> list[tuple[int, int, TextPart]]:
    return [
        (mi, pi, part)
        for mi, message in enumerate(messages)
        if isinstance(message, ModelResponse)
        for pi, part in enumerate(message.parts)
        if isinstance(part, TextPart)
    ]


# --- the scenarios --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Scenario:
    """One way citations go wrong, and what must hold when it happens; `run` checks it against your agent."""

    id: str
    """Stable id, used in test ids and `only=`."""
    title: str
    """Short title."""
    what_must_hold: str
    """One sentence: what your agent must guarantee in this situation."""

    def skip_reason(self, style: CitingStyle) -> str | None:
        """Why this scenario cannot be expressed with `style`, or `None` when it can."""
        return None

    async def run(
        self, factory: CitingAgentFactory, style: CitingStyle = 'anthropic', *, deps: object = None
    ) -> ScenarioResult:
        """Run the scenario against agents built by `factory`, with a model imitating `style`.

        Args:
            factory: Builds your agent around a model and the capabilities the scenario injects.
            style: Which provider `CitingModel` imitates.
            deps: Passed to every `agent.run(...)` as `deps`.

        Returns:
            The result, `outcome='passed'`, with every check that held.

        Raises:
            ScenarioFailed: A check did not hold (the message says what was expected and what happened).
            ScenarioSkipped: The style cannot express this scenario.
            UserError: `style` is not a `CitingModel` style.
        """
        if style not in CITING_STYLES:
            raise UserError(f'Unknown CitingModel style {style!r}; use one of {", ".join(CITING_STYLES)}.')
        reason = self.skip_reason(style)
        if reason is not None:
            raise ScenarioSkipped(reason, scenario_id=self.id, style=style)
        __tracebackhide__ = True  # pytest shows the scenario's message, not this helper
        check = _Check(self, style)
        await self._run(_Runner(factory, deps, check), style)
        return check.result()

    async def _run(self, runner: _Runner, style: CitingStyle) -> None:
        raise NotImplementedError(f'{type(self).__name__} must implement `_run`.')


@dataclass(frozen=True)
class _NoSources(Scenario):
    id: str = 'no_sources'
    title: str = 'The model answers without citations'
    what_must_hold: str = (
        'The answer is complete, equals result.output, has no spans, no unanchored sources and no problems, '
        'and renders without a sources list.'
    )

    async def _run(self, runner: _Runner, style: CitingStyle) -> None:
        check = runner.check
        model = CitingModel(_PLAIN_TEXT, style=style)
        track = TrackCitations()
        agent = runner.agent(model, [track])
        result = await runner.run(agent, _PROMPT)
        runner.used(model)
        report = _report(track, result)
        runner.tracked(report)
        answer = report.answer
        runner.output_is_answer(result.output, answer)
        check.that(answer.complete, 'the answer is complete', 'answer.complete is False')
        check.that(
            not answer.spans and not answer.unanchored and not answer.sources,
            'the answer has no spans, unanchored sources or sources',
            lambda: f'spans={answer.spans!r}, unanchored={answer.unanchored!r}',
        )
        check.that(not report.problems, 'no problems are reported', lambda: f'problems: {_codes(report.problems)}')
        markdown, page = render_markdown(answer), render_html(answer)
        check.that(
            'Sources' not in markdown and 'cited-answer-sources' not in page and 'cite-mark' not in page,
            'the renderers show no sources list and no citation marks',
            lambda: f'markdown: {_short(markdown)}',
        )


@dataclass(frozen=True)
class _SourcesWithoutPositions(Scenario):
    id: str = 'sources_without_positions'
    title: str = 'Sources without positions (OpenRouter-style)'
    what_must_hold: str = (
        'Sources the provider gives without a position land in `unanchored`, are pinned to no sentence, and the '
        'renderers list them under "Sources used".'
    )

    def skip_reason(self, style: CitingStyle) -> str | None:
        if style in ('openrouter', 'openai-responses'):
            return None
        return (
            f'{style!r} always pins its citations to a position in the text; only OpenRouter (web) and OpenAI '
            'Responses (file citations) cite without one'
        )

    async def _run(self, runner: _Runner, style: CitingStyle) -> None:
        check = runner.check
        sources = _WEB if style == 'openrouter' else _DOCS
        model = CitingModel(_TEXT, _citations(sources), style=style)
        track = TrackCitations()
        agent = runner.agent(model, [track])
        result = await runner.run(agent, _PROMPT)
        runner.used(model)
        report = _report(track, result)
        runner.tracked(report)
        answer = report.answer
        runner.output_is_answer(result.output, answer)
        expected = [s.url if isinstance(s, WebCitationSource) else s.document_id for s in sources]
        got = [s.url or s.document_id for s in answer.unanchored]
        check.that(
            got == expected,
            f'the sources land in `unanchored`: {expected}',
            f'unanchored: {got} (spans: {len(answer.spans)})',
        )
        check.that(not answer.spans, 'no source is pinned to a sentence', lambda: f'spans: {answer.spans!r}')
        check.that(not report.problems, 'no problems are reported', lambda: f'problems: {_codes(report.problems)}')
        markdown = render_markdown(answer)
        section = markdown.partition('**Sources used**')[2]
        missing = [s.title for s in answer.unanchored if s.title and s.title not in section]
        check.that(
            bool(section) and not missing,
            'render_markdown lists every source under "Sources used"',
            lambda: f'markdown: {_short(markdown, 600)}',
        )
        page = render_html(answer)
        html_section = page.partition('cited-answer-sources-used')[2]
        check.that(
            bool(html_section) and 'cite-mark' not in page and all(s.title in html_section for s in sources if s.title),
            'render_html lists them under "Sources used" and puts no citation mark in the text',
            lambda: f'html: {_short(page, 600)}',
        )


@dataclass(frozen=True)
class _MergedTextParts(Scenario):
    id: str = 'merged_text_parts'
    title: str = 'An answer made of several text parts (Anthropic-style blocks)'
    what_must_hold: str = (
        'The answer text equals result.output, and each span, shifted onto the joined text, covers exactly the '
        'quoted words (or, for marker styles, the marker right after them).'
    )

    def skip_reason(self, style: CitingStyle) -> str | None:
        if style in _ANCHORED_STYLES:
            return None
        return f'{style!r} gives no citation positions, so there are no spans to shift'

    async def _run(self, runner: _Runner, style: CitingStyle) -> None:
        check = runner.check
        model = CitingModel(_TEXT, _citations(), style=style)
        track = TrackCitations()
        agent = runner.agent(model, [track])
        result = await runner.run(agent, _PROMPT)
        runner.used(model)
        report = _report(track, result)
        runner.tracked(report)
        answer = report.answer
        if style in ('anthropic', 'bedrock'):
            check.that(
                len(answer.segments) > 1,
                'the answer is joined from several text parts',
                f'{len(answer.segments)} text part(s)',
            )
        runner.output_is_answer(result.output, answer)
        check.that(
            len(answer.spans) == len(_QUOTES),
            f'one span per cited quote ({len(_QUOTES)})',
            lambda: f'{len(answer.spans)} spans: {[answer.span_text(s) for s in answer.spans]}',
        )
        for quote, span in zip(_QUOTES, answer.spans, strict=True):
            covered = answer.span_text(span)
            if span.kind == 'content':
                check.that(
                    covered == quote,
                    f'the {span.kind} span covers exactly {quote!r}',
                    f'it covers {covered!r} ({span.start}..{span.end})',
                )
            else:
                before = answer.text[: span.start].rstrip()
                check.that(
                    before.endswith(quote) and covered.strip() != '',
                    f'the marker span sits right after {quote!r}',
                    f'it covers {covered!r}, after {_short(before[-60:])!r}',
                )
        check.that(not report.problems, 'no problems are reported', lambda: f'problems: {_codes(report.problems)}')


@dataclass(frozen=True)
class _StreamCancelled(Scenario):
    id: str = 'stream_cancelled'
    title: str = 'A stream that breaks, or that the consumer closes early'
    what_must_hold: str = (
        'The answer is marked incomplete (complete=False, a stream_incomplete problem) and renders with the '
        'incomplete notice: never a complete-looking answer.'
    )

    async def _run(self, runner: _Runner, style: CitingStyle) -> None:
        check = runner.check

        def incomplete(answer: CitedAnswer, how: str) -> None:
            check.that(
                not answer.complete and 'stream_incomplete' in _codes(answer.problems),
                f'{how}: the answer is incomplete with a stream_incomplete problem',
                f'complete={answer.complete}, problems={_codes(answer.problems)}, text={_short(answer.text)!r}',
            )
            check.that(
                'incomplete' in render_markdown(answer),
                f'{how}: render_markdown says the answer is incomplete',
                lambda: _short(render_markdown(answer)),
            )

        from .._stream import FinalAnswer, stream_cited  # imports Pydantic AI's UI modules: only when needed

        # 1. The provider's stream breaks mid-answer.
        model = CitingModel(_TEXT, _citations(), style=style, chunk_size=8, break_stream_after=2)
        track = TrackCitations()
        agent = runner.agent(model, [track])
        run_id = f'citation-scenario-{uuid.uuid4()}'
        final: FinalAnswer | None = None
        error: BaseException | None = None
        try:
            async with stream_cited(agent, _PROMPT, run_id=run_id, deps=runner.deps) as stream:
                async for item in stream:
                    if isinstance(item, FinalAnswer):
                        final = item
        except Exception as exc:
            error = exc
        runner.used(model)
        check.that(
            isinstance(error, ScriptedStreamError),
            'a broken stream surfaces its error (ScriptedStreamError) to the consumer',
            'the stream ended without raising'
            if error is None
            else f'it raised {type(error).__name__}: {_short(str(error))}',
        )
        check.that(final is not None, 'stream_cited yields a FinalAnswer before the error', 'no FinalAnswer')
        assert final is not None
        incomplete(final.answer, 'broken stream, stream_cited')
        report = _report(track, run_id)
        runner.tracked(report)
        incomplete(report.answer, 'broken stream, TrackCitations.report_run')

        # 2. The consumer stops reading after the first text delta (`run_stream`).
        model = CitingModel(_TEXT, _citations(), style=style, chunk_size=8)
        track = TrackCitations()
        agent = runner.agent(model, [track])
        try:
            async with agent.run_stream(_PROMPT, deps=runner.deps) as streamed:
                async for _ in streamed.stream_text(delta=True):
                    break
        except Exception as exc:
            check.fail('closing a run_stream early is clean', f'{type(exc).__name__}: {_short(str(exc))}')
        runner.used(model)
        incomplete(CitedAnswer.from_result(streamed), 'closed early, CitedAnswer.from_result')
        report = _report(track, streamed)
        runner.tracked(report)
        incomplete(report.answer, 'closed early, TrackCitations.report')

        # 3. The consumer leaves `stream_cited` after the first chunk.
        model = CitingModel(_TEXT, _citations(), style=style, chunk_size=8)
        agent = runner.agent(model, [TrackCitations()])
        async with stream_cited(agent, _PROMPT, deps=runner.deps) as stream:
            async for _ in stream:
                break
            snapshot = stream.snapshot()
        runner.used(model)
        incomplete(snapshot, 'closed early, CitedStream.snapshot')
        check.saw(report)
        check.answer = snapshot


@dataclass(frozen=True)
class _MarkupInToolArgs(Scenario):
    id: str = 'markup_in_tool_args'
    title: str = 'Citation markup in tool arguments'
    what_must_hold: str = (
        'With StripCitationMarkup, the tool receives its arguments without citation markup, and a markup_in_output '
        'problem records what was removed.'
    )

    async def _run(self, runner: _Runner, style: CitingStyle) -> None:
        check = runner.check
        with_markup, clean = _markup_for(style)
        received: list[dict[str, str]] = []

        def save_note(title: str, body: str) -> str:
            """Save a note (injected by the citation failure-path scenarios)."""
            received.append({'title': title, 'body': body})
            return 'saved'

        recorder = _Recorder()
        offered: list[bool] = []

        def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
            recorder.requests.append(list(messages))
            if not any(t.name == _TOOL_NAME for t in info.function_tools):
                offered.append(False)
                return ModelResponse(parts=[TextPart('The note tool is not available.')])
            offered.append(True)
            returned = any(
                isinstance(p, ToolReturnPart) and p.tool_name == _TOOL_NAME
                for m in messages
                if isinstance(m, ModelRequest)
                for p in m.parts
            )
            if returned:
                return ModelResponse(parts=[TextPart('I saved the note.')])
            args = {'title': 'Capital of France', 'body': with_markup}
            return ModelResponse(parts=[ToolCallPart(_TOOL_NAME, args, tool_call_id='scenario-call-1')])

        model = FunctionModel(respond, model_name=f'tool-caller-{style}')
        track = TrackCitations()
        tool = Toolset(FunctionToolset[object]([Tool(save_note, name=_TOOL_NAME)]))
        strip = StripCitationMarkup()
        agent = runner.agent(model, [track, strip, cast('AbstractCapability[object]', tool)])
        result = await runner.run(agent, 'Save a note about the capital of France.')
        runner.used(recorder)
        check.that(
            all(offered),
            f'the injected tool {_TOOL_NAME!r} is offered to the model',
            'the model was not offered the injected tool',
            _CAPS_HINT,
        )
        report = _report(track, result)
        runner.tracked(report)
        check.that(len(received) == 1, 'the tool is called once', f'it was called {len(received)} time(s)')
        body = received[0]['body']
        check.that(
            body == clean and not scan_markup(body).found,
            f'the tool receives clean arguments: body={clean!r}',
            f'it received body={body!r}',
            'Add StripCitationMarkup (injected here) to your agent, or check nothing else rewrites tool arguments.',
        )
        check.that(
            'markup_in_output' in _codes(report.problems),
            'a markup_in_output problem is recorded',
            f'problems: {_codes(report.problems)}',
        )
        removed = removed_markup(strip, result)
        check.that(
            bool(removed) and all(r.tool_name == _TOOL_NAME for r in removed),
            'removed_markup(strip, result) keeps what was removed, with the tool name',
            f'removed: {removed!r}',
        )


class _CityAnswer(BaseModel):
    """A structured answer."""

    city: str
    country: str


@dataclass(frozen=True)
class _StructuredOutput(Scenario):
    id: str = 'structured_output_with_citations'
    title: str = 'Structured output while citations are asked for'
    what_must_hold: str = (
        'Citations() with a structured output_type records a citations_disabled_by_output_mode problem in every '
        'run and warns CitationsDisabledWarning once per agent.'
    )

    async def _run(self, runner: _Runner, style: CitingStyle) -> None:
        check = runner.check
        # Built from a text-output agent: the run-level `output_type` (Pydantic AI 2.68) makes the run structured.
        model = CitingModel('{"city": "Paris", "country": "France"}', style=style)
        track = TrackCitations()
        agent = runner.agent(model, [track, Citations()])

        def call_output_tool(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
            tool = info.output_tools[0].name if info.output_tools else 'final_result'
            return ModelResponse(parts=[ToolCallPart(tool, {'city': 'Paris', 'country': 'France'})])

        tool_model = FunctionModel(call_output_tool, model_name=f'output-tool-{style}')
        runs: list[tuple[str, CitedRun]] = []
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter('always')
            for how, kwargs in (
                ('prompted output', {'output_type': PromptedOutput(_CityAnswer)}),
                ('prompted output, second run', {'output_type': PromptedOutput(_CityAnswer)}),
                ('tool output', {'output_type': _CityAnswer, 'model': tool_model}),
            ):
                result = await runner.run(agent, _PROMPT, **kwargs)
                check.that(
                    isinstance(result.output, _CityAnswer),
                    f'{how}: the run returns the structured output',
                    f'output: {_short(result.output)}',
                )
                runs.append((how, _report(track, result)))
        runner.used(model)
        for how, report in runs:
            runner.tracked(report)
            disabled = [p for p in report.problems if p.code == 'citations_disabled_by_output_mode']
            check.that(
                len(disabled) == 1,
                f'{how}: one citations_disabled_by_output_mode problem is recorded',
                f'problems: {_codes(report.problems)}',
                'Citations() must reach the run (it is injected), and TrackCitations or StripCitationMarkup must '
                'be on the agent: they record the problem.',
            )
        emitted = [w for w in caught if issubclass(w.category, CitationsDisabledWarning)]
        check.that(
            len(emitted) == 1,
            'CitationsDisabledWarning is emitted once for the agent (not once per run)',
            f'{len(emitted)} warning(s): {[str(w.message)[:80] for w in emitted]}',
            'The warning is given once per agent object: return a new agent from every factory call.',
        )


@dataclass(frozen=True)
class _HistoryToAnotherProvider(Scenario):
    id: str = 'history_to_another_provider'
    title: str = 'History handed to another provider'
    what_must_hold: str = (
        'With CleanStaleCitations, what the next provider receives holds no raw citation markers of the first '
        'one, its citations still cover the same words, and the stored history keeps the markers.'
    )

    async def _run(self, runner: _Runner, style: CitingStyle) -> None:
        check = runner.check
        with_markup, _clean = _markup_for(style)
        text = f'{with_markup} It has about 2.1 million residents. The Seine flows through it.'
        first = CitingModel(text, _citations(), style=style)
        track = TrackCitations()
        agent = runner.agent(first, [track, CleanStaleCitations()])
        result = await runner.run(agent, _PROMPT)
        runner.used(first)
        runner.tracked(_report(track, result))
        history = result.all_messages()
        check.that(
            any(scan_markup(p.content).found for _, _, p in _text_parts(history)),
            'the first answer, as stored, holds the provider markup',
            'no markup in the stored answer',
        )
        found = last_response(history)
        assert found is not None
        original = set(_anchored_texts(found[1]))

        other = _other_style(style)
        for how in ('second run', 'fallback'):
            second = CitingModel('About 2.1 million people live in Paris.', style=other)
            # Either a plain second run on another provider, or a `FallbackModel` moving on after an outage.
            model: Model = second if how == 'second run' else FallbackModel(_unavailable(style), second)
            track = TrackCitations()
            agent = runner.agent(model, [track, CleanStaleCitations()])
            result = await runner.run(agent, 'How many people live there?', message_history=history)
            runner.used(second)
            report = _report(track, result)
            runner.tracked(report)
            sent = second.requests[-1]
            leftover = [(mi, pi, p.content) for mi, pi, p in _text_parts(sent) if scan_markup(p.content).found]
            check.that(
                not leftover,
                f'{how}: the {other!r} model receives no raw citation markers from {style!r}',
                f'markers in message {leftover[0][0]} part {leftover[0][1]}: {_short(leftover[0][2])!r}'
                if leftover
                else '',
                'Add CleanStaleCitations (injected here) to your agent; a history processor that copies parts must '
                'keep their provider_name.',
            )
            moved = [t for m in sent if isinstance(m, ModelResponse) for t in _anchored_texts(m) if t not in original]
            check.that(
                not moved,
                f'{how}: the citations sent still cover the words they were made for',
                f'anchors now cover {moved!r}',
            )
            check.that(
                'markers_stripped_for_provider' in _codes(report.problems),
                f'{how}: a markers_stripped_for_provider problem says what was removed',
                f'problems: {_codes(report.problems)}',
            )
            stored = result.all_messages()
            check.that(
                any(scan_markup(p.content).found for _, _, p in _text_parts(stored)),
                f'{how}: the stored history keeps the markers (only what is sent is cleaned)',
                'the stored history lost them',
            )


def _unavailable(style: CitingStyle) -> FunctionModel:
    """A primary model that is down (HTTP 503), so a `FallbackModel` moves on to the next one."""

    def down(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        raise ModelHTTPError(503, f'primary-{style}', body={'error': 'overloaded (scripted)'})

    return FunctionModel(down, model_name=f'primary-{style}')


@dataclass(frozen=True)
class _EditedAndResent(Scenario):
    id: str = 'edited_and_resent'
    title: str = 'An answer edited (without edit_text) and sent again'
    what_must_hold: str = (
        'find_stale reports stale_after_edit for the edited parts, and with CleanStaleCitations the history sent '
        'next carries no stale citation: every anchor covers the words it was made for, or is dropped.'
    )

    async def _run(self, runner: _Runner, style: CitingStyle) -> None:
        check = runner.check
        model = CitingModel(_TEXT, _citations(), style=style)
        track = TrackCitations()
        agent = runner.agent(model, [track, CleanStaleCitations()])
        result = await runner.run(agent, _PROMPT)
        runner.used(model)
        runner.tracked(_report(track, result))
        history = list(result.all_messages())
        found = last_response(history)
        assert found is not None
        index, response = found
        original = set(_anchored_texts(response))

        # What a UI storing an edited answer does: new text, same citations and metadata, no `edit_text`.
        parts = list(response.parts)
        edited = 0
        for pi, part in enumerate(parts):
            if isinstance(part, TextPart) and part.citations:
                new_text = 'Update: ' + part.content.replace('about 2.1 million residents', 'over two million people')
                parts[pi] = dataclasses.replace(part, content=new_text)
                edited += 1
        history[index] = dataclasses.replace(response, parts=parts)
        stale = [p for p in find_stale(history) if p.code == 'stale_after_edit']
        check.that(
            len(stale) == edited,
            f'find_stale reports stale_after_edit for each of the {edited} edited cited part(s)',
            f'it reported {_codes(find_stale(history))}',
            'Answers are fingerprinted by CleanStaleCitations (injected): without it edits cannot be detected.',
        )

        second = CitingModel('Noted.', style=style)
        track = TrackCitations()
        agent = runner.agent(second, [track, CleanStaleCitations()])
        result = await runner.run(agent, 'Thanks. Anything else?', message_history=history)
        runner.used(second)
        report = _report(track, result)
        runner.tracked(report)
        sent = second.requests[-1]
        still = find_stale(sent)
        check.that(
            not still,
            'the history sent next has no stale citations (find_stale finds nothing)',
            f'find_stale on what was sent: {_codes(still)}',
            'Add CleanStaleCitations (injected here) to your agent.',
        )
        wrong = [t for m in sent if isinstance(m, ModelResponse) for t in _anchored_texts(m) if t not in original]
        check.that(
            not wrong,
            'every anchor sent covers the words it was made for (edited quotes are dropped)',
            lambda: f'anchors now cover {wrong!r}',
            'Add CleanStaleCitations (injected here) to your agent.',
        )
        check.that(
            'stale_after_edit' in _codes(report.problems),
            'the run reports the repair as stale_after_edit',
            f'problems: {_codes(report.problems)}',
        )


SCENARIOS: tuple[Scenario, ...] = (
    _NoSources(),
    _SourcesWithoutPositions(),
    _MergedTextParts(),
    _StreamCancelled(),
    _MarkupInToolArgs(),
    _StructuredOutput(),
    _HistoryToAnotherProvider(),
    _EditedAndResent(),
)
"""The failure-path scenarios, in a stable order."""


def _select(only: Iterable[str | Scenario] | None) -> list[Scenario]:
    if only is None:
        return list(SCENARIOS)
    if isinstance(only, str):
        only = [only]
    by_id = {s.id: s for s in SCENARIOS}
    chosen: list[Scenario] = []
    for item in only:
        if isinstance(item, Scenario):
            chosen.append(item)
        elif item in by_id:
            chosen.append(by_id[item])
        else:
            raise UserError(f'Unknown citation scenario {item!r}; known ids: {", ".join(by_id)}.')
    return chosen


def _styles(styles: Iterable[CitingStyle]) -> list[CitingStyle]:
    if isinstance(styles, str):
        styles = [cast(CitingStyle, styles)]
    chosen = list(styles)
    for style in chosen:
        if style not in CITING_STYLES:
            raise UserError(f'Unknown CitingModel style {style!r}; use one of {", ".join(CITING_STYLES)}.')
    return chosen


async def run_scenarios(
    factory: CitingAgentFactory,
    *,
    styles: Iterable[CitingStyle] = CITING_STYLES,
    only: Iterable[str | Scenario] | None = None,
    deps: object = None,
    raise_on_failure: bool = True,
) -> list[ScenarioResult]:
    """Run every scenario (or those in `only`) on every style, one at a time.

    Args:
        factory: Builds your agent around a model and the capabilities a scenario injects.
        styles: The `CitingModel` styles to run on (default: all).
        only: Scenario ids (or `Scenario` objects) to run; default all of `SCENARIOS`.
        deps: Passed to every `agent.run(...)` as `deps`.
        raise_on_failure: Default `True`: after running all, raise one `ScenarioFailed` listing every failure.
            `False`: return failures as results with `outcome='failed'`.

    Returns:
        One result per scenario and style, in order; skipped combinations have `outcome='skipped'` and the reason.

    Raises:
        ScenarioFailed: Some scenario failed (unless `raise_on_failure=False`).
        UserError: An unknown scenario id or style.
    """
    scenarios = _select(only)
    chosen_styles = _styles(styles)
    results: list[ScenarioResult] = []
    failures: list[ScenarioFailed] = []
    for scenario in scenarios:
        for style in chosen_styles:
            try:
                results.append(await scenario.run(factory, style, deps=deps))
            except ScenarioSkipped as skip:
                results.append(ScenarioResult(scenario.id, style, 'skipped', message=skip.reason))
            except ScenarioFailed as failure:
                failures.append(failure)
                results.append(ScenarioResult(scenario.id, style, 'failed', message=str(failure)))
    if failures and raise_on_failure:
        first = failures[0]
        message = f'{len(failures)} of {len(results)} citation scenario runs failed:\n\n' + '\n\n'.join(
            str(f) for f in failures
        )
        raise ScenarioFailed(
            message, scenario_id=first.scenario_id, style=first.style, expected=first.expected, actual=first.actual
        )
    return results


def scenario_params(
    *, styles: Iterable[CitingStyle] = CITING_STYLES, only: Iterable[str | Scenario] | None = None
) -> list[ParameterSet]:
    """`pytest.param(scenario, style, id='<scenario id>[<style>]')` for each scenario and style.

    Combinations the style cannot express carry a `pytest.mark.skip` with the reason.

    ```python
    @pytest.mark.parametrize(('scenario', 'style'), scenario_params())
    @pytest.mark.anyio
    async def test_failure_paths(scenario: Scenario, style: CitingStyle):
        await scenario.run(make_agent, style)
    ```
    """
    import pytest  # pytest is only needed by those who call this

    params: list[ParameterSet] = []
    for scenario in _select(only):
        for style in _styles(styles):
            reason = scenario.skip_reason(style)
            marks = [pytest.mark.skip(reason=reason)] if reason is not None else []
            params.append(pytest.param(scenario, style, id=f'{scenario.id}[{style}]', marks=marks))
    return params
