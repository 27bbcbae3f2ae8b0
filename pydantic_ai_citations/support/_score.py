"""Claim-vs-passage coverage, and how the passage shown for a claim is chosen.

The score is `|claim terms ∩ passage terms| / |claim terms|`, normalised by the *claim* (see `best_passage` for
why); it is what verdicts and the threshold curve read. Which passage is *chosen* is a separate question, and
answers paraphrase: with half of a sentence's words gone, several passages of a page often hold every remaining
term, and the first of them is often a teaser, a summary or a pull quote instead of the paragraph. So passages
are ranked by *relevance*: the page-IDF-weighted sum of the features the claim and passage share, where the
features are the stemmed terms, the surface words (stop words included: "he said" versus "Babin said") and the
pairs of adjacent words. IDF comes from the page's own passages (BM25's `log(1 + (N - df + 0.5) / (df + 0.5))`),
so a word in every passage weighs almost nothing and only breaks ties, and a word in one passage weighs most.
The chosen passage's score is still its plain coverage, so a report's numbers mean what they always meant.

`PassageIndex` keeps inverted indexes (feature -> passage ids), so a claim only visits the passages that share a
feature with it, and stems a page's words only as claims need them (see the class).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from pydantic import TypeAdapter

from ._passages import Passage
from ._terms import latin_algorithm, term_key, terms_of_group, terms_of_words, tokens

__all__ = ('PassageMatch', 'PassageIndex', 'best_passage', 'coverage', 'passage_match_ta')


@dataclass(frozen=True)
class PassageMatch:
    """The passage chosen for a claim (the most relevant one), with its coverage of the claim's terms."""

    passage: Passage
    """The most relevant passage (see the module docstring; ties go to the one earliest in the page)."""
    score: float
    """Share of the claim's terms found in the passage, 0 to 1 (coverage: what verdicts read)."""
    position: float
    """Where the passage starts in the page, 0 (top) to 1 (bottom); same as `passage.position`."""


passage_match_ta: TypeAdapter[PassageMatch] = TypeAdapter(PassageMatch)
"""JSON round trip for a `PassageMatch`."""


def coverage(claim_terms: frozenset[str], passage_terms: frozenset[str]) -> float:
    """Share of `claim_terms` found in `passage_terms` (0 when the claim has no terms)."""
    if not claim_terms:
        return 0.0
    return len(claim_terms & passage_terms) / len(claim_terms)


def _surface(words: Sequence[str]) -> set[str]:
    """Surface features: each word (`=` prefix) and each pair of adjacent words (a space between); never a term."""
    features = {'=' + w for w in words}
    features.update([f'{a} {b}' for a, b in zip(words, words[1:], strict=False)])
    return features


