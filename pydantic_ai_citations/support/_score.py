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

`PassageIndex` keeps inverted indexes (feature -> passages), so a claim only visits the passages that share a term
with it, sums the relevance of only those that can still win, and stems a page's words only as claims need them
(see the class).
"""

from __future__ import annotations

import math
import operator
from bisect import bisect_left
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from functools import reduce
from itertools import accumulate, filterfalse
from operator import itemgetter
from typing import cast
from unicodedata import is_normalized

from pydantic import TypeAdapter
from pydantic_ai.exceptions import UserError

from .._checks import shown
from ._passages import Passage
from ._terms import StemCache, latin_algorithm, term_key, term_map, tokens

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


_Term = tuple[str, float, int]
"""A claim's term found on the page: the term, its weight and its passages (bit `i` for passage `i`)."""
_Feature = tuple[str, float, int, 'str | None']
"""A surface feature of a claim found on the page: name, weight, passages (bit `i` for passage `i`), and the term
every passage holding it holds too (`None` for stop words alone)."""
_Word = tuple['str | None', '_Term | None', '_Feature | None', int, 'str | None']
"""What a claim word brings to one page, worked out the first time the page meets it: its term (`None` for a stop word
or a lone letter), that term on the page (`None` if no passage holds it, and, until a claim needs it, for a word the
page holds: see `PassageIndex._learn`), the word itself as a surface feature (`None` if no passage holds it), the
passages holding both (those of the word if any passage holds it, else those of its term; `-1`, every passage, if
neither is on the page), and the term again if some passage holds it (`None` if none does)."""
_TERM, _ON_PAGE, _SURFACE, _HELD, _NAMED = map(itemgetter, range(5))  # the parts of a `_Word`
_MASK = itemgetter(2)  # the passages of a `_Term` or a `_Feature`
# The passages in both masks: `operator.and_` is a C function, cheaper to call than `int.__and__` (typeshed leaves it
# untyped).
_both = cast('Callable[[int, int], int]', operator.and_)  # pyright: ignore[reportUnknownMemberType]
_LAST = chr(0x10FFFF)  # the last code point: not a letter or digit, so in no word
_FULL_AFTER = 8
"""After this many claims on one page (asked, or announced with `expect`), the index stems all its words and lists all
its pairs of adjacent words."""
_LONG_CLAIM = 256
"""A claim of more words (or terms) than this, such as a whole answer checked against a source cited without a
position, is ranked by one pass over the page's words (`PassageIndex._long`): summing every feature for every passage
that shares a term grows with the product of the claim and the page."""


