"""Probes: named scenarios run through Pydantic AI's real model classes to fill the capability matrix.

Every cell is measured, never typed in: responses come from the package's wire fixtures (`'probe'`), from recordings
(`'recording'`) or from live providers (`'live'`), and what is read off is what Pydantic AI actually did — the
citations on the parts (through `TrackCitations`), and the request bodies it sent (captured by the offline transport).

Scenarios per row:

- `cited` / `document`: a non-streamed cited answer → anchor and source kinds, wire accounting.
- `cited_stream`: the same streamed → when citations arrive.
- request switch: the same prompt (with a small text document where the API takes one) with and without
  `Citations()`; if the outgoing request differs, the provider cites "when asked".
- `replay`: the cited answer's history sent back to the same provider, untouched and then with its text edited →
  whether citation data is in the outgoing request.
- `handoff`: the same history sent to another provider's real model class → what that provider receives.
- `structured`: a structured `output_type` with `Citations()` → whether the request still asks for citations, and
  whether citation markup reached the output tool's arguments.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import os
import time
import warnings
from collections import Counter
from collections.abc import Callable, Generator, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from pydantic import BaseModel, JsonValue
from pydantic_ai import (
    Agent,
    BinaryContent,
    ModelMessage,
    ModelResponse,
    TextPart,
    ToolCallPart,
    UserContent,
)
from pydantic_ai.capabilities import Citations
from pydantic_ai.models import Model

from .._answer import CitedAnswer, last_response
from .._models import ApiLabel, model_family
from .._problems import shorten
from .._replay import (
    Recording,
    RecordingError,
    anthropic_tap_for,
    cohere_tap_for,
    load_recording,
    mistral_tap_for,
    perplexity_tap_for,
    sharing_sdk_setup,
)
from .._track import CitedRun, TrackCitations
from ..formats.markup import scan_markup
from ..formats.openai_placement import PLACEMENT_CODES
from ..formats.unmapped import recover_cohere_from_body, recover_search_result_locations_from_body
from ..formats.wire import WireApi, WireCitation, count_wire_citations
from ._fixtures import FIXTURE_APIS, fixture_families, load_fixture, scenarios
from ._matrix import CapabilityMatrix, Evidence

__all__ = (
    'GATEWAY_KEYS',
    'KNOWN_UNMAPPED',
    'LIVE_KEYS',
    'build_matrix',
    'explain_gaps',
    'probe_api',
    'probe_live',
    'probe_recording',
)

Progress = Callable[[str], None]

PROMPT = 'How tall is K2? Cite your sources.'
DOCUMENT = BinaryContent(
    data=b'K2 is 8,611 metres tall. It stands on the border of Pakistan and China.', media_type='text/plain'
)

LIVE_KEYS: dict[str, tuple[str, ...]] = {
    'anthropic': ('ANTHROPIC_API_KEY',),
    'openai': ('OPENAI_API_KEY',),
    'openai-responses': ('OPENAI_API_KEY',),
    'openai-chat': ('OPENAI_API_KEY',),
    'google-gla': ('GOOGLE_API_KEY', 'GEMINI_API_KEY'),
    'google-vertex': ('GOOGLE_APPLICATION_CREDENTIALS',),
    'bedrock': ('AWS_ACCESS_KEY_ID',),
    'openrouter': ('OPENROUTER_API_KEY',),
    'xai': ('XAI_API_KEY',),
    'mistral': ('MISTRAL_API_KEY',),
    'cohere': ('CO_API_KEY',),
    'groq': ('GROQ_API_KEY',),
}
"""Environment variables that must be set for `--live PROVIDER:MODEL` (any one of each tuple): the ones Pydantic AI's
providers read."""

KNOWN_UNMAPPED: dict[tuple[ApiLabel, str], str] = {
    ('mistral', 'reference'): 'Pydantic AI 2.68 drops Mistral reference chunks (`MistralModel`), no raw data survives',
    ('groq', 'search_result'): 'Groq compound search results go to `NativeToolReturnPart.content`, never to the text',
    ('cohere', 'text_content'): 'CohereModel maps no citations; `CohereTap` with `TrackCitations(cohere_tap=...)` '
    'recovers them from the body, streamed or not',
    (
        'openai-responses',
        'container_file_citation',
    ): 'Pydantic AI 2.68 drops it unless `openai_include_raw_annotations=True`'
    ' is set; then TrackCitations recovers it from `provider_details["annotations"]`',
    ('perplexity-sonar', 'search_result'): 'a search result the answer cites with no `[N]` marker has no position; it '
    'stays in `provider_details["unmapped"]`',
    ('perplexity-agent', 'search_result'): 'a search result the answer cites with no `[N]` marker has no position',
    ('xai', 'search_result_url'): "xAI's list of URLs searched has no position; Pydantic AI keeps it only in search "
    'tool returns when their output is included (then listed as raw-only)',
}
"""Wire citation kinds Pydantic AI drops with no raw data left for this package: listed with the reason."""

_HANDOFF_TARGET: ApiLabel = 'openai-chat'
_HANDOFF_FALLBACK: ApiLabel = 'anthropic-messages'

DeferredHandoff = tuple[ApiLabel, str, list[ModelMessage]]
"""A hand-off probe left for another process: the row's API and model family, and the cited history to send."""

