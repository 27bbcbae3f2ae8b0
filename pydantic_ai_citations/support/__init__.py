"""Support check: does the cited page hold a passage that backs the claim?

Split pages into passages (`split_passages`), score claim-vs-passage coverage (`best_passage`), check every
citation of a `CitedAnswer` (`check_support`, or `check_support_sync`), keep snapshots of cited pages taken at answer time
(`SnapshotStore`, `capture`, `capture_answer`), judge lexically (default) or with a model (`LLMJudge`), and audit
logged answers of any number in partitions, here or on Dask (`audit_answers`; a cluster needs the `[audit]` extra).
Needs the `[support]` extra (selectolax, snowballstemmer, httpx2; with PyStemmer, also in it, stemming runs in C).
"""

from . import _requires  # noqa: F401  # pyright: ignore[reportUnusedImport]  # first: name a missing extra
from ._audit import AuditedAnswer, AuditReport, audit, audit_report_ta, audit_to_html, audit_to_markdown
from ._audit_run import (
    AnswerSource,
    AuditedCitation,
    AuditFormat,
    AuditInputError,
    AuditOptions,
    AuditSummary,
    audit_answers,
    audited_citation_ta,
)
from ._claims import DEFAULT_MIN_CLAIM_WORDS, Claim, ClaimKind, claims_for
from ._decode import DecodedPage, decode_body
from ._judge import Judge, Judgement, JudgeVerdict, LexicalJudge, LLMJudge, LLMVerdict
from ._passages import DEFAULT_MIN_PASSAGE_WORDS, Passage, split_passages
from ._report import (
    THRESHOLDS,
    Basis,
    CitationCheck,
    Pages,
    SupportReport,
    SupportSummary,
    SupportTally,
    ThresholdPoint,
    Verdict,
    check_support,
    check_support_sync,
    summarize,
    support_report_ta,
    support_reports_ta,
)
from ._score import PassageIndex, PassageMatch, best_passage
from ._snapshots import Liveness, PageSnapshot, SnapshotStore, capture, capture_answer, page_snapshots_ta
from ._terms import StemCache, detect_language, terms

__all__ = (
    'DEFAULT_MIN_CLAIM_WORDS',
    'DEFAULT_MIN_PASSAGE_WORDS',
    'AnswerSource',
    'AuditFormat',
    'AuditInputError',
    'AuditOptions',
    'AuditReport',
    'AuditSummary',
    'AuditedAnswer',
    'AuditedCitation',
    'audit',
    'audit_answers',
    'audited_citation_ta',
    'audit_report_ta',
    'audit_to_html',
    'audit_to_markdown',
    'THRESHOLDS',
    'Basis',
    'CitationCheck',
    'Claim',
    'ClaimKind',
    'DecodedPage',
    'Judge',
    'JudgeVerdict',
    'Judgement',
    'LLMJudge',
    'LLMVerdict',
    'LexicalJudge',
    'Liveness',
    'PageSnapshot',
    'Pages',
    'Passage',
    'PassageIndex',
    'PassageMatch',
    'SnapshotStore',
    'StemCache',
    'SupportReport',
    'SupportSummary',
    'SupportTally',
    'ThresholdPoint',
    'Verdict',
    'check_support',
    'best_passage',
    'capture',
    'capture_answer',
    'check_support_sync',
    'claims_for',
    'decode_body',
    'detect_language',
    'page_snapshots_ta',
    'split_passages',
    'summarize',
    'support_report_ta',
    'support_reports_ta',
    'terms',
)
