from __future__ import annotations

import dataclasses
import itertools
import json
import random
import time
from typing import Any, cast

import pytest
from _scripted import run_messages
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic_ai import (
    Agent,
    Citation,
    ContentCitationAnchor,
    MarkerCitationAnchor,
    ModelMessage,
    ModelRequest,
    ModelResponse,
    ModelResponsePart,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    UserPromptPart,
    WebCitationSource,
)
from pydantic_ai.exceptions import UserError
from pydantic_ai.messages import ModelMessagesTypeAdapter
from pydantic_ai.models.function import AgentInfo, FunctionModel

from pydantic_ai_citations import CitedAnswer, CleanStaleCitations, TrackCitations, edit_response, edit_text, find_stale
from pydantic_ai_citations._diff import block_mapper, diff_blocks
from pydantic_ai_citations._edit import (
    METADATA_KEY,
    _all_before,  # pyright: ignore[reportPrivateUsage]
    _anchor_prints,  # pyright: ignore[reportPrivateUsage]
    _cut_mapper,  # pyright: ignore[reportPrivateUsage]
    _hash,  # pyright: ignore[reportPrivateUsage]
    _plain_anchor_prints,  # pyright: ignore[reportPrivateUsage]
    _range_holder,  # pyright: ignore[reportPrivateUsage]
    _realign,  # pyright: ignore[reportPrivateUsage]
    edit_text_with_problems,
    fingerprint_response,
    joined_fingerprint,
    moved_raw_offsets,
    repair_history,
    strip_citation_markers,
)
from pydantic_ai_citations._edit import survey as survey_parts

TEXT = 'Pydantic validates data. It is fast. Logfire observes it.'
#       0         1         2         3         4         5
#       0123456789012345678901234567890123456789012345678901234567


def web(url: str) -> WebCitationSource:
    return WebCitationSource(url)


def cited_part(**kwargs: Any) -> TextPart:
    """Three content citations: 'Pydantic validates data' (0..23), 'It is fast' (25..35), 'Logfire' (37..44)."""
    defaults: dict[str, Any] = {
        'id': 'msg_1',
        'provider_name': 'google-gla',
        'provider_details': {'citations': [{'segment': {'start_index': 0, 'end_index': 23}}]},
        'citations': [
            Citation([web('https://a.example/1')], anchor=ContentCitationAnchor(start=0, end=23)),
            Citation([web('https://b.example/2')], anchor=ContentCitationAnchor(start=25, end=35)),
            Citation([web('https://c.example/3')], anchor=ContentCitationAnchor(start=37, end=44)),
        ],
    }
    defaults.update(kwargs)
    return TextPart(TEXT, **defaults)


def anchored(part: TextPart) -> dict[str, str]:
    """URL -> anchored text, for every anchored citation."""
    out: dict[str, str] = {}
    for c in part.citations or []:
        assert c.anchor is not None
        src = c.sources[0]
        assert isinstance(src, WebCitationSource)
        out[src.url] = part.content[c.anchor.start : c.anchor.end]
    return out


# --- edit_text -------------------------------------------------------------------------------------------------------

ALL_THREE = {
    'https://a.example/1': 'Pydantic validates data',
    'https://b.example/2': 'It is fast',
    'https://c.example/3': 'Logfire',
}
WITHOUT_B = {'https://a.example/1': 'Pydantic validates data', 'https://c.example/3': 'Logfire'}


@pytest.mark.parametrize(
    ('new_text', 'expected', 'dropped'),
    [
        pytest.param(
            'Really, ' + TEXT,
            ALL_THREE,
            [],
            id='before-all-spans',
        ),
        pytest.param(
            TEXT + ' Really.',
            ALL_THREE,
            [],
            id='after-all-spans',
        ),
        pytest.param(
            TEXT.replace('It is fast', 'It is very fast'),
            WITHOUT_B,
            [1],
            id='middle-of-a-span',
        ),
        pytest.param(
            TEXT.replace('data. It', 'data.  It'),
            ALL_THREE,
            [],
            id='between-spans',
        ),
        pytest.param(
            TEXT.replace('fast', 'slow'),
            WITHOUT_B,
            [1],
            id='same-length-inside-span',
        ),
        pytest.param(
            TEXT.replace('observes', 'watchers'),
            ALL_THREE,
            [],
            id='same-length-outside-span',
        ),
        pytest.param('', {}, [0, 1, 2], id='delete-everything'),
    ],
)
def test_edit_text_realigns(new_text: str, expected: dict[str, str], dropped: list[int]) -> None:
    part = cited_part()
    new, problems = edit_text_with_problems(part, new_text)
    assert new.content == new_text
    assert anchored(new) == expected
    assert [p.citation_index for p in problems if p.citation_index is not None] == dropped
    assert all(p.code == 'citation_dropped_after_edit' for p in problems)
    assert new.id is None
    assert new.provider_name == 'google-gla'
    assert part.content == TEXT
    assert part.id == 'msg_1'
    assert edit_text(part, new_text) == new


def test_edit_text_unchanged_keeps_everything_but_id() -> None:
    part = cited_part()
    new, problems = edit_text_with_problems(part, TEXT)
    assert problems == []
    assert new == dataclasses.replace(part, id=None)


def test_edit_text_keeps_unanchored_citations() -> None:
    part = TextPart('Some text.', citations=[Citation([web('https://x.example')])], provider_name='openrouter')
    new = edit_text(part, 'Other words entirely.')
    assert new.citations == part.citations


def test_edit_text_openai_raw_annotations_shift_with_markers() -> None:
    text = 'Pydantic is fast ([pydantic.dev](https://pydantic.dev)). Logfire too ([x.dev](https://x.dev)).'
    a = text.index('([pydantic')
    b = text.index(')).') + 2
    c = text.index('([x.dev')
    d = len(text) - 1
    raw = [
        {'type': 'url_citation', 'url': 'https://pydantic.dev', 'title': 'P', 'start_index': a, 'end_index': b},
        {'type': 'url_citation', 'url': 'https://x.dev', 'title': 'X', 'start_index': c, 'end_index': d},
    ]
    part = TextPart(
        text,
        id='msg_9',
        provider_name='openai',
        provider_details={'citations': raw},
        citations=[
            Citation([web('https://pydantic.dev')], anchor=MarkerCitationAnchor(start=a, end=b)),
            Citation([web('https://x.dev')], anchor=MarkerCitationAnchor(start=c, end=d)),
        ],
    )
    new_text = 'Indeed, ' + text.replace('Logfire too ([x.dev](https://x.dev))', 'Logfire too')
    new, problems = edit_text_with_problems(part, new_text)
    assert [p.citation_index for p in problems] == [1]
    assert new.provider_details == {
        'citations': [{**raw[0], 'start_index': a + 8, 'end_index': b + 8}],
    }
    assert new.provider_details is not None
    entry: dict[str, Any]
    (entry,) = new.provider_details['citations']
    assert entry['url'] in new_text[entry['start_index'] : entry['end_index']]


def test_edit_text_openai_chat_nested_ranges() -> None:
    text = 'Fact [1]. More [2].'
    raw = [
        {'type': 'url_citation', 'url_citation': {'url': 'https://a', 'start_index': 5, 'end_index': 8}},
        {'type': 'url_citation', 'url_citation': {'url': 'https://b', 'start_index': 15, 'end_index': 18}},
    ]
    part = TextPart(
        text,
        provider_name='openai',
        provider_details={'citations': raw},
        citations=[
            Citation([web('https://a')], anchor=MarkerCitationAnchor(start=5, end=8)),
            Citation([web('https://b')], anchor=MarkerCitationAnchor(start=15, end=18)),
        ],
    )
    new = edit_text(part, 'A fact [1]. More [2].')
    assert new.provider_details == {
        'citations': [
            {'type': 'url_citation', 'url_citation': {'url': 'https://a', 'start_index': 7, 'end_index': 10}},
            {'type': 'url_citation', 'url_citation': {'url': 'https://b', 'start_index': 17, 'end_index': 20}},
        ]
    }


