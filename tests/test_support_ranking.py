"""Which passage a claim is shown with: relevance ranking on paraphrased claims, and honest low-overlap verdicts."""

from __future__ import annotations

import math
import re
import time
from pathlib import Path
from unittest.mock import patch

import pytest
from _long_page import long_page_texts
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic_ai.exceptions import UserError

from pydantic_ai_citations import CitedAnswer, CitedSpan, SourceRef
from pydantic_ai_citations.support import (
    Passage,
    PassageIndex,
    StemCache,
    _score,
    best_passage,
    check_support_sync,
    split_passages,
    terms,
)
from pydantic_ai_citations.support._report import check_lexical, page_cache
from pydantic_ai_citations.support._score import coverage
from pydantic_ai_citations.support._terms import term_map, term_of, tokens

TRAPS = (Path(__file__).parent / 'pages' / 'traps.html').read_text(encoding='utf-8')


def page(*texts: str) -> list[Passage]:
    return [Passage(t, i, i / len(texts), len(t.split())) for i, t in enumerate(texts)]


def test_a_paraphrase_finds_the_paragraph_not_the_earlier_pull_quote():
    """Both passages hold every term the claim kept; only its surface words ("he said") tell them apart."""
    passages = page(
        '“If you don’t have a big booster, you’re not going to make it,” Stafford said of returning to the Moon.',
        'Stafford was adamant about heavy-lift rockets. “If you don’t have a big booster, you’re not going to make '
        'it,” he said. “You have to have a big shroud.”',
    )
    claim = '“If you don’t have a big booster, you’re going make he'
    assert all(terms(claim) <= terms(p.text) for p in passages)  # the plain coverage ties: the first one won
    match = best_passage(claim, passages)
    assert match is not None
    assert match.passage.index == 1
    assert match.score == 1.0  # the score is still plain coverage


def test_rare_words_outrank_common_ones():
    passages = page(
        'The council met on Monday and the council voted on the budget for the city council.',
        'The council voted to close the riverside library branch on Monday.',
        'The council said the budget vote on Monday was close.',
    )
    match = best_passage('Council voted Monday close library', passages)
    assert match is not None
    assert match.passage.index == 1
    ranked = PassageIndex(passages).ranked('Council voted Monday close library')
    assert [m.passage.index for m in ranked][0] == 1
    assert {m.passage.index for m in ranked} == {0, 1, 2}


def test_heading_versus_paragraph_trap_with_half_the_words_gone():
    passages = split_passages(TRAPS, min_words=1)
    claim = 'The president unscheduled trip Walter Reed hospital Saturday'  # half of the paragraph's opening
    match = best_passage(claim, passages)
    assert match is not None
    assert match.passage.text.startswith('The president made an unscheduled trip')
    assert match.score == 1.0
    # The heading shares the topic words and their pairs ("Walter Reed", "Reed hospital"), and loses.
    ranked = PassageIndex(passages).ranked(claim)
    assert ranked[0].passage == match.passage
    assert any(m.passage.text == 'President visits Walter Reed hospital' for m in ranked[1:])


def test_nested_div_trap_with_half_the_words_gone():
    passages = split_passages(TRAPS, min_words=1)
    index = PassageIndex(passages)
    for claim, sentence in [
        (
            'An inner paragraph three deep layout divs is passage.',
            'An inner paragraph nested three layers deep inside layout divs is its own passage.',
        ),
        (
            'Text straight into a div, any paragraph, counts for the check.',
            'Text written straight into a div, outside any paragraph, still counts once for the support check.',
        ),
        (
            'A nested item labs sent away routine',
            'A nested list item says the labs were sent away for routine analysis.',
        ),
    ]:
        match = index.best(claim)
        assert match is not None
        assert match.passage.text == sentence  # the block itself, never a container's whole text
        assert match.score == 1.0


def test_terms_keep_the_first_two_letters_of_their_word():
    """The index finds a term among the words of its own first two letters, so a stem must keep them."""
    assert terms('lying lies') == {'lying', 'lie'}  # Snowball's lying -> lie would leave the 'ly' group
    assert terms('trying tries') == {'tri'}
    assert terms('Häuser Häusern', language='german') == terms('Haus', language='german')
    assert terms('ёлки Ёлка') == terms('елка')


def span(start: int, end: int, sources: list[int]) -> CitedSpan:
    return CitedSpan(start, end, 'content', sources, message_index=1, part_index=0, citation_index=0)


