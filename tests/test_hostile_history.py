"""Issue 15 point 7: raw citation ranges follow the text whatever the part holds; `find_stale` sees changes in place;
a tracked run keeps only what its report needs."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic_ai import (
    Agent,
    Citation,
    ContentCitationAnchor,
    MarkerCitationAnchor,
    ModelMessage,
    ModelResponse,
    TextPart,
)
from pydantic_ai import WebCitationSource as Web
from pydantic_ai.messages import ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from pydantic_ai_citations import TrackCitations, find_stale
from pydantic_ai_citations._edit import (
    edit_text_with_problems,
    fingerprint_response,
    repair_part,
    strip_citation_markers,
)

TEXT = 'Pydantic validates data. It is fast.'


def raw(start: int, end: int, nested: bool = False) -> dict[str, Any]:
    holder = {'type': 'url_citation', 'url': 'https://a.example/', 'start_index': start, 'end_index': end}
    return {'type': 'url_citation', 'url_citation': holder} if nested else holder


def ranges(part: TextPart) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for entry in (part.provider_details or {}).get('citations', []):
        holder = entry.get('url_citation', entry)
        out.append((holder['start_index'], holder['end_index']))
    return out


def test_raw_ranges_shift_in_a_part_without_anchored_citations():
    part = TextPart(TEXT, provider_details={'citations': [raw(0, 8), raw(25, 35, nested=True)], 'other': 1})
    new, problems = edit_text_with_problems(part, 'Note: ' + TEXT)
    assert problems == []
    assert ranges(new) == [(6, 14), (31, 41)]
    assert [new.content[a:b] for a, b in ranges(new)] == ['Pydantic', 'It is fast']
    assert new.provider_details is not None
    assert new.provider_details['other'] == 1
    assert new.provider_details['citations'][1]['type'] == 'url_citation'


def test_raw_ranges_whose_words_changed_are_removed_and_reported():
    part = TextPart(
        TEXT,
        citations=[Citation([Web('https://b.example/')])],
        provider_details={'citations': [raw(0, 8), raw(25, 35)]},
    )
    new, problems = edit_text_with_problems(part, TEXT.replace('fast', 'quick'))
    assert ranges(new) == [(0, 8)]
    assert [(p.code, p.start, p.end, p.detail) for p in problems] == [
        ('citation_dropped_after_edit', 25, 35, "provider_details['citations'][1]")
    ]
    assert new.citations == part.citations  # the unanchored citation stays


def test_every_raw_range_gone_removes_the_key():
    part = TextPart(TEXT, provider_details={'citations': [raw(25, 35)]})
    new, problems = edit_text_with_problems(part, 'It is slow.')
    assert new.provider_details is None
    assert [p.detail for p in problems] == ["provider_details['citations'][0]"]


def test_raw_entry_of_a_dropped_citation_is_reported_once():
    citation = Citation([Web('https://a.example/')], anchor=ContentCitationAnchor(start=25, end=35))
    broken = ContentCitationAnchor(start=3, end=4)
    object.__setattr__(broken, 'end', 3)  # no valid range (as from a damaged stored history)
    empty = Citation([Web('https://b.example/')], anchor=broken)
    part = TextPart(TEXT, citations=[citation, empty], provider_details={'citations': [raw(25, 35)]})
    new, problems = edit_text_with_problems(part, TEXT.replace('fast', 'quick'))
    assert new.citations is None
    assert new.provider_details is None
    assert [(p.code, p.citation_index) for p in problems] == [
        ('citation_dropped_after_edit', 0),
        ('citation_dropped_after_edit', 1),
    ]


def test_raw_without_offsets_in_a_part_without_anchors_is_removed_when_the_text_changes():
    part = TextPart(TEXT, provider_details={'citations': [{'segment': {'start_index': 0, 'end_index': 8}}]})
    new, problems = edit_text_with_problems(part, 'Note: ' + TEXT)
    assert new.provider_details is None
    assert [p.detail for p in problems] == ["provider_details['citations']"]
    same, problems = edit_text_with_problems(part, TEXT)
    assert same.provider_details == part.provider_details
    assert problems == []


def test_repair_keeps_raw_ranges_of_located_citations_and_reports_the_rest():
    citation = Citation([Web('https://a.example/')], anchor=ContentCitationAnchor(start=25, end=35))
    response = ModelResponse(
        parts=[TextPart(TEXT, citations=[citation], provider_details={'citations': [raw(25, 35), raw(0, 8)]})]
    )
    fingerprint_response(response)
    edited = TextPart('Note: ' + TEXT, citations=[citation], provider_details={'citations': [raw(25, 35), raw(0, 8)]})
    new, problems = repair_part(response, 0, edited, 'realign')
    assert ranges(new) == [(31, 41)]
    assert [(p.start, p.end, p.detail) for p in problems] == [(0, 8, "provider_details['citations'][1]")]


def test_stripping_markup_shifts_raw_ranges_after_it():
    text = 'Big \ue200cite\ue202turn0search1\ue201 city. It is fast.'
    start = text.index('It is fast')
    citation = Citation([Web('https://a.example/')], anchor=ContentCitationAnchor(start=0, end=3))
    part = TextPart(text, citations=[citation], provider_details={'citations': [raw(0, 3), raw(start, start + 10)]})
    new, _cuts = strip_citation_markers(part)
    assert new.content == 'Big city. It is fast.'
    assert [new.content[a:b] for a, b in ranges(new)] == ['Big', 'It is fast']
    before = TextPart(text, citations=[citation], provider_details={'citations': [raw(0, 3)]})
    assert ranges(strip_citation_markers(before)[0]) == [(0, 3)]  # nothing after the marker: the fast path
    odd = TextPart(text, citations=[citation], provider_details={'citations': 'not a list'})
    assert strip_citation_markers(odd)[0].provider_details is None  # cannot follow: removed


def test_find_stale_sees_citations_changed_in_place():
    citation = Citation([Web('https://a.example/')], anchor=ContentCitationAnchor(start=0, end=8))
    part = TextPart(TEXT, citations=[citation])
    response = ModelResponse(parts=[part])
    fingerprint_response(response)
    assert find_stale([response]) == []
    assert part.citations is not None
    part.citations[0] = Citation([Web('https://a.example/')], anchor=ContentCitationAnchor(start=0, end=80))
    assert [(p.code, p.citation_index, p.end) for p in find_stale([response])] == [('anchor_out_of_range', 0, 80)]
    part.citations[0] = citation
    part.citations.append(Citation([Web('https://b.example/')], anchor=MarkerCitationAnchor(start=40, end=44)))
    assert [(p.code, p.citation_index) for p in find_stale([response])] == [('anchor_out_of_range', 1)]
    part.citations.pop()
    assert find_stale([response]) == []
    part.content = 'Changed.'
    assert [p.code for p in find_stale([response])] == ['stale_after_edit']


@pytest.mark.anyio
async def test_a_tracked_run_keeps_only_its_last_response_until_the_report():
    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if len(messages) < 5:
            return ModelResponse(parts=[TextPart('x' * 10_000), ToolCallPart('lookup', {'q': 'x'})])
        return ModelResponse(parts=[TextPart('Done.')])

    track = TrackCitations()
    agent = Agent(FunctionModel(model), capabilities=[track])

    @agent.tool_plain
    def lookup(q: str) -> str:  # pyright: ignore[reportUnusedFunction]
        return q

    result = await agent.run('q')
    record = track._runs.get(result.run_id)  # pyright: ignore[reportPrivateUsage]
    assert record is not None
    assert [r.response is not None for r in record.requests] == [False, False, True]
    report = track.report(result)
    assert len(report.requests) == 3
    assert [len(r.parts) for r in report.requests] == [1, 1, 1]  # observed before their responses were released
    assert len(track._runs) == 0  # pyright: ignore[reportPrivateUsage]


@pytest.mark.parametrize(
    'prints',
    [
        {'\u00b2': '0123456789abcdef'},  # a digit `int()` does not read
        {0: 'x'},  # not a str
        {'0': ['a list'], '1': {'a': 1}},  # values no hash is
        {'٣': 'x', '0': 'y'},  # an Arabic-Indic digit
    ],
    ids=['superscript-digit', 'int-key', 'unhashable-values', 'other-digit'],
)
@pytest.mark.anyio
async def test_damaged_fingerprint_keys_are_read_as_prints_of_no_part(prints: dict[object, object]) -> None:
    """Hand-edited or damaged fingerprints in a stored history: no crash in `find_stale`, the answer or a run; the
    part they do not match is stale (its citation is not resent unchecked) or shown, never lost."""
    from pydantic_ai import ModelRequest, UserPromptPart

    from pydantic_ai_citations import CitedAnswer, CleanStaleCitations
    from pydantic_ai_citations._edit import METADATA_KEY

    part = TextPart(
        TEXT, citations=[Citation([Web('https://a.example/')], anchor=ContentCitationAnchor(start=0, end=23))]
    )
    response = ModelResponse(parts=[part], metadata={METADATA_KEY: {'fingerprints': prints}})
    history: list[ModelMessage] = [ModelRequest(parts=[UserPromptPart('q')]), response]
    assert find_stale(history)  # the prints name no part of it: reported
    answer = CitedAnswer.from_messages(history)
    assert [s.url for s in answer.sources] == ['https://a.example/']
    sent: list[ModelMessage] = []

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        sent.extend(messages)
        return ModelResponse(parts=[TextPart('ok')])

    await Agent(FunctionModel(model), capabilities=[CleanStaleCitations()]).run('next', message_history=history)
    assert sent