_DEFERRED: ContextVar[list[DeferredHandoff] | None] = ContextVar(
    'pydantic_ai_citations_deferred_handoffs', default=None
)


@contextmanager
def deferring_handoffs() -> Generator[list[DeferredHandoff]]:
    """Within this block, the fixture probes leave their hand-offs in the list yielded, and `build_matrix` explains no gaps.

    For the second process of a split matrix run (`_split`): the hand-off target's SDK is then imported by the first
    process only, which runs them (`run_handoffs`) and explains the gaps of the merged matrix.
    """
    deferred: list[DeferredHandoff] = []
    token = _DEFERRED.set(deferred)
    try:
        yield deferred
    finally:
        _DEFERRED.reset(token)


async def run_handoffs(matrix: CapabilityMatrix, deferred: Sequence[DeferredHandoff]) -> None:
    """Run hand-off probes that another process left (`deferring_handoffs`), into `matrix`."""
    with sharing_sdk_setup():
        for api, family, messages in deferred:
            row = matrix.for_family(family)
            await _guarded(row, api, 'probe', 'handoff', _probe_handoff(row, api, messages, 'probe'))


class _ProbeOutput(BaseModel):
    answer: str


@dataclass
class _RunOutcome:
    report: CitedRun
    messages: list[ModelMessage]
    response: ModelResponse
    sent: list[dict[str, JsonValue]]
    produced: str
    """`'yes'` (Pydantic AI normalised citations), `'recovered'` (only this package's recovery) or `'no'`."""


# --- building the matrix ------------------------------------------------------------------------------------------


async def build_matrix(
    *,
    probes: bool = True,
    apis: Sequence[ApiLabel] | None = None,
    recordings: Sequence[str | Path] = (),
    live: Sequence[str] = (),
    progress: Progress | None = None,
) -> CapabilityMatrix:
    """Measure the matrix: built-in probes (offline, the default), recordings, and live providers.

    Args:
        probes: Run the built-in probes over the package's wire fixtures.
        apis: Rows to probe (default: every row with fixtures).
        recordings: Recording files (pydantic-ai VCR cassettes, xAI gRPC cassettes, Vercel AI SDK fixtures) or
            folders searched for them.
        live: `provider:model` names to probe live (needs the provider's API key; skipped with a message otherwise).
        progress: Called with a short line as each step starts.
    """
    matrix = CapabilityMatrix()
    say: Progress = progress or _quiet
    with sharing_sdk_setup():  # the many replay models of one run share what is costly to set up
        if probes:
            for api in apis or FIXTURE_APIS:
                say(f'probing {api}')
                await probe_api(matrix, api)
        for path in _recording_files(recordings):
            say(f'replaying {path}')
            await probe_recording(matrix, path)
    for name in live:
        say(f'live {name}')
        await probe_live(matrix, name, progress=say)
    if _DEFERRED.get() is None:  # (a process whose hand-offs run elsewhere leaves the gaps to the merged matrix)
        explain_gaps(matrix)
    return matrix


_GAP_REASONS = {
    'anchor': 'no citations were produced, so there is nothing to anchor',
    'sources': 'no citations were produced',
    'stream': 'no streamed run produced citations',
    'replay': 'no citations to replay (or no follow-up response to replay them against)',
    'handoff': 'no cited history to hand off',
    'structured': 'no structured-output scenario for this source (recordings hold none)',
    'wire': 'no response bodies to count',
    'citations': 'nothing could be run',
}


def explain_gaps(matrix: CapabilityMatrix) -> None:
    """Give every `'n/a'` cell a note saying why it cannot apply (per model family where rows are split by it)."""
    for row in matrix.rows:
        for family in row.families:
            for column, reason in _GAP_REASONS.items():
                if matrix.cell(row.api, column, family=family) == 'n/a':
                    matrix.note(row.api, column, f'n/a: {reason}', family=family)


def _quiet(_line: str) -> None:
    pass


def _recording_files(paths: Sequence[str | Path]) -> Iterator[Path]:
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            found = [
                p
                for p in sorted(path.rglob('*'))
                if p.is_file() and p.name.endswith(('.yaml', '.yml', '.json', '.chunks.txt'))
            ]
            yield from found or [path]  # an empty folder is reported by `probe_recording`
        else:
            yield path


# --- probes over the package's fixtures ---------------------------------------------------------------------------


