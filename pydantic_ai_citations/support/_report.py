"""`check_support`: for each citation of a `CitedAnswer`, does the cited page hold a passage that backs the claim?"""

from __future__ import annotations

import asyncio
import functools
import statistics
from collections import Counter, OrderedDict
from collections.abc import Iterable, Mapping, MutableMapping, Sequence
from dataclasses import dataclass, field
from typing import Literal, TypeVar, cast

import anyio
from pydantic import TypeAdapter
from pydantic_ai.exceptions import UserError

from .._answer import CitedAnswer, RawCitation, SourceRef
from .._checks import require_answer, shown
from ._claims import DEFAULT_MIN_CLAIM_WORDS, Claim, ClaimKind, claims_for
from ._decode import DEFAULT_MAX_BYTES, decode_body
from ._judge import Judge, Judgement, LexicalJudge
from ._passages import DEFAULT_MIN_PASSAGE_WORDS, Passage, split_passages
from ._score import PassageIndex
from ._snapshots import Liveness, PageSnapshot, SnapshotStore
from ._terms import StemCache, terms

__all__ = (
    'Basis',
    'CitationCheck',
    'Pages',
    'SupportReport',
    'SupportSummary',
    'SupportTally',
    'THRESHOLDS',
    'ThresholdPoint',
    'Verdict',
    'check_support',
    'check_support_sync',
    'summarize',
    'support_report_ta',
    'support_reports_ta',
)

Verdict = Literal[
    'supported', 'weak', 'unsupported', 'too_short', 'unreachable', 'no_snapshot', 'excerpt_only', 'unreadable'
]
"""`supported` / `weak` / `unsupported`: judged against the page (score vs thresholds, or the judge's own
verdict); `too_short`: the claim has fewer than `min_claim_words` words and is not compared; `unreachable`: the snapshot says the link is dead (`not_found`, `gone`, `timeout`, `error`);
`no_snapshot`: no page and no provider excerpt; `excerpt_only`: no page, judged against the provider's excerpt
(see `score`); `unreadable`: the page is not text (binary body, e.g. a PDF or an image)."""
VERDICTS: tuple[Verdict, ...] = Verdict.__args__  # pyright: ignore[reportAttributeAccessIssue]

Basis = Literal['page', 'excerpt', 'none']
"""What the claim was checked against: the page snapshot, the provider's excerpt, or nothing."""

Pages = Mapping[str, PageSnapshot | str | bytes] | SnapshotStore
"""Pages to check against, by URL (web sources) or document id / title (documents): a snapshot, HTML,
Markdown or plain text, or raw bytes (charset detected); or a `SnapshotStore`."""

_K = TypeVar('_K')

THRESHOLDS: tuple[float, ...] = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)
"""Where the threshold curve is sampled."""

MIN_SHARED_TERMS = 2
"""A lexical `supported` also needs this many of the claim's terms in the passage, whatever the score: a claim
with one term (`'Paris'`) found on a page is `weak` at best. See docs/support.md for how the defaults were chosen."""


@dataclass(frozen=True)
class CitationCheck:
    """The support check of one (claim, source) pair."""

    source: int
    """`SourceRef.number` of the cited source."""
    url: str | None
    """The source's URL (web sources)."""
    document_id: str | None
    """The source's document id (document sources)."""
    title: str | None
    """The source's title, as the provider gave it."""
    claim: str
    """What the answer claims with this citation."""
    claim_kind: ClaimKind
    """`'anchored'`, `'marker_sentence'` or `'whole_answer'` (see `Claim`)."""
    verdict: Verdict
    """The outcome (see `Verdict`)."""
    reason: str
    """Why, for humans."""
    basis: Basis = 'none'
    """What the claim was checked against."""
    score: float | None = None
    """Share of the claim's terms in the best passage (0 to 1), `None` when nothing was scored."""
    passage: Passage | None = None
    """The best passage (or the excerpt, as a passage, when `basis='excerpt'`)."""
    position: float | None = None
    """Where `passage` starts in the page, 0 to 1 (`None` unless `basis='page'`)."""
    liveness: Liveness | None = None
    """The snapshot's liveness, when there is a snapshot."""
    quote: str | None = None
    """The supporting words quoted by the judge, if it quoted any."""
    judge: str = 'lexical'
    """Which judge decided."""
    claim_start: int | None = None
    """Start offset of the claim in the answer text (`None` for `'whole_answer'`)."""
    claim_end: int | None = None
    """End offset of the claim in the answer text (`None` for `'whole_answer'`)."""


