"""Assertion helpers for an agent's own test suite: cited, clean, complete, nothing lost.

Each helper takes what a test holds -- the result of `agent.run` / `run_sync` (`AgentRunResult`), of
`agent.run_stream` (`StreamedRunResult`), of `agent.iter` (`AgentRun`), or a `CitedAnswer` -- and raises an
`AssertionError` whose message says what was expected instead and shows the answer with its marks, as
`render_markdown(answer, 'footnotes')` renders it. Given anything else, a helper raises `UserError` naming the call to
make instead. Nothing here has its own idea of the facts it checks: markup is
what `formats.markup` finds, completeness is `CitedAnswer.complete` (the one verdict), and a citation sent on the
wire is accounted for exactly as `check_seams` accounts for it.
"""

from __future__ import annotations

import inspect
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import is_dataclass
from os import PathLike
from pathlib import Path
from types import NoneType
from typing import Any, NoReturn, Protocol, cast

from pydantic import BaseModel, JsonValue
from pydantic_ai import ModelMessage, TextPart
from pydantic_ai.agent import AbstractAgent
from pydantic_ai.exceptions import UserError
from pydantic_core import PydanticSerializationError, to_jsonable_python

from .._answer import CitedAnswer, answer_parts, last_response, run_messages
from .._checks import is_messages, require, shown
from .._json_markup import format_path, strip_json_markup
from .._problems import shorten
from .._render import render_markdown
from .._replay import Recording, load_recording
from ..formats.markup import scan_markup
from ..formats.wire import WireCitation
from ._citing_model import CitingModel
from ._seams import Expected, scripted_expected, unaccounted, wire_citation_expected, wire_expected

__all__ = (
    'AnswerSubject',
    'WireSubject',
    'assert_cites',
    'assert_clean_output',
    'assert_complete',
    'assert_no_lost_citations',
    'assert_no_raw_markup',
)


class _RunResult(Protocol):
    def all_messages(self) -> list[ModelMessage]: ...


AnswerSubject = _RunResult | CitedAnswer
"""What the helpers read an answer from: a run's result (`AgentRunResult`, `StreamedRunResult`, `AgentRun`: anything
with `all_messages()`) or a `CitedAnswer`."""

WireSubject = Recording | str | PathLike[str] | CitingModel | Sequence[WireCitation]
"""What the provider sent, for `assert_no_lost_citations`: the recording the run was replayed from (or its path), the
`CitingModel` it ran on, or the citations counted on the wire (`formats.wire.count_wire_citations`)."""

_EXPECTED_SUBJECT = 'the result of `agent.run`, `run_sync`, `run_stream` or `iter`, or a `CitedAnswer`'
# A marker cites the sentence it closes: no sentence end between the words and the marker (the sentence's own
# terminator and closing punctuation right before the marker aside).
_PRIVATE_USE = re.compile('[\ue000-\uf8ff]')  # invisible in a terminal: shown escaped
_SENTENCE_END = re.compile(r'[.!?…](?=\s)|[。！？\n]')
"""Where a sentence ends: `.`, `!`, `?` or `…` before a space (not `8.849`), CJK full stops, a line end."""
_MARKER_TAIL = ' \t.,;:!?…)]"\'”’»。！？'


