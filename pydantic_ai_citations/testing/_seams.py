"""`check_seams`: the package's three promises, checked end to end on every path that produces or shows an answer.

Each module keeps its promise on its own; the joins between them are where answers go wrong. `check_seams` runs one
subject (a real recording, a `CitingModel`, or any model) through every path a user takes -- `agent.run`, `iter`,
`run_stream`, `run_stream_events`, `stream_cited` (both ways), rendering, a store round trip, and resending the
history to another provider -- and checks on everything a reader sees:

- `'clean'`: no raw citation markup reaches a reader: no private-use character U+E200-U+E202 (OpenAI's markers),
  no cite tag or half of one, no `【…†…】` marker; in text sent to another provider, no xAI `[[N]](url)` marker either.
- `'incomplete_when_cut'`: a stream that ends before the provider's finishing event (cut at many event boundaries)
  never gives an answer that says `complete=True`.
- `'accounted'`: every citation the provider sent (counted on the wire by `formats.wire`, or scripted in a
  `CitingModel` and sent before any cut of its stream) is in the answer as a span, a source card (`unanchored`),
  `raw_only` data or a problem.
- `'not_stale'`: history a UI sends back unedited (the message the AI SDK's `useChat` builds from the stream, loaded
  by the adapter) has nothing `find_stale` reports: `CleanStaleCitations` would take it for edited and realign or
  drop its citations.
- `'runs'`: the path ran at all on the whole (uncut) subject.

The markup patterns here are deliberately plain substring-level tests, kept apart from the package's own markup
grammar: an oracle that shared the grammar would share its blind spots.
"""

from __future__ import annotations

import html
import importlib.util
import re
import struct
import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import KW_ONLY, dataclass, field, replace
from os import PathLike
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, cast, get_args

import anyio
from pydantic import JsonValue
from pydantic_ai import Agent, ModelMessage, ModelResponse, TextPart, WebCitationSource
from pydantic_ai.agent import AbstractAgent
from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.conversation import Conversation
from pydantic_ai.exceptions import UserError
from pydantic_ai.models import Model
from pydantic_ai.run import AgentRunResultEvent
from pydantic_ai.settings import ModelSettings
from pydantic_ai.ui import UIEventStream

from .._answer import CitedAnswer, SourceRef
from .._checks import require_at_least, shown
from .._history import CleanStaleCitations
from .._problems import CitationProblem
from .._render import render_html, render_markdown
from .._replay import (
    RawResponse,
    Recording,
    ReplayModel,
    anthropic_tap_for,
    cohere_tap_for,
    load_recording,
    mistral_tap_for,
)
from .._store import SQLiteConversationStore
from .._stream import FinalAnswer, TextChunk, stream_cited
from .._track import TrackCitations
from ..formats.wire import WIRE_APIS, WireCitation, count_wire_citations
from ._citing_model import CITING_STYLES, CitingModel, CitingStyle, sent_citations

if TYPE_CHECKING:
    from ._scenarios import CitingAgentFactory

__all__ = (
    'SEAM_PATHS',
    'SEAM_PROPERTIES',
    'SeamFailure',
    'SeamPath',
    'SeamProperty',
    'SeamReport',
    'SeamSkip',
    'SeamSubject',
    'SeamsBroken',
    'assert_seams',
    'check_seams',
    'check_seams_sync',
)

SeamPath = Literal[
    'run',
    'iter',
    'run_stream',
    'run_stream_events',
    'stream_cited',
    'stream_cited_run_stream',
    'render',
    'store',
    'resend',
    'ui_vercel',
    'ui_ag_ui',
]
"""The ways an answer reaches a reader:

- `'run'`: `agent.run` (streamed through an `event_stream_handler` when the subject streams);
- `'iter'`: `agent.iter`, streaming each model request node when the subject streams;
- `'run_stream'`: `agent.run_stream`, reading `stream_output`;
- `'run_stream_events'`: `agent.run_stream_events` up to its `AgentRunResultEvent`;
- `'stream_cited'` / `'stream_cited_run_stream'`: `stream_cited(agent, via='events' | 'run_stream')`;
- `'render'`: `render_markdown` (both styles) and `render_html` of the run's answer;
- `'store'`: `SQLiteConversationStore.save(result)` and the stored answer read back;
- `'resend'`: the history sent on to another provider through `CleanStaleCitations`;
- `'ui_vercel'`: `run_stream_events` through `CitedVercelAIEventStream` (with `CleanStaleCitations` on the agent and
  `cited_answer_chunk` at the end, as `docs/ui.md` sets it up): the UI texts the chunks build, the answer chunk, and the
  message `useChat` builds loaded back by `CitedVercelAIAdapter.load_messages`, as the history a UI sends back;
- `'ui_ag_ui'`: `run_stream_events` through `CitedAGUIEventStream` (with `cited_answer_event` at the end): the text
  messages, the answer event, and what the client holds (each text message with the citations of its last
  `pydantic_ai_citations` event) made into an answer, which must show what the reader was shown. AG-UI messages carry
  neither citations nor completeness, so no history is sent back. Needs the `ag-ui` extra (skipped without it).
"""

SeamProperty = Literal['runs', 'clean', 'incomplete_when_cut', 'accounted', 'not_stale']
"""What is checked (see the module docstring)."""

SEAM_PATHS: tuple[SeamPath, ...] = get_args(SeamPath)
SEAM_PROPERTIES: tuple[SeamProperty, ...] = get_args(SeamProperty)

_UNCUT_PATHS: frozenset[SeamPath] = frozenset({'render', 'resend'})
"""Paths checked on the whole run only: rendering shows the answers the other paths check at every cut, and a cut
run's history is not resent."""
_STREAMING_PATHS: frozenset[SeamPath] = frozenset(
    {'run_stream', 'run_stream_events', 'stream_cited', 'stream_cited_run_stream', 'ui_vercel', 'ui_ag_ui'}
)

# The oracle: anything here in reader-facing text is raw markup. A private-use marker character, an opening or
# closing cite tag, the remains of a half-removed one (`cite index="0-1">`), a `【…†…】` marker.
_READER_MARKUP = re.compile(
    r'[\ue200-\ue202]|</?cite\b|\bcite\s+index\s*=|【[^】\n]{0,80}†[^】\n]{0,200}】', re.IGNORECASE
)
# Sent to another provider, xAI's `[[N]](url)` markers are markup too (in rendered Markdown they are our own links).
_SENT_MARKUP = re.compile(_READER_MARKUP.pattern + r'|\[\[\d+\]\]\([^)\s]*\)', re.IGNORECASE)


@dataclass(frozen=True)
class SeamFailure:
    """One broken promise: which path broke which property, where, and on which cut of the stream."""

    path: SeamPath
    """The path that broke it."""
    property: SeamProperty
    """The property broken."""
    where: str
    """What showed it, e.g. `'FinalAnswer.answer.text'`, `'render_html'`, `'TrackCitations.report(result).answer'`."""
    message: str
    """What was wrong."""
    _: KW_ONLY
    cut: int | None = None
    """For a cut stream: how many stream events (text deltas for a `CitingModel`) were kept; `None` for the whole."""
    detail: str | None = None
    """An excerpt that shows it (the text around raw markup), when there is one."""

    def __str__(self) -> str:
        cut = '' if self.cut is None else f' (cut after {self.cut} events)'
        detail = '' if self.detail is None else f' -- {self.detail}'
        return f'{self.path} [{self.property}] {self.where}{cut}: {self.message}{detail}'