async def probe_api(matrix: CapabilityMatrix, api: ApiLabel) -> None:
    """Run every scenario the row has fixtures for; a failing scenario is recorded as the row's failure.

    Each model family with its own fixtures (`fixture_families`, e.g. Meta Llama on Bedrock) is probed apart, so
    its runs fill its own row when it answers differently.
    """
    for family in ('', *fixture_families(api)):
        row_family = _fixture_family(api, family)
        await _probe_fixtures(matrix.for_family(row_family), api, family, row_family)


def _fixture_family(api: ApiLabel, family: str) -> str:
    """The model family of a fixture folder: its name, or for the API's own fixtures their model's family."""
    if family:
        return family
    try:
        return model_family(api, load_fixture(api, scenarios(api)[0]).model_name)
    except Exception:  # no or malformed fixtures: `_probe_fixtures` reports them on the row
        return ''


async def _probe_fixtures(matrix: CapabilityMatrix, api: ApiLabel, family: str, row_family: str) -> None:
    matrix.ensure_row(api)
    available = set(scenarios(api, family))
    cited_outcome: _RunOutcome | None = None
    produced: list[str] = []
    for scenario in ('cited', 'document', 'document_page', 'cited_stream'):
        if scenario not in available:
            continue
        try:
            outcome = await _probe_answer(matrix, api, load_fixture(api, scenario, family), 'probe')
        except Exception as e:  # a fixture the model class rejects: the row shows why, the rest goes on
            matrix.fail(api, 'probe', scenario, _describe(e))
            continue
        produced.append(outcome.produced)
        if scenario == 'cited':
            cited_outcome = outcome
    if 'followup' not in available:
        _add_produced(matrix, api, produced, switch=False, evidence='probe')
        matrix.note(api, 'replay', 'no follow-up fixture')
        return
    try:
        followup = load_fixture(api, 'followup', family)
        cited = load_fixture(api, 'cited', family) if 'cited' in available else None
        structured = load_fixture(api, 'structured', family) if 'structured' in available else None
    except Exception as e:
        matrix.fail(api, 'probe', 'fixtures', _describe(e))
        return
    switch = await _guarded(matrix, api, 'probe', 'request switch', _probe_switch(followup))
    _add_produced(matrix, api, produced, switch=bool(switch), evidence='probe')
    if cited is not None and cited_outcome is not None:
        await _guarded(matrix, api, 'probe', 'replay', _probe_replay(matrix, api, cited, followup, 'probe'))
        if api == 'openai-responses':
            # Item ids (and with them annotations) are sent by default only for reasoning models: measure that too.
            scratch = CapabilityMatrix()
            with_ids = dataclasses.replace(
                cited, model_settings=cast(Any, {**(cited.model_settings or {}), 'openai_send_reasoning_ids': True})
            )
            await _guarded(matrix, api, 'probe', 'replay', _probe_replay(scratch, api, with_ids, followup, 'probe'))
            matrix.note(
                api,
                'replay',
                f'with item ids sent (`openai_send_reasoning_ids`, the default for reasoning models): '
                f'{scratch.cell(api, "replay")}',
            )
        if (deferred := _DEFERRED.get()) is not None:
            deferred.append((api, row_family, cited_outcome.messages))
        else:
            await _guarded(
                matrix, api, 'probe', 'handoff', _probe_handoff(matrix, api, cited_outcome.messages, 'probe')
            )
    if structured is not None:
        await _guarded(matrix, api, 'probe', 'structured', _probe_structured(matrix, api, structured))
    else:
        matrix.note(api, 'structured', 'no structured-output fixture')


async def _guarded(matrix: CapabilityMatrix, api: ApiLabel, evidence: Evidence, name: str, step: Any) -> Any:
    try:
        return await step
    except Exception as e:
        matrix.fail(api, evidence, name, _describe(e))
        return None


def _add_produced(
    matrix: CapabilityMatrix, api: ApiLabel, produced: list[str], *, switch: bool, evidence: Evidence
) -> None:
    """One `citations` observation per cited run; `'when asked'` when asking changes the request."""
    for value in produced:
        if value == 'yes' and switch:
            value = 'when asked'
        matrix.add(api, 'citations', value, evidence)
        if value == 'recovered':
            matrix.note(api, 'citations', 'Pydantic AI maps none of them; TrackCitations recovers them from raw data')


_SDK_EXTRAS = {
    'anthropic': 'anthropic',
    'openai': 'openai',
    'google': 'google',
    'boto3': 'bedrock',
    'botocore': 'bedrock',
    'xai_sdk': 'xai',
    'cohere': 'cohere',
    'mistralai': 'mistral',
    'groq': 'groq',
    'yaml': 'testing',
}


