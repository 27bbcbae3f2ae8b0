"""Terms for the lexical support check: words, lower-cased, stop words removed, Snowball-stemmed.

Language handling is per word and by script: a word written in Cyrillic is stemmed with the Russian
stemmer, any other word with the Latin-script language (English unless another Snowball language is
given). Claim and page therefore always agree on a word's stem even when one of them mixes languages,
which a single per-text language guess could not promise.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from functools import cache, lru_cache

import snowballstemmer  # pyright: ignore[reportMissingTypeStubs]
from pydantic_ai.exceptions import UserError

__all__ = ('STOP_WORDS', 'detect_language', 'resolve_language', 'terms', 'tokens')

# Words are runs of letters and digits; apostrophes and hyphens split words (`mother's` -> `mother`, `s`).
_WORD = re.compile(r'[^\W_]+')


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


def _is_cyrillic(word: str) -> bool:
    return any('\u0400' <= ch <= '\u04ff' for ch in word)


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


@cache
def _stemmer(algorithm: str) -> Callable[[str], str]:
    stemmer = snowballstemmer.stemmer(algorithm)  # pyright: ignore[reportUnknownMemberType,reportUnknownVariableType]
    return stemmer.stemWord  # pyright: ignore[reportUnknownMemberType,reportUnknownVariableType]


@lru_cache(maxsize=200_000)
def _term(word: str, latin: str) -> str | None:
    """The term for one lower-cased word, or `None` for a stop word or a lone letter (cached: stemming is slow)."""
    if len(word) < 2 and not word.isdigit():
        return None
    algorithm = 'russian' if _is_cyrillic(word) else latin
    if algorithm == 'russian':
        word = word.replace('ё', 'е')
    if word in STOP_WORDS.get(algorithm, frozenset()):
        return None
    return _stemmer(algorithm)(word)


def tokens(text: str) -> list[str]:
    """The lower-cased words of `text`, in order (letters and digits; punctuation splits words)."""
    return _WORD.findall(text.lower())


def terms(text: str, *, language: str | None = None) -> frozenset[str]:
    """The set of stemmed, non-stop-word terms of `text`.

    Args:
        text: Any text.
        language: The language of the Latin-script words (`'en'`, `'ru'` or a Snowball algorithm name);
            Cyrillic words are always stemmed as Russian. `None` means English.
    """
    latin = resolve_language(language)
    if latin == 'russian':
        latin = 'english'
    out: set[str] = set()
    for word in _WORD.findall(text.lower()):
        term = _term(word, latin)
        if term is not None:
            out.add(term)
    return frozenset(out)
