"""Judges decide whether a page backs a claim.

The lexical judge is the default and needs no network;
`LLMJudge` asks a model (any Pydantic AI model) through the same `Judge` interface.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol, runtime_checkable

from pydantic_ai import Agent
from pydantic_ai.models import Model

from ._passages import Passage
from ._score import PassageIndex, PassageMatch

__all__ = ('Judge', 'Judgement', 'JudgeVerdict', 'LexicalJudge', 'LLMJudge', 'LLMVerdict')

JudgeVerdict = Literal['supported', 'weak', 'unsupported']


@dataclass(frozen=True)
class Judgement:
    """What a judge found for one claim on one page."""

    passage: Passage | None
    """The passage the judge relied on (`None` when nothing on the page relates to the claim)."""
    score: float | None
    """Lexical coverage of the claim by `passage` (0 to 1), `None` when there is no passage."""
    verdict: JudgeVerdict | None = None
    """The judge's own verdict; `None` lets `check_support` decide from `score` and its thresholds."""
    quote: str | None = None
    """The words of the passage the judge quoted as support, if it quoted any."""
    reason: str | None = None
    """Why, in a sentence, when the judge says."""


@runtime_checkable
class Judge(Protocol):
    """Decides how well the passages of a page back a claim."""

    @property
    def name(self) -> str:
        """Short name shown in reports (`'lexical'`, `'llm'`)."""
        ...

    async def judge(self, claim: str, page: PassageIndex) -> Judgement:
        """Judge `claim` against one page's passages (`page.passages`, indexed for lexical lookups)."""
        ...


@dataclass(frozen=True)
class LexicalJudge:
    """The default judge: the passage with the best claim-term coverage (`best_passage`), no network."""

    @property
    def name(self) -> str:
        """`'lexical'`."""
        return 'lexical'

    def judge_sync(self, claim: str, page: PassageIndex) -> Judgement:
        """Same as `judge`, without an event loop."""
        match = page.best(claim)
        if match is None:
            return Judgement(passage=None, score=None if not page.passages else 0.0)
        return Judgement(passage=match.passage, score=match.score)

    async def judge(self, claim: str, page: PassageIndex) -> Judgement:
        """The passage covering the most claim terms; the verdict is left to the thresholds."""
        return self.judge_sync(claim, page)


@dataclass(frozen=True)
class LLMVerdict:
    """The structured answer the `LLMJudge` asks its model for."""

    verdict: JudgeVerdict
    """`supported`: the passage states the claim; `weak`: it states part of it; `unsupported`: none does."""
    passage_number: int | None
    """The number (as shown in the prompt) of the passage that supports the claim, if any."""
    quote: str
    """The exact words of that passage that support the claim (empty when unsupported)."""
    reason: str
    """One sentence: why."""


_INSTRUCTIONS = """\
You check whether a web page supports a claim. You get the claim and numbered passages from the page.
Answer with the verdict, the number of the passage that supports the claim, and a quote copied exactly from
that passage. Say "supported" only if the passage states the claim, "weak" if it states only part of it, and
"unsupported" otherwise. Use only the passages; do not use what you know."""


def _fold(text: str) -> str:
    return ' '.join(text.split()).casefold()


@dataclass
class LLMJudge:
    """A judge that asks a model, via a Pydantic AI `Agent` with structured output (`LLMVerdict`).

    The claim and up to `candidates` passages (the best lexical matches, or the page's first passages when
    none shares a word) are sent to the model: use it only where sending them there is acceptable. A quote
    that is not in the chosen passage is not trusted: the verdict becomes `'unsupported'` with a reason.
    """

    model: Model | str
    """The model to ask, as for `Agent(model)`."""
    candidates: int = 5
    """How many passages the model sees (default 5)."""
    instructions: str = _INSTRUCTIONS
    """Instructions for the model (default: a strict, quote-backed support check)."""
    _agent: Agent[None, LLMVerdict] | None = field(default=None, init=False, repr=False)

    @property
    def name(self) -> str:
        """`'llm'`."""
        return 'llm'

    def _get_agent(self) -> Agent[None, LLMVerdict]:
        if self._agent is None:
            self._agent = Agent(self.model, output_type=LLMVerdict, instructions=self.instructions)
        return self._agent

    async def judge(self, claim: str, page: PassageIndex) -> Judgement:
        """Ask the model which of the best candidate passages supports `claim`, with a quote."""
        ranked: Sequence[PassageMatch] = page.ranked(claim, limit=self.candidates)
        shown = [m.passage for m in ranked] or list(page.passages[: self.candidates])
        if not shown:
            return Judgement(passage=None, score=None, verdict='unsupported', reason='the page has no passages')
        lines = [f'Claim: {claim}', '', 'Passages:']
        lines += [f'[{n}] {p.text}' for n, p in enumerate(shown, 1)]
        result = await self._get_agent().run('\n'.join(lines))
        out = result.output
        passage = (
            shown[out.passage_number - 1] if out.passage_number and 1 <= out.passage_number <= len(shown) else None
        )
        score = None
        if passage is not None:
            match = PassageIndex([passage], language=page.language).best(claim)
            score = match.score if match is not None else 0.0
        if out.verdict == 'unsupported':
            return Judgement(
                passage=passage, score=score, verdict='unsupported', quote=out.quote or None, reason=out.reason
            )
        if passage is None:
            return Judgement(
                passage=None,
                score=None,
                verdict='unsupported',
                quote=out.quote or None,
                reason=f'the model said {out.verdict!r} but named no passage shown to it ({out.passage_number!r})',
            )
        if not out.quote.strip() or _fold(out.quote) not in _fold(passage.text):
            return Judgement(
                passage=passage,
                score=score,
                verdict='unsupported',
                quote=out.quote or None,
                reason=f'the model said {out.verdict!r} but its quote is not in the passage',
            )
        return Judgement(passage=passage, score=score, verdict=out.verdict, quote=out.quote, reason=out.reason)
