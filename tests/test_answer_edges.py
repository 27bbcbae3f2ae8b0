"""`CitedAnswer.from_messages` on responses nothing normalised: unreadable citation containers are problems, offsets
survive stripped markup, and the completeness verdict follows the finishing signal a wire tap recorded.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic_ai import Citation, ModelResponse, TextPart, ToolCallPart, WebCitationSource
from pydantic_ai.exceptions import UserError
from pydantic_ai.messages import ContentCitationAnchor, NativeToolCallPart, NativeToolReturnPart

from pydantic_ai_citations import CitedAnswer
from pydantic_ai_citations._answer import FINISH_METADATA_KEY, response_answer
from pydantic_ai_citations._edit import fingerprint_response


def _problems(answer: CitedAnswer) -> list[tuple[str, str | None]]:
    return [(p.code, p.detail) for p in answer.problems]


def test_citations_that_are_not_a_list_are_reported_not_read() -> None:
    part = TextPart('Hello.')
    part.citations = 'not a list'  # pyright: ignore[reportAttributeAccessIssue]  # a hand-built part may hold anything
    answer = CitedAnswer.from_messages([ModelResponse(parts=[part])])
    assert answer.spans == []
    assert _problems(answer) == [('unreadable_raw_data', "'not a list'")]


def test_response_annotations_that_are_not_a_list_are_reported_not_read() -> None:
    response = ModelResponse(parts=[TextPart('Hello.')], provider_details={'annotations': {'url': 'x'}})
    answer = CitedAnswer.from_messages([response])
    assert answer.raw_only == []
    assert _problems(answer) == [('unreadable_raw_data', "{'url': 'x'}")]


def test_anchor_offsets_move_past_markup_removed_from_the_part() -> None:
    content = 'Paris (cite index="0">is big</cite>. Lyon too.'
    lyon = content.index('Lyon')
    inside = content.index('is big')
    source = WebCitationSource('https://a.example/p')
    part = TextPart(
        content,
        citations=[
            Citation([source], anchor=ContentCitationAnchor(start=lyon, end=lyon + 4)),
            Citation([source], anchor=ContentCitationAnchor(start=content.index('cite'), end=inside + 6)),
        ],
    )
    answer = CitedAnswer.from_messages([ModelResponse(parts=[part])])
    assert answer.text == 'Paris is big. Lyon too.'
    assert [answer.text[s.start : s.end] for s in answer.spans] == ['is big', 'Lyon']  # in text order


@pytest.mark.parametrize(
    ('metadata', 'finish_reason', 'reason'),
    [
        pytest.param(None, None, "The response ended without Anthropic's `message_delta.stop_reason`", id='no-signal'),
        pytest.param(None, 'stop', None, id='signal'),
        pytest.param({FINISH_METADATA_KEY: {'complete': True}}, None, None, id='tap-saw-whole-body'),
        pytest.param(
            {FINISH_METADATA_KEY: {'complete': False, 'reason': 'Cut by the tap.'}},
            'stop',
            'Cut by the tap.',
            id='tap-says-cut',
        ),
        pytest.param(
            {FINISH_METADATA_KEY: {'complete': False}}, 'stop', 'The response did not complete.', id='no-reason'
        ),
    ],
)
def test_completeness_follows_the_recorded_finishing_signal(
    metadata: dict[str, Any] | None, finish_reason: Any, reason: str | None
) -> None:
    response = ModelResponse(
        parts=[TextPart('Hello.')],
        provider_name='anthropic',
        provider_details={'finish_reason': finish_reason} if finish_reason else None,
        metadata=metadata,
    )
    answer = CitedAnswer.from_messages([response])
    assert answer.complete is (reason is None)
    messages = [p.message for p in answer.problems if p.code == 'stream_incomplete']
    assert messages[0].startswith(reason) if reason else messages == [], messages


def test_source_of_an_answer_without_sources_says_there_are_none() -> None:
    with pytest.raises(UserError, match=r'this answer has 0 source\(s\): none\.'):
        CitedAnswer('Hello.').source(1)


def test_parts_are_stripped_as_the_one_text_they_make() -> None:
    """A marker that opens a part takes the space ending the part before (as the joined text, and a stream of the
    parts, lose it); a marker split across two parts is one marker, reported on the part it starts in."""
    marker = '\ue200cite\ue202turn0search0\ue201'
    web = WebCitationSource('https://example.com/b')
    cited = TextPart('China border', citations=[Citation([web], anchor=ContentCitationAnchor(start=0, end=12))])
    response = ModelResponse(parts=[TextPart('K2 is tall. '), TextPart(f'{marker} End, '), cited, TextPart('.')])
    answer = CitedAnswer.from_messages([response])
    assert answer.text == 'K2 is tall. End, China border.'
    assert [answer.span_text(s) for s in answer.spans] == ['China border']
    assert [(p.code, p.part_index, p.start, p.end) for p in answer.problems] == [
        ('unresolved_marker', 1, 0, len(marker))
    ]

    split = ModelResponse(parts=[TextPart('a \ue200cite\ue202tu'), TextPart('rn0\ue201 b')])
    answer = CitedAnswer.from_messages([split])
    assert answer.text == 'a b'
    assert [(p.code, p.part_index, p.start, p.end, p.detail) for p in answer.problems] == [
        ('unresolved_marker', 0, 2, 10, repr('\ue200cite\ue202turn0\ue201'))
    ]


def test_a_part_edited_since_its_fingerprint_is_shown_realigned_and_reported() -> None:
    web = WebCitationSource('https://example.com/b')
    other = WebCitationSource('https://example.com/c')
    part = TextPart(
        'It lies on the China border. It is high.',
        citations=[
            Citation([web], anchor=ContentCitationAnchor(start=15, end=27)),
            Citation([other], anchor=ContentCitationAnchor(start=29, end=40)),
        ],
    )
    response = ModelResponse(parts=[part])
    fingerprint_response(response)
    part.content = 'Note: it lies on the China border. It is very high.'  # edited outside `edit_text`
    answer = CitedAnswer.from_messages([response])
    assert [answer.span_text(s) for s in answer.spans] == ['China border']
    assert [s.url for s in answer.unanchored] == [other.url]  # its words are gone: kept without a position
    assert [(p.code, p.part_index) for p in answer.problems] == [('stale_after_edit', 0)]
    assert part.citations is not None and part.citations[0].anchor == ContentCitationAnchor(start=15, end=27)


# --- citations on text the answer does not show ------------------------------------------------------------------


def _cite(url: str, start: int | None = None, end: int | None = None) -> Citation:
    anchor = ContentCitationAnchor(start=start, end=end) if start is not None and end is not None else None
    return Citation([WebCitationSource(url)], anchor=anchor)


def _searched_twice() -> ModelResponse:
    """Claude after two searches: text, search, cited text, search, cited text (the output is the last text)."""
    return ModelResponse(
        parts=[
            TextPart('Let me search.'),
            NativeToolCallPart('web_search', {'query': 'k2'}, tool_call_id='t1', provider_name='anthropic'),
            NativeToolReturnPart('web_search', [], tool_call_id='t1', provider_name='anthropic'),
            TextPart(
                'K2 is 8,611 m tall.', citations=[_cite('https://a.example/k2', 0, 19)], provider_name='anthropic'
            ),
            NativeToolCallPart('web_search', {'query': 'border'}, tool_call_id='t2', provider_name='anthropic'),
            NativeToolReturnPart('web_search', [], tool_call_id='t2', provider_name='anthropic'),
            TextPart('It lies on the border.', citations=[_cite('https://b.example/border', 0, 22)]),
        ],
        provider_name='anthropic',
        provider_details={'finish_reason': 'end_turn'},
    )


def test_citations_on_text_before_the_last_native_tool_call_are_listed_and_reported() -> None:
    answer = CitedAnswer.from_messages([_searched_twice()])
    assert answer.text == 'It lies on the border.'  # Pydantic AI's output
    assert [s.url for s in answer.sources] == ['https://b.example/border']
    (raw,) = answer.raw_only
    assert (raw.part_index, raw.raw_index, raw.provider_name) == (3, 0, 'anthropic')
    assert raw.data == {
        'sources': [{'url': 'https://a.example/k2', 'title': None, 'excerpts': [], 'kind': 'web'}],
        'anchor': {'start': 0, 'end': 19, 'kind': 'content'},
    }
    assert 'before the response' in raw.reason
    assert _problems(answer) == [('citation_outside_answer', 'https://a.example/k2')]
    assert answer.problems[0].part_index == 3
    assert CitedAnswer.from_json(answer.to_json()) == answer


def test_citations_on_empty_text_are_listed_and_reported() -> None:
    part = TextPart('', citations=[_cite('https://c.example/used'), 'junk'])  # pyright: ignore[reportArgumentType]
    answer = CitedAnswer.from_messages([ModelResponse(parts=[part])])
    assert (answer.text, answer.sources) == ('', [])
    assert [(r.raw_index, r.data) for r in answer.raw_only] == [
        (
            0,
            {
                'sources': [{'url': 'https://c.example/used', 'title': None, 'excerpts': [], 'kind': 'web'}],
                'anchor': None,
            },
        )
    ]
    assert [(p.code, p.citation_index) for p in answer.problems] == [
        ('unreadable_raw_data', 1),
        ('citation_outside_answer', None),
    ]
    assert answer.problems[1].detail == 'https://c.example/used'
    assert 'is empty' in answer.problems[1].message


def test_raw_citations_on_text_the_answer_does_not_show_are_listed_too() -> None:
    response = _searched_twice()
    early = response.parts[3]
    assert isinstance(early, TextPart)
    early.provider_details = {
        'citations': [
            {'type': 'web_search_result_location', 'url': 'https://a.example/k2'},
            {'type': 'search_result_location', 'source': 'doc-7'},
        ]
    }
    answer = CitedAnswer.from_messages([response])
    # The raw entry naming the part's own citation's source is that citation; the other one is listed apart.
    assert [(r.part_index, r.data) for r in answer.raw_only][1:] == [
        (3, {'type': 'search_result_location', 'source': 'doc-7'})
    ]
    assert '1 citation(s) and 2 raw provider citation(s)' in answer.problems[0].message


@pytest.mark.parametrize(
    ('part', 'detail'),
    [
        (TextPart(None), 'None'),  # pyright: ignore[reportArgumentType]
        (TextPart('abc', provider_details=[{'type': 'url_citation'}]), "[{'type': 'url_citation'}]"),  # pyright: ignore[reportArgumentType]
    ],
)
def test_unreadable_text_parts_are_reported_not_read(part: TextPart, detail: str) -> None:
    answer = CitedAnswer.from_messages([ModelResponse(parts=[part])])
    assert _problems(answer) == [('unreadable_raw_data', detail)]


def test_unreadable_response_details_and_metadata_do_not_stop_the_verdict() -> None:
    response = ModelResponse(parts=[TextPart('Hi.')], provider_name='anthropic')
    response.provider_details = ['end_turn']  # pyright: ignore[reportAttributeAccessIssue]
    response.metadata = ['x']  # pyright: ignore[reportAttributeAccessIssue]
    answer = CitedAnswer.from_messages([response])
    assert answer.text == 'Hi.'
    assert not answer.complete  # no readable finishing signal: never a complete-looking answer
    assert [p.code for p in answer.problems] == ['stream_incomplete']


def _cited_part(text: str, urls: list[str], anchored: bool) -> TextPart:
    return TextPart(text, citations=[_cite(u, 0, len(text)) if anchored and text else _cite(u) for u in urls] or None)


_PART = st.one_of(
    st.builds(
        _cited_part,
        st.sampled_from(['', 'Some text.', 'More.']),
        st.lists(st.sampled_from(['https://a.example/', 'https://b.example/x', 'https://c.example/']), max_size=3),
        st.booleans(),
    ),
    st.just(NativeToolCallPart('web_search', {}, tool_call_id='t', provider_name='anthropic')),
    st.just(ToolCallPart('lookup', {}, tool_call_id='f')),
)


@given(st.lists(_PART, max_size=7), st.sampled_from([{'finish_reason': 'end_turn'}, None]))
def test_the_stores_answer_of_a_response_is_the_public_one(parts: list[Any], details: dict[str, Any] | None) -> None:
    """`response_answer` (what a store builds per response it saves) is `CitedAnswer.from_messages([response])`."""
    response = ModelResponse(parts=parts, provider_details=details, provider_name='anthropic')
    assert response_answer(response) == CitedAnswer.from_messages([response])


@given(st.lists(_PART, max_size=7))
def test_every_citation_of_a_response_is_shown_listed_or_reported(parts: list[Any]) -> None:
    """The promise, for any layout of text and tool calls: no citation of the response disappears without a trace."""
    response = ModelResponse(parts=parts, provider_details={'finish_reason': 'end_turn'}, provider_name='anthropic')
    answer = CitedAnswer.from_messages([response])
    shown = {(s.part_index, s.citation_index) for s in answer.spans}
    unanchored = {s.url for s in answer.unanchored}
    listed = {(r.part_index, r.raw_index) for r in answer.raw_only}
    reported = {(p.part_index, p.citation_index) for p in answer.problems}
    for index, part in enumerate(parts):
        for k, citation in enumerate(part.citations or []) if isinstance(part, TextPart) else ():
            source = citation.sources[0]
            assert isinstance(source, WebCitationSource)
            url = source.url
            assert (
                (index, k) in shown
                or (citation.anchor is None and url in unanchored)
                or (index, k) in listed
                or (index, k) in reported
                # a second citation of the same source over the same text is a duplicate, reported once
                or any(p.code == 'duplicate_citation' and p.part_index == index for p in answer.problems)
                or url in {s.url for s in answer.sources}
            ), (index, k, answer)


def test_raw_data_that_json_cannot_hold_round_trips_by_name() -> None:
    part = TextPart('Hi.', provider_details={'citations': [{'type': 'weird', 'score': float('inf')}]})
    answer = CitedAnswer.from_messages([ModelResponse(parts=[part])])
    assert [r.data for r in answer.raw_only] == [{'type': 'weird', 'score': 'inf'}]
    assert CitedAnswer.from_json(answer.to_json()) == answer


def test_text_that_is_not_utf8_cannot_be_written_as_json_and_says_so() -> None:
    answer = CitedAnswer.from_messages([ModelResponse(parts=[TextPart('Hi \ud83d.')])])
    with pytest.raises(UserError, match=r'^CitedAnswer.to_json: the answer cannot be written as JSON: .*Replace'):
        answer.to_json()


@given(st.lists(st.tuples(st.integers(0, 20), st.integers(1, 10)), max_size=25, unique=True))
def test_partial_overlaps_are_the_ones_a_pairwise_check_finds(anchors: list[tuple[int, int]]) -> None:
    ranges = [(start, start + length) for start, length in anchors]
    citations = [
        Citation([WebCitationSource(f'https://s{i}.example/')], anchor=ContentCitationAnchor(start=a, end=b))
        for i, (a, b) in enumerate(ranges)
    ]
    answer = CitedAnswer.from_messages([ModelResponse(parts=[TextPart('w' * 40, citations=citations)])])
    flagged = {p.citation_index for p in answer.problems if p.code == 'overlapping_citations'}
    expected = {i for i, (a, b) in enumerate(ranges) if any(s < a < e < b for s, e in ranges)}
    assert flagged == expected