@dataclass(frozen=True)
class ThresholdPoint:
    """One point of the threshold curve."""

    threshold: float
    """Minimum score."""
    supported_share: float
    """Share of scored checks with `score >= threshold`."""


@dataclass(frozen=True)
class SupportSummary:
    """Aggregates over a set of checks."""

    checks: int
    """Number of checks."""
    verdicts: dict[Verdict, int]
    """How many checks got each verdict (every verdict is listed, zeros included)."""
    scored: int
    """Checks with a score (judged against a page or an excerpt): the denominator of the curve."""
    threshold_curve: list[ThresholdPoint]
    """Share of scored checks that reach each threshold in `THRESHOLDS`."""
    median_passages_per_page: float | None
    """Median number of passages of the pages that were split."""
    matched_length_quartiles: tuple[float, float, float] | None
    """Quartiles (Q1, median, Q3) of the word counts of the passages matched on pages."""
    position_thirds: tuple[float, float, float] | None
    """Share of page matches in the top, middle and bottom third of their page."""
    dead_links: list[str]
    """URLs whose snapshot says the link is dead, with the liveness, e.g. `'https://x.test/a (not_found)'`."""
    incomplete_answers: int = 0
    """Answers checked that did not complete (`CitedAnswer.complete` is `False`): text and citations may be missing."""
    not_checked: int = 0
    """The answers' audit-only citations (`CitedAnswer.raw_only`): listed in their reports, with nothing to check."""


@dataclass(frozen=True)
class SupportReport:
    """The support check of one answer."""

    checks: list[CitationCheck]
    """One check per (claim, source) pair: anchored spans in order, then unanchored sources."""
    summary: SupportSummary
    """Aggregates over `checks`."""
    threshold: float
    """Score at or above which a claim counts as supported."""
    weak_threshold: float
    """Score at or above which an unsupported claim counts as weak."""
    page_passages: dict[str, int] = field(default_factory=dict[str, int])
    """Passages per page that was split, by page key (for combining reports)."""
    complete: bool = True
    """`CitedAnswer.complete` of the answer checked: `False` for a cut-off answer, whose text and citations may be
    missing (its checks cover what arrived)."""
    not_checked: list[RawCitation] = field(default_factory=list[RawCitation])
    """The answer's audit-only citations (`CitedAnswer.raw_only`): raw provider data with no position or claim to check
    it against, listed so that none goes unseen."""


support_report_ta: TypeAdapter[SupportReport] = TypeAdapter(SupportReport)
"""JSON round trip for one report."""
support_reports_ta: TypeAdapter[list[SupportReport]] = TypeAdapter(list[SupportReport])
"""JSON round trip for lists of reports."""


def _nth(histogram: Sequence[tuple[int, int]], n: int) -> float:
    """The `n`-th smallest value (0-based) of a sorted `(value, count)` histogram."""
    for value, count in histogram:
        if n < count:
            return float(value)
        n -= count
    raise IndexError(n)


def _quartiles(histogram: Mapping[int, int]) -> tuple[float, float, float] | None:
    """Quartiles of the values counted in `histogram`, exactly as `statistics.quantiles(method='inclusive')`."""
    size = sum(histogram.values())
    if not size:
        return None
    ordered = sorted((value, count) for value, count in histogram.items() if count)
    if size == 1:
        only = float(ordered[0][0])
        return (only, only, only)
    out: list[float] = []
    for i in (1, 2, 3):
        j, delta = divmod(i * (size - 1), 4)
        out.append((_nth(ordered, j) * (4 - delta) + _nth(ordered, j + 1) * delta) / 4)
    return (out[0], out[1], out[2])


def _merged(a: Mapping[_K, int], b: Mapping[_K, int]) -> dict[_K, int]:
    out = dict(a)
    for key, count in b.items():
        out[key] = out.get(key, 0) + count
    return out


