"""The support check on paraphrased claims: real pages, real sentences, words dropped (issue 18).

Pages: the 30 real pages of `../shared/corpus/article-extraction-benchmark` (not in the repository) and their
hand-checked article text. Claims are generated at run time, seeded: from each page, up to four sentences of 14 to
45 words per round, five rounds, with 30 %, 50 % or 65 % of each sentence's words dropped (the first word kept,
order kept). A claim is found when the passage chosen for it contains its sentence (*top-1*); the *oracle* is the
share of claims whose sentence is in some passage at all.

Two methods, side by side, on the same claims:

- *package*: `split_passages`, then `PassageIndex(passages).best(claim)` for every claim (what `check_support_sync` runs);
- *straightforward*: `split_passages`, then for every claim and every passage the two term sets (`terms`) and the
  passage with the largest claim-normalised coverage, ties to the earliest (the package's method before issue 18).

Time is the whole check (split, index, best passage for every claim) with an empty stem cache at the start of every
round, best of three, in CPU time. Acceptance: top-1 >= 0.99 at 50 % and >= 0.97 at 65 % dropped, no loss at 30 %, and the
package no slower than the straightforward method.

`test_verdict_thresholds_calibration` prints the table behind the documented verdict thresholds (docs/support.md):
the share of claims scoring at least each threshold, for the claims above, for a harder paraphrase proxy (65 %
dropped and a third of the kept words swapped for words of other pages) and for *foreign* claims (a sentence of
another page checked against this one), which must not come out `supported`.
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

from pydantic_ai_citations.support import THRESHOLDS, Passage, PassageIndex, decode_body, split_passages, terms
from pydantic_ai_citations.support._terms import _term  # pyright: ignore[reportPrivateUsage]

ROOT = Path(__file__).resolve().parents[1].parent / 'shared' / 'corpus' / 'article-extraction-benchmark'
LEVELS = (0.3, 0.5, 0.65)
TARGETS = {0.5: 0.99, 0.65: 0.97}
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


def foreign_claims(pages: list[Page], round_: int) -> list[ClaimCase]:
    """Each claim of the 30 % level checked against the next page: nothing there states it."""
    return [
        ClaimCase((case.page + 1) % len(pages), case.sentence, case.claim) for case in make_claims(pages, 0.3, round_)
    ]


Choice = tuple[Passage, float] | None
Method = Callable[[list[Passage], list[str]], list[Choice]]


def package(passages: list[Passage], claims: list[str]) -> list[Choice]:
    index = PassageIndex(passages)
    out: list[Choice] = []
    for claim in claims:
        match = index.best(claim)
        out.append(None if match is None else (match.passage, match.score))
    return out


def straightforward(passages: list[Passage], claims: list[str]) -> list[Choice]:
    out: list[Choice] = []
    for claim in claims:
        claim_terms = terms(claim)
        best: Choice = None
        for passage in passages:
            passage_terms = terms(passage.text)
            score = len(claim_terms & passage_terms) / len(claim_terms) if claim_terms else 0.0
            if score > 0 and (best is None or score > best[1]):
                best = (passage, score)
        out.append(best)
    return out


def run(method: Method, pages: list[Page], cases: list[ClaimCase]) -> list[Choice]:
    """The whole check for one round: split every page, then the best passage for each of its claims."""
    by_page: dict[int, list[int]] = {}
    for i, case in enumerate(cases):
        by_page.setdefault(case.page, []).append(i)
    out: list[Choice] = [None] * len(cases)
    for n, ids in by_page.items():
        chosen = method(split_passages(pages[n].html), [cases[i].claim for i in ids])
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
        _term.cache_clear()
        t0 = time.process_time()
        choices += run(method, pages, cases)
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
    levels = {share: [make_claims(pages, share, r) for r in range(ROUNDS)] for share in LEVELS}
    rows: list[str] = []
    failures: list[str] = []
    total = {'package': 0.0, 'straightforward': 0.0}
    for share, rounds in levels.items():
        cases = [c for r in rounds for c in r]
        best: dict[str, tuple[float, list[Choice]]] = {}
        for _ in range(3):  # best of three, the two methods interleaved (a shared machine is noisy)
            for name, method in (('package', package), ('straightforward', straightforward)):
                seconds, choices = timed(method, pages, rounds)
                if name not in best or seconds < best[name][0]:
                    best[name] = (seconds, choices)
        top1 = {name: found(choices, cases) for name, (_, choices) in best.items()}
        for name in total:
            total[name] += best[name][0]
        rows.append(
            f'| {share:.0%} | {len(cases)} | {top1["package"]:.4f} | {top1["straightforward"]:.4f} | '
            f'{oracle(pages, cases):.4f} | {best["package"][0] * 1000:.0f} | {best["straightforward"][0] * 1000:.0f} |'
        )
        target = TARGETS.get(share, top1['straightforward'])
        if top1['package'] < target:
            failures.append(f'top-1 {top1["package"]:.4f} at {share:.0%} dropped (target {target})')
        benchmark.extra_info[f'top1_{share}'] = round(top1['package'], 4)
        benchmark.extra_info[f'top1_straightforward_{share}'] = round(top1['straightforward'], 4)
    ratio = total['straightforward'] / total['package']
    benchmark.extra_info['speed_ratio'] = round(ratio, 2)
    print(
        '\n| dropped | claims | top-1 package | top-1 straightforward | oracle | package ms | straightforward ms |\n'
        '|---|---|---|---|---|---|---|\n' + '\n'.join(rows) + f'\nstraightforward / package time: {ratio:.2f}x'
    )
    all_cases = [r for rounds in levels.values() for r in rounds]
    benchmark.pedantic(lambda: [run(package, pages, cases) for cases in all_cases], rounds=1, iterations=1)
    assert not failures, failures
    assert ratio >= 1.0, f'the package check is slower than the straightforward method ({ratio:.2f}x)'


def test_verdict_thresholds_calibration(benchmark: BenchmarkFixture):
    pages = load_pages()
    sets = {f'{share:.0%} dropped': [make_claims(pages, share, r) for r in range(ROUNDS)] for share in LEVELS}
    sets['65 % dropped, 1/3 swapped'] = [swapped_claims(pages, r) for r in range(ROUNDS)]
    sets['foreign (other page)'] = [foreign_claims(pages, r) for r in range(ROUNDS)]
    scores: dict[str, list[float]] = {}
    for name, rounds in sets.items():
        cases = [c for r in rounds for c in r]
        scores[name] = [0.0 if c is None else c[1] for r in rounds for c in run(package, pages, r)]
        assert len(scores[name]) == len(cases)
    shown = [t for t in THRESHOLDS if t in (0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8)]
    lines = ['| claims | ' + ' | '.join(f'≥ {t:g}' for t in shown) + ' |', '|---' * (len(shown) + 1) + '|']
    for name, values in scores.items():
        shares = [sum(v >= t - 1e-9 for v in values) / len(values) for t in shown]
        lines.append(f'| {name} | ' + ' | '.join(f'{s:.3f}' for s in shares) + ' |')
    print('\nshare of claims scoring at least each threshold\n' + '\n'.join(lines))
    foreign = scores['foreign (other page)']
    supported = sum(v >= 0.6 - 1e-9 for v in foreign) / len(foreign)
    weak_or_better = [
        sum(v >= 0.3 - 1e-9 for v in scores[f'{s:.0%} dropped']) / len(scores[f'{s:.0%} dropped']) for s in LEVELS
    ]
    benchmark.extra_info.update({'foreign_supported': round(supported, 4), 'true_weak_or_better': weak_or_better})
    benchmark.pedantic(lambda: None, rounds=1, iterations=1)
    assert supported <= 0.01, f'{supported:.3f} of foreign claims reach the default supported threshold'
    assert min(weak_or_better) >= 0.99
