"""Terms for the lexical support check: words, lower-cased, stop words removed, Snowball-stemmed.

Language handling is per word and by script: a word written in Cyrillic is stemmed with the Russian
stemmer, any other word with the Latin-script language (English unless another Snowball language is
given). Claim and page therefore always agree on a word's stem even when one of them mixes languages,
which a single per-text language guess could not promise.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Collection, Iterable, Sequence
from functools import cache, lru_cache
from itertools import compress, filterfalse
from operator import itemgetter, ne
from typing import Protocol, cast

import snowballstemmer  # pyright: ignore[reportMissingTypeStubs]
from pydantic_ai.exceptions import UserError

from .._checks import shown

__all__ = (
    'STOP_WORDS',
    'StemCache',
    'detect_language',
    'latin_algorithm',
    'resolve_language',
    'term_key',
    'term_map',
    'term_of',
    'terms',
    'terms_of_words',
    'tokens',
)

# Words are runs of letters and digits; apostrophes and hyphens split words (`mother's` -> `mother`, `s`).
# Numbers are one word each (see `_number`): `1,000` is `1000`; decimals and versions stay whole (`3.5`, `1.2.3`).
_WORD = re.compile(r'\d{1,3}(?:,\d{3})+(?:\.\d+)?(?!\d)|\d+(?:\.\d+)+|[^\W_]+')
# Without a comma or a point between two digits, `_WORD` finds exactly these runs, faster; and without a word that
# starts with `0` and another letter or digit, `_number` changes none of them. (Each check starts with a literal.)
_RUN = re.compile(r'[^\W_]+')
_PLAIN_RUN = re.compile(r'\w+')  # the same runs when there is no `_`, found faster
_NUMBER_COMMA = re.compile(r',(?<=\d,)\d')
_NUMBER_POINT = re.compile(r'\.(?<=\d\.)\d')
_LEADING_ZERO = re.compile(r'0(?<![^\W_]0)[^\W_]')  # not `\d` after the `0`: `0²` is all digits to `str.isdigit`
# An ASCII text's runs are found faster by turning every other ASCII character into a space and splitting. Common
# typographic punctuation (none of it a letter or digit) is turned into spaces first, so most English texts are ASCII.
# (As bytes: `bytes.translate` reads a 256-byte table, twice as fast as `str.translate` on ASCII text.)
_SPACES = bytes(c if chr(c).isalnum() else 32 for c in range(128)) + b' ' * 128  # a constant
_MARKS = '’‘“”—–…«»\xa0•·'


def _words(text: str) -> list[str]:
    return text.split()


_EN_STOP = frozenset(
    _words(
        """
        a about above after again against all also am an and any are aren as at be because been before being below
        between both but by can cannot could couldn did didn do does doesn doing don down during each few for from
        further had hadn has hasn have haven having he her here hers herself him himself his how however i if in
        into is isn it its itself just let ll me more most mustn my myself no nor not now of off on once only or
        other our ours ourselves out over own re said same say says she should shouldn so some such than that the
        their theirs them themselves then there these they this those through to too under until up upon us ve
        very was wasn we were weren what when where which while who whom why will with won would wouldn you your
        yours yourself yourselves also via per may might must shall http https www com html
        """
    )
)

_RU_STOP = frozenset(
    _words(
        """
        а без более бы был была были было быть в вам вас весь во вот все всего всех вы где да даже для до его ее
        ей если есть еще же за здесь и из или им их к как ко когда кто ли либо мне может мы на над надо наш не
        него нее нет ни них но ну о об однако он она они оно от очень по под при с со так также такой там те тем
        то того тоже той только том ты у уже хотя чего чей чем что чтобы чье чья эта эти это этого этой этом я ее
        её ещё это который которая которое которые которых свой своя свои своих сам сама само себя себе между
        после перед через
        """
    )
)

STOP_WORDS: dict[str, frozenset[str]] = {'english': _EN_STOP, 'russian': _RU_STOP}
"""The shipped stop lists, by Snowball algorithm name (English and Russian; other languages have none)."""

_CODES = {'en': 'english', 'ru': 'russian'}


def resolve_language(language: str | None) -> str:
    """The Snowball algorithm for the Latin-script words of a text (`'english'` when `language` is `None`).

    Raises:
        UserError: if `language` is neither `'en'`, `'ru'` nor a Snowball algorithm name.
    """
    if language is None:
        return 'english'
    name = _CODES.get(language.lower(), language.lower())
    if name not in _algorithms():
        raise UserError(f'Unknown language {language!r}: use "en", "ru" or a Snowball algorithm name such as "german".')
    return name


@lru_cache(maxsize=1)
def _algorithms() -> frozenset[str]:
    names: list[str] = snowballstemmer.algorithms()  # pyright: ignore[reportUnknownMemberType]
    return frozenset(names)


_CYRILLIC = re.compile('[\u0400-\u04ff]')


def _is_cyrillic(word: str) -> bool:
    return _CYRILLIC.search(word) is not None


def detect_language(text: str) -> str:
    """`'ru'` when at least 30% of the letters of `text` are Cyrillic, otherwise `'en'`."""
    letters = 0
    cyrillic = 0
    for ch in text:
        if ch.isalpha():
            letters += 1
            if '\u0400' <= ch <= '\u04ff':
                cyrillic += 1
    return 'ru' if letters and cyrillic / letters >= 0.3 else 'en'


class _Stemmer(Protocol):
    def stemWord(self, word: str) -> str: ...

    def stemWords(self, words: list[str]) -> list[str]: ...


@cache
def _stemmer(algorithm: str) -> _Stemmer:
    """The Snowball stemmer for `algorithm` (PyStemmer's C implementation when installed), without a word cache.

    Stems are cached per page, by `PassageIndex`; PyStemmer's own cache would keep words for the life of the process,
    and filling it costs more than stemming (a word seen for the first time takes about three times as long).
    """
    stemmer = snowballstemmer.stemmer(algorithm)  # pyright: ignore[reportUnknownMemberType,reportUnknownVariableType]
    if hasattr(stemmer, 'maxCacheSize'):  # pyright: ignore[reportUnknownArgumentType]
        stemmer.maxCacheSize = 0  # pyright: ignore[reportUnknownMemberType,reportAttributeAccessIssue]
    return cast(_Stemmer, stemmer)


def term_key(word: str) -> str:
    """The first two letters of a lower-cased word or term, diacritics removed: a term always has its word's key.

    `PassageIndex` groups a page's words by key and stems only the groups a claim's words fall in.
    """
    head = word[:2]
    if head.isascii():
        return head
    if unicodedata.is_normalized('NFD', head) and not _MARK.search(head):
        return head  # nothing to fold (most Cyrillic words): what `_fold` would return, without building it
    # Decomposing is per character: the first two letters come from the first two characters, unless one of them
    # decomposes to marks alone.
    key = _fold(head)
    return key if len(key) >= 2 or len(word) <= 2 else _fold(word)[:2]


_MARK = re.compile(r'[^\w\s]')  # (a combining mark is neither: `_fold` drops exactly the marks)


def _fold(text: str) -> str:
    return ''.join(ch for ch in unicodedata.normalize('NFD', text) if not unicodedata.combining(ch))


def _term(word: str, latin: str) -> str | None:
    """The term for one lower-cased word, or `None` for a stop word or a lone letter.

    A stem that does not keep the word's `term_key` (Snowball's `lying` -> `lie`, a stem shorter than two letters)
    is not used: the word stands for itself. So a term is found among the words of its own key.
    """
    if len(word) < 2 and not word.isdigit():
        return None
    algorithm = latin if word.isascii() or not _is_cyrillic(word) else 'russian'
    if algorithm == 'russian':
        word = word.replace('ё', 'е')
    if word in STOP_WORDS.get(algorithm, frozenset()):
        return None
    stem = _stemmer(algorithm).stemWord(word)
    return stem if len(stem) >= 2 and term_key(stem) == term_key(word) else word


class StemCache:
    """Stems shared by the `PassageIndex`es of many pages, so that a word is stemmed once for all of them.

    Pages share most of their words (the 30 real pages of the benchmarks have half as many distinct words as they have
    words page by page), and stemming is most of the cost of indexing a page in full. `check_support` keeps one for
    the pages of a check, and an audit one per partition worker. It holds a table per Snowball algorithm, so the
    indexes of pages in different languages may share it. It is a plain cache: it changes no result, and it is
    emptied when it reaches `limit` words (memory stays bounded however many pages and claims it serves). Use one per
    thread, as an audit does.
    """

    __slots__ = ('_tables', 'limit')

    def __init__(self, limit: int = 100_000) -> None:
        """An empty cache of at most about `limit` words.

        Raises:
            UserError: `limit` is not a positive int.
        """
        if isinstance(limit, bool) or not isinstance(cast(object, limit), int) or limit < 1:
            raise UserError(f'StemCache: `limit` must be a positive int, got {shown(limit)}.')
        self.limit = limit
        self._tables: dict[str, dict[str, str | None]] = {}

    def __len__(self) -> int:
        """The words it holds, all tables together."""
        return sum(map(len, self._tables.values()))

    def terms(self, words: Sequence[str], latin: str) -> list[str | None]:
        """The term of each of `words` (distinct), in their order, as `term_map(words, latin)` gives them.

        Only the words it does not hold yet are stemmed (and kept).
        """
        table = self._tables.setdefault(latin, {})
        missing = set(words).difference(table)
        if missing:
            if len(self) + len(missing) > self.limit:
                self._tables = {latin: table}
                table.clear()
                missing = set(words)
            table.update(term_map(missing, latin))
        return list(map(table.__getitem__, words))


def term_map(words: Collection[str], latin: str) -> dict[str, str | None]:
    """`term_of` of each of `words` (distinct), stemmed in one call per algorithm (one C call with PyStemmer).

    Callers keep the result (a page's index, or a `StemCache` for many pages): nothing is cached here.
    """
    out: dict[str, str | None] = dict.fromkeys(words)
    if ''.join(words).isascii():
        _ascii_terms(out, words, latin)
        return out
    _ascii_terms(out, list(filter(str.isascii, words)), latin)  # (filtered in C)
    others = list(filterfalse(str.isascii, words))
    cyrillic = [w for w in others if _CYRILLIC.search(w)]
    _other_terms(out, [w for w in others if not _CYRILLIC.search(w)], latin)
    _other_terms(out, cyrillic, 'russian')
    return out


_HEAD = itemgetter(slice(0, 2))  # a word's first two letters, read in C


_LONE = frozenset(chr(c) for c in range(128)) - frozenset('0123456789')
"""The one-character ASCII words that have no term (a lone digit is its own)."""


def _ascii_terms(out: dict[str, str | None], words: Collection[str], latin: str) -> None:
    # (In C, reading only the words: `difference` with a set reads all of that set; the order is any.)
    plain = list(filterfalse(_LONE.__contains__, filterfalse(STOP_WORDS.get(latin, _LONE).__contains__, set(words))))
    stems = _stemmer(latin).stemWords(plain)
    out.update(zip(plain, stems, strict=True))
    # A stem that does not keep its word's first two letters (an ASCII word's key is its head) is not used; compared
    # in C, as most stems keep them. (A stem shorter than two letters never equals a two-letter head; a lone digit is
    # its own stem.)
    for word in compress(plain, map(ne, map(_HEAD, stems), map(_HEAD, plain))):
        out[word] = word


def _other_terms(out: dict[str, str | None], words: list[str], algorithm: str) -> None:
    """`_term` of words that are not ASCII, all stemmed with `algorithm`."""
    stop = STOP_WORDS.get(algorithm, frozenset())
    spelled = [w.replace('ё', 'е') for w in words] if algorithm == 'russian' else words
    kept = [(w, s) for w, s in zip(words, spelled, strict=True) if s not in stop and (len(s) > 1 or s.isdigit())]
    spellings = [s for _, s in kept]
    stems = _stemmer(algorithm).stemWords(spellings)
    out.update(zip([w for w, _ in kept], stems, strict=True))
    # A key is a function of the first two letters (each folds to one letter or more): a stem that keeps its word's
    # first two letters keeps its key. Only the others are looked at, as in `_ascii_terms`.
    for (word, spelling), stem in compress(
        zip(kept, stems, strict=True), map(ne, map(_HEAD, stems), map(_HEAD, spellings))
    ):
        out[word] = stem if len(stem) >= 2 and term_key(stem) == term_key(spelling) else spelling


def tokens(text: str) -> list[str]:
    """The lower-cased words of `text`, in order (letters and digits; punctuation splits words, not numbers)."""
    lowered = text.lower()
    if _NUMBER_COMMA.search(lowered) is None and _NUMBER_POINT.search(lowered) is None:
        words = _runs(lowered)
        if _LEADING_ZERO.search(lowered) is None:
            return words
    else:
        words = _WORD.findall(lowered)
    return [_number(w) if w[0].isdigit() else w for w in words]


def _runs(lowered: str) -> list[str]:
    """The runs of letters and digits of a lower-cased text (`_RUN`)."""
    if not lowered.isascii():
        for mark in _MARKS:
            if mark in lowered:
                lowered = lowered.replace(mark, ' ')
        if not lowered.isascii():
            return (_RUN if '_' in lowered else _PLAIN_RUN).findall(lowered)
    return lowered.encode('ascii').translate(_SPACES).decode('ascii').split()


def _number(word: str) -> str:
    """`1,000` -> `1000`, `05` -> `5` (a date's `03-05` meets `March 5`); decimals and versions unchanged."""
    word = word.replace(',', '')
    return (word.lstrip('0') or '0') if word.isdigit() else word


def terms(text: str, *, language: str | None = None) -> frozenset[str]:
    """The set of stemmed, non-stop-word terms of `text`.

    Args:
        text: Any text.
        language: The language of the Latin-script words (`'en'`, `'ru'` or a Snowball algorithm name);
            Cyrillic words are always stemmed as Russian. `None` means English.
    """
    return terms_of_words(tokens(text), language=language)


def terms_of_words(words: Iterable[str], *, language: str | None = None) -> frozenset[str]:
    """`terms` of text already split by `tokens` (for callers that need the words too)."""
    out = set(term_map(set(words), latin_algorithm(language)).values())
    out.discard(None)
    return frozenset(cast('set[str]', out))


def latin_algorithm(language: str | None) -> str:
    """The Snowball algorithm for the Latin-script words of a text in `language` (Cyrillic words are always Russian)."""
    latin = resolve_language(language)
    return 'english' if latin == 'russian' else latin


def term_of(word: str, latin: str) -> str | None:
    """The term of one word from `tokens` (`latin` from `latin_algorithm`), `None` for stop words and lone letters."""
    return _term(word, latin)