@dataclass(frozen=True)
class SupportTally:
    """The raw counts behind a `SupportSummary`, mergeable exactly: counts and histograms, never averages.

    Tally each part of a large set of checks where it is checked (a partition, a worker, a machine), `merge` the
    tallies in input order, and `summary()` equals `summarize` over all the checks at once.
    """

    checks: int = 0
    """Number of checks."""
    verdicts: dict[Verdict, int] = field(default_factory=dict[Verdict, int])
    """Checks per verdict (verdicts with no check may be missing)."""
    scored: int = 0
    """Checks with a score."""
    reached: tuple[int, ...] = (0,) * len(THRESHOLDS)
    """Scored checks reaching each threshold of `THRESHOLDS`."""
    page_passages: dict[str, int] = field(default_factory=dict[str, int])
    """Passages per page that was split, by page key (a page counts once however often it is cited)."""
    matched_lengths: dict[int, int] = field(default_factory=dict[int, int])
    """Word counts of the passages matched on pages: how many matches had each length."""
    thirds: tuple[int, int, int] = (0, 0, 0)
    """Page matches in the top, middle and bottom third of their page."""
    dead_links: tuple[str, ...] = ()
    """Dead-link labels, each once, in order of first appearance."""
    incomplete_answers: int = 0
    """Answers that did not complete."""
    not_checked: int = 0
    """Audit-only citations of the answers (`raw_only`), not checked."""

    @classmethod
    def of(
        cls,
        checks: Iterable[CitationCheck],
        page_passages: Mapping[str, int] | None = None,
        *,
        incomplete_answers: int = 0,
        not_checked: int = 0,
    ) -> SupportTally:
        """Count `checks` and the passages of the pages they were checked against (and the answers' counts given)."""
        verdicts: dict[Verdict, int] = {}
        scored = 0
        reached = [0] * len(THRESHOLDS)
        lengths: dict[int, int] = {}
        thirds = [0, 0, 0]
        dead: dict[str, None] = {}
        total = 0
        for check in checks:
            total += 1
            verdicts[check.verdict] = verdicts.get(check.verdict, 0) + 1
            if check.score is not None:
                scored += 1
                for i, t in enumerate(THRESHOLDS):
                    if check.score >= t - 1e-9:
                        reached[i] += 1
            if check.basis == 'page' and check.passage is not None and check.position is not None:
                lengths[check.passage.word_count] = lengths.get(check.passage.word_count, 0) + 1
                thirds[min(int(check.position * 3), 2)] += 1
            if check.verdict == 'unreachable':
                dead[f'{check.url or check.document_id or check.title} ({check.liveness})'] = None
        return cls(
            total,
            verdicts,
            scored,
            tuple(reached),
            dict(page_passages or {}),
            lengths,
            (thirds[0], thirds[1], thirds[2]),
            tuple(dead),
            incomplete_answers,
            not_checked,
        )

    def merge(self, other: SupportTally) -> SupportTally:
        """Both tallies as one (`self` first: dead links keep their order of first appearance)."""
        return SupportTally(
            self.checks + other.checks,
            _merged(self.verdicts, other.verdicts),
            self.scored + other.scored,
            tuple(a + b for a, b in zip(self.reached, other.reached, strict=True)),
            {**self.page_passages, **other.page_passages},
            _merged(self.matched_lengths, other.matched_lengths),
            (self.thirds[0] + other.thirds[0], self.thirds[1] + other.thirds[1], self.thirds[2] + other.thirds[2]),
            tuple(dict.fromkeys((*self.dead_links, *other.dead_links))),
            self.incomplete_answers + other.incomplete_answers,
            self.not_checked + other.not_checked,
        )

    @classmethod
    def merge_all(cls, tallies: Iterable[SupportTally]) -> SupportTally:
        """`tallies` merged in order, as `a.merge(b).merge(c)...` merges them, in time linear in all they hold.

        Merging one at a time copies what is merged so far at every step: quadratic over many partitions whose pages
        and dead links all differ. This folds them into one set of counts instead.
        """
        total = TallySum()
        for tally in tallies:
            total.add(tally)
        return total.tally()

    def summary(self) -> SupportSummary:
        """The summary of everything tallied."""
        matched = sum(self.thirds)
        passages = list(self.page_passages.values())
        return SupportSummary(
            checks=self.checks,
            verdicts={v: self.verdicts.get(v, 0) for v in VERDICTS},
            scored=self.scored,
            threshold_curve=[
                ThresholdPoint(t, n / self.scored if self.scored else 0.0)
                for t, n in zip(THRESHOLDS, self.reached, strict=True)
            ],
            median_passages_per_page=float(statistics.median(passages)) if passages else None,
            matched_length_quartiles=_quartiles(self.matched_lengths),
            position_thirds=(self.thirds[0] / matched, self.thirds[1] / matched, self.thirds[2] / matched)
            if matched
            else None,
            dead_links=list(self.dead_links),
            incomplete_answers=self.incomplete_answers,
            not_checked=self.not_checked,
        )