class PassageIndex:
    """Passages of one page, indexed once for many claims: words up front, terms and word pairs as claims need them.

    Building the index reads each passage once: its words (`tokens`), and for each distinct word of the page the set
    of passages holding it (a bit set: bit `i` for passage `i`). Stemming is most of the rest of the cost, and most of
    a page's words never meet a claim's. So for each term of a claim the index stems only the page's words that may
    have it, in one call to the Snowball stemmer (the C one when PyStemmer is installed): those of the term's
    `term_key` (a term always has its words' first two letters), and for English only those of them that start with
    all of the term but its last two letters (see `_complete`); every passage holding a claim's term is found. Each
    word is stemmed once per page: the index is the page's stem cache, and it goes away with the page. Pairs of
    adjacent words are looked up the same way: only for the pairs a claim has, among the passages holding both words.
    A page asked about by many claims is indexed in full instead, at the first claim when they are announced
    (`expect`). Stems can be shared by the indexes of many pages (`StemCache`). The lazily filled stems, postings,
    features and matches returned are the only state that changes, and only by growing.

    A claim's relevance is summed in full only for the passages that can still win. A passage holding a surface word
    or pair of the claim also holds that word's term (stop words aside), so each term, weighted with the features
    that imply it, bounds what a passage gains by holding it. Terms are visited from the highest bound down (the
    rarest first), and a passage is summed only while the bounds of the terms left could still reach the best sum
    so far (the MaxScore method of search engines). The choice is the one the full sums give, to the last bit. Before
    any of that, a passage holding every feature the claim shares with the page wins outright (no passage lacking one
    can sum as much): most claims that keep the words of one passage, in order, are settled by a few bit operations,
    with none of their features listed. Each claim word brings one mask (the passages holding it, or its term when no
    passage holds the word), and the first passage in all of them is the one to check for the claim's pairs: in the
    page's listed pairs once there are many claims, before that among the passage's own pairs, where only a pair it lacks
    whose two words meet in another passage needs looking up. A claim word's term, its surface feature and its mask are
    worked out once per page (the first time a claim has the word) and read back with map and set operations after
    that; its term's weight and complete postings too, except for a word the page holds: that check needs neither (the
    word's own passages hold its term), so they wait for a claim that has to be ranked, and a page whose claims keep its
    words has none of its other words stemmed.
    """

    def __init__(
        self, passages: Sequence[Passage], *, language: str | None = None, stems: StemCache | None = None
    ) -> None:
        """Index the words of each passage.

        Args:
            passages: The page's passages, e.g. from `split_passages`.
            language: Language of the Latin-script words (see `terms`); `None` means English.
            stems: A cache shared with the indexes of other pages, so each word is stemmed once for all of them;
                `None` stems this page's words for this index alone.

        Raises:
            UserError: `stems` is not a `StemCache`, or `language` is unknown.
        """
        if stems is not None and not isinstance(cast(object, stems), StemCache):
            raise UserError(f'PassageIndex: `stems` must be a `StemCache` or None, got {shown(stems)}.')
        self.passages: tuple[Passage, ...] = tuple(passages)
        self.language = language
        self._latin = latin_algorithm(language)  # an unknown language fails here, not on the first claim
        self._stems = stems
        self._tokens = [tokens(passage.text) for passage in self.passages]
        self._words = _word_masks(self._tokens)
        self._vocabulary: list[str] | None = None  # the page's words, sorted, when the first claim comes
        self._folded: dict[str, list[str]] | None = None  # words whose key is not their head, by key (if any)
        self._done: set[str] | None = set()  # prefixes whose words are stemmed (`None`: all words are)
        self._claims = 0  # claims asked about so far
        self._expected = 0  # claims announced (`expect`), counted from the first
        self._pair_masks: dict[tuple[str, str], int] | None = None  # every pair of the page, once many claims come
        self._term_of: dict[str, str | None] = {}  # this page's stems (page and claim words)
        self._term_masks: dict[str, int] = {}
        self._on_page: dict[str, _Term] = {}  # terms whose postings are complete and not empty
        self._known: dict[str, _Word] = {}  # every claim word met so far
        self._unweighed: set[str] = set()  # claim words on the page whose term is not weighed yet (see `_learn`)
        self._pair_features: dict[tuple[str, str], _Feature | None] = {}
        self._matches: dict[tuple[int, float], PassageMatch] = {}  # the matches returned so far
        self._lines: list[str | None] = [None] * len(self.passages)  # a passage's words, space-separated and -framed
        n = len(self.passages)
        # BM25's IDF over the page's passages, by document frequency: near 0 in every passage, highest in one.
        self._idf = [math.log(1 + (n - df + 0.5) / (df + 0.5)) for df in range(n + 1)]
        # Up to this many features, the float sum of all of a claim's features exceeds any sum that lacks one: the
        # smallest weight stays above the rounding error of m sums of m weights each (2 m**2 u w_max < w_min, u the
        # unit roundoff; about 100,000 features for 10,000 passages). Claims have a few dozen.
        self._sure = math.isqrt(int(self._idf[-1] / (4 * 2**-53 * self._idf[1]))) if n else 0

    def expect(self, claims: int) -> None:
        """Announce `claims` more claims about this page: with many, the next one indexes the page in full.

        Indexing in full (every word stemmed, every pair of adjacent words listed) costs about what a few claims cost
        lazily, and makes each later claim cheaper: for a page checked against many claims at once (an audit, an
        answer citing it many times) it is the cheaper way. Results do not change either way.

        Raises:
            UserError: `claims` is not an int of at least 0.
        """
        if isinstance(claims, bool) or not isinstance(cast(object, claims), int) or claims < 0:
            raise UserError(f'PassageIndex.expect: `claims` must be an int of at least 0, got {shown(claims)}.')
        self._expected = max(self._expected, self._claims + claims)

    def _stem(self, words: list[str]) -> None:
        """Stem words not stemmed on this page yet; the passages of a page word join its term's."""
        stems = self._stems
        # The terms in the order of `words` (`term_map` keeps their order).
        found = list(term_map(words, self._latin).values()) if stems is None else stems.terms(words, self._latin)
        self._term_of.update(zip(words, found, strict=True))
        masks = self._term_masks
        page = self._words
        for word, term in zip(words, found, strict=True):
            if term is not None:
                mask = page.get(word)
                if mask:
                    masks[term] = masks.get(term, 0) | mask

    def _complete(self, terms: Iterable[str]) -> None:
        """Make the postings of these terms complete: stem every page word that may have one of them."""
        done = self._done
        if done is None:
            return
        english = self._latin == 'english'
        todo: set[str] = set()
        for term in terms:
            # A term keeps its word's key. An English stem also keeps all of its word's beginning but its own last
            # letter (`cry` -> `cri`, `hoping` -> `hope`; checked on four million words): stemming the words that start
            # with all of it but its last two letters is enough, and much less than all the words of its key.
            prefix = term[: max(2, len(term) - 2)] if english and term.isascii() else term_key(term)
            if prefix not in done:
                done.add(prefix)
                todo.update(self._starting(prefix))
        term_of = self._term_of
        new = [w for w in todo if w not in term_of]
        if new:
            self._stem(new)

    def _starting(self, prefix: str) -> list[str]:
        """The page's words starting with `prefix`, and for a key (two letters or fewer) those whose key it is."""
        vocabulary = self._vocabulary
        if vocabulary is None:
            vocabulary = self._vocabulary = sorted(self._words)  # one C call: cheaper than grouping words in Python
        # The words starting with `prefix` lie between it and it followed by the last code point (never in a word).
        found = vocabulary[bisect_left(vocabulary, prefix) : bisect_left(vocabulary, prefix + _LAST)]
        if len(prefix) <= 2:
            folded = self._folded
            if folded is None:
                folded = self._folded = self._fold_keys()
            found += folded.get(prefix, ())
        return found

    def _fold_keys(self) -> dict[str, list[str]]:
        """The page's words whose key is not their first two letters (diacritics: `été` has the key `et`), by key."""
        out: dict[str, list[str]] = {}
        words = self._words
        if ''.join(words).isascii():
            return out
        # Words hold no combining marks (they are not letters or digits): a head folds only if decomposing changes it.
        folding = {head for head in {word[:2] for word in words} if not is_normalized('NFD', head)}
        if folding:
            for word in words:
                if word[:2] in folding:
                    out.setdefault(term_key(word), []).append(word)
        return out

    def _learn(self, new: set[str]) -> None:
        """Work out what the claim words not met on this page before bring to it (see `_Word`).

        A word the page holds brings its own passages, and its term is on the page: what most claims need (see
        `best`). Its term's weight and complete postings (every page word of that term, stemmed) are worked out only
        when a claim has to be ranked (`_weighed`): claims that keep the page's words mostly never are.
        """
        term_of = self._term_of
        fresh = new.difference(term_of)
        if fresh:
            self._stem(list(fresh))
        words = self._words
        lazy = self._done is not None  # (else every posting is complete)
        if lazy:
            found = set(map(term_of.__getitem__, filterfalse(words.__contains__, new)))
            found.discard(None)
            self._complete(cast('set[str]', found))
        on_page = self._on_page
        idf = self._idf
        known = self._known
        for word in new:
            term = term_of[word]
            mask = words.get(word)
            if mask:  # (a passage holding the word holds its term)
                shared = None if term is None else on_page.get(term) or (None if lazy else self._weigh(term))
                if shared is None and term is not None:
                    self._unweighed.add(word)
                known[word] = (term, shared, ('=' + word, idf[mask.bit_count()], mask, term), mask, term)
            else:
                shared = None if term is None else on_page.get(term) or self._weigh(term)
                if shared is None:
                    known[word] = (term, None, None, -1, None)
                else:
                    known[word] = (term, shared, None, shared[2], term)

    def _weighed(self, words: set[str]) -> None:
        """Weigh the terms of these claim words that `_learn` left unweighed (their postings completed first)."""
        unweighed = self._unweighed.intersection(words)
        if not unweighed:
            return
        self._unweighed -= unweighed
        term_of = self._term_of
        self._complete(cast('set[str]', set(map(term_of.__getitem__, unweighed))))
        known = self._known
        on_page = self._on_page
        for word in unweighed:
            term, _, surface, held, named = known[word]
            known[word] = (term, on_page.get(cast(str, term)) or self._weigh(cast(str, term)), surface, held, named)

    def _enter(self, terms: Iterable[str]) -> dict[str, _Term]:
        """Weigh these terms, whose postings are complete (see `_complete`), if the page has them; all weighed terms."""
        on_page = self._on_page
        for term in terms:
            if term not in on_page:
                self._weigh(term)
        return on_page

    def _weigh(self, term: str) -> _Term | None:
        """Weigh a term not weighed yet whose postings are complete, `None` if no passage holds it."""
        mask = self._term_masks.get(term)
        if not mask:
            return None
        found = self._on_page[term] = (term, self._idf[mask.bit_count()], mask)
        return found

    def _pairs(self, words: list[str]) -> Iterator[_Feature]:
        """The claim's pairs of adjacent words that some passage holds next to each other, as surface features."""
        pairs = set(zip(words, words[1:], strict=False))
        seen = self._pair_features
        new = pairs.difference(seen)
        if new:
            listed = self._pair_masks
            if listed is None:
                for pair in new:
                    seen[pair] = self._pair(*pair)
            else:
                # Every pair of the page is listed: most of a claim's new pairs are not, and are told apart in C.
                found = listed.keys() & new
                seen.update(dict.fromkeys(new - found))
                for pair in found:
                    seen[pair] = self._pair_feature(*pair, listed[pair])
        return filter(None, map(seen.__getitem__, pairs))

    def _pair(self, first: str, second: str) -> _Feature | None:
        """The feature of a claim's pair of adjacent words, `None` if no passage holds them next to each other."""
        words = self._words
        mask = words.get(first, 0) & words.get(second, 0)  # the passages holding both words
        if not mask:
            return None
        needle = f' {first} {second} '
        lines = self._lines
        if mask & (mask - 1):
            both = mask
            while both:
                bit = both & -both
                both ^= bit
                i = bit.bit_length() - 1
                if needle not in (lines[i] or self._line(i)):
                    mask ^= bit
            if not mask:
                return None
        else:  # one passage holds both words (the most common case)
            i = mask.bit_length() - 1
            if needle not in (lines[i] or self._line(i)):
                return None
        return self._pair_feature(first, second, mask)

    def _pair_feature(self, first: str, second: str, mask: int) -> _Feature:
        term = self._term_of[first]
        return (f'{first} {second}', self._idf[mask.bit_count()], mask, self._term_of[second] if term is None else term)

    def _index_all(self) -> None:
        """Stem all the page's words and list all its pairs: for a page asked about by many claims, cheaper than lazily."""
        self._stem_all()
        masks: dict[tuple[str, str], int] = {}
        get = masks.get
        for i, words in enumerate(self._tokens):
            bit = 1 << i
            for pair in zip(words, words[1:], strict=False):
                mask = get(pair)
                masks[pair] = bit if mask is None else mask | bit  # (most pairs are in one passage: `bit` shared)
        self._pair_masks = masks

    def _stem_all(self) -> None:
        """Stem every word of the page not stemmed yet: every term's postings are complete."""
        if self._done is not None:
            term_of = self._term_of
            self._stem([w for w in self._words if w not in term_of])
            self._done = None

    def _line(self, i: int) -> str:
        """Passage `i`'s words, each with a space on both sides (made the first time a claim's pair may be in it)."""
        line = self._lines[i] = f' {" ".join(self._tokens[i])} '
        return line

    def _read(self, words: list[str], *, weighed: bool = True) -> list[_Word]:
        """What each distinct word of a claim brings to the page (see `_Word`); the words not met before are learnt.

        With `weighed=False`, the term on the page of a word the page holds may be left unworked (`None`).
        """
        distinct = set(words)
        known = self._known
        new = distinct.difference(known)  # (`difference` reads only this set: `- keys()` reads the dict)
        if new:
            self._learn(new)
        if weighed and self._unweighed:
            self._weighed(distinct)
        # Map, filter and set operations run in C: most claims meet only words and pairs the page has met before.
        return list(map(known.__getitem__, distinct))

    def _features(self, claim: str | frozenset[str]) -> _Claim | None:
        """What the claim shares with the page, `None` if it shares no term."""
        if isinstance(claim, str):
            words = tokens(claim)
            return self._claim(words, self._read(words))
        self._complete(claim)
        on_page = self._enter(claim)
        shared = {on_page[t] for t in claim if t in on_page}
        if not shared:
            return None
        return _Claim(len(claim), sorted(shared), [])  # sorted: same sums every run

    def _claim(self, words: list[str], found: list[_Word]) -> _Claim | None:
        """What the claim of `words` (`found`: what its distinct words bring, from `_read`) shares with the page."""
        claim_terms: set[str | None] = set(map(_TERM, found))
        claim_terms.discard(None)
        shared: set[_Term | None] = set(map(_ON_PAGE, found))
        shared.discard(None)
        if not shared:
            return None
        surface: list[_Feature] = list(filter(None, map(_SURFACE, found)))
        surface += self._pairs(words)
        return _Claim(len(claim_terms), sorted(cast('set[_Term]', shared)), surface)  # sorted: same sums every run

    def best(self, claim: str | frozenset[str]) -> PassageMatch | None:
        """The most relevant passage for `claim` (text, or its precomputed terms), `None` if none shares a term.

        Its `score` is its coverage of the claim's terms. Ties go to the earliest passage. Given only terms, the
        ranking uses the terms alone (no surface words or word pairs).
        """
        self._claims += 1
        words = tokens(claim) if isinstance(claim, str) else None
        if len(claim if words is None else words) > _LONG_CLAIM:
            return self._long_best(claim, words)
        if self._pair_masks is None and max(self._claims, self._expected) >= _FULL_AFTER:
            self._index_all()
        if words is not None:
            found = self._read(words, weighed=False)
            # A passage holding every feature the claim shares with the page (every term, surface word and pair) sums
            # all their weights: no passage missing one reaches it, and those holding them all tie (ties to the
            # earliest). Claims that keep words of one passage (quotes, trimmed sentences) mostly end here, with
            # nothing to rank and no features listed. A claim of n words has at most 3 n features.
            held = reduce(_both, map(_HELD, found), -1)
            # No passage holds every feature when none holds every word (or its term), or, pairs counted, none of
            # those holds every pair: then what the features' masks would give is known (nothing), so not worked out.
            unheld = not held
            if held and 3 * len(words) <= self._sure:
                claim_terms: set[str | None] = set(map(_TERM, found))
                claim_terms.discard(None)
                # The claim's terms on the page (a claim word's term on the page is final once the word is met).
                named: set[str | None] = set(map(_NAMED, found))
                named.discard(None)
                shared = len(named)
                if not shared:
                    return None
                listed = self._pair_masks
                if listed is not None:
                    held = reduce(_both, filter(None, map(listed.get, zip(words, words[1:], strict=False))), held)
                    unheld = not held
                elif not self._holds_pairs(words, held & -held):  # (the first passage holding every word or its term)
                    held = 0
                if held:
                    return self._match((held & -held).bit_length() - 1, shared / len(claim_terms))
            if self._unweighed:
                found = self._read(words)
            features = self._claim(words, found)
        else:
            features = self._features(claim)
            unheld = False
        if features is None:
            return None
        held = (
            0 if unheld else reduce(_both, map(_MASK, features.terms), reduce(_both, map(_MASK, features.surface), -1))
        )
        if held and len(features.terms) + len(features.surface) <= self._sure:
            i = (held & -held).bit_length() - 1
            return self._match(i, len(features.terms) / features.size)
        i = features.search()
        return self._match(i, features.count(1 << i) / features.size)

    def _holds_pairs(self, words: list[str], bit: int) -> bool:
        """Whether the passage of `bit` holds every pair of adjacent words of the claim that some passage holds.

        The claim's pairs it lacks are told apart from its own pairs in C; only a pair it lacks whose two words are both
        in another passage is looked up (once per page, as `_pairs` does).
        """
        i = bit.bit_length() - 1
        own = self._tokens[i]
        lacking = set(zip(words, words[1:], strict=False)).difference(zip(own, own[1:], strict=False))
        page = self._words
        seen = self._pair_features
        for pair in lacking:
            if page.get(pair[0], 0) & page.get(pair[1], 0) & ~bit:  # (else no passage holds it: this one does not)
                if pair not in seen:
                    seen[pair] = self._pair(*pair)
                if seen[pair] is not None:
                    return False
        return True

    def ranked(self, claim: str, *, limit: int = 5) -> list[PassageMatch]:
        """Up to `limit` passages sharing a term with `claim`, most relevant first (candidates for a judge)."""
        words = tokens(claim)
        if len(words) > _LONG_CLAIM:
            summed = self._long(claim, words)
            if summed is None:
                return []
            size, sums, counts = summed
            order = sorted(sums, key=lambda i: (-sums[i], i))[:limit]
            return [self._match(i, counts[i] / size) for i in order]
        found = self._claim(words, self._read(words))
        if found is None:
            return []
        found.surface.sort()
        every = 0
        for _, _, mask in found.terms:
            every |= mask
        sums: dict[int, float] = {}
        while every:
            bit = every & -every
            every ^= bit
            sums[bit.bit_length() - 1] = found.relevance(bit)
        order = sorted(sums, key=lambda i: (-sums[i], i))[:limit]
        return [self._match(i, found.count(1 << i) / found.size) for i in order]

    def _long_best(self, claim: str | frozenset[str], words: list[str] | None) -> PassageMatch | None:
        """`best` for a long claim (see `_LONG_CLAIM`): the highest sum, ties to the earliest passage."""
        summed = self._long(claim, words)
        if summed is None:
            return None
        size, sums, counts = summed
        i = max(sums, key=sums.__getitem__)  # (the first of the highest: the passages are in page order)
        return self._match(i, counts[i] / size)

    def _long(
        self, claim: str | frozenset[str], words: list[str] | None
    ) -> tuple[int, dict[int, float], dict[int, int]] | None:
        """A long claim's term count, and the relevance and terms held of each passage sharing a term with it.

        No passage is skipped: a passage holding every feature has the highest sum anyway (see `best`). The claim's
        words are read as for any claim; its pairs are met with each passage's in one pass (nothing looked up pair by
        pair, nothing indexed in full). `None` if no passage shares a term.
        """
        singles: dict[str, tuple[str, float]] = {}  # the claim's words some passage holds: their feature, by word
        pairs: frozenset[tuple[str, str]] = frozenset()
        if words is None:
            terms = cast('frozenset[str]', claim)
            self._complete(terms)
            on_page = self._enter(terms)
            shared = {on_page[t] for t in terms if t in on_page}
            size = len(terms)
        else:
            found = self._read(words)
            named: set[str | None] = set(map(_TERM, found))
            named.discard(None)
            size = len(named)
            on_page_terms: set[_Term | None] = set(map(_ON_PAGE, found))
            on_page_terms.discard(None)
            shared = cast('set[_Term]', on_page_terms)
            for name, weight, _, _ in filter(None, map(_SURFACE, found)):
                singles[name[1:]] = (name, weight)
            pairs = frozenset(zip(words, words[1:], strict=False))
        if not shared:
            return None
        return size, *self._sums({term: weight for term, weight, _ in shared}, singles, pairs)

    def _sums(
        self, weights: dict[str, float], singles: dict[str, tuple[str, float]], pairs: frozenset[tuple[str, str]]
    ) -> tuple[dict[int, float], dict[int, int]]:
        """The relevance and the number of claim terms of each passage holding a claim term, in page order.

        Two passes over the passages' words, each meeting a passage's terms, words and pairs with the claim's in C: the
        first counts the passages holding each of the claim's pairs (its weight), the second sums what each passage
        holds in the order `_Claim.relevance` sums it (terms, then surface features, each by name), so each sum is the
        same to the last bit. The work is the page's words plus the claim's.
        """
        # (A frozenset's `intersection` reads only its argument, a passage's words here; `keys() &` copies the keys.)
        claim_terms, claim_words = frozenset(weights), frozenset(singles)
        held_pairs = [pairs.intersection(zip(words, words[1:], strict=False)) for words in self._tokens]
        passages_holding: Counter[tuple[str, str]] = Counter()
        for found in held_pairs:
            passages_holding.update(found)
        idf = self._idf
        pair_features = {pair: (f'{pair[0]} {pair[1]}', idf[df]) for pair, df in passages_holding.items()}
        term_of = self._term_of.get
        sums: dict[int, float] = {}
        counts: dict[int, int] = {}
        for i, words in enumerate(self._tokens):
            held = claim_terms.intersection(map(term_of, words))
            if not held:
                continue
            relevance = 0.0
            for term in sorted(held):
                relevance += weights[term]
            surface = list(map(singles.__getitem__, claim_words.intersection(words)))
            surface += map(pair_features.__getitem__, held_pairs[i])
            surface.sort()  # by name, as `_Claim.search` sorts them
            for _, weight in surface:
                relevance += weight
            sums[i] = relevance
            counts[i] = len(held)
        return sums, counts

    def _match(self, i: int, score: float) -> PassageMatch:
        match = self._matches.get((i, score))  # (claims often get the same passage and score: a match is a value)
        if match is None:
            passage = self.passages[i]
            match = self._matches[i, score] = PassageMatch(passage=passage, score=score, position=passage.position)
        return match

    @property
    def terms(self) -> tuple[frozenset[str], ...]:
        """Each passage's terms (stems every word of the page; the index itself stems only what claims need)."""
        self._stem_all()
        out: list[set[str]] = [set() for _ in self.passages]
        for term, mask in self._term_masks.items():
            for i, found in enumerate(out):
                if mask >> i & 1:
                    found.add(term)
        return tuple(frozenset(t) for t in out)