def assert_cites(subject: AnswerSubject, url: str, *, quote: str | None = None) -> None:
    """Assert that the answer cites `url` (as a span or a source card); with `quote`, that it cites it for those words.

    A content anchor cites `quote` when one contains the other; a marker (`[1]`, a Markdown link) cites the words
    of the sentence it closes (no sentence end between them and the marker). A source cited without a position (a
    "sources used" card) cites no particular words.

    Args:
        subject: A run's result or a `CitedAnswer`.
        url: The URL that must be cited (compared exactly).
        quote: Words of the answer text the URL must be cited for.
    """
    answer = _answer(subject, 'assert_cites')
    cited = _cited_urls(answer)
    require('assert_cites', 'url', url, str, 'the URL that must be cited (a str)')
    require('assert_cites', 'quote', quote, (str, NoneType), 'words of the answer text (a str), or None')
    number = cited.get(url)
    if number is None:
        listed = ', '.join(repr(u) for u in cited) or 'none'
        _fail(answer, f'The answer does not cite {url!r}.', f'a span or a source card citing {url!r}; cited: {listed}')
    if quote is None:
        return
    where = [m.start() for m in re.finditer(re.escape(quote), answer.text)] if quote else []
    if not where:
        _fail(answer, f'The answer text does not contain {quote!r}.', f'{quote!r} in the answer, cited by {url!r}')
    spans = [s for s in answer.spans if number in s.sources]
    if any(
        _covers(answer.text, span.kind, span.start, span.end, at, at + len(quote)) for span in spans for at in where
    ):
        return
    positions = '; '.join(f'{answer.span_text(s)!r} at {s.start}-{s.end}' for s in spans)
    on = f'on: {positions}' if spans else 'only on a source card (no position in the text)'
    _fail(answer, f'{url!r} is cited, but not for {quote!r}.', f'a citation of {url!r} on {quote!r}; it is cited {on}')


def assert_no_raw_markup(subject: AnswerSubject) -> None:
    """Assert that no raw citation markup reached the answer's text.

    For a run's result, the text checked is the answer as the run returned it (`result.output` for text output: the
    final response's text parts, joined); for a `CitedAnswer`, its `text`. Markup is what `formats.markup` finds:
    cite tags, OpenAI's private-use markers (U+E200-U+E202), `【…†…】` markers, and what is unmistakably meant as one
    of them but malformed or unterminated.
    """
    answer = _answer(subject, 'assert_no_raw_markup')
    text = answer.text if isinstance(subject, CitedAnswer) else _run_text(subject)
    scan = scan_markup(text)
    if not scan.found:
        return
    found = [(m.kind, m.start, m.end, '') for m in scan.matches] + [
        (i.kind, i.start, i.end, f' ({i.code})') for i in scan.issues
    ]
    listed = '; '.join(f'{kind}{code} at {start}-{end}: {text[start:end]!r}' for kind, start, end, code in found[:5])
    more = f'; and {len(found) - 5} more' if len(found) > 5 else ''
    _fail(
        answer,
        f'Raw citation markup reached the text: {listed}{more}.',
        'no citation markup in the text: show `CitedAnswer.text` (markup removed, each removal a problem), or '
        'resolve OpenAI markers with `TrackCitations(marker_sources=...)`',
    )


def assert_complete(subject: AnswerSubject) -> None:
    """Assert that the answer is complete: the provider's own finishing signal arrived (`CitedAnswer.complete`)."""
    answer = _answer(subject, 'assert_complete')
    if answer.complete:
        return
    reasons = ' '.join(p.message for p in answer.problems if p.code == 'stream_incomplete')
    _fail(answer, f'The answer is not complete. {reasons}'.rstrip(), "a complete answer (the provider's finish signal)")


def assert_no_lost_citations(subject: AnswerSubject, wire: WireSubject) -> None:
    """Assert that every citation the provider sent is in the answer: a span, a source card, raw-only data or a problem.

    Accounted for exactly as `check_seams` does (by URL, document id, title or offsets), over the responses of the run
    (for a `CitedAnswer`: every response of the recording). A `CitingModel` whose stream was cut (`end_stream_after`)
    sent only the citations that went out before the cut; the answer is then incomplete, which says the rest is
    missing.

    Args:
        subject: A run's result or a `CitedAnswer`.
        wire: What the provider sent: the recording the run was replayed from (or its path), the `CitingModel` it ran
            on, or the citations counted on the wire (`formats.wire.count_wire_citations`).
    """
    answer = _answer(subject, 'assert_no_lost_citations')
    responses = None if isinstance(subject, CitedAnswer) else _response_range(subject)
    expected = _wire_expectations(wire, responses, answer)
    missing = unaccounted(answer, expected)
    if not missing:
        return
    listed = '; '.join(missing[:5]) + ('; ...' if len(missing) > 5 else '')
    _fail(
        answer,
        f'{len(missing)} of {len(expected)} citation(s) sent on the wire are lost: {listed}.',
        'every citation sent to be a span, a source card, `raw_only` data or a problem',
    )