class TallySum:
    """Tallies added in order into one set of counts, as `SupportTally.merge` would merge them: each read once.

    What an audit sums its partitions' tallies into as they come (`SupportTally.merge_all` for a sequence).
    """

    def __init__(self) -> None:
        self.checks = self.scored = self.incomplete_answers = self.not_checked = 0
        self.verdicts: dict[Verdict, int] = {}
        self.reached = [0] * len(THRESHOLDS)
        self.page_passages: dict[str, int] = {}
        self.matched_lengths: dict[int, int] = {}
        self.thirds = [0, 0, 0]
        self.dead_links: dict[str, None] = {}

    def add(self, tally: SupportTally) -> None:
        self.checks += tally.checks
        self.scored += tally.scored
        self.incomplete_answers += tally.incomplete_answers
        self.not_checked += tally.not_checked
        for verdict, count in tally.verdicts.items():
            self.verdicts[verdict] = self.verdicts.get(verdict, 0) + count
        for length, count in tally.matched_lengths.items():
            self.matched_lengths[length] = self.matched_lengths.get(length, 0) + count
        for k, n in enumerate(tally.reached):
            self.reached[k] += n
        for k, n in enumerate(tally.thirds):
            self.thirds[k] += n
        self.page_passages.update(tally.page_passages)
        self.dead_links.update(dict.fromkeys(tally.dead_links))

    def tally(self) -> SupportTally:
        """The counts so far, as a `SupportTally` of its own (adding more later does not change it)."""
        return SupportTally(
            self.checks,
            dict(self.verdicts),
            self.scored,
            tuple(self.reached),
            dict(self.page_passages),
            dict(self.matched_lengths),
            (self.thirds[0], self.thirds[1], self.thirds[2]),
            tuple(self.dead_links),
            self.incomplete_answers,
            self.not_checked,
        )


def summarize(
    checks: Sequence[CitationCheck],
    page_passages: Sequence[int] = (),
    *,
    incomplete_answers: int = 0,
    not_checked: int = 0,
) -> SupportSummary:
    """Aggregate checks (of one answer or many), the passage counts of the pages they used, and the answers' counts."""
    pages = {str(i): n for i, n in enumerate(page_passages)}
    return SupportTally.of(checks, pages, incomplete_answers=incomplete_answers, not_checked=not_checked).summary()


NOT_SUMMARIZED = summarize([])
"""The summary of a report made with `check_lexical(..., summarized=False)`: no counts, the same as a report of no
citations would have, so such a report never leaves the audit that made it (`check_partition` renders its checks, and
tallies them itself) and is never rendered by what reads `summary` (the JSON report)."""


@dataclass(frozen=True)
class _Page:
    index: PassageIndex | None
    liveness: Liveness | None
    problem: Verdict | None
    note: str | None


@dataclass(frozen=True)
class _Job:
    claim: Claim
    source: SourceRef | None
    basis: Basis
    index: PassageIndex | None
    page: _Page | None
    fixed: CitationCheck | None