def answer_for(*claims: str) -> CitedAnswer:
    text = ' '.join(claims)
    spans: list[CitedSpan] = []
    offset = 0
    for claim in claims:
        spans.append(span(offset, offset + len(claim), [1]))
        offset += len(claim) + 1
    return CitedAnswer(text, spans=spans, unanchored=[], sources=[SourceRef(1, 'web', url='https://e.test/a')])


def test_low_overlap_is_weak_or_unsupported_with_the_best_candidate_shown():
    report = check_support_sync(
        answer_for(
            'Walter Reed doctors ordered surgery after the exam.',  # 3 of 6 terms: weak
            'Doctors at the hospital ordered surgery, chemotherapy and a month of rest.',  # 1 of 7: unsupported
        ),
        {'https://e.test/a': TRAPS},
    )
    weak, unsupported = report.checks
    assert (weak.verdict, unsupported.verdict) == ('weak', 'unsupported')
    for check in report.checks:
        assert check.passage is not None  # the best candidate is shown, so a reader can judge
        assert check.score is not None and check.score < 0.6
        assert check.reason.startswith(f'score {check.score:.2f}')


WORDS = st.sampled_from(
    [
        'the',
        'a',
        'of',
        'he',
        'said',
        'walter',
        'reed',
        'hospital',
        'president',
        'lying',
        'lie',
        'trying',
        'tries',
        'Häuser',
        'Haus',
        'ёлка',
        'елка',
        '2019',
        '2,019',
        'Президент',
        'посетил',
        'больницу',
        'x',
        'y',
        'z',
        'visits',
        'visit',
        'visited',
    ]
)
TEXTS = st.one_of(st.text(max_size=80), st.lists(WORDS, max_size=15).map(' '.join))


@settings(max_examples=150, deadline=None)
@given(
    st.lists(TEXTS, max_size=6),
    TEXTS,
    st.sampled_from([None, 'en', 'ru', 'german', 'french']),
)
def test_index_agrees_with_plain_terms(texts: list[str], claim: str, language: str | None):
    """The lazily stemmed index sees exactly the terms `terms` sees; the chosen passage's score is its coverage."""
    passages = page(*texts) if texts else []
    index = PassageIndex(passages, language=language)
    match = index.best(claim)
    claim_terms = terms(claim, language=language)
    passage_terms = [terms(p.text, language=language) for p in passages]
    sharing = [i for i, t in enumerate(passage_terms) if claim_terms & t]
    if not sharing:
        assert match is None
        assert index.ranked(claim) == []
    else:
        assert match is not None
        assert match.passage.index in sharing
        assert match.score == coverage(claim_terms, passage_terms[match.passage.index])
        assert 0 < match.score <= 1
        assert index.ranked(claim, limit=len(passages))[0] == match
        assert {m.passage.index for m in index.ranked(claim, limit=len(passages))} == set(sharing)
        assert index.best(claim_terms) is not None  # precomputed terms work too
    assert index.terms == tuple(passage_terms)
    assert coverage(frozenset(), frozenset({'a'})) == 0.0


@settings(max_examples=100, deadline=None)
@given(st.text(max_size=120), st.lists(TEXTS, min_size=1, max_size=5))
def test_verdicts_never_claim_more_than_the_score(claim: str, texts: list[str]):
    answer = answer_for(claim) if claim else answer_for('x')
    report = check_support_sync(answer, {'https://e.test/a': '\n\n'.join(texts)}, min_claim_words=1)
    for check in report.checks:
        if check.verdict == 'supported':
            assert check.score is not None and check.score >= 0.6 - 1e-9
            assert check.passage is not None
            assert len(terms(check.claim) & terms(check.passage.text)) >= 2
        if check.score:
            assert check.passage is not None
            assert 0 <= check.passage.position <= 1


def test_one_shared_term_is_weak_at_best():
    answer = answer_for('Walter Reed', 'Hospital.', 'Hospital exams.')
    report = check_support_sync(answer, {'https://e.test/a': TRAPS}, min_claim_words=1)
    assert [(c.verdict, c.score) for c in report.checks] == [('supported', 1.0), ('weak', 1.0), ('supported', 1.0)]
    assert report.checks[1].reason == (
        'score 1.00 but 1 shared term (supported at 0.6 with at least 2 shared terms, weak at 0.3)'
    )
    assert report.checks[1].passage is not None


def test_numbers_meet_their_other_spellings():
    assert terms('1,000 people on 2019-03-05') == {'1000', 'peopl', '2019', '3', '5'}
    assert terms('3.5 GHz, version 1.2.3, items 1,2,3') == {'3.5', 'ghz', 'version', '1.2.3', 'item', '1', '2', '3'}
    passages = page(
        'The city spent 3 million on parks and 5 on roads in the 2019 budget.',
        'The city spent $1,000,000 on parks in the budget of 2019, about 05 percent of it.',
    )
    match = best_passage('The city spent 1000000 on parks, 5 percent of its 2019 budget', passages)
    assert match is not None
    assert match.passage.index == 1
    assert match.score == 1.0


