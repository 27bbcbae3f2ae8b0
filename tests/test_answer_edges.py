"""`CitedAnswer.from_messages` on responses nothing normalised: unreadable citation containers are problems, offsets
survive stripped markup, and the completeness verdict follows the finishing signal a wire tap recorded.
"""

from __future__ import annotations

from typing import Any

import pytest
from pydantic_ai import Citation, ModelResponse, TextPart, WebCitationSource
from pydantic_ai.exceptions import UserError
from pydantic_ai.messages import ContentCitationAnchor

from pydantic_ai_citations import CitedAnswer
from pydantic_ai_citations._answer import FINISH_METADATA_KEY
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