class _Planner:
    def __init__(
        self,
        answer: CitedAnswer,
        pages: Pages,
        *,
        threshold: float,
        weak_threshold: float,
        language: str | None,
        min_passage_words: int,
        min_claim_words: int,
        max_bytes: int,
        cache: MutableMapping[str, _Page] | None = None,
        stems: StemCache | None = None,
    ) -> None:
        require_answer(answer, where='check_support')
        if not isinstance(cast(object, pages), Mapping | SnapshotStore):
            raise UserError(
                f'check_support: `pages` must be a mapping of URL to page or a `SnapshotStore`, got {shown(pages)}.'
            )
        if not 0.0 < threshold <= 1.0:
            raise UserError(f'threshold must be in (0, 1], got {threshold!r}.')
        if not 0.0 <= weak_threshold <= threshold:
            raise UserError(f'weak_threshold must be in [0, threshold], got {weak_threshold!r}.')
        if min_claim_words < 1:
            raise UserError(f'min_claim_words must be at least 1, got {min_claim_words!r}.')
        if min_passage_words < 1:
            raise UserError(f'min_passage_words must be at least 1, got {min_passage_words!r}.')
        self.answer = answer
        self.pages = pages
        self.threshold = threshold
        self.weak_threshold = weak_threshold
        self.language = language
        self.min_passage_words = min_passage_words
        self.min_claim_words = min_claim_words
        self.max_bytes = max_bytes
        # Split pages by key; shared between the answers of an audit partition (same pages and options).
        self.cache: MutableMapping[str, _Page] = {} if cache is None else cache
        self.stems = StemCache() if stems is None else stems  # shared by the pages (and excerpts) of the check
        self.page_passages: dict[str, int] = {}

    def _lookup(self, source: SourceRef) -> tuple[str, PageSnapshot | str | bytes] | None:
        for key in (source.url, source.document_id, source.title):
            if key:
                value = self.pages.get(key)
                if value is not None:
                    return key, value
        return None

    def _page(self, key: str, value: PageSnapshot | str | bytes) -> _Page:
        cached = self.cache.get(key)
        if cached is not None:
            if cached.index is not None:
                self.page_passages[key] = len(cached.index.passages)
            return cached
        liveness: Liveness | None = None
        notes: list[str] = []
        text: str | None
        if isinstance(value, PageSnapshot):
            liveness = value.liveness
            if value.liveness != 'ok':
                page = _Page(None, liveness, 'unreachable', value.reason or f'link is {value.liveness}')
                self.cache[key] = page
                return page
            if value.truncated:
                notes.append('snapshot was cut at the size cap')
            decoded = decode_body(value.body, value.content_type, max_bytes=self.max_bytes)
            text = decoded.text
            if decoded.reason:
                notes.append(decoded.reason)
        elif isinstance(value, bytes):
            decoded = decode_body(value, max_bytes=self.max_bytes)
            text = decoded.text
            if decoded.reason:
                notes.append(decoded.reason)
        else:
            text = value
            if len(text) > self.max_bytes:
                text = text[: self.max_bytes]
                notes.append(f'page cut at {self.max_bytes} characters')
        note = '; '.join(notes) or None
        if text is None:
            page = _Page(None, liveness, 'unreadable', note or 'not a text page')
        else:
            passages = split_passages(text, min_words=self.min_passage_words)
            self.page_passages[key] = len(passages)
            page = _Page(PassageIndex(passages, language=self.language, stems=self.stems), liveness, None, note)
        self.cache[key] = page
        return page

    def _excerpts(self, source: SourceRef) -> PassageIndex | None:
        texts = [' '.join(e.split()) for e in source.excerpts]
        passages = [Passage(t, i, 0.0, len(t.split())) for i, t in enumerate(x for x in texts if x)]
        return PassageIndex(passages, language=self.language, stems=self.stems) if passages else None

    def _fixed(
        self, claim: Claim, source: SourceRef | None, verdict: Verdict, reason: str, liveness: Liveness | None = None
    ) -> _Job:
        check = CitationCheck(
            source=claim.source,
            url=source.url if source else None,
            document_id=source.document_id if source else None,
            title=source.title if source else None,
            claim=claim.text,
            claim_kind=claim.kind,
            verdict=verdict,
            reason=reason,
            liveness=liveness,
            claim_start=claim.start,
            claim_end=claim.end,
        )
        return _Job(claim, source, 'none', None, None, check)

    def plan(self) -> list[_Job]:
        numbers = {s.number: s for s in self.answer.sources}
        jobs = [self._plan(claim, numbers.get(claim.source)) for claim in claims_for(self.answer)]
        # Each page's index learns how many claims it is about to get: with many, it indexes the page in full at once.
        for index, claims in Counter(job.index for job in jobs if job.index is not None).items():
            index.expect(claims)
        return jobs

    def _plan(self, claim: Claim, source: SourceRef | None) -> _Job:
        """What to check one claim against (the page, else the provider's excerpts), or its verdict without a check."""
        if source is None:
            return self._fixed(claim, None, 'no_snapshot', f'source number {claim.source!r} is not in the answer')
        found = self._lookup(source)
        page = None if found is None else self._page(*found)
        basis: Basis = 'page'
        index = None if page is None else page.index
        if index is None:
            # No page, a dead link or an unreadable page: score the provider's excerpt when there is one.
            basis = 'excerpt'
            index = self._excerpts(source)
        if index is None:
            if page is None:
                return self._fixed(claim, source, 'no_snapshot', 'no page snapshot and no provider excerpt')
            verdict = page.problem or 'unreadable'
            return self._fixed(claim, source, verdict, page.note or verdict, liveness=page.liveness)
        if claim.word_count < self.min_claim_words:
            return self._too_short(claim, source, page)
        if not terms(claim.text, language=self.language):
            return self._fixed(claim, source, 'unsupported', 'the claim has no content words to check')
        return _Job(claim, source, basis, index, page, None)

    def _too_short(self, claim: Claim, source: SourceRef, page: _Page | None) -> _Job:
        """A claim below `min_claim_words` is not compared; a dead or unreadable page keeps its own verdict."""
        reason = (
            f'the claim has {claim.word_count} word(s): claims shorter than {self.min_claim_words} words are not '
            'compared'
        )
        liveness = None if page is None else page.liveness
        if page is not None and page.problem is not None:
            return self._fixed(claim, source, page.problem, f'{page.note or page.problem}; {reason}', liveness)
        return self._fixed(claim, source, 'too_short', reason, liveness)

    def verdict_for(self, score: float | None, shared: int) -> Verdict:
        if score is None:
            return 'unsupported'
        if score >= self.threshold - 1e-9 and shared >= MIN_SHARED_TERMS:
            return 'supported'
        if score >= self.weak_threshold - 1e-9:
            return 'weak'
        return 'unsupported'

    def lexical_reason(self, score: float | None, shared: int) -> str:
        if score is None:
            return 'no passage shares a word with the claim'
        if score >= self.threshold - 1e-9 and shared < MIN_SHARED_TERMS:
            return (
                f'score {score:.2f} but {shared} shared term (supported at {self.threshold:g} with at least '
                f'{MIN_SHARED_TERMS} shared terms, weak at {self.weak_threshold:g})'
            )
        return f'score {score:.2f} (supported at {self.threshold:g}, weak at {self.weak_threshold:g})'

    def finish(self, job: _Job, judgement: Judgement | None, judge_name: str) -> CitationCheck:
        if job.fixed is not None:
            return job.fixed
        assert judgement is not None
        assert job.source is not None
        source = job.source
        shared = (
            0
            if judgement.score is None
            else round(judgement.score * len(terms(job.claim.text, language=self.language)))
        )
        judged = judgement.verdict or self.verdict_for(judgement.score, shared)
        score_text = (
            'no passage shares a word with the claim' if judgement.score is None else f'score {judgement.score:.2f}'
        )
        reason = judgement.reason or (
            self.lexical_reason(judgement.score, shared)
            if judgement.verdict is None
            else f'{judge_name} judge: {judged}'
        )
        page = job.page
        if job.basis == 'excerpt':
            if page is not None and page.problem is not None:
                verdict: Verdict = page.problem
                reason = f'{page.note or page.problem}; provider excerpt: {judged} ({score_text})'
            else:
                verdict = 'excerpt_only'
                reason = f'no page snapshot; provider excerpt: {judged} ({score_text})'
        else:
            verdict = judged
            if not job.index or not job.index.passages:
                reason = f'the page has no passages of at least {self.min_passage_words} words'
            if page is not None and page.note:
                reason = f'{reason}; {page.note}'
        passage = judgement.passage
        return CitationCheck(
            source=job.claim.source,
            url=source.url,
            document_id=source.document_id,
            title=source.title,
            claim=job.claim.text,
            claim_kind=job.claim.kind,
            verdict=verdict,
            reason=reason,
            basis=job.basis,
            score=judgement.score,
            passage=passage,
            position=passage.position if passage is not None and job.basis == 'page' else None,
            liveness=page.liveness if page is not None else None,
            quote=judgement.quote,
            judge=judge_name,
            claim_start=job.claim.start,
            claim_end=job.claim.end,
        )

    def report(self, checks: list[CitationCheck], *, summarized: bool = True) -> SupportReport:
        answer = self.answer
        return SupportReport(
            checks=checks,
            summary=summarize(
                checks,
                list(self.page_passages.values()),
                incomplete_answers=0 if answer.complete else 1,
                not_checked=len(answer.raw_only),
            )
            if summarized
            else NOT_SUMMARIZED,
            threshold=self.threshold,
            weak_threshold=self.weak_threshold,
            page_passages=dict(self.page_passages),
            complete=answer.complete,
            not_checked=list(answer.raw_only),
        )