def _describe(error: BaseException) -> str:
    root = error
    while not isinstance(root, ModuleNotFoundError) and root.__cause__ is not None:
        root = root.__cause__
    if isinstance(root, ModuleNotFoundError) and root.name:
        top = root.name.split('.')[0]
        extra = _SDK_EXTRAS.get(top)
        if extra is not None:
            return f'needs the {top!r} package: pip install "pydantic-ai-citations[{extra}]" (or [all])'
    return shorten(f'{type(error).__name__}: {error}', 300)


# --- the scenarios ------------------------------------------------------------------------------------------------


async def _run(
    model: Model,
    prompt: str | Sequence[UserContent],
    *,
    streamed: bool,
    settings: Any,
    capabilities: Sequence[Any] = (),
    history: Sequence[ModelMessage] | None = None,
    output_type: Any = str,
    recover: bool = True,
) -> tuple[CitedRun, list[ModelMessage]]:
    track = TrackCitations(
        recover_raw=recover,
        perplexity_tap=perplexity_tap_for(model),
        cohere_tap=cohere_tap_for(model),
        anthropic_tap=anthropic_tap_for(model),
        mistral_tap=mistral_tap_for(model),
    )
    agent = Agent(model, capabilities=[track, *capabilities], output_type=output_type)
    with warnings.catch_warnings():
        warnings.simplefilter('ignore')  # probes expect the warnings the package and SDKs give (deprecated models…)
        if streamed:
            async with agent.run_stream(prompt, message_history=history, model_settings=settings) as stream:
                async for _ in stream.stream_output(debounce_by=None):
                    pass
            return track.report(stream), stream.all_messages()
        result = await agent.run(prompt, message_history=history, model_settings=settings)
        return track.report(result), result.all_messages()


def _last_response(messages: Sequence[ModelMessage]) -> ModelResponse:
    found = last_response(messages)
    if found is None:
        raise RecordingError('<run>', 'the run produced no model response')
    return found[1]


async def _probe_answer(
    matrix: CapabilityMatrix, api: ApiLabel, recording: Recording, evidence: Evidence
) -> _RunOutcome:
    """One cited answer: anchors, sources, arrival (streamed), produced-or-not, wire accounting."""
    matrix.add_model(api, recording.model_name)
    prompt = recording.prompt or PROMPT
    sent: list[dict[str, JsonValue]] = []
    report, messages = await _run(
        recording.model(sent=sent), prompt, streamed=recording.streamed, settings=recording.model_settings
    )
    response = _last_response(messages)
    request = report.requests[-1] if report.requests else None
    recovered_by_part = {p.part_index: p.recovered for p in request.parts} if request is not None else {}
    if request is not None:
        matrix.observe(dataclasses.replace(request, api=api), evidence)
    recovered = sum(recovered_by_part.values())
    normalised = _citation_count(response) - recovered
    # The row says one thing: what the wire accounting counts as recovered makes the run `recovered` too.
    recovered += _account_wire(matrix, api, recording, report, response, recovered_by_part, evidence)
    produced = 'yes' if normalised else ('recovered' if recovered > 0 else 'no')
    placement = Counter(p.code for p in report.problems if p.code in PLACEMENT_CODES)
    if placement:  # OpenAI's marker placement guidance broken by the model (`formats.openai_placement`)
        counts = ', '.join(f'{n} {code}' for code, n in sorted(placement.items()))
        matrix.note(api, 'anchor', f'{evidence}: OpenAI marker placement: {counts}')
    return _RunOutcome(report, messages, response, sent, produced)


def _citation_count(response: ModelResponse | None) -> int:
    if response is None:
        return 0
    return sum(len(p.citations or []) for p in response.parts if isinstance(p, TextPart))


_SWITCH_SETTINGS = ('citations', 'xai_include_inline_citations')


async def _probe_switch(followup: Recording) -> bool:
    """Does asking for citations change the request? Same prompt (with a document where accepted), with and without."""
    settings = {k: v for k, v in (followup.model_settings or {}).items() if k not in _SWITCH_SETTINGS}
    bodies: list[str] = []
    for prompt in ([PROMPT, DOCUMENT], PROMPT):
        bodies = []
        try:
            for capabilities in ((), (Citations(),)):
                sent: list[dict[str, JsonValue]] = []
                await _run(
                    _neutral_model(followup, sent),
                    prompt,
                    streamed=followup.streamed,
                    settings=settings,
                    capabilities=capabilities,
                )
                bodies.append(_stable_dump(sent[0]) if sent else '')
        except Exception:
            if isinstance(prompt, str):
                raise
            continue  # the API takes no text documents: try the plain prompt
        break
    return len(bodies) == 2 and bodies[0] != bodies[1]