def assert_clean_output(output: object) -> None:
    """Assert that a structured output holds no citation markup in any field (keys included).

    Args:
        output: A run's result (`AgentRunResult`, or a finished `AgentRun`; its `output` is checked) or the output
            itself: a Pydantic model, a dataclass, a dict, a list or a string. For `run_stream`, pass
            `await result.get_output()`.

    Raises:
        UserError: `output` is a `CitedAnswer`, an agent, a run's messages, a `StreamedRunResult`, an unfinished
            `AgentRun`, or anything else that cannot be read as JSON.
    """
    value = _output_value(output)
    try:
        data = cast(JsonValue, to_jsonable_python(value))
    except PydanticSerializationError:
        raise UserError(_output_type_error(value)) from None
    stripped = strip_json_markup(data)
    if not stripped.changed and not stripped.problems:
        return
    found = [f'{format_path(r.path)}: {r.kind} {r.markup!r}' for r in stripped.removed]
    found += [
        f'{format_path(path)}: {p.message}' for path, p in zip(stripped.problem_paths, stripped.problems, strict=True)
    ]
    listed = '\n'.join(f'  - {line}' for line in found)
    raise AssertionError(
        f'Citation markup in the structured output:\n{listed}\n'
        'Expected: no citation markup in any field; add `StripCitationMarkup()` to the agent (it removes markup '
        'before validation and keeps what it removed).\n'
        f'The output (as JSON):\n{_indent(_show_json(data))}'
    )


# --- reading the subject --------------------------------------------------------------------------------------------


def _answer(subject: object, helper: str) -> CitedAnswer:
    if isinstance(subject, CitedAnswer):
        return subject
    if callable(getattr(subject, 'all_messages', None)):
        return CitedAnswer.from_result(cast(_RunResult, subject))
    got = shown(subject)
    hint = ''
    if isinstance(subject, list):
        hint = ' For a list of messages, use `CitedAnswer.from_messages(messages)`.'
    elif isinstance(subject, (BaseModel, Mapping)) or is_dataclass(subject):
        hint = ' For a structured output, use `assert_clean_output(output)`.'
    raise UserError(f'{helper}(): `subject` must be {_EXPECTED_SUBJECT}; got {got}.{hint}')


def _run_text(result: object) -> str:
    """The answer text as the run returned it: the final response's text parts, joined as Pydantic AI joins them."""
    messages, _ = run_messages(cast(_RunResult, result))
    found = last_response(messages)
    if found is None:
        return ''
    response = found[1]
    return ''.join(cast(TextPart, response.parts[i]).content for i in answer_parts(response))


def _response_range(result: object) -> tuple[int, int]:
    """Which responses of the recording the run consumed: after those of the history it was given, to its last."""
    messages, _ = run_messages(cast(_RunResult, result))
    responses = sum(1 for m in messages if m.kind == 'response')
    new_messages = getattr(result, 'new_messages', None)
    new = new_messages() if callable(new_messages) else messages
    own = sum(1 for m in cast('Sequence[ModelMessage]', new) if getattr(m, 'kind', None) == 'response')
    return max(responses - own, 0), responses