def check_lexical(
    answer: CitedAnswer,
    pages: Pages,
    *,
    threshold: float,
    weak_threshold: float,
    judge: LexicalJudge | None,
    language: str | None,
    min_passage_words: int,
    min_claim_words: int,
    max_bytes: int,
    page_cache: MutableMapping[str, _Page] | None = None,
    stems: StemCache | None = None,
    summarized: bool = True,
) -> SupportReport:
    """`check_support` with the lexical judge, keeping split pages (`page_cache`) and stems (`stems`) across answers.

    Both caches are for one set of pages and options: `page_cache` from `page_cache()`, `stems` a `StemCache`. With
    `summarized=False` the report's `summary` is `NOT_SUMMARIZED`, for a caller that drops it: an audit writing its
    checks and tallying them itself (a summary of each answer is 7 % of the time spent checking it).
    """
    lexical = judge or LexicalJudge()
    planner = _Planner(
        answer,
        pages,
        threshold=threshold,
        weak_threshold=weak_threshold,
        language=language,
        min_passage_words=min_passage_words,
        min_claim_words=min_claim_words,
        max_bytes=max_bytes,
        cache=page_cache,
        stems=stems,
    )
    checks = [
        planner.finish(job, None if job.index is None else lexical.judge_sync(job.claim.text, job.index), 'lexical')
        for job in planner.plan()
    ]
    return planner.report(checks, summarized=summarized)


