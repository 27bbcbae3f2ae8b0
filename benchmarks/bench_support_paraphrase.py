"""The support check on paraphrased claims: real pages, real sentences, words dropped (issue 18).

Pages: the 30 real pages of `../shared/corpus/article-extraction-benchmark` (not in the repository) and their
hand-checked article text. Claims are generated at run time, seeded: from each page, up to four sentences of 14 to
45 words per round, five rounds, with 30 %, 50 % or 65 % of each sentence's words dropped (the first word kept,
order kept). A claim is found when the passage chosen for it contains its sentence (*top-1*); the *oracle* is the
share of claims whose sentence is in some passage at all.

Two methods, side by side, on the same claims:

- *package*: `split_passages`, then `PassageIndex(passages, stems=...).best(claim)` for every claim, each page's
  index told how many claims are coming (`expect`) and the pages of a round sharing one `StemCache`: what
  `check_support_sync` runs;
- *straightforward*: `split_passages`, then for every claim and every passage the two term sets (`terms`, each word's
  stem cached for the round) and the passage with the largest claim-normalised coverage, ties to the earliest (the
  package's method before issue 18).

Time is the whole check (split, index, best passage for every claim) with empty stem caches and new stemmers at the
start of every round, best of three, in CPU time. Acceptance: top-1 >= 0.99 at 50 % and >= 0.97 at 65 % dropped, no
loss at 30 %, and the package no slower than the straightforward method.

`test_verdict_thresholds_calibration` prints the table behind the documented verdict thresholds (docs/support.md):
the share of claims scoring at least each threshold and the verdicts `check_support_sync` gives at its defaults, for the
claims above, for a harder paraphrase proxy (65 % dropped and a third of the kept words swapped for words of other
pages), for short claims (3 or 5 consecutive words of a sentence, like short anchored spans), and for the same
claims checked against *another* page, which does not state them and must not come out `supported`. Every claim is
compared there, short ones included (`min_claim_words=1`; at the default of 8 words they are `too_short`).
"""

from __future__ import annotations

import gzip
import json
import random
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from pytest_benchmark.fixture import BenchmarkFixture

from pydantic_ai_citations._answer import CitedAnswer, CitedSpan, SourceRef
from pydantic_ai_citations.support import (
    THRESHOLDS,
    CitationCheck,
    Passage,
    PassageIndex,
    StemCache,
    check_support_sync,
    decode_body,
    split_passages,
)
from pydantic_ai_citations.support._terms import _stemmer, term_of, tokens  # pyright: ignore[reportPrivateUsage]

ROOT = Path(__file__).resolve().parents[1].parent / 'shared' / 'corpus' / 'article-extraction-benchmark'
LEVELS = (0.3, 0.5, 0.65)
TARGETS = {'50%': 0.99, '65%': 0.97}  # top-1; at 30 % (and the swapped proxy): no loss
ROUNDS = 5
PER_PAGE = 4
# Ground-truth paragraphs split into sentences (benchmark-side only: the package never splits HTML with regexes).
SENTENCE_END = re.compile(r'(?<=[.!?])\s+(?=[A-Z"“])')


@dataclass(frozen=True)
class Page:
    key: str
    html: str
    sentences: list[str]


@dataclass(frozen=True)
class ClaimCase:
    page: int
    sentence: str
    claim: str


def squash(text: str) -> str:
    """Compare without whitespace: the hand-checked ground truth spaces quotes and tags differently."""
    return ''.join(text.split())


def load_pages() -> list[Page]:
    if not (ROOT / 'ground-truth.json').is_file():
        pytest.skip(f'{ROOT} has no ground-truth.json (CI places ../shared beside the checkout)')
    truth = json.loads((ROOT / 'ground-truth.json').read_text(encoding='utf-8'))
    pages: list[Page] = []
    for key, entry in sorted(truth.items()):
        decoded = decode_body(gzip.decompress((ROOT / 'html' / f'{key}.html.gz').read_bytes()), max_bytes=50_000_000)
        assert decoded.text is not None, key
        sentences = [
            ' '.join(s.split())
            for paragraph in entry['articleBody'].split('\n')
            for s in SENTENCE_END.split(paragraph)
            if 14 <= len(s.split()) <= 45
        ]
        pages.append(Page(key, decoded.text, sentences))
    assert len(pages) == 30
    return pages