def test_a_stem_that_changes_the_key_is_not_used():
    """Snowball stems `lying` to `lie`: the word keeps itself, on the page and in the claim, so both still meet."""
    index = PassageIndex(page('He was lying about the lying report from the committee.'))
    assert index.terms == (frozenset({'lying', 'report', 'committe'}),)
    assert terms('lying committee') == {'lying', 'committe'}


_REFERENCE_WORD = re.compile(r'\d{1,3}(?:,\d{3})+(?:\.\d+)?(?!\d)|\d+(?:\.\d+)+|[^\W_]+')


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.sampled_from('ab0123456789,._ -’“—\xa0éЁ٣²\n'), max_size=40) | TEXTS)
def test_tokens_are_the_one_pattern_with_numbers_normalised(text: str):
    """`tokens` skips the number patterns when a text has no number that needs them: the same words either way."""
    expected: list[str] = []
    for word in _REFERENCE_WORD.findall(text.lower()):
        if word[0].isdigit():
            word = word.replace(',', '')
            word = (word.lstrip('0') or '0') if word.isdigit() else word
        expected.append(word)
    assert tokens(text) == expected


def reference_best(claim: str, passages: list[Passage], language: str | None) -> tuple[int, float] | None:
    """The relevance ranking summed in full for every passage: what `PassageIndex.best` must choose."""
    words = [tokens(p.text) for p in passages]
    found = [terms(p.text, language=language) for p in passages]
    surface = [{'=' + w for w in ws} | {f'{a} {b}' for a, b in zip(ws, ws[1:], strict=False)} for ws in words]
    n = len(passages)
    claim_words = tokens(claim)
    claim_terms = terms(claim, language=language)
    claim_surface = {'=' + w for w in claim_words} | {
        f'{a} {b}' for a, b in zip(claim_words, claim_words[1:], strict=False)
    }
    best: tuple[int, float, float] | None = None
    for i in range(n):
        if not claim_terms & found[i]:
            continue
        relevance = 0.0
        for feature in sorted(claim_terms & found[i]):
            df = sum(feature in t for t in found)
            relevance += math.log(1 + (n - df + 0.5) / (df + 0.5))
        for feature in sorted(claim_surface & surface[i]):
            df = sum(feature in s for s in surface)
            relevance += math.log(1 + (n - df + 0.5) / (df + 0.5))
        if best is None or relevance > best[1]:
            best = (i, relevance, len(claim_terms & found[i]) / len(claim_terms))
    return None if best is None else (best[0], best[2])


@settings(max_examples=300, deadline=None)
@given(st.lists(TEXTS, min_size=1, max_size=8), st.lists(TEXTS, min_size=1, max_size=12), st.sampled_from([None, 'ru']))
def test_the_pruned_search_chooses_what_the_full_sums_choose(texts: list[str], claims: list[str], language: str | None):
    """Relevance is summed only for passages whose bound can still win: the choice and score are the full ranking's."""
    passages = page(*texts)
    index = PassageIndex(passages, language=language)  # one index for several claims, as for an answer
    for claim in claims:
        match = index.best(claim)
        assert (None if match is None else (match.passage.index, match.score)) == reference_best(
            claim, passages, language
        )


@settings(max_examples=200, deadline=None)
@given(st.lists(TEXTS, min_size=1, max_size=8), st.lists(TEXTS, min_size=1, max_size=6), st.sampled_from([None, 'ru']))
def test_a_long_claim_is_ranked_as_any_claim(texts: list[str], claims: list[str], language: str | None):
    """A claim of many words (a whole answer) is ranked by one pass over the page: same choice, score and order."""
    passages = page(*texts)
    short = PassageIndex(passages, language=language)
    with patch.object(_score, '_LONG_CLAIM', 0):  # every claim counts as long
        index = PassageIndex(passages, language=language)
        for claim in claims:
            match = index.best(claim)
            assert (None if match is None else (match.passage.index, match.score)) == reference_best(
                claim, passages, language
            )
            assert index.ranked(claim, limit=3) == short.ranked(claim, limit=3)
            claim_terms = terms(claim, language=language)
            assert index.best(claim_terms) == short.best(claim_terms)


def long_page_and_answer(n: int) -> tuple[list[Passage], str]:
    texts, claim = long_page_texts(n)
    return page(*texts), claim