class _PageCache(OrderedDict[str, _Page]):
    """Split pages by key, the least recently used dropped beyond `limit` (memory stays bounded)."""

    def __init__(self, limit: int) -> None:
        super().__init__()
        self.limit = limit

    def get(self, key: str, default: _Page | None = None) -> _Page | None:  # pyright: ignore[reportIncompatibleMethodOverride]
        page = super().get(key)
        if page is None:
            return default
        self.move_to_end(key)
        return page

    def __setitem__(self, key: str, value: _Page) -> None:
        super().__setitem__(key, value)
        if len(self) > self.limit:
            self.popitem(last=False)


def page_cache(limit: int = 64) -> MutableMapping[str, _Page]:
    """An empty cache of split pages for `check_lexical` (one set of pages and options), at most `limit` pages."""
    return _PageCache(limit)


def check_support_sync(
    answer: CitedAnswer,
    pages: Pages,
    *,
    threshold: float = 0.6,
    weak_threshold: float = 0.3,
    judge: Judge | None = None,
    language: str | None = None,
    min_passage_words: int = DEFAULT_MIN_PASSAGE_WORDS,
    min_claim_words: int = DEFAULT_MIN_CLAIM_WORDS,
    max_bytes: int = DEFAULT_MAX_BYTES,
) -> SupportReport:
    """`check_support` for synchronous code.

    A judge that needs an event loop (such as `LLMJudge`) is run with `anyio.run`, so inside a running event loop
    use `await check_support(...)`.

    Args:
        answer: The answer to check.
        pages: Pages by URL / document id: snapshots, text or bytes, or a `SnapshotStore`.
        threshold: Score at or above which a claim is `'supported'` (default 0.6), if at least two of its terms
            are in the passage (one shared term is `'weak'` at best). The defaults are calibrated on real pages;
            see docs/support.md.
        weak_threshold: Score at or above which it is `'weak'` (default 0.3); below is `'unsupported'`. The best
            passage is shown with every lexical verdict, so a reader can judge a weak one.
        judge: Who decides; default `LexicalJudge()` (no network).
        language: Language of the Latin-script words (see `terms`); `None` means English.
        min_passage_words: Passages shorter than this many words are dropped when splitting pages (default 5;
            see `split_passages`).
        min_claim_words: Claims shorter than this many words are not compared: their verdict is `'too_short'`
            (default 8). A dead or unreadable page keeps its own verdict.
        max_bytes: Pages are cut at this size before parsing (the cut is mentioned in the reason).
    """
    if judge is None or isinstance(judge, LexicalJudge):
        return check_lexical(
            answer,
            pages,
            threshold=threshold,
            weak_threshold=weak_threshold,
            judge=judge,
            language=language,
            min_passage_words=min_passage_words,
            min_claim_words=min_claim_words,
            max_bytes=max_bytes,
        )
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        pass
    else:
        raise UserError(
            f'check_support_sync() cannot run judge {judge!r} inside a running event loop: '
            'use `await check_support(...)`.'
        )
    return anyio.run(
        functools.partial(
            check_support,
            answer,
            pages,
            threshold=threshold,
            weak_threshold=weak_threshold,
            judge=judge,
            language=language,
            min_passage_words=min_passage_words,
            min_claim_words=min_claim_words,
            max_bytes=max_bytes,
        )
    )