def drop_words(sentence: str, share: float, rng: random.Random) -> str:
    words = sentence.split()
    gone = set(rng.sample(range(1, len(words)), round(share * len(words))))
    return ' '.join(w for i, w in enumerate(words) if i not in gone)


def make_claims(pages: list[Page], share: float, round_: int) -> list[ClaimCase]:
    """Up to four sentences per page with `share` of their words dropped; seeded by level and round."""
    rng = random.Random(f'paraphrase-{share}-{round_}')
    return [
        ClaimCase(n, sentence, drop_words(sentence, share, rng))
        for n, page in enumerate(pages)
        for sentence in rng.sample(page.sentences, min(PER_PAGE, len(page.sentences)))
    ]


def swapped_claims(pages: list[Page], round_: int) -> list[ClaimCase]:
    """65 % dropped, then a third of the kept words (not the first) swapped for words of other pages' sentences."""
    rng = random.Random(f'swapped-{round_}')
    out: list[ClaimCase] = []
    for case in make_claims(pages, 0.65, round_):
        others = [w for n, p in enumerate(pages) if n != case.page for s in p.sentences[:3] for w in s.split()]
        words = case.claim.split()
        words = [w if i == 0 or rng.random() > 1 / 3 else rng.choice(others) for i, w in enumerate(words)]
        out.append(ClaimCase(case.page, case.sentence, ' '.join(words)))
    return out


Choice = tuple[Passage, float] | None
Stems = dict[str, str | None]
Method = Callable[[list[Passage], list[str], Stems], list[Choice]]


class _Round:
    stems = StemCache()
    """The package's stem cache for the round (new at the start of each: see `timed`)."""


def package(passages: list[Passage], claims: list[str], stems: Stems) -> list[Choice]:
    del stems  # the straightforward method's: the package keeps its own, in a `StemCache`
    index = PassageIndex(passages, stems=_Round.stems)
    index.expect(len(claims))
    out: list[Choice] = []
    for claim in claims:
        match = index.best(claim)
        out.append(None if match is None else (match.passage, match.score))
    return out


def cached_terms(text: str, stems: Stems) -> frozenset[str]:
    """`terms(text)`, each word's stem cached for the round (as `terms` itself did before stems moved to the index)."""
    words = tokens(text)
    for word in words:
        if word not in stems:
            stems[word] = term_of(word, 'english')
    return frozenset(t for t in map(stems.__getitem__, words) if t is not None)


def straightforward(passages: list[Passage], claims: list[str], stems: Stems) -> list[Choice]:
    out: list[Choice] = []
    for claim in claims:
        claim_terms = cached_terms(claim, stems)
        best: Choice = None
        for passage in passages:
            passage_terms = cached_terms(passage.text, stems)
            score = len(claim_terms & passage_terms) / len(claim_terms) if claim_terms else 0.0
            if score > 0 and (best is None or score > best[1]):
                best = (passage, score)
        out.append(best)
    return out


def run(method: Method, pages: list[Page], cases: list[ClaimCase], stems: Stems | None = None) -> list[Choice]:
    """The whole check for one round: split every page, then the best passage for each of its claims."""
    by_page: dict[int, list[int]] = {}
    for i, case in enumerate(cases):
        by_page.setdefault(case.page, []).append(i)
    out: list[Choice] = [None] * len(cases)
    for n, ids in by_page.items():
        chosen = method(split_passages(pages[n].html), [cases[i].claim for i in ids], {} if stems is None else stems)
        for i, choice in zip(ids, chosen, strict=True):
            out[i] = choice
    return out


