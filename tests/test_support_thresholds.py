"""The support check's two length rules (issue 17 point 5), on hand-written answers that break each of them.

Passages shorter than 5 words are dropped when a page is split (`min_passage_words`, `split_passages(min_words=)`);
claims shorter than 8 words are not compared and come out `'too_short'` (`min_claim_words`).
"""

from __future__ import annotations

import io
import json
from datetime import UTC, datetime

import pytest
from pydantic_ai.exceptions import UserError

from pydantic_ai_citations import CitedAnswer, CitedSpan, SourceRef
from pydantic_ai_citations.support import (
    DEFAULT_MIN_CLAIM_WORDS,
    DEFAULT_MIN_PASSAGE_WORDS,
    AuditOptions,
    PageSnapshot,
    audit_answers,
    check_support,
    check_support_sync,
    claims_for,
    split_passages,
    summarize,
)

URL = 'https://e.test/a'
PAGE = (
    '<html><body>'
    '<p>Rome hosts ancient ruins.</p>'  # 4 words: dropped by default
    '<p>Paris hosts the Eiffel tower.</p>'  # 5 words: kept
    '<p>The Eiffel tower in Paris was finished in 1889 for the World Fair.</p>'
    '</body></html>'
)
SEVEN = 'The Eiffel tower was finished in 1889.'  # 7 words
EIGHT = 'The Eiffel tower in Paris was finished 1889.'  # 8 words


def answer_for(*claims: str, source: SourceRef | None = None) -> CitedAnswer:
    """Each claim a content span citing source 1."""
    text = ' '.join(claims)
    spans: list[CitedSpan] = []
    offset = 0
    for claim in claims:
        spans.append(
            CitedSpan(offset, offset + len(claim), 'content', [1], message_index=1, part_index=0, citation_index=0)
        )
        offset += len(claim) + 1
    return CitedAnswer(text, spans=spans, unanchored=[], sources=[source or SourceRef(1, 'web', url=URL)])


def test_defaults_are_the_methods():
    assert (DEFAULT_MIN_PASSAGE_WORDS, DEFAULT_MIN_CLAIM_WORDS) == (5, 8)


def test_passages_shorter_than_five_words_are_dropped():
    kept = [p.text for p in split_passages(PAGE)]
    assert 'Rome hosts ancient ruins.' not in kept
    assert kept[0] == 'Paris hosts the Eiffel tower.'
    assert [p.text for p in split_passages(PAGE, min_words=4)][0] == 'Rome hosts ancient ruins.'
    # Markdown and plain text follow the same rule.
    assert [p.text for p in split_passages('Four words only here.\n\nNow five words are here.')] == [
        'Now five words are here.'
    ]


def test_check_support_drops_short_passages_with_min_passage_words():
    claim = 'Rome hosts ancient ruins from the empire today.'  # 8 words, its terms only in the 4-word passage
    default = check_support_sync(answer_for(claim), {URL: PAGE}).checks[0]
    assert default.verdict == 'unsupported'
    assert default.passage is None or default.passage.text != 'Rome hosts ancient ruins.'
    shorter = check_support_sync(answer_for(claim), {URL: PAGE}, min_passage_words=4).checks[0]
    assert shorter.passage is not None and shorter.passage.text == 'Rome hosts ancient ruins.'
    report = check_support_sync(answer_for(claim), {URL: '<p>Tiny page here.</p>'})
    assert report.checks[0].reason == 'the page has no passages of at least 5 words'