def _wire_expectations(wire: object, responses: tuple[int, int] | None, answer: CitedAnswer) -> list[Expected]:
    got = shown(wire)
    if isinstance(wire, (str, PathLike)):
        wire = load_recording(Path(cast('str | PathLike[str]', wire)))
    if isinstance(wire, Recording):
        if responses is None:
            return wire_expected(wire)(len(wire.responses), 0)
        first, consumed = responses
        return wire_expected(wire)(consumed, first)
    if isinstance(wire, CitingModel):
        # Only a stream cut before its end sends less than `request` (a whole stream sends it all), and a cut answer
        # is incomplete: the one verdict says whether the response was cut.
        return scripted_expected(wire, streamed=not answer.complete)
    if isinstance(wire, (list, tuple)) and all(isinstance(c, WireCitation) for c in cast('Sequence[object]', wire)):
        seen: dict[str, WireCitation] = {}
        for citation in cast('Sequence[WireCitation]', wire):
            seen.setdefault(citation.key, citation)  # one object seen in an event and a snapshot counts once
        return [wire_citation_expected(c) for c in seen.values()]
    raise UserError(
        'assert_no_lost_citations(): `wire` must be a `Recording` or its path, the `CitingModel` the run used, or a '
        f'list of `WireCitation` (`formats.wire.count_wire_citations`); got {got}.'
    )


def _output_value(output: object) -> object:
    given = output  # (not narrowed by the checks below: they would make its type partly unknown)
    if isinstance(output, CitedAnswer):
        raise UserError(
            "assert_clean_output(): `output` must be a structured output or the run's result, got a `CitedAnswer`: use "
            '`assert_no_raw_markup(answer)` for its text.'
        )
    if isinstance(output, AbstractAgent):
        raise UserError(
            _output_type_error(given, " That is the agent: pass the run's result (`await agent.run(...)`).")
        )
    if is_messages(output):
        # Messages hold the prompt, tool calls and provider data: not what the agent returned.
        raise UserError(_output_type_error(output, " That is a run's messages: pass the run's result or its `output`."))
    if callable(getattr(output, 'all_messages', None)):
        if callable(getattr(output, 'get_output', None)):
            raise UserError(
                'assert_clean_output() cannot wait for a streamed output: pass `await result.get_output()` instead of '
                'the `StreamedRunResult`.'
            )
        inner = getattr(output, 'result', output)  # an `AgentRun` holds its `AgentRunResult` once finished
        if inner is None:
            raise UserError('assert_clean_output(): the `AgentRun` has not finished; it has no output yet.')
        return cast(Any, inner).output
    if inspect.isawaitable(output):
        raise UserError(_output_type_error(output, ' Did you forget `await`?'))
    return output


def _output_type_error(value: object, hint: str = ' It cannot be read as JSON.') -> str:
    return (
        "assert_clean_output(): `output` must be a run's result or its output (a Pydantic model, a dataclass, a dict, "
        f'a list or a string), got {shown(value)}.{hint}'
    )


# --- judging --------------------------------------------------------------------------------------------------------


def _cited_urls(answer: CitedAnswer) -> dict[str, int]:
    """The URLs the answer cites (in spans or on source cards), in order, with their source numbers."""
    numbers = [n for span in answer.spans for n in span.sources] + [s.number for s in answer.unanchored]
    by_number = {s.number: s for s in answer.sources}
    out: dict[str, int] = {}
    for number in numbers:
        source = by_number.get(number)
        if source is not None and source.url is not None:
            out.setdefault(source.url, number)
    return out


def _covers(text: str, kind: str, start: int, end: int, q_start: int, q_end: int) -> bool:
    if kind == 'content':
        return (start <= q_start and q_end <= end) or (q_start <= start and end <= q_end)
    if q_end <= start:  # no sentence ends from the words on to the marker (but the one the marker closes)
        return _SENTENCE_END.search(text[q_start:start].rstrip(_MARKER_TAIL)) is None
    return q_start <= start and end <= q_end


def _fail(answer: CitedAnswer, what: str, expected: str) -> NoReturn:
    raise AssertionError(
        f'{what}\nExpected: {expected}.\n'
        f"The answer (as render_markdown(answer, 'footnotes') shows it):\n{_indent(render_markdown(answer, 'footnotes'))}"
    )


def _show_json(data: JsonValue) -> str:
    text = json.dumps(data, ensure_ascii=False, indent=2)
    return shorten(_PRIVATE_USE.sub(lambda m: f'\\u{ord(m.group()):04x}', text), 2000)


def _indent(text: str) -> str:
    return '\n'.join(f'    {line}' if line else '' for line in text.rstrip('\n').split('\n'))