def timed(method: Method, pages: list[Page], rounds: list[list[ClaimCase]]) -> tuple[float, list[Choice]]:
    """CPU seconds for all rounds, each starting with an empty stem cache (cold), and the choices.

    CPU time of this process, not wall time: the machines that run this are shared, and a busy neighbour should
    not decide which method looks faster.
    """
    seconds = 0.0
    choices: list[Choice] = []
    for cases in rounds:
        _stemmer.cache_clear()  # new stemmers (with PyStemmer: empty C caches)
        _Round.stems = StemCache()  # and no stems kept from another round
        t0 = time.process_time()
        choices += run(method, pages, cases, {})  # the straightforward method's stem cache, for one round
        seconds += time.process_time() - t0
    return seconds, choices


def found(choices: list[Choice], cases: list[ClaimCase]) -> float:
    return sum(
        c is not None and squash(k.sentence) in squash(c[0].text) for c, k in zip(choices, cases, strict=True)
    ) / len(cases)


def oracle(pages: list[Page], cases: list[ClaimCase]) -> float:
    split = {n: [squash(p.text) for p in split_passages(pages[n].html)] for n in {c.page for c in cases}}
    return sum(any(squash(c.sentence) in p for p in split[c.page]) for c in cases) / len(cases)


def test_paraphrased_claims_find_their_passage(benchmark: BenchmarkFixture):
    pages = load_pages()
    levels = {f'{share:.0%}': [make_claims(pages, share, r) for r in range(ROUNDS)] for share in LEVELS}
    # Not in the acceptance, a harder proxy for paraphrase: shown, and the package must not lose there either.
    levels['65%, 1/3 swapped'] = [swapped_claims(pages, r) for r in range(ROUNDS)]
    rows: list[str] = []
    failures: list[str] = []
    total = {'package': 0.0, 'straightforward': 0.0}
    for label, rounds in levels.items():
        cases = [c for r in rounds for c in r]
        best: dict[str, tuple[float, list[Choice]]] = {}
        for _ in range(3):  # best of three, the two methods interleaved (a shared machine is noisy)
            for name, method in (('package', package), ('straightforward', straightforward)):
                seconds, choices = timed(method, pages, rounds)
                if name not in best or seconds < best[name][0]:
                    best[name] = (seconds, choices)
        top1 = {name: found(choices, cases) for name, (_, choices) in best.items()}
        if label in TARGETS or label == '30%':  # the acceptance levels decide the time ratio
            for name in total:
                total[name] += best[name][0]
        rows.append(
            f'| {label} | {len(cases)} | {top1["package"]:.4f} | {top1["straightforward"]:.4f} | '
            f'{oracle(pages, cases):.4f} | {best["package"][0] * 1000:.0f} | {best["straightforward"][0] * 1000:.0f} |'
        )
        target = TARGETS.get(label, top1['straightforward'])
        if top1['package'] < target:
            failures.append(f'top-1 {top1["package"]:.4f} at {label} dropped (target {target})')
        benchmark.extra_info[f'top1 {label}'] = round(top1['package'], 4)
        benchmark.extra_info[f'top1 straightforward {label}'] = round(top1['straightforward'], 4)
    ratio = total['straightforward'] / total['package']
    benchmark.extra_info['speed_ratio'] = round(ratio, 2)
    print(
        '\n| dropped | claims | top-1 package | top-1 straightforward | oracle | package ms | straightforward ms |\n'
        '|---|---|---|---|---|---|---|\n'
        + '\n'.join(rows)
        + f'\nstraightforward / package CPU time (30 %, 50 %, 65 %): {ratio:.2f}x'
    )
    all_cases = [r for rounds in levels.values() for r in rounds]
    benchmark.pedantic(lambda: [run(package, pages, cases) for cases in all_cases], rounds=1, iterations=1)
    assert not failures, failures
    assert ratio >= 1.0, f'the package check is slower than the straightforward method ({ratio:.2f}x)'


def snippet_claims(pages: list[Page], words: int, round_: int) -> list[ClaimCase]:
    """`words` consecutive words of each sentence (short anchored spans such as `'Walter Reed hospital'`)."""
    rng = random.Random(f'snippet-{words}-{round_}')
    out: list[ClaimCase] = []
    for case in make_claims(pages, 0.0, round_):
        split = case.sentence.split()
        start = rng.randrange(0, len(split) - words)
        out.append(ClaimCase(case.page, case.sentence, ' '.join(split[start : start + words])))
    return out