async def _probe_replay(
    matrix: CapabilityMatrix, api: ApiLabel, cited: Recording, followup: Recording, evidence: Evidence
) -> None:
    """Send the cited answer's history back to the same provider, untouched and then edited."""
    combined = dataclasses.replace(cited, responses=[*cited.responses, *followup.responses, *followup.responses])
    sent: list[dict[str, JsonValue]] = []
    model = combined.model(sent=sent)
    first, history = await _run(model, cited.prompt or PROMPT, streamed=cited.streamed, settings=cited.model_settings)
    if not any(p.citations for p in first.requests[-1].parts) if first.requests else True:
        matrix.note(api, 'replay', f'{evidence}: the cited answer had no citations, so nothing could be replayed')
        return
    await _run(model, 'Thanks!', streamed=False, settings=followup.model_settings, history=history)
    untouched = _has_citation_data(sent[-1])
    if not untouched:
        matrix.add(api, 'replay', 'no', evidence)
        return
    edited = copy.deepcopy(history)
    for part in _last_response(edited).parts:
        if isinstance(part, TextPart) and part.citations:
            part.content += ' (edited)'
    await _run(model, 'Thanks!', streamed=False, settings=followup.model_settings, history=edited)
    matrix.add(api, 'replay', 'yes' if _has_citation_data(sent[-1]) else 'only when untouched', evidence)


async def _probe_handoff(
    matrix: CapabilityMatrix, api: ApiLabel, messages: list[ModelMessage], evidence: Evidence
) -> None:
    """Send the cited answer's history to another provider's real model class and read what it receives."""
    target_api = (
        _HANDOFF_TARGET
        if api not in (_HANDOFF_TARGET, 'openrouter', 'perplexity-sonar', 'groq')
        else (_HANDOFF_FALLBACK)
    )
    target = load_fixture(target_api, 'followup')
    sent: list[dict[str, JsonValue]] = []
    await _run(target.model(sent=sent), 'Thanks!', streamed=False, settings=target.model_settings, history=messages)
    if not sent:
        raise RecordingError(str(target.path), 'the hand-off request was not captured')
    body = sent[-1]
    answer = CitedAnswer.from_messages(messages)
    # Citation markup as the package's grammar reads it (numbered markers too), and what citations are anchored on as
    # markers (an OpenAI link), each piece as JSON would write it.
    pieces = [
        *scan_markup(answer.text, numbered=True).cuts,
        *((s.start, s.end) for s in answer.spans if s.kind == 'marker'),
    ]
    markers = [json.dumps(answer.text[a:b], ensure_ascii=False)[1:-1] for a, b in pieces if a < b]
    dumped = json.dumps(body, ensure_ascii=False)
    if _has_citation_data(body):
        value = 'text + citation data'
    elif any(m in dumped for m in markers):
        value = 'raw markers in text'
    else:
        value = 'plain text'
    matrix.add(api, 'handoff', value, evidence)
    matrix.note(api, 'handoff', f'measured by sending the history to {target_api}')


async def _probe_structured(matrix: CapabilityMatrix, api: ApiLabel, recording: Recording) -> None:
    """A structured `output_type` with `Citations()`: still asked for? markup in the output tool's arguments?"""
    switch = matrix.cell(api, 'citations', evidence=('probe',))
    sent: list[dict[str, JsonValue]] = []
    prompt: Sequence[UserContent] | str = [PROMPT, DOCUMENT] if 'when asked' in switch else PROMPT
    report, messages = await _run(
        recording.model(sent=sent),
        prompt,
        streamed=recording.streamed,
        settings=recording.model_settings,
        capabilities=(Citations(),),
        output_type=_ProbeOutput,
    )
    if 'when asked' not in switch:
        value = 'no switch'
    else:
        value = 'requested' if _citations_switched_on(sent[0] if sent else {}) else 'not requested'
    matrix.add(api, 'structured', value, 'probe')
    if any(p.code == 'citations_disabled_by_output_mode' for p in report.problems):
        matrix.note(api, 'structured', 'TrackCitations recorded citations_disabled_by_output_mode')
    markup = [
        text
        for message in messages
        if isinstance(message, ModelResponse)
        for part in message.parts
        for text in _strings_of(part)
        if scan_markup(text).matches
    ]
    matrix.note(
        api,
        'structured',
        'citation markup reached the output (StripCitationMarkup removes it)'
        if markup
        else 'no citation markup in the output',
    )


def _strings_of(part: object) -> Iterator[str]:
    if isinstance(part, ToolCallPart):
        args = part.args
        if isinstance(args, str):
            yield args
        elif args is not None:
            yield json.dumps(args, ensure_ascii=False)
    elif isinstance(part, TextPart):
        yield part.content


# --- reading request bodies ---------------------------------------------------------------------------------------


def _walk(value: object) -> Iterator[tuple[str, object]]:
    stack: list[object] = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            for k, v in cast('dict[str, object]', item).items():
                yield k, v
                stack.append(v)
        elif isinstance(item, list):
            stack.extend(cast('list[object]', item))