def test_claims_shorter_than_eight_words_are_too_short():
    report = check_support_sync(answer_for(SEVEN, EIGHT), {URL: PAGE})
    short, long = report.checks
    assert [c.word_count for c in claims_for(answer_for(SEVEN, EIGHT))] == [7, 8]
    assert (short.verdict, short.score, short.passage, short.basis) == ('too_short', None, None, 'none')
    assert short.reason == 'the claim has 7 word(s): claims shorter than 8 words are not compared'
    assert long.verdict == 'supported'
    assert long.passage is not None and '1889' in long.passage.text
    # Not scored: the threshold curve counts only the compared claim.
    assert report.summary.verdicts['too_short'] == 1
    assert report.summary.scored == 1
    assert summarize(report.checks).verdicts['too_short'] == 1
    lowered = check_support_sync(answer_for(SEVEN), {URL: PAGE}, min_claim_words=7).checks[0]
    assert lowered.verdict == 'supported'


def test_markers_do_not_count_as_claim_words():
    text = 'The Eiffel tower was finished in 1889 [1]. Next.'
    marker = text.index('[1]')
    answer = CitedAnswer(
        text,
        spans=[CitedSpan(marker, marker + 3, 'marker', [1], message_index=1, part_index=0, citation_index=0)],
        unanchored=[],
        sources=[SourceRef(1, 'web', url=URL)],
    )
    check = check_support_sync(answer, {URL: PAGE}).checks[0]
    assert (check.claim, check.verdict) == ('The Eiffel tower was finished in 1889', 'too_short')


def test_too_short_next_to_page_problems():
    now = datetime(2026, 1, 1, tzinfo=UTC)
    dead = PageSnapshot(url=URL, final_url=URL, status=404, liveness='not_found', captured_at=now, reason='HTTP 404')
    # A dead link stays `unreachable` (the audit lists it), whether or not an excerpt could be scored.
    assert check_support_sync(answer_for(SEVEN), {URL: dead}).checks[0].verdict == 'unreachable'
    with_excerpt = SourceRef(1, 'web', url=URL, excerpts=['The Eiffel tower was finished in 1889.'])
    check = check_support_sync(answer_for(SEVEN, source=with_excerpt), {URL: dead}).checks[0]
    assert (check.verdict, check.liveness) == ('unreachable', 'not_found')
    assert check.reason == 'HTTP 404; the claim has 7 word(s): claims shorter than 8 words are not compared'
    # No page at all: `no_snapshot`; only an excerpt: not compared either.
    assert check_support_sync(answer_for(SEVEN), {}).checks[0].verdict == 'no_snapshot'
    assert check_support_sync(answer_for(SEVEN, source=with_excerpt), {}).checks[0].verdict == 'too_short'
    assert check_support_sync(answer_for(EIGHT, source=with_excerpt), {}).checks[0].verdict == 'excerpt_only'


@pytest.mark.anyio
async def test_async_check_takes_both_parameters():
    report = await check_support(answer_for(SEVEN), {URL: PAGE}, min_claim_words=7, min_passage_words=4)
    assert report.checks[0].verdict == 'supported'


def test_bad_values():
    with pytest.raises(UserError, match='min_claim_words must be at least 1, got 0'):
        check_support_sync(answer_for(EIGHT), {URL: PAGE}, min_claim_words=0)
    with pytest.raises(UserError, match='min_passage_words must be at least 1, got 0'):
        check_support_sync(answer_for(EIGHT), {URL: PAGE}, min_passage_words=0)
    with pytest.raises(UserError, match='min_passage_words and min_claim_words'):
        AuditOptions(min_claim_words=0)


def test_audit_answers_threads_both_parameters():
    answers = [answer_for(SEVEN, EIGHT)]

    def verdicts(options: AuditOptions | None) -> list[str]:
        out = io.StringIO()
        summary = audit_answers(answers, {URL: PAGE}, out, options=options)
        lines = [json.loads(line)['check']['verdict'] for line in out.getvalue().splitlines()]
        assert summary.summary.verdicts['too_short'] == lines.count('too_short')
        return lines

    assert verdicts(None) == ['too_short', 'supported']
    assert verdicts(AuditOptions(min_claim_words=7)) == ['supported', 'supported']
    assert verdicts(AuditOptions(min_claim_words=1, min_passage_words=50)) == ['unsupported', 'unsupported']
