"""Claim-vs-passage coverage: which passage of a page holds the most of a claim's terms.

`score = |claim terms ∩ passage terms| / |claim terms|`, normalised by the *claim*. See `best_passage` for why.
`PassageIndex` precomputes each passage's term set once and keeps an inverted index (term -> passage ids), so a
claim only counts intersections over the passages that share at least one of its terms.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pydantic import TypeAdapter

from ._passages import Passage
from ._terms import terms

__all__ = ('PassageMatch', 'PassageIndex', 'best_passage', 'coverage', 'passage_match_ta')


@dataclass(frozen=True)
class PassageMatch:
    """The passage of a page that covers most of a claim's terms."""

    passage: Passage
    """The best passage (ties go to the one earliest in the page)."""
    score: float
    """Share of the claim's terms found in the passage, 0 to 1."""
    position: float
    """Where the passage starts in the page, 0 (top) to 1 (bottom); same as `passage.position`."""


passage_match_ta: TypeAdapter[PassageMatch] = TypeAdapter(PassageMatch)
"""JSON round trip for a `PassageMatch`."""


def coverage(claim_terms: frozenset[str], passage_terms: frozenset[str]) -> float:
    """Share of `claim_terms` found in `passage_terms` (0 when the claim has no terms)."""
    if not claim_terms:
        return 0.0
    return len(claim_terms & passage_terms) / len(claim_terms)


class PassageIndex:
    """Passages of one page, with their term sets and an inverted index, ready for many claims."""

    def __init__(self, passages: Sequence[Passage], *, language: str | None = None) -> None:
        """Compute each passage's terms once and index them.

        Args:
            passages: The page's passages, e.g. from `split_passages`.
            language: Language of the Latin-script words (see `terms`); `None` means English.
        """
        self.passages: tuple[Passage, ...] = tuple(passages)
        self.language = language
        self.terms: tuple[frozenset[str], ...] = tuple(terms(p.text, language=language) for p in self.passages)
        postings: dict[str, list[int]] = {}
        for i, passage_terms in enumerate(self.terms):
            for term in passage_terms:
                postings.setdefault(term, []).append(i)
        self._postings = postings

    def best(self, claim: str | frozenset[str]) -> PassageMatch | None:
        """The passage covering most of `claim` (text, or its precomputed terms), or `None` if none shares a term."""
        claim_terms = terms(claim, language=self.language) if isinstance(claim, str) else claim
        if not claim_terms:
            return None
        counts: dict[int, int] = {}
        postings = self._postings
        for term in claim_terms:
            ids = postings.get(term)
            if ids is not None:
                for i in ids:
                    counts[i] = counts.get(i, 0) + 1
        if not counts:
            return None
        # Highest count, then earliest passage.
        best_id = min(counts, key=lambda i: (-counts[i], i))
        passage = self.passages[best_id]
        return PassageMatch(passage=passage, score=counts[best_id] / len(claim_terms), position=passage.position)

    def ranked(self, claim: str, *, limit: int = 5) -> list[PassageMatch]:
        """Up to `limit` passages sharing a term with `claim`, best first (candidates for a judge)."""
        claim_terms = terms(claim, language=self.language)
        if not claim_terms:
            return []
        counts: dict[int, int] = {}
        for term in claim_terms:
            for i in self._postings.get(term, ()):
                counts[i] = counts.get(i, 0) + 1
        order = sorted(counts, key=lambda i: (-counts[i], i))[:limit]
        return [
            PassageMatch(
                passage=self.passages[i], score=counts[i] / len(claim_terms), position=self.passages[i].position
            )
            for i in order
        ]


def best_passage(claim: str, passages: Sequence[Passage], *, language: str | None = None) -> PassageMatch | None:
    """The passage that covers the largest share of the claim's terms.

    `score = |claim terms ∩ passage terms| / |claim terms|`. The claim is the denominator on purpose: the
    question is "how much of what the answer says does this passage back?". Normalising by the passage
    instead (or using a symmetric measure) rewards short passages: a heading or menu item that shares two
    topic words with the claim would score 2/2 = 1.0 and outrank the paragraph that actually states the
    claim, which shares more terms but also holds many others. With the claim as denominator a passage only
    scores high by containing most of what is claimed, and a longer passage is never penalised for context.

    Args:
        claim: The claimed text (an anchored span, the sentence a marker closes, or a whole answer).
        passages: Candidate passages, e.g. from `split_passages`.
        language: Language of the Latin-script words (`'en'`, `'ru'`, or a Snowball name); Cyrillic words are
            always stemmed as Russian. `None` means English.

    Returns:
        The best passage with its score and position (ties go to the earliest passage), or `None` when no
        passage shares a term with the claim or the claim has no terms.
    """
    return PassageIndex(passages, language=language).best(claim)