def test_a_whole_answer_against_a_long_page_is_checked_in_linear_time():
    """Four times the passages and four times the claim cost at most 8x as much (the search summed every feature for
    every passage sharing a term: 12x here, more on larger pages; a 16 KB answer against 2,000 passages took 4.7 s)."""

    def cost(n: int) -> float:
        passages, claim = long_page_and_answer(n)
        best = float('inf')
        for _ in range(3):
            start = time.process_time()
            PassageIndex(passages).best(claim)
            best = min(best, time.process_time() - start)
        return best

    passages, claim = long_page_and_answer(500)
    match = PassageIndex(passages).best(claim)
    assert match is not None and match.passage.index % 16 == 0  # one of the passages the claim has half the words of
    cost(500)  # warm up
    assert cost(2000) <= 8 * cost(500) + 0.05


def test_an_english_term_keeps_the_beginning_of_its_words():
    """`PassageIndex` looks for an English term's words among those starting with all of it but its last two letters.

    The Snowball English stemmer changes at most the last letter of the beginning it keeps (`cry` -> `cri`, `hoping`
    -> `hope`); stems that change the first two letters are not used (`lying`). Four million generated words hold it.
    """
    bases = [
        'cry',
        'hope',
        'hop',
        'sensible',
        'able',
        'active',
        'valence',
        'probable',
        'relate',
        'organ',
        'sky',
        'die',
        'lie',
        'lying',
        'generous',
        'happy',
        'duplicate',
        'realize',
        'agree',
        'proceed',
        'early',
        'gentle',
        'ugly',
        'news',
        'bias',
        'operate',
        'possible',
        'fulfil',
        'control',
        'city',
        'study',
        'argue',
    ]
    suffixes = [
        '',
        's',
        'es',
        'ed',
        'ing',
        'ly',
        'ness',
        'ation',
        'ational',
        'ization',
        'ities',
        'ility',
        'ably',
        'ibility',
        'iveness',
        'ivity',
        'ies',
        'ied',
        'er',
        'est',
        'ful',
        'fully',
        'lessly',
        'ousli',
        'ogi',
        'eed',
        'edly',
        'ingly',
        'ence',
        'ency',
        'ancy',
        'ement',
        'alism',
        'alize',
        'icate',
        'ical',
    ]
    words = {b + s for b in bases for s in suffixes} | {b[:-1] + s for b in bases for s in suffixes}
    for word, term in term_map(sorted(words), 'english').items():
        assert term is None or word.startswith(term[: max(2, len(term) - 2)]), (word, term)


_WORD_CHARS = st.sampled_from('aeiostxyzAZ019éèàüößçñёеёжшяЁİıﬁ한국٣')


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.text(_WORD_CHARS, min_size=1, max_size=9) | st.sampled_from(['the', 'и', 'été', 'lying', 'ёлка']),
        max_size=30,
    ),
    st.sampled_from(['english', 'german', 'french', 'russian']),
)
def test_term_map_is_term_of_for_every_word(words: list[str], latin: str):
    """Stemming a batch (one C call per algorithm, stop and one-letter words dropped in C) gives each word the term
    `term_of` gives it alone: stop words, lone letters, upper case, diacritics, Cyrillic and other scripts."""
    assert term_map(words, latin) == {word: term_of(word, latin) for word in words}


@settings(max_examples=200, deadline=None)
@given(
    st.lists(TEXTS, min_size=1, max_size=8),
    st.lists(TEXTS, min_size=1, max_size=6),
    st.lists(TEXTS, min_size=1, max_size=12),
    st.sampled_from([None, 'ru', 'german']),
    st.integers(min_value=1, max_value=40),
)
def test_announced_claims_and_shared_stems_change_no_choice(
    texts: list[str], others: list[str], claims: list[str], language: str | None, limit: int
):
    """An index told how many claims are coming (`expect`), with stems shared with another page's index in a small
    `StemCache` (emptied as it fills), chooses what a plain index chooses, with the same score."""
    stems = StemCache(limit=limit)
    other = PassageIndex(page(*others), stems=stems)  # another page, English, sharing the cache
    index = PassageIndex(page(*texts), language=language, stems=stems)
    index.expect(len(claims))
    plain = PassageIndex(page(*texts), language=language)
    for claim in claims:
        other.best(claim)
        found, expected = index.best(claim), plain.best(claim)
        assert (None if found is None else (found.passage.index, found.score)) == (
            None if expected is None else (expected.passage.index, expected.score)
        )
    assert index.terms == plain.terms
    # Bounded: at most `limit` words, or the words of one call (a page's vocabulary, when it is indexed in full).
    vocabularies = [{w for t in texts for w in tokens(t)}, {w for t in others for w in tokens(t)}]
    assert len(stems) <= max(limit, *map(len, vocabularies), *(len(set(tokens(c))) for c in claims))