@dataclass(frozen=True)
class SeamSkip:
    """A path or property that could not be checked on this subject, and why."""

    path: SeamPath | None
    """The path, or `None` when a property is skipped for every path."""
    reason: str
    """Why."""


@dataclass(frozen=True)
class SeamReport:
    """What `check_seams` found for one subject."""

    subject: str
    """The subject: a recording's file name, `CitingModel(style=...)`, or the model's name."""
    failures: list[SeamFailure]
    """Every broken promise, in path order."""
    _: KW_ONLY
    skipped: list[SeamSkip] = field(default_factory=list[SeamSkip])
    """What could not be checked (e.g. streaming paths on a non-streamed recording)."""
    cuts: list[int] = field(default_factory=list[int])
    """The cut points used: how many stream events each cut stream kept (empty when no path was cut)."""
    wire_citations: int | None = None
    """Citations the provider sent (counted on the wire, or scripted), or `None` when unknown."""
    runs: int = 0
    """Agent runs made."""

    @property
    def ok(self) -> bool:
        """Whether every promise held."""
        return not self.failures

    def broken(self, path: SeamPath | None = None, property: SeamProperty | None = None) -> list[SeamFailure]:
        """The failures of one path and/or property."""
        return [
            f
            for f in self.failures
            if (path is None or f.path == path) and (property is None or f.property == property)
        ]

    def summary(self) -> str:
        """A readable account: one line per broken promise (one line for the same failure at several cuts)."""
        head = f'{self.subject}: {len(self.failures)} broken promise(s) in {self.runs} runs'
        if self.cuts:
            head += f', streams cut after {_ranges(self.cuts)} events'
        grouped: dict[tuple[str, str, str, str], list[SeamFailure]] = {}
        for f in self.failures:
            grouped.setdefault((f.path, f.property, f.where, f.message), []).append(f)
        lines = [head]
        for (path, prop, where, message), same in grouped.items():
            at = [f.cut for f in same if f.cut is not None]
            whole = 'the whole run' if any(f.cut is None for f in same) else ''
            when = ', '.join(filter(None, [whole, f'cut after {_ranges(at)} events' if at else '']))
            detail = next((f' -- {f.detail}' for f in same if f.detail), '')
            lines.append(f'  {path} [{prop}] {where} ({when}): {message}{detail}')
        lines.extend(f'  skipped {s.path or "all paths"}: {s.reason}' for s in self.skipped)
        return '\n'.join(lines)

    def assert_ok(self) -> None:
        """Raise `SeamsBroken` (an `AssertionError`) listing every failure, if any."""
        if self.failures:
            raise SeamsBroken(self)


class SeamsBroken(AssertionError):
    """Raised by `SeamReport.assert_ok` and `assert_seams`: the message lists every broken promise."""

    def __init__(self, report: SeamReport) -> None:
        self.report = report
        """The report."""
        super().__init__(report.summary())


SeamSubject = Recording | str | PathLike[str] | Model[Any] | Callable[[], Model[Any]]
"""What `check_seams` runs: a recording (its path, or a model replaying it), a `CitingModel`, any `Model`, or a
function returning one."""


async def check_seams(
    subject: SeamSubject,
    *,
    paths: Sequence[SeamPath] = SEAM_PATHS,
    prompt: str | None = None,
    model_settings: ModelSettings | None = None,
    agent_factory: CitingAgentFactory | None = None,
    deps: object = None,
    max_cuts: int | None = 12,
    resend_to: CitingStyle | None = None,
) -> SeamReport:
    """Run `subject` through every path that produces or shows an answer and check the package's promises.

    ```python
    from pydantic_ai_citations.testing import check_seams, load_recording

    report = await check_seams(load_recording('tests/cassettes/test_answer.yaml'))
    print(report.summary())
    report.assert_ok()
    ```

    Every run uses a fresh agent from `agent_factory` (default `Agent(model, capabilities=capabilities)`) around a
    fresh model and the `TrackCitations` the check reads; the `'resend'` path sends the run's history on through a
    plain `Agent(other_model, capabilities=[CleanStaleCitations()])`.

    Args:
        subject: What answers: a `Recording`, the path of one, or a model replaying one (`replay_recording(path)`,
            `recording.model()`) -- replayed through Pydantic AI's real model class, a fresh replay of the whole
            recording per run; a `CitingModel`; any other `Model` (used for every run); or a function returning a
            fresh `Model`. Streamed recordings are cut before their finishing event, and a `CitingModel` with
            `end_stream_after`; other models are not cut.
        paths: The paths to run (default: all of `SEAM_PATHS`).
        prompt: The user prompt (default: the recording's first prompt, or `'How tall is K2? Cite your sources.'`).
        model_settings: Settings for each run (default: the recording's own `model_settings`).
        agent_factory: Builds your agent (instructions, tools, your own capabilities) around the model and the
            capabilities the check injects, as for the scenario suite (`CitingAgentFactory`); text output.
        deps: The `deps` for each run of your agent.
        max_cuts: How many cut points to try per path: every event boundary before the finishing event when there
            are at most this many, otherwise this many spread evenly (always the first and the last). `None`: all;
            `0`: no cuts.
        resend_to: The `CitingModel` style the `'resend'` path sends the history to (default: `'anthropic'`, or
            `'openai-responses'` for an Anthropic subject).

    Returns:
        A `SeamReport`: `report.ok`, `report.failures` (path, property, where, cut), `report.summary()`.
    """
    if isinstance(paths, str) or not isinstance(cast(object, paths), Sequence):
        raise UserError(f'check_seams: `paths` must be a list of seam paths (e.g. [{paths!r}]), got {shown(paths)}.')
    unknown = [p for p in paths if p not in SEAM_PATHS]
    if unknown:
        raise UserError(f'Unknown seam path(s) {unknown!r}; use some of {", ".join(SEAM_PATHS)}.')
    if max_cuts is not None:
        require_at_least('check_seams', 'max_cuts', max_cuts, 0, int, 'an int of at least 0, or None')
    if resend_to is not None and resend_to not in CITING_STYLES:
        raise UserError(f'check_seams: unknown `resend_to` style {resend_to!r}; use one of {", ".join(CITING_STYLES)}.')
    target = _subject(subject, prompt, model_settings)
    checker = _Checker(target, agent_factory or _default_agent, deps, resend_to or _other_style(target.provider))
    cuts = _spread(target.cut_points, max_cuts)
    cut_any = False
    for path in paths:
        if path in _STREAMING_PATHS and target.streamed is False:
            checker.skipped.append(SeamSkip(path, 'the recording is not streamed'))
            continue
        if path == 'ui_ag_ui' and importlib.util.find_spec('ag_ui') is None:
            checker.skipped.append(
                SeamSkip(path, 'needs the `ag-ui` extra: pip install "pydantic-ai-citations[ag-ui]"')
            )
            continue
        await checker.check(path, None)
        if path not in _UNCUT_PATHS and target.cut_points:
            cut_any = True
            for cut in cuts:
                await checker.check(path, cut)
    if not target.cut_points:
        checker.skipped.append(SeamSkip(None, f'incomplete_when_cut: {target.cannot_cut}'))
    elif not cuts:
        checker.skipped.append(SeamSkip(None, 'incomplete_when_cut: max_cuts=0'))
    if target.expected is None:
        checker.skipped.append(SeamSkip(None, f'accounted: {target.no_wire}'))
    return SeamReport(
        target.name,
        checker.failures,
        skipped=checker.skipped,
        cuts=cuts if cut_any else [],
        wire_citations=None if target.expected is None else len(target.expected(1, False)),
        runs=checker.runs,
    )