def test_edit_text_anthropic_block_dropped_with_raw() -> None:
    text = 'K2 is 8,611 m tall.'
    part = TextPart(
        text,
        provider_name='anthropic',
        provider_details={'citations': [{'type': 'web_search_result_location', 'encrypted_index': 'ENC'}]},
        citations=[Citation([web('https://ex.com/k2')], anchor=ContentCitationAnchor(start=0, end=len(text)))],
    )
    new, problems = edit_text_with_problems(part, 'K2 is 8,611 m tall (edited).')
    assert new.citations is None
    assert new.provider_details is None
    assert [p.code for p in problems] == ['citation_dropped_after_edit']
    kept = edit_text(part, 'Note: ' + text)  # the block's words are unchanged: kept, shifted, raw kept
    assert kept.citations is not None
    assert kept.citations[0].anchor == ContentCitationAnchor(start=6, end=6 + len(text))
    assert kept.provider_details == part.provider_details


def test_edit_text_google_raw_removed_when_it_cannot_follow() -> None:
    part = cited_part()
    new, problems = edit_text_with_problems(part, 'Yes. ' + TEXT)  # every citation shifts; byte segments cannot
    assert new.provider_details is None
    assert [p.detail for p in problems] == ["provider_details['citations']"]
    unchanged_raw = edit_text(part, TEXT + ' More.')  # nothing moved: raw data still true
    assert unchanged_raw.provider_details == part.provider_details
    # One citation: its byte segment cannot follow either (the shortcut for Anthropic's one citation per block, whose
    # raw entries hold no offsets, kept it unchanged, pointing at other words).
    one = cited_part(citations=(part.citations or [])[:1])
    new, problems = edit_text_with_problems(one, 'Yes. ' + TEXT)
    assert new.provider_details is None
    assert anchored(new) == {'https://a.example/1': 'Pydantic validates data'}
    assert [p.detail for p in problems] == ["provider_details['citations']"]


def test_edit_text_out_of_range_anchor_dropped() -> None:
    part = TextPart('short', citations=[Citation([web('https://x')], anchor=ContentCitationAnchor(start=0, end=99))])
    new, problems = edit_text_with_problems(part, 'short!')
    assert new.citations is None
    assert problems[0].code == 'citation_dropped_after_edit'
    assert problems[0].end == 99


_WORDS = st.sampled_from(['the', 'fox', 'data', 'Pydantic', 'validates', ' ', ', ', '.', 'é', 'quick'])