def _has_citation_data(body: object) -> bool:
    """Citation data in a request: a non-empty `citations` / `annotations` list anywhere (history replay)."""
    return any(
        k in ('citations', 'annotations') and isinstance(v, list) and bool(cast('list[object]', v))
        for k, v in _walk(body)
    )


def _citations_switched_on(body: object) -> bool:
    """Whether a request asks for citations: documents with `citations.enabled`, xAI's inline-citations option."""
    for key, value in _walk(body):
        if key == 'citations' and isinstance(value, dict) and cast('dict[str, object]', value).get('enabled') is True:
            return True
        if isinstance(value, str) and 'INLINE_CITATIONS' in value:
            return True
        if isinstance(value, int) and key == 'include' and value:
            return True
    return 'INLINE_CITATIONS' in json.dumps(body)


def _neutral_model(recording: Recording, sent: list[dict[str, JsonValue]]) -> Model:
    """The recording's model without the citation settings a replay carries (they would hide the switch)."""
    settings = {k: v for k, v in (recording.model_settings or {}).items() if k not in _SWITCH_SETTINGS}
    return (
        recording.model(sent=sent)
        if settings == recording.model_settings
        else dataclasses.replace(recording, model_settings=cast(Any, settings)).model(sent=sent)
    )


def _stable_dump(body: object) -> str:
    return json.dumps(body, sort_keys=True, default=str)


# --- wire accounting ----------------------------------------------------------------------------------------------


def _account_wire(
    matrix: CapabilityMatrix,
    api: ApiLabel,
    recording: Recording,
    report: CitedRun,
    response: ModelResponse,
    recovered_by_part: dict[int, int],
    evidence: Evidence,
) -> int:
    """Count the first response's wire citations into the `wire` cell; returns how many were recovered."""
    if api == 'other':
        matrix.note(api, 'wire', f'no wire counter for {api}')
        return 0
    wire_api: WireApi = api
    wire: dict[str, WireCitation] = {}
    for raw in recording.responses[:1]:  # one agent run consumes the first response
        for citation in count_wire_citations(wire_api, raw.payload):
            wire.setdefault(citation.key, citation)
    if not wire:
        matrix.add(api, 'wire', 'no wire citations', evidence)
        return 0
    normalised_ids, recovered_ids = _response_ids(response, recovered_by_part)
    listed_ids: set[str] = set()
    for raw_only in report.answer.raw_only:
        listed_ids |= _ids(raw_only.data)
    known = (normalised_ids, recovered_ids | _body_recovered_ids(api, recording), listed_ids)
    counts = {'normalised': 0, 'recovered': 0, 'listed': 0, 'unaccounted': 0}
    unaccounted: list[str] = []
    reasons: set[str] = set()
    for citation in wire.values():
        outcome = _wire_outcome(api, citation, *known)
        if outcome == 'known unmapped':
            reasons.add(f'{citation.kind}: {KNOWN_UNMAPPED[api, citation.kind]}')
            outcome = 'listed'
        elif outcome == 'unaccounted':
            unaccounted.append(citation.kind)
        counts[outcome] += 1
    share = 100 * (len(wire) - counts['unaccounted']) // len(wire)
    matrix.add(api, 'wire', f'{share}%', evidence)
    matrix.note(
        api,
        'wire',
        f'{evidence} {recording.path.name}: {len(wire)} wire = {counts["normalised"]} normalised + '
        f'{counts["recovered"]} recovered + {counts["listed"]} listed'
        + (f' + {counts["unaccounted"]} unaccounted ({", ".join(sorted(set(unaccounted)))})' if unaccounted else '')
        + (f'; listed: {"; ".join(sorted(reasons))}' if reasons else ''),
    )
    return counts['recovered']


def _wire_outcome(
    api: ApiLabel, citation: WireCitation, normalised: set[str], recovered: set[str], listed: set[str]
) -> str:
    """What became of one wire citation: normalised, recovered, listed, known unmapped, or unaccounted for."""
    ids = _wire_ids(citation)
    if ids & normalised:
        return 'normalised'
    if ids & recovered:
        return 'recovered'
    if ids & listed:
        return 'listed'
    return 'known unmapped' if (api, citation.kind) in KNOWN_UNMAPPED else 'unaccounted'


def _body_recovered_ids(api: ApiLabel, recording: Recording) -> set[str]:
    """Identity tokens of what this package recovers from a non-streamed body Pydantic AI does not map."""
    ids: set[str] = set()
    for raw in recording.responses[:1]:
        payload = raw.payload
        if isinstance(payload, dict) and api == 'cohere':
            ids |= _recovery_ids(recover_cohere_from_body(payload)[1])
        elif isinstance(payload, dict) and api == 'anthropic-messages':
            ids |= _recovery_ids(recover_search_result_locations_from_body(payload))
    return ids