def test_announced_claims_index_the_page_in_full_at_the_first():
    passages = page('Pydantic validates data with type hints.', 'Logfire observes applications built on it.')
    index = PassageIndex(passages)
    index.best('Pydantic validates data.')
    assert index._pair_masks is None  # pyright: ignore[reportPrivateUsage]  # one claim: lazily
    announced = PassageIndex(passages)
    announced.expect(20)
    announced.best('Pydantic validates data.')
    assert announced._pair_masks is not None  # pyright: ignore[reportPrivateUsage]  # in full, at once
    few = PassageIndex(passages)
    few.expect(2)
    few.best('Pydantic validates data.')
    assert few._pair_masks is None  # pyright: ignore[reportPrivateUsage]


def test_a_claim_that_keeps_the_pages_words_stems_no_other_word():
    """A claim whose words the page holds is settled by those words' own passages: none of the page's other words is
    stemmed for it. A later claim that has to be ranked weighs the same words' terms in full (same choice as a new
    index)."""
    passages = page(
        'Pydantic validates data with type hints.',
        'Validation errors are raised as validators validate the data.',
        'Logfire observes applications built on it.',
    )
    stems = StemCache()
    index = PassageIndex(passages, stems=stems)
    match = index.best('Pydantic validates data.')
    assert match is not None and match.passage.index == 0
    assert len(stems) == len(set(tokens('Pydantic validates data.')))  # the claim's words, nothing else
    later = 'validators validate hints'  # no passage holds all three: ranked, `validate` weighed over the whole page
    found, fresh = index.best(later), PassageIndex(passages).best(later)
    assert found == fresh and found is not None and found.passage.index == 1
    assert len(stems) > len(set(tokens('Pydantic validates data.')) | set(tokens(later)))


def test_check_support_announces_each_pages_claims():
    """`check_support` counts each page's claims before checking them: a page cited by many indexes in full once."""
    sentences = [f'Claim number {n} says that Pydantic validates data with type hints quickly.' for n in range(10)]
    text = ' '.join(sentences)
    answer = CitedAnswer(
        text,
        spans=[
            CitedSpan(
                text.index(s), text.index(s) + len(s), 'content', [1], message_index=0, part_index=0, citation_index=n
            )
            for n, s in enumerate(sentences)
        ],
        sources=[SourceRef(1, 'web', url='https://docs.pydantic.dev/')],
    )
    html = '<p>' + '</p><p>'.join(sentences) + '</p>'
    cache, stems = page_cache(), StemCache()
    report = check_lexical(
        answer,
        {'https://docs.pydantic.dev/': html},
        threshold=0.6,
        weak_threshold=0.3,
        judge=None,
        language=None,
        min_passage_words=5,
        min_claim_words=8,
        max_bytes=1_000_000,
        page_cache=cache,
        stems=stems,
    )
    assert [c.verdict for c in report.checks] == ['supported'] * 10
    index = cache['https://docs.pydantic.dev/'].index
    assert index is not None
    assert index._expected == 10  # pyright: ignore[reportPrivateUsage]
    assert index._pair_masks is not None  # pyright: ignore[reportPrivateUsage]
    assert {'pydantic', 'validates', 'quickly'} <= set(stems._tables['english'])  # pyright: ignore[reportPrivateUsage]
    assert check_support_sync(answer, {'https://docs.pydantic.dev/': html}).checks == report.checks


@pytest.mark.parametrize('claims', [-1, 1.5, '3', True, None])
def test_expect_refuses_what_is_not_a_count(claims: object):
    index = PassageIndex(page('Pydantic validates data with type hints.'))
    with pytest.raises(UserError, match=r'PassageIndex\.expect: `claims` must be an int of at least 0'):
        index.expect(claims)  # type: ignore[arg-type]


@pytest.mark.parametrize('limit', [0, -5, 2.0, '10', False])
def test_stem_cache_refuses_a_limit_that_is_not_a_positive_int(limit: object):
    with pytest.raises(UserError, match=r'StemCache: `limit` must be a positive int'):
        StemCache(limit)  # type: ignore[arg-type]


def test_passage_index_refuses_stems_that_are_not_a_stem_cache():
    with pytest.raises(UserError, match=r'`stems` must be a `StemCache` or None, got'):
        PassageIndex(page('Pydantic validates data with type hints.'), stems={})  # type: ignore[arg-type]