def check_seams_sync(
    subject: SeamSubject,
    *,
    paths: Sequence[SeamPath] = SEAM_PATHS,
    prompt: str | None = None,
    model_settings: ModelSettings | None = None,
    agent_factory: CitingAgentFactory | None = None,
    deps: object = None,
    max_cuts: int | None = 12,
    resend_to: CitingStyle | None = None,
) -> SeamReport:
    """`check_seams`, run to completion in a new event loop (not from inside a running one)."""

    async def main() -> SeamReport:
        return await check_seams(
            subject,
            paths=paths,
            prompt=prompt,
            model_settings=model_settings,
            agent_factory=agent_factory,
            deps=deps,
            max_cuts=max_cuts,
            resend_to=resend_to,
        )

    return anyio.run(main)


async def assert_seams(
    subject: SeamSubject,
    *,
    paths: Sequence[SeamPath] = SEAM_PATHS,
    prompt: str | None = None,
    model_settings: ModelSettings | None = None,
    agent_factory: CitingAgentFactory | None = None,
    deps: object = None,
    max_cuts: int | None = 12,
    resend_to: CitingStyle | None = None,
) -> SeamReport:
    """`check_seams`, then raise `SeamsBroken` listing every failure; returns the report when all promises hold.

    ```python
    @pytest.mark.anyio
    async def test_my_recording_is_honest():
        await assert_seams('tests/cassettes/test_answer.yaml')
    ```
    """
    report = await check_seams(
        subject,
        paths=paths,
        prompt=prompt,
        model_settings=model_settings,
        agent_factory=agent_factory,
        deps=deps,
        max_cuts=max_cuts,
        resend_to=resend_to,
    )
    report.assert_ok()
    return report


# --- subjects -------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Expected:
    """A citation the provider sent, with the identity tokens that would account for it."""

    label: str
    tokens: frozenset[str]
    needles: tuple[str, ...]
    """Strings (URL, document id, title) a problem may mention to account for it."""
    kind: str = ''
    """The provider's own type name; a problem naming it in backticks (`` `reference` ``) speaks for every one."""


@dataclass
class _Subject:
    name: str
    streamed: bool | None
    """`True`/`False` for a recording; `None` for a model that answers both ways."""
    prompt: str
    settings: ModelSettings | None
    provider: str | None
    make: Callable[[int | None, list[dict[str, JsonValue]]], Model[Any]]
    """A model for one run: `make(cut, sent)`, cut after `cut` events (`None`: whole); `sent` collects requests."""
    cut_points: list[int]
    expected: Callable[[int, bool], list[Expected]] | None
    """`expected(n, streamed)`: the citations sent in the first `n` responses a run consumed, streamed or not."""
    cannot_cut: str = ''
    no_wire: str = ''


_DEFAULT_PROMPT = 'How tall is K2? Cite your sources.'


_SUBJECT_KINDS = (
    'a `Recording` or its path, a `Model` (such as a `CitingModel`), or a function returning a fresh `Model`'
)


def _subject(subject: SeamSubject, prompt: str | None, settings: ModelSettings | None) -> _Subject:
    if isinstance(subject, (str, PathLike)):
        subject = load_recording(Path(cast('str | PathLike[str]', subject)))
    elif isinstance(subject, ReplayModel):
        # A replay serves its responses once: each run gets a fresh replay of the same recording, as for its path.
        subject = subject.recording
    if isinstance(subject, Recording):
        return _recording_subject(subject, prompt, settings)
    if isinstance(subject, CitingModel):
        return _citing_subject(subject, prompt, settings)
    if not isinstance(subject, Model) and not callable(cast(object, subject)):
        raise UserError(f'check_seams: `subject` must be {_SUBJECT_KINDS}, got {shown(subject)}.')
    factory: Callable[[], Model[Any]] = (
        _constant(cast('Model[Any]', subject)) if isinstance(subject, Model) else subject
    )
    first = cast(object, factory())
    if not isinstance(first, Model):
        raise UserError(f'check_seams: `subject` must be {_SUBJECT_KINDS}; the function returned {shown(first)}.')
    if isinstance(first, ReplayModel):  # `lambda: replay_recording(path)`: checked as the recording (cut, counted)
        return _recording_subject(first.recording, prompt, settings)

    def make(cut: int | None, sent: list[dict[str, JsonValue]]) -> Model[Any]:
        return factory()

    return _Subject(
        first.model_name,
        None,
        prompt or _DEFAULT_PROMPT,
        settings,
        first.system,
        make,
        [],
        None,
        cannot_cut='only recordings and CitingModel can be cut before their finishing event',
        no_wire='what the model sent on the wire is known only for recordings and CitingModel',
    )


def _constant(model: Model[Any]) -> Callable[[], Model[Any]]:
    return lambda: model


def _recording_subject(recording: Recording, prompt: str | None, settings: ModelSettings | None) -> _Subject:
    first = recording.responses[0]
    events = cast('list[JsonValue]', first.payload) if recording.streamed and isinstance(first.payload, list) else []
    finish = _finish_index(recording.api, events) if events else 0
    cut_cache: dict[int, Recording] = {}

    def make(cut: int | None, sent: list[dict[str, JsonValue]]) -> Model[Any]:
        if cut is None:
            return recording.model(sent=sent)
        if cut not in cut_cache:
            cut_cache[cut] = replace(recording, responses=[_cut_response(first, cut)])
        return cut_cache[cut].model(sent=sent)

    counted = None if recording.api not in WIRE_APIS else wire_expected(recording)
    return _Subject(
        recording.path.name,
        recording.streamed,
        prompt or recording.prompt or _DEFAULT_PROMPT,
        settings if settings is not None else recording.model_settings,
        _API_PROVIDER.get(recording.api),
        make,
        list(range(1, finish + 1)),
        # What the recording holds is what was sent, streamed or not.
        None if counted is None else lambda consumed, streamed: counted(consumed, 0),
        cannot_cut='the recording is not streamed' if not recording.streamed else 'no event before the finishing one',
        no_wire=f'no wire counter for {recording.api}',
    )