def _wire_ids(citation: WireCitation) -> set[str]:
    ids: set[str] = set()
    if citation.url:
        ids.add('url:' + citation.url)
    if citation.document_id:
        ids.add('doc:' + citation.document_id)
        ids.add('doc:' + citation.document_id.split(':', 1)[-1])  # e.g. Anthropic 'document_index:0'
    if not (citation.url or citation.title or citation.start is not None):
        # Only an id (a Google retrieved-context chunk, an Anthropic document index): represented by any document source.
        ids.add('kind:document')
    if citation.title:
        ids.add('title:' + citation.title)
    if citation.start is not None and citation.end is not None:
        ids.add(f'off:{citation.start}-{citation.end}')
    return ids


def _recovery_ids(recovery: Any) -> set[str]:
    ids: set[str] = set()
    for citations in recovery.citations.values():
        for citation in citations:
            for source in citation.sources:
                ids |= _source_ids(source)
            if citation.anchor is not None:
                ids.add(f'off:{citation.anchor.start}-{citation.anchor.end}')
    for raw_only in recovery.raw_only:
        ids |= _ids(raw_only.raw)
    return ids


def _source_ids(source: Any) -> set[str]:
    ids: set[str] = set()
    url = getattr(source, 'url', None)
    if url:
        ids.add('url:' + url)
    if getattr(source, 'document_id', None):
        ids.add('doc:' + source.document_id)
    if source.title:
        ids.add('title:' + source.title)
    return ids


def _response_ids(response: ModelResponse, recovered_by_part: dict[int, int]) -> tuple[set[str], set[str]]:
    """Identity tokens of what Pydantic AI normalised (its citations + raw data) and of what this package recovered.

    `TrackCitations` appends recovered citations after Pydantic AI's own, so the last `recovered` ones of a part are ours.
    """
    normalised: set[str] = set()
    recovered: set[str] = set()
    for index, part in enumerate(response.parts):
        if not isinstance(part, TextPart) or not part.citations:
            continue
        split = len(part.citations) - recovered_by_part.get(index, 0)
        for position, citation in enumerate(part.citations):
            target = normalised if position < split else recovered
            for source in citation.sources:
                target |= _source_ids(source)
                if source.kind == 'document':
                    target.add('kind:document')
            if citation.anchor is not None:
                target.add(f'off:{citation.anchor.start}-{citation.anchor.end}')
        if split > 0 and part.provider_details:
            normalised |= _ids(part.provider_details.get('citations'))
    return normalised, recovered


_URL_KEYS = ('url', 'uri', 'source_uri', 'source')
_DOC_KEYS = ('file_id', 'document_id', 'document_name', 'document_index', 'documentIndex', 'id')
_TITLE_KEYS = ('title', 'document_title', 'filename')
_RANGES = (('start_index', 'end_index'), ('startIndex', 'endIndex'), ('start', 'end'))


def _ids(value: object) -> set[str]:
    """Identity tokens in raw citation data: URLs, document ids, titles and offset ranges, at any depth."""
    ids: set[str] = set()
    stack: list[object] = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            data = cast('dict[str, object]', item)
            for key in _URL_KEYS:
                if isinstance(v := data.get(key), str) and v:
                    ids.add('url:' + v)
            for key in _DOC_KEYS:
                if isinstance(v := data.get(key), str | int) and not isinstance(v, bool):
                    ids.add(f'doc:{v}')
            for key in _TITLE_KEYS:
                if isinstance(v := data.get(key), str) and v:
                    ids.add('title:' + v)
            for start_key, end_key in _RANGES:
                start, end = data.get(start_key), data.get(end_key)
                if start is None and start_key == 'start_index' and isinstance(end, int):
                    start = 0  # proto3 JSON (Google) leaves out a zero start
                if isinstance(start, int) and isinstance(end, int):
                    ids.add(f'off:{start}-{end}')
            stack.extend(data.values())
        elif isinstance(item, (list, tuple)):
            stack.extend(cast('Sequence[object]', item))
    return ids


# --- recordings and live --------------------------------------------------------------------------------------------


async def probe_recording(matrix: CapabilityMatrix, path: str | Path) -> None:
    """Fill a row from a recording: what it yields, its stream timing, replay when it holds a follow-up response."""
    if Path(path).is_dir():
        matrix.unusable('recording', str(path), 'no recordings (.yaml, .yml, .json, .chunks.txt) in this folder')
        return
    try:
        recording = load_recording(path)
    except Exception as e:  # missing, malformed, truncated, unknown provider: reported, the rest goes on
        matrix.unusable('recording', str(path), _describe(e))
        return
    api = cast(ApiLabel, recording.api)
    matrix = matrix.for_family(model_family(api, recording.model_name))
    matrix.ensure_row(api)
    try:
        outcome = await _probe_answer(matrix, api, recording, 'recording')
    except Exception as e:
        matrix.fail(api, 'recording', str(path), _describe(e))
        matrix.unusable('recording', str(path), _describe(e))
        return
    switch = await _guarded(matrix, api, 'recording', f'{path} request switch', _probe_switch(recording))
    _add_produced(matrix, api, [outcome.produced], switch=bool(switch), evidence='recording')
    if len(recording.responses) >= 2 and not recording.streamed:
        follow = dataclasses.replace(recording, responses=recording.responses[1:2])
        first = dataclasses.replace(recording, responses=recording.responses[:1])
        await _guarded(
            matrix, api, 'recording', f'{path} replay', _probe_replay(matrix, api, first, follow, 'recording')
        )
    await _guarded(
        matrix, api, 'recording', f'{path} handoff', _probe_handoff(matrix, api, outcome.messages, 'recording')
    )


