"""Property tests for the markup scanner and `strip_json_markup`."""

from __future__ import annotations

import json
import re
from typing import Any, cast

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pydantic_ai_citations._json_markup import (
    strip_json_markup,
    strip_raw_markup,
)
from pydantic_ai_citations.formats.markup import scan_markup, strip_markup

CITE = '\x3ccite'
CLOSING = set('.,;:!?)]}…»”’')
# Plain text never contains what starts markup, so everything but the injected markup must survive byte for byte.
PLAIN = st.text(
    st.characters(blacklist_categories=['Cs'], blacklist_characters='<>(【】\ue200\ue201\ue202'),
    max_size=25,
)
JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | PLAIN,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(PLAIN, children, max_size=4),
    max_leaves=15,
)
# An id shaped like a line locator (`L3`, `L1-L9`) is read as one, so a marker holding only that cites nothing.
IDS = st.from_regex(r'[A-Za-z0-9_-]{1,10}', fullmatch=True).filter(lambda i: re.fullmatch(r'L\d+(-L\d+)?', i) is None)


@st.composite
def markers(draw: st.DrawFn) -> str:
    if draw(st.booleans()):
        ids = draw(st.lists(IDS, min_size=1, max_size=3))
        locator = draw(st.sampled_from(['', '\ue202L3', '\ue202L1-L9']))
        family = draw(st.sampled_from(['cite', 'filecite', 'navlist']))
        return '\ue200' + family + ''.join('\ue202' + i for i in ids) + locator + '\ue201'
    # A label holding the private-use marker characters is two kinds of markup in one (its own problem), not a label.
    label = draw(
        st.text(
            st.characters(blacklist_categories=['Cs'], blacklist_characters='【】\n<>\ue200\ue201\ue202'), max_size=8
        )
    )
    return f'【{draw(st.integers(0, 99))}:{draw(st.integers(0, 9))}†{label}】'


def _spaced_ok(s: str, i: int) -> bool:
    return i > 0 and not s[i - 1].isspace() and (i == len(s) or s[i].isspace() or s[i] in CLOSING)


def _bare_ok(s: str, i: int) -> bool:
    return not (i >= 2 and s[i - 1] == ' ' and not s[i - 2].isspace())


def _after_spaced_markup(out: str, markups: list[str]) -> bool:
    """Whether `out` ends in markup and a space: a bare marker there reads as one after a space (which takes it)."""
    return out.endswith(' ') and any(out[:-1].endswith(m) for m in markups)


@st.composite
def injected_string(draw: st.DrawFn, s: str) -> tuple[str, list[str]]:
    """Inject markers (bare, or after a space as models write them) and at most one cite wrap into `s`."""
    positions = sorted(draw(st.lists(st.integers(0, len(s)), max_size=4)))
    wrap: tuple[int, int] | None = None
    if draw(st.booleans()):
        a, b = sorted(draw(st.tuples(st.integers(0, len(s)), st.integers(0, len(s)))))
        wrap = (a, b)
    markups: list[str] = []
    out: list[str] = []
    pos = 0
    cuts = sorted({*positions, *(wrap or ())})
    for cut in cuts:
        out.append(s[pos:cut])
        pos = cut
        if wrap is not None and cut == wrap[1] and wrap[0] != wrap[1]:
            out.append('</cite>')
        for _ in range(positions.count(cut)):
            m = draw(markers())
            if _spaced_ok(s, cut) and draw(st.booleans()):
                out.append(' ' + m)
                markups.append(m)
            elif _bare_ok(s, cut) and not _after_spaced_markup(''.join(out), markups):
                out.append(m)
                markups.append(m)
        if wrap is not None and cut == wrap[0]:
            out.append(f'{CITE} index="{draw(IDS)}">')
            if wrap[0] == wrap[1]:
                out.append('</cite>')
    out.append(s[pos:])
    marked = ''.join(out)
    if wrap is not None:
        start = marked.index(CITE)
        markups.append(marked[start : marked.index('</cite>', start) + len('</cite>')])
    return marked, markups


@st.composite
def injected_json(draw: st.DrawFn) -> tuple[Any, Any, list[str]]:
    original = draw(JSON)
    markups: list[str] = []

    def inject(value: Any) -> Any:
        if isinstance(value, str) and draw(st.booleans()):
            marked, added = draw(injected_string(value))
            markups.extend(added)
            return marked
        if isinstance(value, list):
            return [inject(v) for v in cast(list[Any], value)]
        if isinstance(value, dict):
            return {k: inject(v) for k, v in cast(dict[Any, Any], value).items()}
        return value

    return original, inject(original), markups


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, list):
        return [s for v in cast(list[Any], value) for s in _strings(v)]
    if isinstance(value, dict):
        return [s for v in cast(dict[Any, Any], value).values() for s in _strings(v)]
    return []


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(injected_json())
def test_stripping_injected_markup_restores_the_original(case: tuple[Any, Any, list[str]]):
    original, marked, markups = case
    result = strip_json_markup(marked)
    assert json.dumps(result.value) == json.dumps(original)
    assert not any(scan_markup(s).found for s in _strings(result.value))
    assert sorted(r.markup for r in result.removed) == sorted(markups)
    assert result.problems == []
    for r in result.removed:
        assert 0 <= r.start < r.end
    # The same through raw JSON text args, the way a provider may hand them over.
    new_args, _ = strip_raw_markup(json.dumps({'args': marked}))
    assert isinstance(new_args, str)
    assert json.loads(new_args) == {'args': original}


TOKENS = st.sampled_from(
    [
        'a',
        ' ',
        '.',
        '\n',
        CITE,
        '(cite',
        ' index="0-1"',
        '>',
        '<',
        '</cite>',
        '\ue200',
        '\ue201',
        '\ue202',
        'cite',
        'turn0',
        'L1-L2',
        '【',
        '】',
        '4:0',
        '†',
        '重要',
    ]
)


@settings(max_examples=500, deadline=None)
@given(st.lists(TOKENS, max_size=30).map(''.join) | st.text(max_size=60))
def test_scanner_never_crashes_and_offsets_are_inside(text: str):
    scan = scan_markup(text)
    last_end = 0
    for m in scan.matches:
        assert 0 <= m.start < m.end <= len(text)
        assert m.start <= m.kept_start <= m.kept_end <= m.end
        assert m.start >= last_end  # matches do not overlap (a marker inside a cite tag's text is its own match)
        last_end = m.end if m.kind != 'cite_tag' else m.kept_start
    for issue in scan.issues:
        assert 0 <= issue.start < issue.end <= len(text) or (issue.start == issue.end == len(text))
    stripped = strip_markup(text)
    if not scan.found:
        assert stripped.text == text
    else:
        assert len(stripped.text) < len(text)
    # What could not be read loses its markup characters too (it used to be left as it was).
    assert not any(c in stripped.text for c in '\ue200\ue201\ue202')


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=80))
def test_invalid_json_text_is_returned_untouched(text: str):
    raw = '{"a": ' + json.dumps(text)  # never valid: the object is not closed
    new, result = strip_raw_markup(raw)
    assert new is raw
    assert result is None


def test_cite_tag_whose_attributes_hold_a_malformed_marker():
    # Found by hypothesis: the marker in the "attributes" is malformed, so the opening is not a tag; the marker and the
    # stray closing tag are removed and reported.
    text = '\x3ccite \ue200>\ue201\x3c/cite>'
    stripped = strip_markup(text)
    assert stripped.scan.matches == ()
    assert stripped.text == '\x3ccite'
    assert [i.code for i in stripped.scan.issues] == ['malformed_marker', 'malformed_marker']