class PassageIndex:
    """Passages of one page, indexed once for many claims: words up front, terms and word pairs as claims need them.

    Building the index reads each passage once: its words (`tokens`) and a posting list per distinct word. Stemming is most of the rest of the cost, and most of a page's words never meet
    a claim's. So the index keeps the page's words grouped by `term_key` (their first two letters) and stems a group
    the first time a claim has a word in it (one call per word to the Snowball stemmer, the C one when PyStemmer is
    installed); a term always has its words' key, so every passage holding a claim's term is found. Pairs of adjacent
    words are looked up the same way: only for the pairs a claim has, among the passages holding both words. The
    lazily filled term and pair postings are the only state that changes, and only by growing.
    """

    def __init__(self, passages: Sequence[Passage], *, language: str | None = None) -> None:
        """Index the words of each passage.

        Args:
            passages: The page's passages, e.g. from `split_passages`.
            language: Language of the Latin-script words (see `terms`); `None` means English.
        """
        self.passages: tuple[Passage, ...] = tuple(passages)
        self.language = language
        self._latin = latin_algorithm(language)  # an unknown language fails here, not on the first claim
        words: dict[str, set[int]] = {}
        self._tokens = [tokens(passage.text) for passage in self.passages]
        self._pairs: list[frozenset[str] | None] = [None] * len(self.passages)
        for i, found in enumerate(self._tokens):
            for word in set(found):
                ids = words.get(word)
                if ids is None:
                    words[word] = {i}
                else:
                    ids.add(i)
        self._words = words
        unstemmed: dict[str, list[str]] = {}
        for word in words:
            key = word[:2] if word.isascii() else term_key(word)
            group = unstemmed.get(key)
            if group is None:
                unstemmed[key] = [word]
            else:
                group.append(word)
        self._unstemmed = unstemmed
        self._term_ids: dict[str, set[int]] = {}
        self._pair_ids: dict[str, set[int]] = {}
        n = len(self.passages)
        # BM25's IDF over the page's passages, by document frequency: near 0 in every passage, highest in one.
        self._idf = [math.log(1 + (n - df + 0.5) / (df + 0.5)) for df in range(n + 1)]

    def _stem_group(self, key: str) -> None:
        group = self._unstemmed.pop(key, None)
        if group is None:
            return
        term_ids = self._term_ids
        for word, term in zip(group, terms_of_group(group, self._latin), strict=True):
            if term is not None:
                ids = term_ids.get(term)
                if ids is None:
                    term_ids[term] = set(self._words[word])
                else:
                    ids |= self._words[word]

    def _pair(self, pair: str) -> set[int]:
        """Passages holding the two words of `pair` (`'a b'`) next to each other."""
        ids = self._pair_ids.get(pair)
        if ids is None:
            first, second = pair.split(' ')
            both = self._words.get(first, set()) & self._words.get(second, set())
            ids = {i for i in both if pair in self._pairs_of(i)}
            self._pair_ids[pair] = ids
        return ids

    def _pairs_of(self, i: int) -> frozenset[str]:
        """The pairs of adjacent words of passage `i` (made the first time a claim's pair may be in it)."""
        pairs = self._pairs[i]
        if pairs is None:
            words = self._tokens[i]
            pairs = self._pairs[i] = frozenset(map(' '.join, zip(words, words[1:], strict=False)))
        return pairs

    def _candidates(self, claim: str | frozenset[str]) -> tuple[frozenset[str], dict[int, float], dict[int, int]]:
        """The claim's terms, and for each passage sharing one of them its relevance and its count of them."""
        if isinstance(claim, str):
            words = tokens(claim)
            claim_terms = terms_of_words(words, language=self.language)
            surface = _surface(words)
        else:
            claim_terms = claim
            surface = set[str]()
        for key in {term_key(t) for t in claim_terms}:
            self._stem_group(key)
        idf = self._idf
        relevance: dict[int, float] = {}
        counts: dict[int, int] = {}
        for term in sorted(claim_terms):  # sorted: the same sums, to the last bit, on every run
            ids = self._term_ids.get(term)
            if ids:
                weight = idf[len(ids)]
                for i in ids:
                    relevance[i] = relevance.get(i, 0.0) + weight
                    counts[i] = counts.get(i, 0) + 1
        if not counts:
            return claim_terms, relevance, counts
        # Only passages sharing a term are candidates: shared stop words or word pairs alone back nothing.
        for feature in sorted(surface):
            ids = self._words.get(feature[1:]) if feature[0] == '=' else self._pair(feature)
            if ids:
                weight = idf[len(ids)]
                for i in counts.keys() & ids:
                    relevance[i] += weight
        return claim_terms, relevance, counts

    def best(self, claim: str | frozenset[str]) -> PassageMatch | None:
        """The most relevant passage for `claim` (text, or its precomputed terms), `None` if none shares a term.

        Its `score` is its coverage of the claim's terms. Ties go to the earliest passage. Given only terms, the
        ranking uses the terms alone (no surface words or word pairs).
        """
        claim_terms, relevance, counts = self._candidates(claim)
        if not relevance:
            return None
        best = min(relevance, key=lambda i: (-relevance[i], i))
        return self._match(best, counts[best] / len(claim_terms))

    def ranked(self, claim: str, *, limit: int = 5) -> list[PassageMatch]:
        """Up to `limit` passages sharing a term with `claim`, most relevant first (candidates for a judge)."""
        claim_terms, relevance, counts = self._candidates(claim)
        order = sorted(relevance, key=lambda i: (-relevance[i], i))[:limit]
        return [self._match(i, counts[i] / len(claim_terms)) for i in order]

    def _match(self, i: int, score: float) -> PassageMatch:
        passage = self.passages[i]
        return PassageMatch(passage=passage, score=score, position=passage.position)

    @property
    def terms(self) -> tuple[frozenset[str], ...]:
        """Each passage's terms (stems every word of the page; the index itself stems only what claims need)."""
        for key in list(self._unstemmed):
            self._stem_group(key)
        out: list[set[str]] = [set() for _ in self.passages]
        for term, ids in self._term_ids.items():
            for i in ids:
                out[i].add(term)
        return tuple(frozenset(t) for t in out)


def best_passage(claim: str, passages: Sequence[Passage], *, language: str | None = None) -> PassageMatch | None:
    """The passage most relevant to the claim, scored by the share of the claim's terms it covers.

    `score = |claim terms ∩ passage terms| / |claim terms|`. The claim is the denominator on purpose: the
    question is "how much of what the answer says does this passage back?". Normalising by the passage
    instead (or using a symmetric measure) rewards short passages: a heading or menu item that shares two
    topic words with the claim would score 2/2 = 1.0 and outrank the paragraph that actually states the
    claim, which shares more terms but also holds many others. With the claim as denominator a passage only
    scores high by containing most of what is claimed, and a longer passage is never penalised for context.

    The passage is chosen by relevance (page-IDF-weighted shared terms, surface words and word pairs; see the
    module docstring), which tells apart passages that hold the same terms, e.g. a paragraph and the teaser
    that repeats half of it, when an answer keeps only some of a sentence's words.

    Args:
        claim: The claimed text (an anchored span, the sentence a marker closes, or a whole answer).
        passages: Candidate passages, e.g. from `split_passages`.
        language: Language of the Latin-script words (`'en'`, `'ru'`, or a Snowball name); Cyrillic words are
            always stemmed as Russian. `None` means English.

    Returns:
        The most relevant passage with its score and position (ties go to the earliest passage), or `None` when no
        passage shares a term with the claim or the claim has no terms.
    """
    return PassageIndex(passages, language=language).best(claim)