async def probe_live(matrix: CapabilityMatrix, name: str, *, progress: Progress | None = None) -> None:
    """Probe a live model (`provider:model`) when its API key is set; otherwise say which variable is missing.

    `name` may also be an OpenAI-compatible base URL with the model after `#` (`https://gateway.example/v1#gpt-4o`):
    a gateway or relay in front of a provider, probed through `OpenAIChatModel` with `OPENAI_API_KEY`, as its own
    row (`'via HOST'`), since such endpoints can drop annotations and grounding data the provider sent.
    """
    say: Progress = progress or _quiet
    if name.startswith(('http://', 'https://')):
        await _probe_gateway(matrix, name, say)
        return
    provider = name.split(':', 1)[0]
    keys = LIVE_KEYS.get(provider)
    if keys is None:
        matrix.unusable(
            'live',
            name,
            f'unknown provider {provider!r}; known: {", ".join(sorted(LIVE_KEYS))}, or an OpenAI-compatible URL#MODEL',
        )
        return
    if not _has_key(matrix, name, keys, say):
        return
    from pydantic_ai.models import infer_model

    from .._models import describe_model

    try:
        model = infer_model(name)
    except Exception as e:  # unknown model name, missing SDK
        matrix.unusable('live', name, _describe(e))
        return
    api = describe_model(model).api
    await _probe_live_model(matrix.for_family(model_family(api, model.model_name)), api, name, model, say)


GATEWAY_KEYS = ('OPENAI_API_KEY',)
"""Environment variables for `--live URL#MODEL` (an OpenAI-compatible gateway): the key sent to the gateway."""


def _has_key(matrix: CapabilityMatrix, name: str, keys: tuple[str, ...], say: Progress) -> bool:
    if any(os.environ.get(k) for k in keys):
        return True
    say(f'skipping {name}: set {" or ".join(keys)} to probe it live')
    matrix.unusable('live', name, f'skipped: {" or ".join(keys)} not set')
    return False


async def _probe_gateway(matrix: CapabilityMatrix, name: str, say: Progress) -> None:
    """An OpenAI-compatible base URL (`URL#MODEL`): Chat Completions through it, as its own row."""
    from urllib.parse import urlsplit

    url, _, model_name = name.partition('#')
    host = urlsplit(url).netloc
    if not model_name or not host:
        matrix.unusable('live', name, 'a gateway is given as URL#MODEL, e.g. https://gateway.example/v1#gpt-4o-mini')
        return
    if not _has_key(matrix, name, GATEWAY_KEYS, say):
        return
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    from .._models import describe_model

    key = next(v for k in GATEWAY_KEYS if (v := os.environ.get(k)))
    model = OpenAIChatModel(model_name, provider=OpenAIProvider(base_url=url, api_key=key))
    api = describe_model(model).api
    await _probe_live_model(matrix.for_family(f'via {host}'), api, name, model, say)


async def _probe_live_model(matrix: CapabilityMatrix, api: ApiLabel, name: str, model: Model, say: Progress) -> None:
    """The live scenario, non-streamed then streamed: web search (where the model has it) with `Citations()`."""
    from pydantic_ai.capabilities import NativeTool
    from pydantic_ai.native_tools import WebSearchTool

    matrix.ensure_row(api)
    searches = WebSearchTool in model.profile.get('supported_native_tools', frozenset({WebSearchTool}))
    capabilities = (NativeTool(WebSearchTool()), Citations()) if searches else (Citations(),)
    for streamed in (False, True):
        started = time.monotonic()
        try:
            report, _ = await _run(model, PROMPT, streamed=streamed, settings=None, capabilities=capabilities)
        except Exception as e:
            matrix.fail(api, 'live', name, _describe(e))
            matrix.unusable('live', name, _describe(e))
            return
        if report.requests:
            matrix.observe(report.requests[-1], 'live')  # 'yes' when cited
            if not any(p.citations for p in report.requests[-1].parts):
                matrix.add(api, 'citations', 'no', 'live')
        say(f'{name} {"streamed" if streamed else "non-streamed"} in {time.monotonic() - started:.1f}s')