def elsewhere(cases: list[ClaimCase], n_pages: int) -> list[ClaimCase]:
    """The same claims checked against the next page, which does not state them."""
    return [ClaimCase((c.page + 1) % n_pages, c.sentence, c.claim) for c in cases]


def check(pages: list[Page], cases: list[ClaimCase]) -> list[CitationCheck]:
    """`check_support_sync` (defaults) on one answer per page holding that page's claims, each cited as a content span."""
    by_page: dict[int, list[ClaimCase]] = {}
    for case in cases:
        by_page.setdefault(case.page, []).append(case)
    out: list[CitationCheck] = []
    for n, page_cases in by_page.items():
        text = ''
        spans: list[CitedSpan] = []
        for case in page_cases:
            start = len(text)
            text += case.claim + ' '
            spans.append(
                CitedSpan(
                    start, start + len(case.claim), 'content', [1], message_index=1, part_index=0, citation_index=0
                )
            )
        answer = CitedAnswer(text, spans=spans, unanchored=[], sources=[SourceRef(1, 'web', url=f'https://e.test/{n}')])
        # Every claim compared, short ones too (the default `min_claim_words=8` reports them `too_short`): the table
        # shows how the score thresholds behave at every claim length.
        out += check_support_sync(answer, {f'https://e.test/{n}': pages[n].html}, min_claim_words=1).checks
    return out


def test_verdict_thresholds_calibration(benchmark: BenchmarkFixture):
    """The table behind the default thresholds (0.6 supported, 0.3 weak, two shared terms for supported)."""
    pages = load_pages()
    n = len(pages)
    sets: dict[str, list[ClaimCase]] = {}
    for share in LEVELS:
        sets[f'{share:.0%} dropped'] = [c for r in range(ROUNDS) for c in make_claims(pages, share, r)]
    sets['65% dropped, 1/3 swapped'] = [c for r in range(ROUNDS) for c in swapped_claims(pages, r)]
    for words in (5, 3):
        sets[f'{words} words'] = [c for r in range(ROUNDS) for c in snippet_claims(pages, words, r)]
    for name in ('30% dropped', '5 words', '3 words'):
        sets[f'{name}, other page'] = elsewhere(sets[name], n)
    shown = [t for t in THRESHOLDS if t in (0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8)]
    lines = [
        '| claims | n | ' + ' | '.join(f'≥ {t:g}' for t in shown) + ' | supported | weak | unsupported |',
        '|---' * (len(shown) + 5) + '|',
    ]
    verdicts: dict[str, dict[str, float]] = {}
    for name, cases in sets.items():
        checks = check(pages, cases)
        assert len(checks) == len(cases)
        scores = [c.score or 0.0 for c in checks]
        curve = [sum(v >= t - 1e-9 for v in scores) / len(scores) for t in shown]
        verdicts[name] = {
            v: sum(c.verdict == v for c in checks) / len(checks) for v in ('supported', 'weak', 'unsupported')
        }
        assert all(c.passage is not None for c in checks if c.verdict == 'weak')  # the best candidate is shown
        lines.append(
            f'| {name} | {len(cases)} | '
            + ' | '.join(f'{s:.3f}' for s in curve)
            + ' | '
            + ' | '.join(f'{verdicts[name][v]:.3f}' for v in ('supported', 'weak', 'unsupported'))
            + ' |'
        )
    print('\nshare of claims scoring at least each threshold, and verdicts at the defaults\n' + '\n'.join(lines))
    benchmark.extra_info['verdicts'] = verdicts
    benchmark.pedantic(lambda: None, rounds=1, iterations=1)
    for name in sets:
        if name.endswith('other page'):
            assert verdicts[name]['supported'] <= 0.01, (name, verdicts[name])
    for share in LEVELS:  # claims left with one term by the drop are `weak`: the rest must be `supported`
        found = verdicts[f'{share:.0%} dropped']
        assert found['supported'] >= 0.95, (share, found)
        assert found['unsupported'] <= 0.01, (share, found)