@given(st.lists(_WORDS, max_size=60), st.lists(_WORDS, max_size=60), st.integers(0, 60), st.integers(0, 60))
def test_diff_blocks_are_equal_text_in_order(old_words: list[str], other: list[str], cut: int, size: int) -> None:
    """Every block `diff_blocks` returns is text both sides hold there, in the same order on both, never overlapping;
    a range inside a block maps onto the same text."""
    old = ''.join(old_words)
    new = ''.join(old_words[:cut] + other[:size] + old_words[cut + size // 2 :])
    blocks = diff_blocks(old, new)
    end_old = end_new = 0
    for i, j, length in blocks:
        assert length > 0 and i >= end_old and j >= end_new
        assert old[i : i + length] == new[j : j + length]
        end_old, end_new = i + length, j + length
    move = block_mapper(blocks, len(old))
    for i, j, length in blocks:
        assert move(i, i + length) == (j, j + length)


@pytest.mark.parametrize('size', [1_750, 3_500, 7_200, 40_000])
def test_edit_text_of_a_long_answer_changed_at_both_ends_keeps_every_citation(size: int) -> None:
    """Both ends of a long answer edited (a greeting added, the closing line changed): the middle is compared word by
    word in linear time, and every citation on it is kept, even in text of a few distinct words repeated (no word of
    it is unique). `difflib` on the characters took seconds, and past a size it dropped every citation."""
    words = [
        'the',
        'quick',
        'brown',
        'fox',
        'jumps',
        'over',
        'the',
        'lazy',
        'dog',
        'while',
        'pydantic',
        'validates',
        'data',
        'and',
        'logfire',
        'observes',
        'it',
    ]
    rng = random.Random(size)
    body = ' '.join(rng.choice(words) for _ in range(size // 4))[:size]
    citations = [
        Citation([web(f'https://s{k}.example/')], anchor=ContentCitationAnchor(start=8 + k * 100, end=38 + k * 100))
        for k in range(10)
    ]
    part = TextPart('Answer: ' + body + ' End.', citations=citations)
    start = time.process_time()
    new, problems = edit_text_with_problems(part, 'Sure! ' + body + ' Hope this helps.')
    assert time.process_time() - start < 1.0
    assert problems == []
    assert new.citations is not None and len(new.citations) == 10
    for old_citation, citation in zip(citations, new.citations, strict=True):
        old_anchor, anchor = old_citation.anchor, citation.anchor
        assert isinstance(old_anchor, ContentCitationAnchor) and isinstance(anchor, ContentCitationAnchor)
        assert new.content[anchor.start : anchor.end] == part.content[old_anchor.start : old_anchor.end]
        assert anchor.start == old_anchor.start - 2  # ('Answer: ' became 'Sure! ')


def test_edit_text_of_a_rewritten_long_answer_is_linear() -> None:
    """The worst case for a diff: the whole text rewritten with letters from a small alphabet."""

    def cost(n: int) -> float:
        rng = random.Random(n)
        old = 'Z' + ''.join(rng.choice('abcd ') for _ in range(n)) + 'W'
        new = 'X' + ''.join(rng.choice('abcd ') for _ in range(n)) + 'Y'
        part = TextPart(old, citations=[Citation([web('https://a')], anchor=ContentCitationAnchor(start=0, end=4))])
        best = float('inf')
        for _ in range(3):
            start = time.process_time()
            edit_text_with_problems(part, new)
            best = min(best, time.process_time() - start)
        return best

    cost(2_000)
    assert cost(32_000) <= 8 * cost(8_000) + 0.05  # four times the text: 16x if it were quadratic


def test_edit_text_misuse() -> None:
    with pytest.raises(UserError, match="got 'text'"):
        edit_text('text', 'x')  # type: ignore[arg-type]
    with pytest.raises(UserError, match='got 3'):
        edit_text(TextPart('a'), 3)  # type: ignore[arg-type]


def test_edit_text_through_json_round_trip() -> None:
    response = ModelResponse(parts=[cited_part()], provider_name='google-gla')
    fingerprint_response(response)
    (loaded,) = ModelMessagesTypeAdapter.validate_json(ModelMessagesTypeAdapter.dump_json([response]))
    assert isinstance(loaded, ModelResponse)
    assert loaded == response
    part = loaded.parts[0]
    assert isinstance(part, TextPart)
    new = edit_text(part, TEXT.replace('fast', 'quick'))
    assert anchored(new) == {'https://a.example/1': 'Pydantic validates data', 'https://c.example/3': 'Logfire'}


_alphabet = st.sampled_from('ab .[]1\ue200\ue201é')


@st.composite
def part_and_edit(draw: st.DrawFn) -> tuple[TextPart, str]:
    text = draw(st.text(_alphabet, min_size=1, max_size=40))
    n = draw(st.integers(0, 4))
    citations: list[Citation] = []
    for i in range(n):
        start = draw(st.integers(0, len(text) - 1))
        end = draw(st.integers(start + 1, len(text) + 2))  # may run past the end
        kind = draw(st.sampled_from([ContentCitationAnchor, MarkerCitationAnchor]))
        citations.append(Citation([web(f'https://s/{i}')], anchor=kind(start=start, end=end)))
    ops = draw(st.lists(st.tuples(st.integers(0, 50), st.integers(0, 5), st.text(_alphabet, max_size=6)), max_size=4))
    new = text
    for pos, cut, insert in ops:
        pos = min(pos, len(new))
        new = new[:pos] + insert + new[pos + cut :]
    return TextPart(text, citations=citations or None, provider_name='p'), new


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(part_and_edit())
def test_property_surviving_citations_anchor_the_same_text(case: tuple[TextPart, str]) -> None:
    part, new_text = case
    before: dict[str, str] = {
        c.sources[0].url: part.content[c.anchor.start : c.anchor.end]  # type: ignore[union-attr]
        for c in part.citations or []
        if c.anchor is not None and c.anchor.end <= len(part.content)
    }
    new, problems = edit_text_with_problems(part, new_text)
    assert new.content == new_text
    for c in new.citations or []:
        assert c.anchor is not None
        assert 0 <= c.anchor.start < c.anchor.end <= len(new_text)
        url = c.sources[0].url  # type: ignore[union-attr]
        assert new_text[c.anchor.start : c.anchor.end] == before[url]
    assert len(new.citations or []) + len([p for p in problems if p.citation_index is not None]) == len(
        part.citations or []
    )


# --- markers ---------------------------------------------------------------------------------------------------------


def test_strip_citation_markers() -> None:
    text = 'Fact \ue200cite\ue202turn0search0\ue201. Other【4:0†source】. <cite index="0-1">Claim</cite> [1].'
    part = TextPart(
        text,
        provider_name='perplexity',
        citations=[
            Citation([web('https://p')], anchor=MarkerCitationAnchor(start=text.index('[1]'), end=len(text) - 1))
        ],
    )
    stripped, removed = strip_citation_markers(part)
    assert stripped.content == 'Fact. Other. Claim.'
    # the marker with the space before it, the bracket marker, the opening tag, `</cite>` + ' ' + `[1]`
    assert [text[s:e] for s, e in removed] == [
        ' \ue200cite\ue202turn0search0\ue201',
        '【4:0†source】',
        '<cite index="0-1">',
        '</cite> [1]',
    ]
    assert stripped.citations is None  # its marker is gone
    plain = TextPart('See [1] and [2].', provider_name='x')  # not marker-anchored: left alone
    assert strip_citation_markers(plain) == (plain, [])


def test_strip_list_marker_that_a_citation_is_anchored_on() -> None:
    """`[1, 2]` is one numbered marker (formats.numbered): a hand-off must not carry it either."""
    text = 'Both facts hold [1, 2]. Next.'
    start, end = text.index('[1, 2]'), text.index('[1, 2]') + len('[1, 2]')
    part = TextPart(
        text,
        provider_name='perplexity',
        citations=[Citation([web('https://a'), web('https://b')], anchor=MarkerCitationAnchor(start=start, end=end))],
    )
    stripped, removed = strip_citation_markers(part)
    assert stripped.content == 'Both facts hold. Next.'  # the space before it goes too, as for every marker
    assert removed == [(start - 1, end)]
    not_a_marker = TextPart(
        'Range [1-2].',
        provider_name='x',
        citations=[Citation([web('https://a')], anchor=MarkerCitationAnchor(start=6, end=11))],
    )
    assert strip_citation_markers(not_a_marker) == (not_a_marker, [])


# --- fingerprints and find_stale ---------------------------------------------------------------------------------------


def history() -> list[ModelMessage]:
    response = ModelResponse(parts=[TextPart('intro'), cited_part()], provider_name='google-gla')
    fingerprint_response(response)
    return [ModelRequest(parts=[UserPromptPart('q')]), response]


def test_fingerprint_shape_and_json_round_trip() -> None:
    messages = history()
    response = messages[1]
    assert isinstance(response, ModelResponse)
    assert response.metadata is not None
    ours = response.metadata[METADATA_KEY]
    assert list(ours['fingerprints']) == ['1']  # only the cited part
    assert len(ours['anchors']['1']) == 3
    loaded = ModelMessagesTypeAdapter.validate_json(ModelMessagesTypeAdapter.dump_json(messages))
    assert loaded == messages
    assert find_stale(loaded) == []


def test_find_stale_detects_edits_made_without_edit_text() -> None:
    messages = history()
    data = json.loads(ModelMessagesTypeAdapter.dump_json(messages))
    data[1]['parts'][1]['content'] = TEXT.replace('fast', 'slow')  # same length, edited by hand
    edited = ModelMessagesTypeAdapter.validate_json(json.dumps(data))
    (problem,) = find_stale(edited)
    assert (problem.code, problem.message_index, problem.part_index) == ('stale_after_edit', 1, 1)
    # mutating `content` in place is seen too
    response = messages[1]
    assert isinstance(response, ModelResponse)
    part = response.parts[1]
    assert isinstance(part, TextPart)
    assert find_stale(messages) == []
    part.content = part.content + '!'
    assert [p.code for p in find_stale(messages)] == ['stale_after_edit']
    # a part that is gone
    response.parts = [response.parts[0]]
    assert [p.code for p in find_stale(messages)] == ['stale_after_edit']


def test_find_stale_anchor_out_of_range_without_fingerprint() -> None:
    part = TextPart('short', citations=[Citation([web('https://x')], anchor=ContentCitationAnchor(start=2, end=50))])
    (problem,) = find_stale([ModelResponse(parts=[part])])
    assert (problem.code, problem.citation_index, problem.start, problem.end) == ('anchor_out_of_range', 0, 2, 50)


# --- CleanStaleCitations in runs ---------------------------------------------------------------------------------------


def citing_function(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    text = 'Pydantic validates data. It is fast.'
    return ModelResponse(
        parts=[
            TextPart(
                text,
                provider_name='function',
                provider_details={'citations': [{'raw': 1}]},
                citations=[
                    Citation([web('https://docs.pydantic.dev')], anchor=ContentCitationAnchor(start=0, end=23)),
                    Citation([web('https://fast.example')], anchor=ContentCitationAnchor(start=25, end=35)),
                ],
            )
        ]
    )


def test_capability_fields_and_misuse() -> None:
    cap = CleanStaleCitations[None]()
    assert (cap.on_edit, cap.on_provider_switch) == ('realign', 'strip_markers')
    with pytest.raises(UserError, match="got 'fix'"):
        CleanStaleCitations[None](on_edit='fix')  # type: ignore[arg-type]
    with pytest.raises(UserError, match="got 'drop'"):
        CleanStaleCitations[None](on_provider_switch='drop')  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        CleanStaleCitations[None]('clear')  # type: ignore[misc]


@pytest.mark.anyio
async def test_run_fingerprints_and_realigns_edit() -> None:
    seen: list[list[ModelMessage]] = []

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        seen.append(messages)
        return citing_function(messages, info)

    agent = Agent(FunctionModel(model), capabilities=[CleanStaleCitations(), TrackCitations()])
    result = await agent.run('q')
    answer = result.all_messages()[-1]
    assert isinstance(answer, ModelResponse)
    assert answer.metadata is not None
    assert METADATA_KEY in answer.metadata
    # The app stores the edited text by itself (no `edit_text`): 'It is fast' -> 'It is very fast'.
    data = json.loads(ModelMessagesTypeAdapter.dump_json(result.all_messages()))
    data[1]['parts'][0]['content'] = 'Note. Pydantic validates data. It is very fast.'
    stored = ModelMessagesTypeAdapter.validate_json(json.dumps(data))
    result2 = await agent.run('more', message_history=stored)
    repaired = result2.all_messages()[1]
    assert isinstance(repaired, ModelResponse)
    part = repaired.parts[0]
    assert isinstance(part, TextPart)
    # 'Pydantic validates data' is found once in the edited text, moved; 'It is fast' is gone.
    assert anchored(part) == {'https://docs.pydantic.dev': 'Pydantic validates data'}
    assert part.provider_details is None  # raw data of one of two citations: cannot be kept in step
    assert part.provider_name == 'function'
    assert find_stale(result2.all_messages()) == []
    sent = seen[-1][1]
    assert isinstance(sent, ModelResponse)
    assert sent.parts[0] == part
    assert [p.code for p in TrackCitations.of(agent).report(result2).problems] == [
        'stale_after_edit',
        'citation_dropped_after_edit',
        'citation_dropped_after_edit',
    ]


@pytest.mark.anyio
async def test_a_part_from_edit_text_put_back_with_the_old_prints_keeps_its_citations() -> None:
    """An app edits a part with `edit_text` but puts it back in a response that keeps the prints of before (it did not
    use `edit_response`): the part is stale, and each citation still on the words of a print, in order, is that
    print's, though `edit_text` dropped one (the prints no longer line up with the citations by index)."""
    text = 'Pydantic validates data. It is fast. Logfire observes it.'
    spans = [(0, 23), (25, 35), (37, 44)]

    def first(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        citations = [
            Citation([web(f'https://{k}.example/')], anchor=ContentCitationAnchor(start=s, end=e))
            for k, (s, e) in enumerate(spans)
        ]
        return ModelResponse(parts=[TextPart(text, citations=citations)])

    history = (await Agent(FunctionModel(first), capabilities=[CleanStaleCitations()]).run('q')).all_messages()
    response = history[-1]
    assert isinstance(response, ModelResponse)
    old = response.parts[0]
    assert isinstance(old, TextPart)
    edited = edit_text(old, text.replace('It is fast', 'It is very fast'))  # drops the citation of 'It is fast'
    history[-1] = ModelResponse(parts=[edited], metadata=response.metadata)
    seen: list[list[ModelMessage]] = []

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        seen.append(messages)
        return ModelResponse(parts=[TextPart('ok')])

    track = TrackCitations()
    result = await Agent(FunctionModel(model), capabilities=[track, CleanStaleCitations()]).run(
        'n', message_history=history
    )
    sent = seen[-1][1]
    assert isinstance(sent, ModelResponse) and isinstance(sent.parts[0], TextPart)
    assert anchored(sent.parts[0]) == {'https://0.example/': 'Pydantic validates data', 'https://2.example/': 'Logfire'}
    assert [p.code for p in track.report(result).problems] == ['stale_after_edit']


@pytest.mark.anyio
async def test_clear_mode() -> None:
    agent = Agent(FunctionModel(citing_function), capabilities=[CleanStaleCitations(on_edit='clear')])
    result = await agent.run('q')
    messages = result.all_messages()
    part = messages[1].parts[0]  # type: ignore[union-attr]
    assert isinstance(part, TextPart)
    part.content = 'Pydantic validates data. It is fast!'
    result2 = await agent.run('more', message_history=messages)
    cleared = result2.all_messages()[1].parts[0]  # type: ignore[union-attr]
    assert isinstance(cleared, TextPart)
    assert (cleared.citations, cleared.provider_details, cleared.content) == (
        None,
        None,
        'Pydantic validates data. It is fast!',
    )


@pytest.mark.anyio
async def test_run_stream_keeps_fingerprints() -> None:
    from pydantic_ai.capabilities import AbstractCapability
    from pydantic_ai.models.test import TestModel

    @dataclasses.dataclass
    class AddCitation(AbstractCapability[object]):
        async def after_model_request(
            self, ctx: Any, *, request_context: Any, response: ModelResponse
        ) -> ModelResponse:
            for part in response.parts:
                if isinstance(part, TextPart):  # in place, so run_stream history sees it
                    part.citations = [Citation([web('https://a')], anchor=ContentCitationAnchor(start=0, end=5))]
            return response

    capabilities: list[AbstractCapability[object]] = [CleanStaleCitations(), AddCitation()]
    agent = Agent(TestModel(custom_output_text='hello world'), capabilities=capabilities)
    async with agent.run_stream('q') as run:
        await run.get_output()
    response = run.all_messages()[-1]
    assert isinstance(response, ModelResponse)
    assert response.metadata is not None
    assert response.metadata[METADATA_KEY]['fingerprints']
    plain = Agent(TestModel(custom_output_text='hi'), capabilities=[CleanStaleCitations()])
    async with plain.run_stream('q') as run2:
        await run2.get_output()
    assert not run2.all_messages()[-1].metadata  # None or {}: nothing to record


def test_find_stale_second_pass_sees_every_kind_of_change() -> None:
    """A history checked before is not hashed again, but any change since is still seen."""
    messages = history() + history()
    assert find_stale(messages) == []
    assert find_stale(messages) == []  # unchanged: served from the previous pass
    grown = [*messages, *history()]
    assert find_stale(grown) == []  # grown: only the new messages are looked at
    third = grown[5]
    assert isinstance(third, ModelResponse)
    third.parts[1] = dataclasses.replace(third.parts[1], content='changed')  # type: ignore[arg-type]
    assert [(p.code, p.message_index) for p in find_stale(grown)] == [('stale_after_edit', 5)]
    first = grown[1]
    assert isinstance(first, ModelResponse)
    part = first.parts[1]
    assert isinstance(part, TextPart)
    part.content = part.content.upper()  # in place, same object
    assert [(p.code, p.message_index) for p in find_stale(grown)] == [('stale_after_edit', 1), ('stale_after_edit', 5)]
    cast(list[ModelResponsePart], first.parts).append(
        TextPart('new', citations=[Citation([web('https://x')], anchor=ContentCitationAnchor(start=0, end=9))])
    )
    codes = [(p.code, p.message_index, p.part_index) for p in find_stale(grown)]
    assert ('anchor_out_of_range', 1, 2) in codes
    assert find_stale(grown[:2]) == find_stale(list(grown[:2]))  # a shorter history is surveyed afresh


@pytest.mark.anyio
async def test_example_edit_and_resend() -> None:
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / 'examples' / 'edit_and_resend.py'
    spec = importlib.util.spec_from_file_location('edit_and_resend', path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert await module.main() == [
        'answer: ["\'K2 is 8,611 m tall.\' -> https://ex.com/k2", "\'first climbed in 1954\' -> https://ex.com/1954"]',
        'edited: ["\'K2 is 8,611 m tall.\' -> https://ex.com/k2"]',
        '  citation_dropped_after_edit: citation 1',
        'stored answers citing ex.com/k2: 2',
        'find_stale: stale_after_edit at message 1',
        'realigned before sending: ["\'K2 is 8,611 m tall.\' -> https://ex.com/k2"]',
    ]


# --- issue 12: every provider's markup removed for another provider ---------------------------------------------------


def sent_text(messages: list[ModelMessage]) -> str:
    return ' '.join(
        p.content for m in messages if isinstance(m, ModelResponse) for p in m.parts if isinstance(p, TextPart)
    )


async def resend(history: list[ModelMessage]) -> str:
    """What the next request sends of `history` to another provider (`FunctionModel`), through `CleanStaleCitations`."""
    seen: list[list[ModelMessage]] = []

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        seen.append(messages)
        return ModelResponse(parts=[TextPart('ok')])

    await Agent(FunctionModel(model), capabilities=[CleanStaleCitations()]).run('next', message_history=history)
    return sent_text(seen[0])


XAI_TEXT = 'K2 is 8,611 m tall. [[1]](https://en.wikipedia.org/wiki/K2) It is in the Karakoram.'


@pytest.mark.anyio
async def test_xai_numbered_link_markers_not_handed_on() -> None:
    """Regression: xAI's `[[1]](url)` markers were sent on to the next provider as they were."""
    start = XAI_TEXT.index('[[1]]')
    end = XAI_TEXT.index(' It is')
    part = TextPart(
        XAI_TEXT,
        provider_name='xai',
        citations=[
            Citation([web('https://en.wikipedia.org/wiki/K2')], anchor=MarkerCitationAnchor(start=start, end=end)),
            Citation([web('https://k2.example')], anchor=ContentCitationAnchor(start=0, end=19)),
        ],
    )
    history: list[ModelMessage] = [
        ModelRequest(parts=[UserPromptPart('q')]),
        ModelResponse(parts=[part], provider_name='xai'),
    ]
    sent = await resend(history)
    assert sent == 'K2 is 8,611 m tall. It is in the Karakoram.'
    assert history[1].parts[0] is part  # the stored history keeps them
    stripped, _ = strip_citation_markers(part)
    assert anchored(stripped) == {'https://k2.example': 'K2 is 8,611 m tall.'}  # shifted, not diffed


@pytest.mark.anyio
async def test_paren_cite_tag_not_half_removed() -> None:
    """Regression: `(cite index="0-1">x</cite>` lost only its `</cite>`, and the next provider got the half tag."""
    text = 'Everest is 8,849 m (cite index="0-1">tall</cite>. Other prose (cite sources) stays.'
    part = TextPart(
        text,
        provider_name='anthropic',
        citations=[Citation([web('https://e.example')], anchor=ContentCitationAnchor(start=37, end=41))],
    )
    assert text[37:41] == 'tall'
    history: list[ModelMessage] = [ModelRequest(parts=[UserPromptPart('q')]), ModelResponse(parts=[part])]
    sent = await resend(history)
    assert sent == 'Everest is 8,849 m tall. Other prose (cite sources) stays.'
    stripped, _ = strip_citation_markers(part)
    assert anchored(stripped) == {'https://e.example': 'tall'}


def test_strip_leaves_no_private_use_character_or_half_tag() -> None:
    text = 'A \ue200cite\ue202turn9 unterminated. B </cite> stray. C \ue201.'
    stripped, removed = strip_citation_markers(TextPart(text, provider_name='openai'))
    assert removed
    assert not any(ch in stripped.content for ch in '\ue200\ue201\ue202')
    assert 'cite' not in stripped.content


# --- edit_response, and fingerprints with TrackCitations ---------------------------------------------------------------


def test_edit_response_refreshes_fingerprints() -> None:
    messages = history()
    response = messages[1]
    assert isinstance(response, ModelResponse)
    edited, problems = edit_response(response, 1, TEXT.replace('It is fast', 'It is very fast'))
    assert [(p.code, p.part_index, p.citation_index) for p in problems] == [
        ('citation_dropped_after_edit', 1, 1),
        ('citation_dropped_after_edit', 1, None),  # Google's raw data cannot follow
    ]
    assert response.parts[1].content == TEXT  # type: ignore[union-attr]  # not changed
    assert find_stale([messages[0], edited]) == []
    assert edited.metadata is not None
    assert edited.metadata[METADATA_KEY] != response.metadata[METADATA_KEY]  # type: ignore[index]
    unprinted = ModelResponse(parts=[cited_part()])
    edited, _ = edit_response(unprinted, 0, 'Note. ' + TEXT)
    assert edited.metadata is not None
    assert METADATA_KEY in edited.metadata  # now fingerprinted: later edits are caught
    with pytest.raises(UserError, match='`part_index` 0 does not name a `TextPart`'):
        edit_response(ModelResponse(parts=[]), 0, 'x')
    with pytest.raises(UserError, match='`part_index` True does not name a `TextPart`'):
        edit_response(ModelResponse(parts=[TextPart('a'), TextPart('b')]), True, 'x')  # not part 1


def test_edit_response_wants_a_response() -> None:
    with pytest.raises(
        UserError, match=r"edit_response: `response` must be a `ModelResponse`.*got TextPart\(content='a'"
    ):
        edit_response(TextPart('a'), 0, 'b')  # type: ignore[arg-type]


def test_find_stale_without_fingerprints_checks_anchors_only() -> None:
    """A history no fingerprinting capability saw (e.g. made with `TrackCitations` alone)."""
    part = cited_part()
    messages: list[ModelMessage] = [ModelRequest(parts=[UserPromptPart('q')]), ModelResponse(parts=[part])]
    assert find_stale(messages) == []
    part.content = 'short'
    assert [(p.code, p.citation_index) for p in find_stale(messages)] == [
        ('anchor_out_of_range', 0),
        ('anchor_out_of_range', 1),
        ('anchor_out_of_range', 2),
    ]


@pytest.mark.anyio
@pytest.mark.parametrize('clean_first', [True, False], ids=['clean-then-track', 'track-then-clean'])
@pytest.mark.parametrize('streamed', [False, True], ids=['run', 'run_stream'])
async def test_fingerprints_with_track_citations_in_either_order(clean_first: bool, streamed: bool) -> None:
    """`TrackCitations` changes responses in place (here: OpenAI markers become citations); the fingerprint
    `CleanStaleCitations` records is of the final response, whichever hook runs first, in `run` and `run_stream`."""
    from pydantic_ai.models.test import TestModel

    from pydantic_ai_citations import TrackCitations

    text = 'K2 is 8,611 m tall. \ue200cite\ue202turn0search0\ue201'
    sources = {'turn0search0': web('https://k2.example')}
    track = TrackCitations(marker_sources=sources)
    clean = CleanStaleCitations()
    agent = Agent(TestModel(custom_output_text=text), capabilities=[clean, track] if clean_first else [track, clean])
    messages = await run_messages(agent, 'q', streamed=streamed)
    response = messages[-1]
    assert isinstance(response, ModelResponse)
    part = response.parts[0]
    assert isinstance(part, TextPart)
    assert part.citations
    assert '\ue200' not in part.content
    assert response.metadata is not None
    assert response.metadata[METADATA_KEY]['fingerprints']
    assert find_stale(messages) == []
    part.content += ' (edited)'
    assert [p.code for p in find_stale(messages)] == ['stale_after_edit']


# --- stripping: properties, and markup found when fingerprinting --------------------------------------------------------

_FRAGMENTS = st.sampled_from(
    [
        'word',
        ' ',
        '. ',
        '[1]',
        '[1, 2]',
        '[[1]](https://x.ai/a)',
        '\ue200cite\ue202turn0search0\ue201',
        '\ue200cite\ue202turn9',
        '\ue201',
        '【4:0†source】',
        '<cite index="0-1">',
        '(cite index="0-2">',
        '</cite>',
        '(cite sources)',
        'é',
    ]
)


@st.composite
def marked_up_part(draw: st.DrawFn) -> TextPart:
    text = ''.join(draw(st.lists(_FRAGMENTS, min_size=1, max_size=12)))
    citations: list[Citation] = []
    for i in range(draw(st.integers(0, 3))):
        start = draw(st.integers(0, len(text) - 1))
        end = draw(st.integers(start + 1, len(text)))
        kind = draw(st.sampled_from([ContentCitationAnchor, MarkerCitationAnchor]))
        citations.append(Citation([web(f'https://s/{i}')], anchor=kind(start=start, end=end)))
    return TextPart(text, citations=citations or None, provider_name='p')


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(marked_up_part())
def test_property_strip_citation_markers(part: TextPart) -> None:
    """Cuts lie in the text, nothing private-use is left, surviving citations anchor the same words, and the markup
    found when fingerprinting strips exactly the same."""
    stripped, cuts = strip_citation_markers(part)
    text = part.content
    assert all(0 <= s < e <= len(text) for s, e in cuts)
    assert all(a[1] < b[0] for a, b in itertools.pairwise(cuts))
    assert not any(ch in stripped.content for ch in '\ue200\ue201\ue202')
    before = {c.sources[0].url: text[c.anchor.start : c.anchor.end] for c in part.citations or [] if c.anchor}  # type: ignore[union-attr]
    for c in stripped.citations or []:
        assert c.anchor is not None
        assert stripped.content[c.anchor.start : c.anchor.end] == before[c.sources[0].url]  # type: ignore[union-attr]
    response = ModelResponse(parts=[part])
    fingerprint_response(response)
    markup = (response.metadata or {}).get(METADATA_KEY, {}).get('markup', {}).get('0')
    assert strip_citation_markers(part, markup) == (stripped, cuts) if cuts else markup is None


@st.composite
def marked_up_part_with_raw(draw: st.DrawFn) -> TextPart:
    """A marked-up part whose citations may be anchored on its markup (as xAI's are), with raw entries beside them."""
    part = draw(marked_up_part())
    citations = list(part.citations or [])
    cuts = list(strip_citation_markers(part)[1])
    ranges = [(c.anchor.start, c.anchor.end) for c in citations if c.anchor]  # type: ignore[union-attr]
    for start, end in cuts if draw(st.booleans()) else []:
        inner = (draw(st.integers(start, end - 1)), end) if draw(st.booleans()) else (start, end)
        citations.append(
            Citation([web(f'https://m/{start}')], anchor=MarkerCitationAnchor(start=inner[0], end=inner[1]))
        )
        ranges.append(inner)
    raw = [
        {'type': 'url_citation', 'url': f'https://r/{i}', 'start_index': s, 'end_index': e}
        for i, (s, e) in enumerate(draw(st.lists(st.sampled_from(ranges), max_size=4)) if ranges else [])
    ]
    if draw(st.booleans()):
        raw.append({'type': 'no_offsets'})
    details: dict[str, Any] | None = draw(st.sampled_from([None, {'citations': raw}, {'citations': raw, 'x': 1}]))
    return TextPart(part.content, citations=citations or None, provider_name='p', provider_details=details)


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
@given(marked_up_part_with_raw())
def test_property_strip_fast_paths_equal_realign(part: TextPart) -> None:
    """Where something moves or goes, `strip_citation_markers` leaves the part `_realign` leaves (the general path),
    also on its fast path for citations anchored on the markup (the path where nothing moves is checked above)."""
    stripped, cuts = strip_citation_markers(part)
    if not cuts or (_all_before(part.citations, cuts[0][0]) and _nothing_moves(part.provider_details, cuts[0][0])):
        return
    move = _cut_mapper(cuts)
    reference, _ = _realign(
        part, stripped.content, lambda _i, start, end: move(start, end), reason='-', move_raw=move, report=False
    )
    assert stripped.content == reference.content
    assert stripped.citations == reference.citations
    assert _without_empty(stripped.provider_details) == _without_empty(reference.provider_details)


def test_strip_drops_citations_anchored_on_markup_and_keeps_the_rest() -> None:
    """The xAI shape: a citation and its raw entry on the `[[1]](url)` marker go with it; the rest stays as it was."""
    text = 'Grok is fast [[1]](https://x.ai/news). '
    start = text.index('[[')
    end = text.index(')') + 1
    on_marker = Citation([web('https://x.ai/news')], anchor=MarkerCitationAnchor(start=start, end=end))
    before = Citation([web('https://x.ai')], anchor=ContentCitationAnchor(start=0, end=4))
    raw_marker = {'type': 'url_citation', 'url': 'https://x.ai/news', 'start_index': start, 'end_index': end}
    raw_before = {'type': 'url_citation', 'url': 'https://x.ai', 'start_index': 0, 'end_index': 4}

    def strip(details: Any, citations: list[Any] | None = None) -> TextPart:
        part = TextPart(text, citations=citations or [before, on_marker], provider_name='xai', provider_details=details)
        stripped, cuts = strip_citation_markers(part)
        assert cuts and stripped.content == 'Grok is fast. '
        return stripped

    kept = strip({'citations': [raw_before, raw_marker], 'other': 1})
    assert kept.citations == [before]
    assert kept.provider_details == {'citations': [raw_before], 'other': 1}
    assert strip({'citations': [raw_marker]}).provider_details is None
    assert strip({'other': 1}).provider_details == {'other': 1}
    assert strip(None).provider_details is None
    # Shapes the fast path leaves to the general one, with the same outcome for the citations.
    for details in (
        {'citations': 'x'},
        {'citations': [{'type': 'no_offsets'}]},
        {'citations': [dict(raw_marker, start_index=2)]},
    ):
        assert strip(details).citations == [before]
    assert strip({}, [before, on_marker, 'not a citation']).citations == [before]


def _nothing_moves(details: dict[str, Any] | None, first: int) -> bool:
    """No raw entry has offsets at or after `first`: the path where nothing moves keeps them all (checked above)."""
    raw: list[object] = (details or {}).get('citations') or []
    holders: list[Any] = [_range_holder(entry) for entry in raw]
    return all(holder is None or holder['end_index'] <= first for holder in holders)


def _without_empty(details: dict[str, Any] | None) -> dict[str, Any] | None:
    """`details` with an empty raw list dropped (kept by the fast paths, dropped by `_realign`), `{}` as `None`."""
    return {k: v for k, v in (details or {}).items() if not (k == 'citations' and v == [])} or None


def test_fingerprinted_markup_is_used_and_checked() -> None:
    text = 'Fact. \ue200cite\ue202turn0search0\ue201 More.'
    part = TextPart(text, citations=[Citation([web('https://a')], anchor=ContentCitationAnchor(start=0, end=5))])
    response = ModelResponse(parts=[part])
    fingerprint_response(response)
    assert response.metadata is not None
    assert response.metadata[METADATA_KEY]['markup'] == {'0': [[5, 25]]}
    marked: list[Any] = []
    assert survey_parts([ModelRequest(parts=[UserPromptPart('q')]), response], marked) == []
    assert [(m[0], m[2], m[4]) for m in marked] == [(1, 0, [[5, 25]])]
    assert strip_citation_markers(part, [[5, 25]])[0].content == 'Fact. More.'
    # Stored ranges that do not fit the text are not trusted: the text is scanned again.
    for bad in ([[5, 300]], [[9, 5]], [[5, 10], [7, 12]], 'x', [['a', 'b']]):
        assert strip_citation_markers(part, bad)[0].content == 'Fact. More.'


def test_stale_only_survey_skips_anchor_findings_and_nothing_else() -> None:
    """`survey(..., anchors=False)`, the pass behind `CleanStaleCitations`, finds the same stale parts and marks the
    same parts as the full survey, without the anchor checks it does not act on."""
    bad_anchor = Citation([web('https://a')], anchor=ContentCitationAnchor(start=0, end=999))
    printed_bad = ModelResponse(parts=[TextPart('Fact. \ue200cite\ue202turn0search0\ue201', citations=[bad_anchor])])
    fingerprint_response(printed_bad)
    edited = ModelResponse(parts=[cited_part()])
    fingerprint_response(edited)
    part = edited.parts[0]
    assert isinstance(part, TextPart)
    part.content = part.content.replace('fast', 'slow')
    unprinted = ModelResponse(parts=[TextPart('Fact (cite index="0-1">x</cite>', citations=[bad_anchor])])
    foreign = ModelResponse(parts=[TextPart('Fact \ue200cite\ue201', citations=[bad_anchor])], metadata={'app': 1})
    tool_call = ModelResponse(parts=[ToolCallPart('search', {'q': 'x'})])
    history: list[ModelMessage] = [ModelRequest(parts=[UserPromptPart('q')]), printed_bad, edited, unprinted, foreign]
    history.append(tool_call)
    full_marked: list[Any] = []
    full = survey_parts(history, full_marked)
    assert [(f[0], f[3][0][0]) for f in full] == [
        (1, 'anchor_out_of_range'),
        (2, 'stale_after_edit'),
        (3, 'anchor_out_of_range'),
        (4, 'anchor_out_of_range'),
    ]
    stale_marked: list[Any] = []
    assert [(f[0], f[3][0][0]) for f in survey_parts(history, stale_marked, anchors=False)] == [(2, 'stale_after_edit')]
    assert [m[0] for m in stale_marked] == [m[0] for m in full_marked] == [1, 3, 4]
    assert survey_parts(history, anchors=False) == survey_parts(history, stale_marked, anchors=False)


def test_edit_response_keeps_other_parts_fingerprints() -> None:
    """Editing one part must not vouch for another part edited outside `edit_text` in the meantime."""
    response = ModelResponse(parts=[cited_part(), cited_part()])
    fingerprint_response(response)
    other = response.parts[1]
    assert isinstance(other, TextPart)
    other.content = other.content.replace('fast', 'slow')  # edited by hand
    edited, _ = edit_response(response, 0, 'Note. ' + TEXT)
    assert [(p.code, p.part_index) for p in find_stale([edited])] == [('stale_after_edit', 1)]
    repaired, problems = repair_history([edited], 'realign')
    assert [(p.code, p.part_index) for p in problems][0] == ('stale_after_edit', 1)
    assert find_stale([repaired[0]]) == []
    part = repaired[0].parts[1]
    assert isinstance(part, TextPart)
    assert anchored(part) == WITHOUT_B  # located by the old anchor prints


FIRST_FORM_PRINTS = {
    'fingerprints': {'0': '41a1548b2a834a22'},
    'anchors': {
        '0': [
            ['9cbd3f99358e1097', 23, '154bb388c5598151', 'b32cc32d0e1af0'],
            ['f57e13723c96a1c1', 10, '301d7ff5d0fcdf', '18c34fbaa7dcffe2'],
        ]
    },
    'markup': {},
}
"""`metadata['pydantic_ai_citations']` of 'Pydantic validates data. It is fast.' (anchors 0..23 and 25..35) as
earlier versions stored it: anchor prints of four fields, polynomial hashes in base 1,000,003 modulo 2**61 - 1."""


@pytest.mark.anyio
async def test_a_stored_history_with_first_form_anchor_prints_is_repaired() -> None:
    stored = ModelResponse(
        parts=[
            TextPart(
                'Note: Pydantic validates data. It is fast!',  # edited by the app after it was stored
                citations=[
                    Citation([web('https://a.example/1')], anchor=ContentCitationAnchor(start=0, end=23)),
                    Citation([web('https://b.example/2')], anchor=ContentCitationAnchor(start=25, end=35)),
                ],
            )
        ],
        metadata={METADATA_KEY: FIRST_FORM_PRINTS},
    )
    history = ModelMessagesTypeAdapter.validate_json(
        ModelMessagesTypeAdapter.dump_json([ModelRequest([UserPromptPart('q')]), stored])
    )
    agent = Agent(
        FunctionModel(lambda _m, _i: ModelResponse(parts=[TextPart('ok')])), capabilities=[CleanStaleCitations()]
    )
    result = await agent.run('more', message_history=history)
    repaired = result.all_messages()[1]
    assert isinstance(repaired, ModelResponse)
    part = repaired.parts[0]
    assert isinstance(part, TextPart)
    assert anchored(part) == {'https://a.example/1': 'Pydantic validates data', 'https://b.example/2': 'It is fast'}
    assert [(c.anchor.start, c.anchor.end) for c in part.citations or [] if c.anchor] == [(6, 29), (31, 41)]
    assert find_stale(result.all_messages()) == []
    assert repaired.metadata is not None
    assert [len(p) for p in repaired.metadata[METADATA_KEY]['anchors']['0']] == [5, 5]  # printed afresh


def _marked_response(provider_name: str, **fields: Any) -> ModelResponse:
    text = f'From {provider_name}: Pydantic is fast. \ue200cite\ue202turn0search0\ue201'
    part = TextPart(
        text,
        provider_name=provider_name,
        citations=[Citation([web('https://a.example/1')], anchor=ContentCitationAnchor(start=0, end=10))],
    )
    return ModelResponse(parts=[part], provider_name=provider_name, **fields)


def test_strip_for_asks_each_provider_once_and_answers_as_the_model_would() -> None:
    from pydantic_ai.models.openai import OpenAIResponsesModel
    from pydantic_ai.providers.openai import OpenAIProvider

    from pydantic_ai_citations._history import _strip_for  # pyright: ignore[reportPrivateUsage]

    history: list[ModelMessage] = []
    for name, fields in [
        ('openai', {}),
        ('openai', {'canonical_system': 'azure'}),  # same name, another system: asked apart
        ('anthropic', {}),
        ('openai', {}),
        ('google', {'provider_url': 'https://generativelanguage.googleapis.com/'}),
        ('openai', {'canonical_system': 'azure'}),
    ]:
        history += [ModelRequest([UserPromptPart('q')]), _marked_response(name, **fields)]
    model = OpenAIResponsesModel('gpt-5', provider=OpenAIProvider(api_key='x'))
    expected = [
        i
        for i, m in enumerate(history)
        if isinstance(m, ModelResponse) and not model.accepts_stateless_artifacts(m, m.parts[0])
    ]
    cleaned, problems = _strip_for(model, history)
    assert cleaned is not None
    assert [p.message_index for p in problems] == expected == [3, 5, 9, 11]
    assert all('\ue200' not in cast(TextPart, cast(ModelResponse, cleaned[i]).parts[0]).content for i in expected)
    assert cleaned[1] is history[1] and cleaned[7] is history[7]  # the model's own: sent as they are

    asked: list[str | None] = []

    class Asking(OpenAIResponsesModel):
        def accepts_stateless_artifacts(self, response: ModelResponse, part: ModelResponsePart | None = None) -> bool:
            asked.append(response.provider_name)
            return False  # its own rule: nothing is its own

    _, problems = _strip_for(Asking('gpt-5', provider=OpenAIProvider(api_key='x')), history)
    assert len(asked) == len(problems) == 6  # an override is asked for every part: its answer may read anything

    odd = _marked_response('anthropic')
    odd.provider_url = ['not', 'text']  # type: ignore[assignment]  # hand-built: an unhashable name
    cleaned, problems = _strip_for(model, [ModelRequest([UserPromptPart('q')]), odd])
    assert cleaned is not None and [p.message_index for p in problems] == [1]  # asked as it is, not a crash


# --- text parts joined (a UI round trip) -------------------------------------------------------------------------------


def _split_response() -> ModelResponse:
    """`TEXT` as Anthropic sends it, one text part per cited stretch, fingerprinted."""
    cite = Citation([web('https://b.example/2')], anchor=ContentCitationAnchor(start=0, end=10))
    parts: list[ModelResponsePart] = [TextPart(TEXT[:25]), TextPart(TEXT[25:35], citations=[cite]), TextPart(TEXT[35:])]
    response = ModelResponse(parts=parts)
    fingerprint_response(response)
    return response


def _joined(response: ModelResponse) -> ModelResponse:
    """`response` with its text parts joined into one, as `VercelAIAdapter` dumps and loads it."""
    parts = [p for p in response.parts if isinstance(p, TextPart)]
    at = len(parts[0].content)
    citations = [
        dataclasses.replace(c, anchor=ContentCitationAnchor(start=c.anchor.start + at, end=c.anchor.end + at))
        for c in parts[1].citations or []
        if c.anchor is not None
    ]
    return ModelResponse(parts=[TextPart(''.join(p.content for p in parts), citations=citations)])


def test_joined_parts_are_vouched_for_when_their_parts_were():
    response = _split_response()
    joined = _joined(response)
    joined.metadata = {METADATA_KEY: joined_fingerprint(response, joined, {0: [0, 1, 2]})}
    assert find_stale([joined]) == []
    assert joined_fingerprint(ModelResponse(parts=[TextPart('x')]), joined, {0: [0]}) is None  # never fingerprinted


def test_joined_parts_stay_stale_and_repairable_when_one_was_edited():
    response = _split_response()
    cited = response.parts[1]
    assert isinstance(cited, TextPart)
    cited.content = 'So: It is fast'  # edited outside `edit_text`: the anchor is stale, the anchored words intact
    joined = _joined(response)
    joined.metadata = {METADATA_KEY: joined_fingerprint(response, joined, {0: [0, 1, 2]})}
    assert [(p.code, p.part_index) for p in find_stale([joined])] == [('stale_after_edit', 0)]
    repaired, problems = repair_history([joined], 'realign')
    assert [p.code for p in problems] == ['stale_after_edit']
    part = repaired[0].parts[0]
    assert isinstance(part, TextPart)
    assert anchored(part) == {'https://b.example/2': 'It is fast'}
    answer = CitedAnswer.from_messages([joined])  # the reader sees it realigned too, and told
    assert [answer.span_text(s) for s in answer.spans] == ['It is fast']
    assert [p.code for p in answer.problems] == ['stale_after_edit']


def test_a_fingerprinted_part_that_is_gone_stays_reported_after_joining():
    response = _split_response()
    response.parts = [response.parts[0], ToolCallPart('lookup', {}), response.parts[2]]  # the cited part is gone
    rebuilt = ModelResponse(parts=[TextPart(TEXT[:25]), ToolCallPart('lookup', {}), TextPart(TEXT[35:])])
    rebuilt.metadata = {METADATA_KEY: joined_fingerprint(response, rebuilt, {0: [0], 2: [2]})}
    assert [(p.code, p.part_index) for p in find_stale([rebuilt])] == [('stale_after_edit', 3)]


def test_raw_offsets_into_the_text_move_and_others_stay():
    def move(offset: int) -> int:
        return offset - 10

    raw: list[object] = [
        {'type': 'url_citation', 'url': 'u', 'start_index': 20, 'end_index': 30},  # OpenAI Responses, xAI
        {'type': 'url_citation', 'url_citation': {'url': 'u', 'start_index': 20, 'end_index': 30}},  # OpenAI Chat
        {'type': 'file_citation', 'file_id': 'f', 'index': 25},
        {'segment': {'start_index': 20, 'end_index': 30}, 'grounding_chunk_indices': [0]},  # Google: UTF-8 bytes
        {'type': 'char_location', 'start_char_index': 5, 'end_char_index': 9},  # Anthropic: in the cited document
        'not a dict',
    ]
    assert moved_raw_offsets(raw, move) == [
        {'type': 'url_citation', 'url': 'u', 'start_index': 10, 'end_index': 20},
        {'type': 'url_citation', 'url_citation': {'url': 'u', 'start_index': 10, 'end_index': 20}},
        {'type': 'file_citation', 'file_id': 'f', 'index': 15},
        *raw[3:],
    ]
    assert moved_raw_offsets({'not': 'a list'}, move) == {'not': 'a list'}


# --- fingerprinted parts that moved (a part before them removed from the history) -------------------------------


def _thinking_then_cited() -> ModelResponse:
    """A response whose cited text parts follow a `ThinkingPart`, fingerprinted as `CleanStaleCitations` does."""
    response = ModelResponse(
        parts=[
            ThinkingPart('Let me check.'),
            TextPart(
                'K2 is 8,611 m tall. ',
                citations=[Citation([web('https://a.example/k2')], anchor=ContentCitationAnchor(start=0, end=19))],
            ),
            TextPart(
                'It is in Pakistan.',
                citations=[Citation([web('https://b.example/pk')], anchor=ContentCitationAnchor(start=9, end=17))],
            ),
        ]
    )
    fingerprint_response(response)
    return response


def _without_thinking(response: ModelResponse) -> ModelResponse:
    return dataclasses.replace(response, parts=[p for p in response.parts if not isinstance(p, ThinkingPart)])


def test_a_part_that_moved_unchanged_is_still_vouched_for() -> None:
    moved = _without_thinking(_thinking_then_cited())
    assert find_stale([moved]) == []
    assert repair_history([moved], 'realign') == ({}, [])
    assert [s.url for s in CitedAnswer.from_messages([moved]).sources] == [
        'https://a.example/k2',
        'https://b.example/pk',
    ]


@pytest.mark.parametrize('edited', [0, 1])
def test_a_part_that_moved_and_was_edited_is_stale_and_its_citations_are_not_resent(edited: int) -> None:
    moved = _without_thinking(_thinking_then_cited())
    part = moved.parts[edited]
    assert isinstance(part, TextPart)
    part.content = part.content.replace('8,611', '9,999').replace('Pakistan', 'India')
    assert [(p.code, p.part_index) for p in find_stale([moved])] == [('stale_after_edit', edited)]
    replaced, problems = repair_history([moved], 'realign')
    repaired = replaced[0].parts[edited]
    assert isinstance(repaired, TextPart)
    assert repaired.citations is None  # its cited words are gone: dropped, and reported
    assert [p.code for p in problems] == ['stale_after_edit', 'citation_dropped_after_edit']
    other = replaced[0].parts[1 - edited]
    assert isinstance(other, TextPart) and other.citations  # the other part kept its own


def test_parts_that_moved_and_changed_beyond_telling_lose_their_citations_with_a_problem() -> None:
    response = _thinking_then_cited()
    only = response.parts[2]
    assert isinstance(only, TextPart)
    edited = dataclasses.replace(response, parts=[dataclasses.replace(only, content='It is in India, it seems.')])
    # Two prints, one part that matches neither: which one it was cannot be told, so no anchor is trusted.
    assert [(p.code, p.part_index) for p in find_stale([edited])] == [
        ('stale_after_edit', 0),
        ('stale_after_edit', 1),
        ('stale_after_edit', 2),
    ]
    replaced, problems = repair_history([edited], 'realign')
    repaired = replaced[0].parts[0]
    assert isinstance(repaired, TextPart) and repaired.citations is None
    assert 'citation_dropped_after_edit' in [p.code for p in problems]


def test_a_repaired_response_keeps_each_print_under_the_index_its_part_has_now() -> None:
    """After the hand-off's repair, the next request finds nothing stale: the moved parts' prints moved with them."""
    response = _thinking_then_cited()
    first, second = response.parts[1], response.parts[2]
    assert isinstance(first, TextPart) and isinstance(second, TextPart)
    moved = dataclasses.replace(response, parts=[dataclasses.replace(first, content='K2 is 9,999 m tall. '), second])
    replaced, problems = repair_history([moved], 'realign')
    assert [p.code for p in problems] == ['stale_after_edit', 'citation_dropped_after_edit']
    repaired = replaced[0]
    assert find_stale([repaired]) == []
    assert repair_history([repaired], 'realign') == ({}, [])
    ours = cast(dict[str, Any], repaired.metadata)[METADATA_KEY]
    # Part 0 lost its one citation (no print: uncited); part 1 has the print made when it was part 2.
    assert (sorted(ours['fingerprints']), sorted(ours['anchors'])) == (['1'], ['1'])
    assert ours['fingerprints']['1'] == cast(dict[str, Any], response.metadata)[METADATA_KEY]['fingerprints']['2']


@settings(max_examples=300, deadline=None)
@given(
    st.text(st.sampled_from('ab é\U0001f600\ud800'), max_size=20),
    st.lists(
        st.one_of(
            st.none(),
            st.tuples(st.sampled_from(['content', 'marker']), st.integers(0, 22), st.integers(1, 8)),
        ),
        max_size=4,
    ),
)
def test_plain_anchor_prints_are_the_general_ones(text: str, anchors: list[tuple[str, int, int] | None]) -> None:
    """`fingerprint_response`'s path for the usual part prints exactly what the general one does, or leaves it to it."""
    citations: list[Citation] = []
    for anchor in anchors:
        if anchor is None:
            citations.append(Citation([WebCitationSource(url='https://a.example')]))
            continue
        kind, start, size = anchor
        end = start + size
        made = ContentCitationAnchor if kind == 'content' else MarkerCitationAnchor
        citations.append(Citation([WebCitationSource(url='https://a.example')], anchor=made(start=start, end=end)))
    part = TextPart(text, citations=citations)
    digest = _hash(text)
    data = text.encode('utf-8', 'surrogatepass')
    fast = _plain_anchor_prints(text, data, digest, citations)
    if fast is not None:
        assert fast == _anchor_prints(part, digest)
    valid = all(a is None or a[1] + a[2] <= len(text) for a in anchors)
    assert (fast is not None) == valid
