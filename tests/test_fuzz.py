"""Acceptance fuzz suite (issue 15): every parser, renderer and history transform on generated hostile input.

Each area is driven by hypothesis (derandomised in CI, see `conftest.py`) with inputs built from the pieces that make
its grammar (markup delimiters, SSE fields, YAML and JSON shapes, numbered markers, Markdown and HTML payloads) mixed
with arbitrary text. Nothing may raise except the documented error of the area, every offset returned lies inside its
text, and rendered output links only where the package put a link, with an allowed scheme.

`FUZZ_EXAMPLES` sets the examples per test (default 100); with `FUZZ_COUNTS=path` the inputs tried per area in the
run are written to `path` as JSON (the figures in the CHANGELOG come from such a run).
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from pydantic_ai import (
    Citation,
    ContentCitationAnchor,
    DocumentCitationSource,
    MarkerCitationAnchor,
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    UserPromptPart,
    WebCitationSource,
)
from test_render_xss import PAYLOADS, assert_safe_html, assert_safe_markdown, expected_links

from pydantic_ai_citations import CitedAnswer, edit_response, edit_text, find_stale, render_html, render_markdown
from pydantic_ai_citations._edit import (
    edit_text_with_problems,
    fingerprint_response,
    repair_history,
    strip_citation_markers,
)
from pydantic_ai_citations.formats._sse import SseDecoder, load_json, sse_data
from pydantic_ai_citations.formats.markup import StreamCleaner, remove_cuts, scan_markup, strip_markup
from pydantic_ai_citations.formats.numbered import NumberedScanner, extract_numbered, resolve
from pydantic_ai_citations.formats.openai_markers import MarkerScanner, extract_markers_with_problems
from pydantic_ai_citations.formats.perplexity import AgentStreamCollector, collect_response, recover_sonar
from pydantic_ai_citations.testing import RecordingError, load_recording

EXAMPLES = int(os.environ.get('FUZZ_EXAMPLES', '100'))
FUZZ = settings(max_examples=EXAMPLES, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
TRIED: Counter[str] = Counter()
"""Inputs tried per area in this run (test-side bookkeeping, written out with `FUZZ_COUNTS`)."""


@pytest.fixture(scope='module', autouse=True)
def _write_counts() -> Iterator[None]:
    yield
    if path := os.environ.get('FUZZ_COUNTS'):
        Path(path).write_text(json.dumps(dict(sorted(TRIED.items())), indent=2) + '\n')


# --- strategies ---------------------------------------------------------------------------------------------------------

MARKUP_PIECES = [
    '\ue200', '\ue201', '\ue202', 'cite', 'turn0search1', 'L8', 'L8-L13', ' ', '\n', '.', '【', '】', '†', '4:0',
    '<cite index="0-1">', '(cite index="1-2">', '</cite>', '<ci', 'te>', '(cite', '"', '[1]', '[1, 2]', '[[1]](https://a.example/x)',
    '[', ']', '(', ')', '`', '```\n', '\\ue200', '\\ue201', '\\ue202', '\\', 'https://e.example/', 'a', 'word',
]  # fmt: skip


def text_from(pieces: list[str], *, max_size: int = 40) -> st.SearchStrategy[str]:
    piece = st.one_of(st.sampled_from(pieces), st.text(max_size=6))
    return st.lists(piece, max_size=max_size).map(''.join)


MARKUP_TEXT = text_from(MARKUP_PIECES)
SPLITS = st.lists(st.integers(min_value=1, max_value=12), max_size=20)


def split(text: str, cuts: list[int]) -> list[str]:
    pieces: list[str] = []
    pos = 0
    for cut in cuts:
        pieces.append(text[pos : pos + cut])
        pos += cut
    pieces.append(text[pos:])
    return pieces


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)


# --- markup grammar -----------------------------------------------------------------------------------------------------


@FUZZ
@given(MARKUP_TEXT, st.booleans(), st.booleans())
def test_markup_grammar(text: str, numbered: bool, incomplete: bool):
    TRIED['markup grammar'] += 1
    scan = scan_markup(text, numbered=numbered, incomplete=incomplete)
    for found in (*scan.matches, *scan.issues):
        assert 0 <= found.start <= found.end <= len(text)
    stripped = strip_markup(text, numbered=numbered, incomplete=incomplete)
    last = -1
    for start, end in stripped.cuts:
        assert last < start < end <= len(text)  # sorted, disjoint, not adjacent
        last = end
    assert remove_cuts(text, stripped.cuts) == stripped.text
    assert not any(c in stripped.text for c in '\ue200\ue201\ue202')
    assert not scan_markup(stripped.text, numbered=numbered).matches


@FUZZ
@given(MARKUP_TEXT, SPLITS, st.booleans())
def test_markup_stream_cleaner(text: str, cuts: list[int], numbered: bool):
    TRIED['markup grammar'] += 1
    cleaner = StreamCleaner(numbered=numbered)
    shown = ''.join(cleaner.feed(piece) for piece in split(text, cuts)) + cleaner.close()
    assert not any(c in shown for c in '\ue200\ue201\ue202')
    for issue in cleaner.issues:
        assert 0 <= issue.start <= issue.end <= len(text)


@FUZZ
@given(MARKUP_TEXT, SPLITS, st.booleans())
def test_openai_markers(text: str, cuts: list[int], escaped: bool):
    TRIED['markup grammar'] += 1
    whole = extract_markers_with_problems(text, escaped=escaped)
    for marker in whole.markers:
        assert text[marker.start : marker.end] == marker.raw
    for problem in whole.problems:
        assert problem.start is not None
        assert problem.end is not None
        assert 0 <= problem.start <= problem.end <= len(text)
    scanner = MarkerScanner(escaped=escaped)
    markers = [m for piece in split(text, cuts) for m in scanner.feed(piece)]
    assert (markers, scanner.close()) == (whole.markers, whole.problems)


# --- SSE decoder ----------------------------------------------------------------------------------------------------------

SSE_PIECES = [
    b'data: ',
    b'data:',
    b'event: x',
    b': note',
    b'id: 1',
    b'\n',
    b'\r\n',
    b'\r',
    b'{"a": 1}',
    b'[DONE]',
    b'\xff',
    b'[[[[',
    b'x',
]


@FUZZ
@given(st.lists(st.one_of(st.sampled_from(SSE_PIECES), st.binary(max_size=6)), max_size=40).map(b''.join), SPLITS)
def test_sse_decoder(body: bytes, cuts: list[int]):
    TRIED['SSE decoder'] += 1
    whole = sse_data(body)
    decoder = SseDecoder()
    pieces = [body[a:b] for a, b in _byte_ranges(len(body), cuts)]
    assert [d for piece in pieces for d in decoder.feed(piece)] + decoder.flush() == whole
    for data in whole:
        load_json(data)  # JSON or `None`, never an exception


def _byte_ranges(size: int, cuts: list[int]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    pos = 0
    for cut in cuts:
        out.append((pos, min(pos + cut, size)))
        pos = min(pos + cut, size)
    return [*out, (pos, size)]


@FUZZ
@given(st.one_of(st.text(max_size=40), JSON.map(json.dumps), st.integers(1, 400).map(lambda n: '[' * n + ']' * n)))
def test_sse_json_payloads(data: str):
    TRIED['SSE decoder'] += 1
    load_json(data)


# --- recordings loader ----------------------------------------------------------------------------------------------------

YAML_PIECES = [
    'interactions:', '\n', '- ', '  ', 'request:', 'response:', 'body:', 'string:', 'headers:', 'uri: https://api.openai.com/v1/responses',
    'method: POST', 'status: {code: 200}', '&a', '*a', '!!python/object:os.system', '[', ']', '{', '}', ': ', '"', "'", '|', '>',
    'content-type: [text/event-stream]', 'content-encoding: [gzip]', 'data: {}', '\t', '---', '...', '%YAML 1.1',
]  # fmt: skip


@pytest.fixture(scope='module')
def scratch() -> Iterator[Path]:
    with tempfile.TemporaryDirectory() as directory:
        yield Path(directory)


@FUZZ
@given(
    st.one_of(
        text_from(YAML_PIECES, max_size=60).map(str.encode),
        JSON.map(lambda v: json.dumps({'interactions': [v]}).encode()),
        st.binary(max_size=200),
    ),
    st.sampled_from(['cassette.yaml', 'cassette.json', 'cassette.yaml.gz']),
)
def test_recordings_loader(scratch: Path, data: bytes, name: str):
    TRIED['recordings loader'] += 1
    path = scratch / name
    path.write_bytes(data)
    with contextlib.suppress(RecordingError):  # a recording, or the documented error: nothing else
        load_recording(path)


# --- Perplexity and numbered formats --------------------------------------------------------------------------------------

NUMBERED_PIECES = [
    '[1]',
    '[2]',
    '[1, 2]',
    '[1][2]',
    '[',
    ']',
    '(',
    ')',
    '[1](https://a.example/)',
    '`',
    '``',
    '```',
    '\n',
    ' ',
    'x',
    '9' * 30,
]
NUMBERED_TEXT = text_from(NUMBERED_PIECES)


@FUZZ
@given(NUMBERED_TEXT, SPLITS)
def test_numbered_markers(text: str, cuts: list[int]):
    TRIED['Perplexity / numbered formats'] += 1
    whole = extract_numbered(text)
    for marker in whole:
        assert text[marker.start : marker.end] == marker.raw
    scanner = NumberedScanner()
    assert [m for piece in split(text, cuts) for m in scanner.feed(piece)] + scanner.close() == whole
    sources = [WebCitationSource(f'https://s{i}.example/') for i in range(3)]
    for citation in resolve(text, sources).citations:
        assert citation.anchor is not None
        assert 0 <= citation.anchor.start < citation.anchor.end <= len(text)


def perplexity_event(kind: str, value: Any, text: str) -> Any:
    return {'type': kind, 'delta': text, 'item_id': 'msg_1', 'content_index': 0, 'results': value, 'response': value}


EVENT_KINDS = [
    'response.output_text.delta', 'response.reasoning.search_results', 'response.output_item.added',
    'response.output_item.done', 'response.created', 'response.completed', 'response.failed', 'error', 'other',
]  # fmt: skip
RESULT = st.fixed_dictionaries(
    {
        'id': st.one_of(st.integers(0, 4), st.text(max_size=3), JSON),
        'url': st.one_of(st.just('https://r.example/'), JSON),
    }
)


@FUZZ
@given(
    st.lists(
        st.one_of(
            st.builds(
                perplexity_event,
                st.sampled_from(EVENT_KINDS),
                st.one_of(JSON, st.lists(RESULT, max_size=3)),
                NUMBERED_TEXT,
            ),
            JSON,
        ),
        max_size=12,
    ),
    JSON,
)
def test_perplexity_agent_stream(events: list[Any], body: Any):
    TRIED['Perplexity / numbered formats'] += 1
    collector = AgentStreamCollector()
    for event in events:
        collector.feed_event(event)
    collector.close()
    text = collector.text
    for citation in collector.citations():
        assert citation.anchor is not None
        assert 0 <= citation.anchor.start < citation.anchor.end <= len(text)
    assert isinstance(collector.problems, list)
    collect_response(body)


@FUZZ
@given(NUMBERED_TEXT, JSON, st.lists(st.one_of(st.just('https://c.example/'), JSON), max_size=4))
def test_perplexity_sonar(text: str, results: Any, urls: list[Any]):
    TRIED['Perplexity / numbered formats'] += 1
    data = {'citations': urls, 'search_results': results}
    response = ModelResponse(parts=[TextPart(text)], provider_details={'unmapped': {'response': data}})
    by_part, _problems = recover_sonar(response)
    for citations in by_part.values():
        for citation in citations:
            assert citation.anchor is not None
            assert 0 <= citation.anchor.start < citation.anchor.end <= len(text)


# --- renderers --------------------------------------------------------------------------------------------------------------

HOSTILE = st.one_of(st.sampled_from(PAYLOADS), MARKUP_TEXT, st.text(max_size=30))
URLS = st.one_of(
    st.sampled_from(PAYLOADS),
    st.sampled_from(
        ['https://ok.example/a`b', 'https://ok.example/(x)', 'https://ok.example/ <x>', 'javascript:alert(1)']
    ),
    st.text(max_size=20).map(lambda t: 'https://h.example/' + t),
)


@st.composite
def answers(draw: st.DrawFn) -> CitedAnswer:
    text = draw(HOSTILE)
    n = len(text)
    citations: list[Citation] = []
    for _ in range(draw(st.integers(0, 5))):
        if draw(st.booleans()):
            source: WebCitationSource | DocumentCitationSource = WebCitationSource(
                draw(URLS), title=draw(HOSTILE), excerpts=[draw(HOSTILE)]
            )
        else:
            source = DocumentCitationSource(document_id=draw(HOSTILE), title=draw(HOSTILE), excerpts=[draw(HOSTILE)])
        anchor: ContentCitationAnchor | MarkerCitationAnchor | None = None
        if n and draw(st.booleans()):
            start = draw(st.integers(0, n - 1))
            end = draw(st.integers(start + 1, n))
            anchor = (
                ContentCitationAnchor(start=start, end=end)
                if draw(st.booleans())
                else MarkerCitationAnchor(start=start, end=end)
            )
        citations.append(Citation([source], anchor=anchor))
    return CitedAnswer.from_messages([ModelResponse(parts=[TextPart(text, citations=citations or None)])])


@FUZZ
@given(answers(), st.booleans())
def test_renderers(answer: CitedAnswer, redact: bool):
    TRIED['renderers'] += 1
    for html in (render_html(answer, redact=redact), render_html(answer, document=True)):
        assert_safe_html(html)
    links = expected_links(answer)
    for style in ('inline', 'footnotes'):
        assert_safe_markdown(render_markdown(answer, style=style, redact=redact), links=links)


# --- history transforms -------------------------------------------------------------------------------------------------------

WORDS = st.lists(
    st.sampled_from(['alpha', 'beta', 'gamma', 'delta', 'Note:', '\ue200', '[1]', 'é', '\n', '.']),
    min_size=1,
    max_size=30,
)


@st.composite
def cited_parts(draw: st.DrawFn) -> TextPart:
    text = ' '.join(draw(WORDS))
    n = len(text)
    citations: list[Citation] = []
    raw: list[dict[str, Any]] = []
    for i in range(draw(st.integers(0, 4))):
        start = draw(st.integers(0, n - 1))
        end = draw(st.integers(start + 1, n))
        anchored = draw(st.booleans())
        if anchored:
            citations.append(
                Citation(
                    [WebCitationSource(f'https://s{i}.example/')], anchor=ContentCitationAnchor(start=start, end=end)
                )
            )
        if draw(st.booleans()) or not anchored:
            raw.append(
                {'type': 'url_citation', 'url': f'https://s{i}.example/', 'start_index': start, 'end_index': end}
            )
    details = {'citations': raw} if raw else None
    return TextPart(text, citations=citations or None, provider_details=details)


@st.composite
def edits(draw: st.DrawFn, text: str) -> str:
    out = text
    for _ in range(draw(st.integers(1, 3))):
        start = draw(st.integers(0, len(out)))
        end = draw(st.integers(start, min(len(out), start + 8)))
        out = out[:start] + draw(st.sampled_from(['', 'Note: ', 'x', ' beta ', '\ue201'])) + out[end:]
    return out


def raw_ranges(part: TextPart) -> list[tuple[int, int]]:
    return [(e['start_index'], e['end_index']) for e in (part.provider_details or {}).get('citations', [])]


@FUZZ
@given(st.data(), cited_parts())
def test_edit_text_keeps_every_range_on_its_words(data: st.DataObject, part: TextPart):
    TRIED['history transforms'] += 1
    new_text = data.draw(edits(part.content))
    new, problems = edit_text_with_problems(part, new_text)
    assert new.content == new_text
    old_words = {part.content[a:b] for a, b in raw_ranges(part)}
    old_words |= {part.content[c.anchor.start : c.anchor.end] for c in part.citations or [] if c.anchor}
    for citation in new.citations or []:
        assert citation.anchor is not None
        assert new_text[citation.anchor.start : citation.anchor.end] in old_words
    for start, end in raw_ranges(new):
        assert 0 <= start < end <= len(new_text)
        assert new_text[start:end] in old_words
    dropped = len(part.citations or []) - len(new.citations or []) + len(raw_ranges(part)) - len(raw_ranges(new))
    assert len(problems) <= dropped
    assert bool(problems) == (dropped > 0)


@FUZZ
@given(st.data(), st.lists(cited_parts(), min_size=1, max_size=3))
def test_history_edit_response_and_find_stale(data: st.DataObject, parts: list[TextPart]):
    TRIED['history transforms'] += 1
    response = ModelResponse(parts=list(parts))
    fingerprint_response(response)
    messages: list[ModelMessage] = [ModelRequest(parts=[UserPromptPart('q')]), response]
    assert [p.code for p in find_stale(messages)] == []
    index = data.draw(st.integers(0, len(parts) - 1))
    new_text = data.draw(edits(parts[index].content))
    edited, _problems = edit_response(response, index, new_text)
    assert find_stale([messages[0], edited]) == []
    # The same edit made by hand: stale when the text changed, and a repair keeps only anchors it can vouch for.
    hand_parts: list[TextPart] = list(parts)
    hand_parts[index] = TextPart(
        new_text, citations=parts[index].citations, provider_details=parts[index].provider_details
    )
    by_hand = ModelResponse(parts=hand_parts, metadata=response.metadata)
    found = find_stale([messages[0], by_hand])
    cited = bool(parts[index].citations or parts[index].provider_details)  # only cited parts are fingerprinted
    assert [p.part_index for p in found] == ([index] if cited and new_text != parts[index].content else [])
    for problem in found:
        assert problem.message_index == 1
    repaired, _ = repair_history([messages[0], by_hand], 'realign')
    for part in repaired.get(1, by_hand).parts:
        assert isinstance(part, TextPart)
        for citation in part.citations or []:
            assert citation.anchor is not None
            assert citation.anchor.end <= len(part.content)
        for start, end in raw_ranges(part):
            assert 0 <= start < end <= len(part.content)


@FUZZ
@given(
    cited_parts(), st.sampled_from(['\ue200cite\ue202turn0search1\ue201', '<cite index="0-1">', '</cite>', '【4:0†x】'])
)
def test_history_strip_markers_keeps_ranges_on_their_words(part: TextPart, marker: str):
    TRIED['history transforms'] += 1
    assume(not any(c in part.content for c in '\ue200\ue201\ue202<【'))
    middle = len(part.content) // 2
    marked = edit_text(part, part.content[:middle] + marker + part.content[middle:])
    new, _cuts = strip_citation_markers(marked)
    for citation in new.citations or []:
        assert citation.anchor is not None
        assert 0 <= citation.anchor.start < citation.anchor.end <= len(new.content)
    for start, end in raw_ranges(new):
        assert 0 <= start < end <= len(new.content)