def _citing_subject(model: CitingModel, prompt: str | None, settings: ModelSettings | None) -> _Subject:
    deltas = sum(-(-len(s.text) // model.chunk_size) for s in model._segments)  # pyright: ignore[reportPrivateUsage]

    def make(cut: int | None, sent: list[dict[str, JsonValue]]) -> Model[Any]:
        if cut is None:
            return model
        return CitingModel(
            model.text,
            model.citations,
            style=model.style,
            model_name=model.model_name,
            chunk_size=model.chunk_size,
            part_after_text=model.part_after_text,
            end_stream_after=cut,
        )

    def expected(consumed: int, streamed: bool) -> list[Expected]:
        return scripted_expected(model, streamed=streamed)

    return _Subject(
        f'CitingModel(style={model.style!r})',
        None,
        prompt or _DEFAULT_PROMPT,
        settings,
        model.system,
        make,
        list(range(1, deltas + 1)),
        expected,
    )


_API_PROVIDER: dict[str, str] = {
    'anthropic-messages': 'anthropic',
    'bedrock-converse': 'bedrock',
    'openai-responses': 'openai',
    'openai-chat': 'openai',
    'openrouter': 'openrouter',
    'google-gemini': 'google',  # (what `GoogleProvider` stamps in Pydantic AI 2)
    'google-vertex': 'google-cloud',
    'xai': 'xai',
    'cohere': 'cohere',
    'perplexity-sonar': 'openai',
}


def _other_style(provider: str | None) -> CitingStyle:
    return 'openai-responses' if provider == 'anthropic' else 'anthropic'


def _spread(points: list[int], max_cuts: int | None) -> list[int]:
    if max_cuts is None or len(points) <= max_cuts:
        return list(points)
    if max_cuts == 0:
        return []
    if max_cuts == 1:
        return [points[-1]]
    last = len(points) - 1
    return sorted({points[round(i * last / (max_cuts - 1))] for i in range(max_cuts)})


def _ranges(values: list[int]) -> str:
    if len(values) <= 6:
        return ', '.join(map(str, values))
    return f'{values[0]}, {values[1]}, ..., {values[-1]} ({len(values)} cuts)'


# --- cutting a recorded stream ---------------------------------------------------------------------------------------


def _finish_index(api: str, events: list[JsonValue]) -> int:
    """The index of the provider's finishing event (what says the response is done); `len(events)` if none."""
    for index, event in enumerate(events):
        if _is_finishing(api, event):
            return index
    return len(events)


def _is_finishing(api: str, event: JsonValue) -> bool:
    if not isinstance(event, dict):
        return False
    kind = event.get('type')
    if api == 'anthropic-messages':
        delta = event.get('delta')
        return kind == 'message_stop' or (
            kind == 'message_delta' and isinstance(delta, dict) and delta.get('stop_reason') is not None
        )
    if api == 'openai-responses':
        return kind in ('response.completed', 'response.incomplete', 'response.failed')
    if api == 'bedrock-converse':
        return 'messageStop' in event
    if api == 'cohere':
        return kind == 'message-end'
    return any(_has_finish_reason(item) for item in _choices(event))


def _choices(event: dict[str, JsonValue]) -> list[JsonValue]:
    """Chat choices, Google candidates, or xAI outputs of one stream event."""
    for key in ('choices', 'candidates', 'outputs'):
        value = event.get(key)
        if isinstance(value, list):
            return value
    return []


def _has_finish_reason(item: JsonValue) -> bool:
    if not isinstance(item, dict):
        return False
    reason = item.get('finish_reason', item.get('finishReason'))
    return reason not in (None, '', 'REASON_INVALID')


def _cut_response(raw: RawResponse, keep: int) -> RawResponse:
    """`raw` with only its first `keep` stream events: the stream then ends cleanly, without an error."""
    events = cast('list[JsonValue]', raw.payload)[:keep]
    if raw.chunks:  # xAI gRPC
        return replace(raw, payload=events, chunks=raw.chunks[:keep])
    ctype = raw.content_type.lower()
    if 'eventstream' in ctype:
        return replace(raw, payload=events, body=b''.join(_event_stream_frames(raw.body)[:keep]))
    blocks = [b for b in raw.body.replace(b'\r\n', b'\n').split(b'\n\n') if _is_data_block(b)]
    return replace(raw, payload=events, body=b''.join(block + b'\n\n' for block in blocks[:keep]))


def _is_data_block(block: bytes) -> bool:
    data = [line[5:].strip() for line in block.split(b'\n') if line.startswith(b'data:')]
    return bool(data) and b'\n'.join(data) != b'[DONE]'


def _event_stream_frames(body: bytes) -> list[bytes]:
    """AWS event-stream frames: each starts with its total length (big-endian uint32)."""
    frames: list[bytes] = []
    offset = 0
    while offset + 4 <= len(body):
        (length,) = struct.unpack_from('>I', body, offset)
        frames.append(body[offset : offset + length])
        offset += length
    return frames


# --- wire accounting -----------------------------------------------------------------------------------------------


def wire_expected(recording: Recording) -> Callable[[int, int], list[Expected]]:
    """What accounts for the citations of the recording's responses `first` to `consumed` (`expected(consumed, first)`).

    A run's own responses: those of the history it was given were accounted for by the run that made them.
    """
    api = cast(Any, recording.api)

    def expected(consumed: int, first: int) -> list[Expected]:
        seen: dict[str, WireCitation] = {}
        for raw in recording.responses[first : max(consumed, first + 1)]:
            for c in count_wire_citations(api, raw.payload):
                seen.setdefault(c.key, c)
        return [wire_citation_expected(c) for c in seen.values()]

    return expected


def wire_citation_expected(c: WireCitation) -> Expected:
    """What accounts for one citation the provider sent."""
    offsets = (c.start, c.end) if c.start is not None and c.end is not None else None
    label = f'{c.kind} {c.url or c.document_id or c.title or ""}'.rstrip()
    if offsets:
        label += f' at {offsets[0]}-{offsets[1]}' + (' (UTF-8 bytes)' if c.offset_unit == 'utf8_byte' else '')
    only_id = not (c.url or c.title or c.start is not None)
    return _expected(
        label, url=c.url, document_id=c.document_id, title=c.title, offsets=offsets, document=only_id, kind=c.kind
    )


def scripted_expected(model: CitingModel, *, streamed: bool) -> list[Expected]:
    """What accounts for each source of each citation a `CitingModel` sent, streamed or not (`sent_citations`).

    A stream cut (`end_stream_after`) before a citation went out never sent it: the answer's `stream_incomplete`
    problem covers what is missing, so it is not counted as sent. Every citation that did go out still counts.
    """
    out: list[Expected] = []
    for citation in sent_citations(model, streamed=streamed):
        for source in citation.sources:
            url = getattr(source, 'url', None)
            doc = getattr(source, 'document_id', None)
            label = f'scripted citation of {citation.quote!r} to {url or doc or source.title!r}'
            # (`document`: any document stands for one known only by position; a scripted id or title is its own.)
            known_by = url or doc or source.title
            out.append(_expected(label, url=url, document_id=doc, title=source.title, document=not known_by))
    return out


def _expected(
    label: str,
    *,
    url: str | None = None,
    document_id: str | None = None,
    title: str | None = None,
    offsets: tuple[int, int] | None = None,
    document: bool = False,
    kind: str = '',
) -> Expected:
    tokens: set[str] = set()
    needles: list[str] = []
    if url:
        tokens.add('url:' + url)
        needles.append(url)
    if document_id:
        tokens.add('doc:' + document_id)
        tokens.add('doc:' + document_id.split(':', 1)[-1])  # e.g. Anthropic 'document_index:0'
        needles.append(document_id)
    if title:
        tokens.add('title:' + title)
        needles.append(title)
    # A short or numeric id ('0', '12') is in many a message: it names nothing there.
    needles = [n for n in needles if len(n) >= 4 and not n.isdigit()]
    if offsets:
        tokens.add(f'off:{offsets[0]}-{offsets[1]}')
    if document:
        tokens.add('kind:document')  # only an index: represented by any document source
    return Expected(label, frozenset(tokens), tuple(needles), kind)


def _shown_sources(answer: CitedAnswer) -> list[SourceRef]:
    """The sources the answer shows: those of its spans and its source cards, in number order."""
    numbers = {n for span in answer.spans for n in span.sources} | {s.number for s in answer.unanchored}
    return [s for s in answer.sources if s.number in numbers]


def _source_tokens(source: SourceRef) -> set[str]:
    tokens: set[str] = set()
    if source.url:
        tokens.add('url:' + source.url)
    if source.document_id:
        tokens.add('doc:' + source.document_id)
    if source.title:
        tokens.add('title:' + source.title)
    if source.kind == 'document':
        tokens.add('kind:document')
    return tokens


def shown_expected(answer: CitedAnswer) -> list[Expected]:
    """What `answer` shows a reader (its spans' and cards' sources), as citations a copy of it must account for."""
    return [
        Expected(
            f'source {s.number} {s.url or s.document_id or s.title or ""}'.rstrip(),
            frozenset(_source_tokens(s)),
            tuple(v for v in (s.url, s.document_id, s.title) if v),
        )
        for s in _shown_sources(answer)
    ]


def _answer_tokens(answer: CitedAnswer) -> set[str]:
    """Identity tokens of what the answer shows or keeps: span and card sources, span offsets, raw-only data."""
    tokens: set[str] = set()
    for source in _shown_sources(answer):
        tokens |= _source_tokens(source)
    segments = {(s.message_index, s.part_index): s for s in answer.segments}
    for span in answer.spans:
        tokens.add(f'off:{span.start}-{span.end}')
        segment = segments.get((span.message_index, span.part_index))
        if segment is not None:
            part = answer.text[segment.start : segment.end]
            start, end = span.start - segment.start, span.end - segment.start
            tokens.add(f'off:{start}-{end}')
            tokens.add(f'off:{len(part[:start].encode())}-{len(part[:end].encode())}')
    for raw in answer.raw_only:
        tokens |= _raw_tokens(raw.data)
    return tokens


_URL_KEYS = ('url', 'uri', 'source_uri', 'sourceUri', 'source')
_DOC_KEYS = ('file_id', 'document_id', 'document_name', 'documentName', 'document_index', 'documentIndex', 'id')
_TITLE_KEYS = ('title', 'document_title', 'filename')
_RANGES = (('start_index', 'end_index'), ('startIndex', 'endIndex'), ('start', 'end'))


def _raw_tokens(value: JsonValue) -> set[str]:
    """Identity tokens anywhere in raw citation data."""
    tokens: set[str] = set()
    stack: list[JsonValue] = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, list):
            stack.extend(item)
        elif isinstance(item, dict):
            tokens |= _mapping_tokens(item)
            stack.extend(item.values())
        elif isinstance(item, str) and item.startswith(('http://', 'https://')):
            tokens.add('url:' + item)  # a bare list of URLs (xAI, Perplexity `citations`)
    return tokens


def _mapping_tokens(data: dict[str, JsonValue]) -> set[str]:
    tokens = {'url:' + v for key in _URL_KEYS if isinstance(v := data.get(key), str) and v}
    tokens |= {f'doc:{v}' for key in _DOC_KEYS if isinstance(v := data.get(key), str | int) and not isinstance(v, bool)}
    tokens |= {'title:' + v for key in _TITLE_KEYS if isinstance(v := data.get(key), str) and v}
    ids = data.get('reference_ids')  # a Mistral `reference` chunk names its tool-result ids
    tokens |= {f'doc:{v}' for v in (ids if isinstance(ids, list) else []) if isinstance(v, (str, int))}
    for start_key, end_key in _RANGES:
        start, end = data.get(start_key, 0 if start_key in data or end_key in data else None), data.get(end_key)
        if isinstance(start, int) and isinstance(end, int):
            tokens.add(f'off:{start}-{end}')
    return tokens


def unaccounted(answer: CitedAnswer, expected: list[Expected]) -> list[str]:
    """The labels of the citations the answer neither keeps (by identity: `_identity`) nor names in a problem."""
    tokens = _answer_tokens(answer)
    told = ' '.join(f'{p.message} {p.detail or ""}' for p in answer.problems)
    offsets = {f'off:{p.start}-{p.end}' for p in answer.problems if p.start is not None and p.end is not None}
    return [
        e.label
        for e in expected
        if not (_identity(e) & tokens or e.tokens & offsets or any(needle in told for needle in e.needles))
    ]


WireOutcome = Literal['normalised', 'recovered', 'listed', 'unaccounted']
"""What became of one citation the provider sent (see `account_wire`)."""


def account_wire(
    expected: Sequence[Expected],
    *,
    plain: Sequence[ModelMessage],
    tracked: Sequence[ModelMessage],
    answer: CitedAnswer,
    problems: Sequence[CitationProblem],
) -> dict[WireOutcome, list[str]]:
    """Sort each sent citation into exactly one outcome, by identity, from the messages alone.

    - `'normalised'`: on a `TextPart.citations` of the run *without* this package (`plain`), and still there with it;
    - `'recovered'`: on a `TextPart.citations` only with this package (`tracked`);
    - `'listed'`: in the answer's `raw_only` data, or named by a problem (its offsets, its URL / id / title, or its
      kind in backticks);
    - `'unaccounted'`: none of these, a silent loss.

    Identity is the web URL when the citation has one (a title or a domain is shared by many pages), else its
    document id, title or offsets. Citations are read from every text part, so one outside the output's text still counts.
    """
    normalised, shown = _parts_tokens(plain), _parts_tokens(tracked)
    raw: set[str] = set()
    for entry in answer.raw_only:
        raw |= _raw_tokens(entry.data)
    told = [(f'{p.message} {p.detail or ""}', f'off:{p.start}-{p.end}') for p in [*problems, *answer.problems]]
    out: dict[WireOutcome, list[str]] = {}
    for e in expected:
        tokens = _identity(e)
        outcome: WireOutcome
        if tokens & normalised and tokens & shown:
            outcome = 'normalised'
        elif tokens & shown:
            outcome = 'recovered'
        elif tokens & raw or any(_tells(e, text, offsets) for text, offsets in told):
            outcome = 'listed'
        else:
            outcome = 'unaccounted'
        out.setdefault(outcome, []).append(e.label)
    return out


def _identity(e: Expected) -> frozenset[str]:
    """The tokens that say a kept citation is this one: its web URL when it has one, else all its tokens.

    A title, a domain or offsets are shared by other pages (two pages titled `K2`, two pages grounding one segment):
    a web citation is kept only if its URL is.
    """
    urls = frozenset(t for t in e.tokens if t.startswith(('url:http://', 'url:https://')))
    return urls or e.tokens


def _tells(e: Expected, text: str, offsets: str) -> bool:
    return offsets in e.tokens or any(n in text for n in e.needles) or bool(e.kind and f'`{e.kind}`' in text)


def _parts_tokens(messages: Sequence[ModelMessage]) -> set[str]:
    """Identity tokens of every `TextPart.citations` in `messages`.

    Sources, and anchors in characters and UTF-8 bytes, within the part and within its response's text parts joined
    (where providers count offsets).
    """
    tokens: set[str] = set()
    for message in messages:
        if not isinstance(message, ModelResponse):
            continue
        joined = ''
        for part in message.parts:
            if not isinstance(part, TextPart):
                continue
            for citation in part.citations or []:
                for source in citation.sources:
                    if isinstance(source, WebCitationSource):
                        tokens.add('url:' + source.url)
                    else:
                        tokens.add('kind:document')
                        if source.document_id:
                            tokens.add('doc:' + source.document_id)
                    if source.title:
                        tokens.add('title:' + source.title)
                if citation.anchor is not None:
                    start, end = citation.anchor.start, citation.anchor.end
                    for text, base in ((part.content, ''), (joined + part.content, joined)):
                        at, to = len(base) + start, len(base) + end
                        tokens.add(f'off:{at}-{to}')
                        tokens.add(f'off:{len(text[:at].encode())}-{len(text[:to].encode())}')
            joined += part.content
    return tokens


# --- running the paths ---------------------------------------------------------------------------------------------


@dataclass
class _Seen:
    """What one path showed a reader."""

    answers: list[tuple[str, CitedAnswer]] = field(default_factory=list[tuple[str, CitedAnswer]])
    texts: list[tuple[str, str]] = field(default_factory=list[tuple[str, str]])
    sent_texts: list[tuple[str, str]] = field(default_factory=list[tuple[str, str]])
    """Text sent to another provider (checked with the stricter pattern)."""
    messages: list[ModelMessage] | None = None
    stale: list[tuple[str, CitationProblem]] = field(default_factory=list[tuple[str, CitationProblem]])
    """What `find_stale` reported on history sent back, and where that history came from."""
    copies: list[tuple[str, CitedAnswer, CitedAnswer | None]] = field(
        default_factory=list[tuple[str, CitedAnswer, CitedAnswer | None]]
    )
    """Answers made again from a copy of the history (a UI's), each with the answer the reader was shown (if sent):
    the copy must show what that one showed (audit-only `raw_only` data stays with the run: a UI message has none)."""
    error: BaseException | None = None
    consumed: int = 1
    missing_final: bool = False


class _Checker:
    def __init__(self, subject: _Subject, factory: CitingAgentFactory, deps: object, other: CitingStyle):
        self.subject = subject
        self.factory = factory
        self.kwargs: dict[str, Any] = {'model_settings': subject.settings, 'deps': deps}
        """Keyword arguments of every run."""
        self.other: CitingStyle = other
        self.failures: list[SeamFailure] = []
        self.skipped: list[SeamSkip] = []
        self.runs = 0

    async def check(self, path: SeamPath, cut: int | None) -> None:
        seen = _Seen()
        try:
            await _PATHS[path](self, seen, cut)
        except Exception as exc:  # a broken path is a finding, the other paths still run
            seen.error = exc
        self._judge(path, cut, seen)

    def _judge(self, path: SeamPath, cut: int | None, seen: _Seen) -> None:
        fail = self.failures.append
        if seen.error is not None and cut is None:
            fail(SeamFailure(path, 'runs', 'agent run', f'raised {type(seen.error).__name__}: {seen.error}'))
        if seen.missing_final:
            prop: SeamProperty = 'runs' if cut is None else 'incomplete_when_cut'
            fail(SeamFailure(path, prop, 'stream_cited', 'the stream ended without a FinalAnswer', cut=cut))
        copies = [(where, answer) for where, answer, _ in seen.copies]
        texts = [*seen.texts, *((f'{where}.text', answer.text) for where, answer in [*seen.answers, *copies])]
        for where, text in texts:
            if found := _markup(text, _READER_MARKUP):
                fail(SeamFailure(path, 'clean', where, found[0], cut=cut, detail=found[1]))
        for where, problem in seen.stale:
            fail(SeamFailure(path, 'not_stale', where, f'{problem.code}: {problem.message}', cut=cut))
        for where, text in seen.sent_texts:
            if found := _markup(text, _SENT_MARKUP):
                fail(SeamFailure(path, 'clean', where, found[0], cut=cut, detail=found[1]))
        self._judge_copies(path, cut, seen)
        if cut is not None:
            for where, answer in [*seen.answers, *copies]:
                if answer.complete:
                    message = 'complete=True for a stream cut before its finishing event'
                    fail(SeamFailure(path, 'incomplete_when_cut', where, message, cut=cut))
        elif self.subject.expected is not None and seen.error is None:
            expected = self.subject.expected(seen.consumed, path in _STREAMING_PATHS or self.streams(cut))
            for where, answer in seen.answers:
                if missing := unaccounted(answer, expected):
                    message = f'{len(missing)} of {len(expected)} sent citation(s) are not a span, a source card, ' + (
                        f'raw_only data or a problem: {"; ".join(missing[:5])}' + ('; ...' if len(missing) > 5 else '')
                    )
                    fail(SeamFailure(path, 'accounted', where, message))

    def _judge_copies(self, path: SeamPath, cut: int | None, seen: _Seen) -> None:
        """A copy of the answer (history a UI sent back) shows every source the reader was shown."""
        for where, copy, reader in seen.copies:
            if reader is not None and (missing := unaccounted(copy, shown_expected(reader))):
                message = f'{len(missing)} source(s) the reader was shown are not in it: {"; ".join(missing[:5])}'
                self.failures.append(SeamFailure(path, 'accounted', where, message, cut=cut))

    # -- helpers shared by the paths --

    def agent(
        self, cut: int | None, sent: list[dict[str, JsonValue]], *more: AbstractCapability[Any]
    ) -> tuple[AbstractAgent[Any, Any], TrackCitations]:
        model = self.subject.make(cut, sent)
        # As an application with a Cohere, Anthropic or Mistral tap sets it up.
        track = TrackCitations(
            cohere_tap=cohere_tap_for(model), anthropic_tap=anthropic_tap_for(model), mistral_tap=mistral_tap_for(model)
        )
        self.runs += 1
        return cast('AbstractAgent[Any, Any]', self.factory(model, [track, *more])), track

    def streams(self, cut: int | None) -> bool:
        """Whether `run`/`iter`/`store` stream: always for a streamed recording and for cuts."""
        return self.subject.streamed is True or (self.subject.streamed is None and cut is not None)

    async def run(self, seen: _Seen, cut: int | None, **kwargs: Any) -> Any:
        """`agent.run`; on failure, the answer `TrackCitations.report_run` gives for the run."""
        sent: list[dict[str, JsonValue]] = []
        agent, track = self.agent(cut, sent)
        run_id = f'seams-{uuid.uuid4().hex}'
        handler = _drain if self.streams(cut) else None
        try:
            result = await agent.run(
                self.subject.prompt, run_id=run_id, event_stream_handler=handler, **self.kwargs, **kwargs
            )
        except Exception:
            seen.answers.append(('TrackCitations.report_run(run_id).answer', track.report_run(run_id).answer))
            raise
        finally:
            seen.consumed = len(sent)
        seen.answers.append(('CitedAnswer.from_result(result)', CitedAnswer.from_result(result)))
        seen.answers.append(('TrackCitations.report(result).answer', track.report(result).answer))
        seen.messages = result.all_messages()
        return result


def _default_agent(model: Model[Any], capabilities: Sequence[AbstractCapability[object]]) -> AbstractAgent[Any, Any]:
    return Agent(model, capabilities=[*capabilities])


async def _drain(ctx: Any, events: Any) -> None:
    async for _ in events:
        pass


async def _path_run(checker: _Checker, seen: _Seen, cut: int | None) -> None:
    await checker.run(seen, cut)


async def _path_iter(checker: _Checker, seen: _Seen, cut: int | None) -> None:
    sent: list[dict[str, JsonValue]] = []
    agent, track = checker.agent(cut, sent)
    streams = checker.streams(cut)
    run_id = f'seams-{uuid.uuid4().hex}'
    try:
        async with agent.iter(checker.subject.prompt, run_id=run_id, **checker.kwargs) as run:
            async for node in run:
                if streams and Agent.is_model_request_node(node):
                    async with node.stream(run.ctx) as stream:
                        async for _ in stream:
                            pass
    except Exception:
        seen.answers.append(('TrackCitations.report_run(run_id).answer', track.report_run(run_id).answer))
        raise
    finally:
        seen.consumed = len(sent)
    seen.answers.append(('CitedAnswer.from_result(agent_run)', CitedAnswer.from_result(run)))
    result = run.result
    if result is None:
        seen.answers.append(('TrackCitations.report_run(run_id).answer', track.report_run(run_id).answer))
    else:
        seen.answers.append(('TrackCitations.report(agent_run.result).answer', track.report(result).answer))


async def _path_run_stream(checker: _Checker, seen: _Seen, cut: int | None) -> None:
    sent: list[dict[str, JsonValue]] = []
    agent, track = checker.agent(cut, sent)
    run_id = f'seams-{uuid.uuid4().hex}'
    try:
        async with agent.run_stream(checker.subject.prompt, run_id=run_id, **checker.kwargs) as stream:
            async for _ in stream.stream_output(debounce_by=None):
                pass
            seen.answers.append(('CitedAnswer.from_result(stream)', CitedAnswer.from_result(stream)))
            seen.answers.append(('TrackCitations.report(stream).answer', track.report(stream).answer))
    except Exception:
        seen.answers.append(('TrackCitations.report_run(run_id).answer', track.report_run(run_id).answer))
        raise
    finally:
        seen.consumed = len(sent)


async def _path_run_stream_events(checker: _Checker, seen: _Seen, cut: int | None) -> None:
    sent: list[dict[str, JsonValue]] = []
    agent, track = checker.agent(cut, sent)
    run_id = f'seams-{uuid.uuid4().hex}'
    result: Any = None
    try:
        async with agent.run_stream_events(checker.subject.prompt, run_id=run_id, **checker.kwargs) as events:
            async for event in events:
                if isinstance(event, AgentRunResultEvent):
                    result = event.result
    except Exception:
        seen.answers.append(('TrackCitations.report_run(run_id).answer', track.report_run(run_id).answer))
        raise
    finally:
        seen.consumed = len(sent)
    if result is None:
        seen.answers.append(('TrackCitations.report_run(run_id).answer', track.report_run(run_id).answer))
        return
    seen.answers.append(('CitedAnswer.from_result(event.result)', CitedAnswer.from_result(result)))
    seen.answers.append(('TrackCitations.report(event.result).answer', track.report(result).answer))


async def _stream_cited(
    checker: _Checker, seen: _Seen, cut: int | None, via: Literal['events', 'run_stream']
) -> FinalAnswer | None:
    sent: list[dict[str, JsonValue]] = []
    agent, _ = checker.agent(cut, sent)
    chunks: list[str] = []
    final: FinalAnswer | None = None
    try:
        async with stream_cited(agent, checker.subject.prompt, via=via, **checker.kwargs) as stream:
            async for item in stream:
                if isinstance(item, TextChunk):
                    chunks.append(item.text)
                else:
                    final = item
    except Exception:
        if final is None or final.error is None:
            raise  # raised without the incomplete FinalAnswer it promises first
        if cut is None:
            raise
    finally:
        seen.consumed = len(sent)
        seen.texts.append(('TextChunk.text (all chunks joined)', ''.join(chunks)))
        if final is not None:
            seen.answers.append(('FinalAnswer.answer', final.answer))
        else:
            seen.missing_final = True
    return final


async def _path_stream_cited(checker: _Checker, seen: _Seen, cut: int | None) -> None:
    await _stream_cited(checker, seen, cut, 'events')


async def _path_stream_cited_run_stream(checker: _Checker, seen: _Seen, cut: int | None) -> None:
    await _stream_cited(checker, seen, cut, 'run_stream')


async def _path_render(checker: _Checker, seen: _Seen, cut: int | None) -> None:
    inner = _Seen()
    try:
        await checker.run(inner, cut)
    finally:
        seen.consumed = inner.consumed
        if inner.answers:
            answer = inner.answers[-1][1]
            seen.texts.append(("render_markdown(answer, 'inline')", render_markdown(answer, 'inline')))
            seen.texts.append(("render_markdown(answer, 'footnotes')", render_markdown(answer, 'footnotes')))
            # What a browser shows: entities decoded, so an escaped `&lt;cite&gt;` counts as a cite tag.
            seen.texts.append(('render_html(answer) as displayed', html.unescape(render_html(answer))))


async def _path_store(checker: _Checker, seen: _Seen, cut: int | None) -> None:
    inner = _Seen()
    conversation = Conversation(conversation_id=f'seams-{uuid.uuid4().hex}')
    try:
        result = await checker.run(inner, cut, conversation=conversation)
    finally:
        seen.consumed = inner.consumed
    store = SQLiteConversationStore(':memory:')
    try:
        entries = await store.save(result)
        for entry in entries:
            if isinstance(entry.message, ModelResponse):
                stored = await store.answer(entry.id)
                if stored is not None:
                    seen.answers.append(('StoredAnswer.answer', stored.answer))
                elif any(isinstance(p, TextPart) and p.content for p in entry.message.parts):
                    raise AssertionError(f'no stored answer for response entry {entry.id!r}, which has text')
    finally:
        store.close()


async def _path_resend(checker: _Checker, seen: _Seen, cut: int | None) -> None:
    inner = _Seen()
    try:
        await checker.run(inner, cut)
    finally:
        seen.consumed = inner.consumed
    other = CitingModel('Noted.', style=checker.other)
    agent = Agent(other, capabilities=[CleanStaleCitations()])
    checker.runs += 1
    await agent.run('Go on.', message_history=inner.messages)
    for message in other.requests[-1]:
        if isinstance(message, ModelResponse):
            for part in message.parts:
                if isinstance(part, TextPart):
                    seen.sent_texts.append((f'history sent to {checker.other} (TextPart.content)', part.content))


async def _ui_events(
    checker: _Checker,
    seen: _Seen,
    cut: int | None,
    encoder: UIEventStream[Any, Any, Any, Any],
    answer: Callable[[Any], Any],
    *more: AbstractCapability[Any],
) -> list[Any]:
    """What a UI protocol's stream sends of a run (`encoder`), ending with the whole answer (`answer(result)`)."""
    sent: list[dict[str, JsonValue]] = []
    agent, _ = checker.agent(cut, sent, *more)
    out: list[Any] = []

    async def on_complete(result: Any) -> AsyncIterator[Any]:
        yield answer(result)

    try:
        async with agent.run_stream_events(checker.subject.prompt, **checker.kwargs) as events:
            async for item in encoder.transform_stream(events, on_complete=on_complete):
                out.append(item)
    finally:
        seen.consumed = len(sent)
    return out


async def _path_ui_vercel(checker: _Checker, seen: _Seen, cut: int | None) -> None:
    from pydantic_ai.ui.vercel_ai.request_types import TextUIPart, UIMessage
    from pydantic_ai.ui.vercel_ai.response_types import BaseChunk, DataChunk, ErrorChunk

    from .._answer import cited_answer_ta
    from .._edit import find_stale
    from ..ui import CITED_ANSWER_DATA_TYPE, CitedVercelAIAdapter, CitedVercelAIEventStream, cited_answer_chunk
    from ..ui._vercel_message import ui_message_of

    prompt = checker.subject.prompt
    encoder = CitedVercelAIEventStream[Any, Any]()
    chunks: list[BaseChunk] = await _ui_events(checker, seen, cut, encoder, cited_answer_chunk, CleanStaleCitations())
    message = ui_message_of(chunks)
    seen.texts.extend(
        ('UI text part (text-delta chunks joined)', p.text) for p in message.parts if isinstance(p, TextUIPart)
    )
    for chunk in chunks:
        if isinstance(chunk, DataChunk) and chunk.type == CITED_ANSWER_DATA_TYPE:
            seen.answers.append(('cited_answer_chunk(result).data', cited_answer_ta.validate_python(chunk.data)))
        elif isinstance(chunk, ErrorChunk) and cut is None and seen.error is None:
            seen.error = RuntimeError(f'the stream sent an error chunk: {chunk.error_text}')
    user = UIMessage(id='user', role='user', parts=[TextUIPart(text=prompt)])
    history = CitedVercelAIAdapter[Any, Any].load_messages([user, message])
    where = 'CitedVercelAIAdapter.load_messages(the message useChat builds)'
    seen.stale.extend((f'find_stale({where})', problem) for problem in find_stale(history))
    shown = next((a for w, a in seen.answers if w.startswith('cited_answer_chunk')), None)
    seen.copies.append((f'CitedAnswer.from_messages({where})', CitedAnswer.from_messages(history), shown))


async def _path_ui_ag_ui(checker: _Checker, seen: _Seen, cut: int | None) -> None:
    from ag_ui.core import BaseEvent, CustomEvent, RunErrorEvent, TextMessageContentEvent, TextMessageStartEvent
    from pydantic_ai import ModelRequest

    from .._answer import cited_answer_ta
    from ..ui import CITATIONS_EVENT_NAME, CITED_ANSWER_EVENT_NAME, CitedAGUIEventStream, cited_answer_event
    from ..ui._common import load_citations

    prompt = checker.subject.prompt
    sent_events: list[BaseEvent] = await _ui_events(
        checker, seen, cut, CitedAGUIEventStream[Any, Any](), cited_answer_event
    )
    texts: dict[str, str] = {}
    cited: dict[str, Any] = {}
    for event in sent_events:
        if isinstance(event, TextMessageStartEvent):
            texts.setdefault(event.message_id, '')
        elif isinstance(event, TextMessageContentEvent):
            texts[event.message_id] = texts.get(event.message_id, '') + event.delta
        elif isinstance(event, CustomEvent) and event.name == CITATIONS_EVENT_NAME:
            value = cast('dict[str, Any]', event.value)
            cited[str(value['message_id'])] = value['citations']  # (a later event for a message replaces it)
        elif isinstance(event, CustomEvent) and event.name == CITED_ANSWER_EVENT_NAME:
            seen.answers.append(('cited_answer_event(result).value', cited_answer_ta.validate_python(event.value)))
        elif isinstance(event, RunErrorEvent) and cut is None and seen.error is None:
            seen.error = RuntimeError(f'the stream sent RUN_ERROR: {event.message}')
    seen.texts.extend(('AG-UI text message (TEXT_MESSAGE_CONTENT deltas joined)', text) for text in texts.values())
    shown = next((a for w, a in seen.answers if w.startswith('cited_answer_event')), None)
    if cut is None and shown is not None:  # (what the client holds says nothing of completeness: judged uncut only)
        parts = [TextPart(text, citations=load_citations(cited.get(mid)) or None) for mid, text in texts.items()]
        held = CitedAnswer.from_messages([ModelRequest.user_text_prompt(prompt), ModelResponse(parts=parts)])
        where = 'what the AG-UI client holds (text messages, citations of their last pydantic_ai_citations event)'
        seen.copies.append((where, held, shown))


_PATHS: dict[SeamPath, Callable[[_Checker, _Seen, int | None], Any]] = {
    'run': _path_run,
    'iter': _path_iter,
    'run_stream': _path_run_stream,
    'run_stream_events': _path_run_stream_events,
    'stream_cited': _path_stream_cited,
    'stream_cited_run_stream': _path_stream_cited_run_stream,
    'render': _path_render,
    'store': _path_store,
    'resend': _path_resend,
    'ui_vercel': _path_ui_vercel,
    'ui_ag_ui': _path_ui_ag_ui,
}


def _markup(text: str, pattern: re.Pattern[str]) -> tuple[str, str] | None:
    """What raw markup `text` holds (the first piece) and the text around it, or `None`."""
    first = pattern.search(text)
    if first is None:
        return None
    context = text[max(0, first.start() - 20) : first.end() + 20]
    return f'raw markup {first.group()!r}', f'at offset {first.start()}: {context!r}'