async def check_support(
    answer: CitedAnswer,
    pages: Pages,
    *,
    threshold: float = 0.6,
    weak_threshold: float = 0.3,
    judge: Judge | None = None,
    language: str | None = None,
    min_passage_words: int = DEFAULT_MIN_PASSAGE_WORDS,
    min_claim_words: int = DEFAULT_MIN_CLAIM_WORDS,
    max_bytes: int = DEFAULT_MAX_BYTES,
) -> SupportReport:
    """Check every citation of `answer` against the cited pages.

    Per citation the claim (see `claims_for`) is checked against the page stored for its source (by URL,
    then document id, then title). Without a page, the provider's excerpts (`SourceRef.excerpts`) are used
    and the verdict is `'excerpt_only'`; without either, `'no_snapshot'`. Dead links (per the snapshot's
    liveness) are `'unreachable'`; binary pages `'unreadable'`. Broken or empty pages give a verdict with a
    reason, never an exception.

    Args:
        answer: The answer to check.
        pages: Pages by URL / document id: snapshots, text or bytes, or a `SnapshotStore`.
        threshold: Score at or above which a claim is `'supported'` (default 0.6), if at least two of its terms
            are in the passage (one shared term is `'weak'` at best). The defaults are calibrated on real pages;
            see docs/support.md.
        weak_threshold: Score at or above which it is `'weak'` (default 0.3); below is `'unsupported'`. The best
            passage is shown with every lexical verdict, so a reader can judge a weak one.
        judge: Who decides; default `LexicalJudge()` (no network). An async judge (such as `LLMJudge`) is awaited
            once per claim and page.
        language: Language of the Latin-script words (see `terms`); `None` means English.
        min_passage_words: Passages shorter than this many words are dropped when splitting pages (default 5;
            see `split_passages`).
        min_claim_words: Claims shorter than this many words are not compared: their verdict is `'too_short'`
            (default 8). A dead or unreadable page keeps its own verdict.
        max_bytes: Pages are cut at this size before parsing (the cut is mentioned in the reason).
    """
    judge = judge or LexicalJudge()
    planner = _Planner(
        answer,
        pages,
        threshold=threshold,
        weak_threshold=weak_threshold,
        language=language,
        min_passage_words=min_passage_words,
        min_claim_words=min_claim_words,
        max_bytes=max_bytes,
    )
    checks: list[CitationCheck] = []
    for job in planner.plan():
        judgement = None if job.index is None else await judge.judge(job.claim.text, job.index)
        checks.append(planner.finish(job, judgement, judge.name))
    return planner.report(checks)