def _word_masks(passages: list[list[str]]) -> dict[str, int]:
    """The passages holding each word (bit `i` for passage `i`), words in the order the page first has them."""
    words: dict[str, int] = {}
    get = words.get
    for i, found in enumerate(passages):
        bit = 1 << i
        for word in found:
            mask = get(word)
            words[word] = bit if mask is None else mask | bit  # (a word's first passage shares `bit`: `0 | bit` copies)
    return words


@dataclass
class _Claim:
    """What a claim shares with one page (see `PassageIndex._features`); passages are bits of the masks."""

    size: int
    """How many terms the claim has (on the page or not): the denominator of coverage."""
    terms: list[_Term]
    """The claim's terms found on the page, in the order of their names."""
    surface: list[_Feature]
    """The claim's surface words and pairs found on the page; sorted by name before any relevance is summed."""

    def search(self) -> int:
        """The passage of the highest relevance (ties to the earliest), summed in full only where it can still win.

        A passage holding a surface feature holds the term it implies, so each term, weighted with the features that
        imply it, bounds what a passage gains by holding it. Terms are visited from the highest bound down, and a
        passage is summed only while the bounds of the terms left could still reach the best sum so far (MaxScore).
        """
        surface = self.surface
        surface.sort()  # in the order of their names (unique), as the sums have always run
        bounds = {t: weight for t, weight, _ in self.terms}
        common = 0.0  # stop words alone: any passage may hold them
        for _, weight, _, term in surface:
            if term is None:
                common += weight
            else:
                bounds[term] += weight
        bounded = sorted(((bounds[t], mask) for t, _, mask in self.terms), reverse=True)
        # left[k]: the most a passage holding none of the terms before k can reach (summed from the end, in C).
        left = list(accumulate(reversed([bound for bound, _ in bounded]), initial=common))
        left.reverse()
        best, best_relevance = -1, -1.0
        floor = -1.0  # below this no sum reaches the best, whatever the rounding
        seen = 0
        for k, (_, mask) in enumerate(bounded):
            if left[k] < floor:
                break
            candidates = mask & ~seen
            seen |= mask
            while candidates:
                bit = candidates & -candidates
                candidates ^= bit
                if best >= 0 and _bound(bounded, k, bit, common) < floor:  # (the first passage is always summed)
                    continue
                relevance = self.relevance(bit)
                i = bit.bit_length() - 1
                if relevance > best_relevance or (relevance == best_relevance and i < best):
                    best, best_relevance = i, relevance
                    floor = relevance - 1e-9 * (1 + relevance)
        return best

    def relevance(self, bit: int) -> float:
        """The relevance of the passage of `bit`, summed in one order for every passage (`surface` sorted)."""
        relevance = 0.0
        for _, weight, mask in self.terms:
            if mask & bit:
                relevance += weight
        for _, weight, mask, _ in self.surface:
            if mask & bit:
                relevance += weight
        return relevance

    def count(self, bit: int) -> int:
        """How many of the claim's terms the passage of `bit` holds."""
        return sum(1 for _, _, mask in self.terms if mask & bit)


def _bound(bounded: list[tuple[float, int]], start: int, bit: int, common: float) -> float:
    """At least the relevance of the passage of `bit`, which holds none of the terms before `bounded[start]`."""
    bound = common
    for weight, mask in bounded[start:]:
        if mask & bit:
            bound += weight
    return bound


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
