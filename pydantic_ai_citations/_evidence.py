"""Evidence as fields: the application's own citation protocol for structured output, checked against the run.

With tool, native or prompted output, Pydantic AI does not ask providers for citations (they live on text only).
An application that needs structured output *and* grounding can ask the model to name its sources in the output
itself: put `Claim` / `Evidence` in the output type and add `VerifyEvidence()` (or `verify_evidence` as an output
validator). Every `source_id` is checked against the sources this run actually retrieved, and every `quote` against
the text of the sources it names. This is the application's protocol, checked by the application: it is never
presented as provider citations (nothing here touches `TextPart.citations`).

Accepted source shapes (`retrieved_sources`):

- `ToolReturnPart.content` of function tools: a mapping, Pydantic model or dataclass with an `id` or `source_id`
  field (a `str` or an `int`), or a list / tuple of them, at any depth (e.g. `{'results': [{'id': …}, …]}`); JSON text
  of the same shapes is parsed. Without `id`/`source_id`, a `url` field is the id. The text quotes are checked against
  is every string among `text`, `content`, `body`, `snippet`, `excerpt`, `page_content`, `quote`, `title`.
- `NativeToolReturnPart.content` (provider web search, fetch…): the same shapes; in practice results carry a `url`.
- `TextPart.citations` on responses: a web source's `url`, a document source's `document_id`, with its excerpts.

Only messages of this run count (messages whose `run_id` is another run's are skipped).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import unicodedata
from collections.abc import Mapping, Sequence
from dataclasses import KW_ONLY, dataclass, field
from typing import TYPE_CHECKING, Literal, TypeVar, cast

import anyio
from pydantic import BaseModel, Field
from pydantic_ai import Agent
from pydantic_ai.capabilities import AbstractCapability, Citations
from pydantic_ai.exceptions import AgentRunError, ModelRetry, UserError
from pydantic_ai.messages import (
    BinaryContent,
    DocumentCitationSource,
    DocumentUrl,
    ModelMessage,
    ModelRequest,
    ModelResponse,
    NativeToolReturnPart,
    TextPart,
    ToolReturnPart,
    UserContent,
    WebCitationSource,
)
from pydantic_ai.models import Model
from pydantic_ai.settings import ModelSettings
from pydantic_ai.tools import RunContext

from ._answer import CitedAnswer, last_response
from ._checks import require, require_at_least, require_base_fields, require_bools, require_mapping, shown
from ._json_markup import FieldPath, format_path
from ._ledger import record_problems
from ._problems import CitationProblem, shorten

if TYPE_CHECKING:
    from pydantic_ai.output import OutputContext

__all__ = (
    'Claim',
    'ClaimVerification',
    'Verdict',
    'Evidence',
    'EvidenceFailure',
    'RetrievedSource',
    'UnverifiedEvidenceError',
    'VerifyEvidence',
    'check_evidence',
    'normalize_quote',
    'retrieved_sources',
    'verify_claims',
    'verify_claims_sync',
    'verify_evidence',
)

_ID_KEYS = ('id', 'source_id')
_TEXT_KEYS = ('text', 'content', 'body', 'snippet', 'excerpt', 'page_content', 'quote', 'title')


class Claim(BaseModel):
    """A claim and the retrieved sources it rests on. Put it in your output type; `VerifyEvidence` checks it."""

    text: str = Field(description='The claim, as one self-contained statement.')
    """The claim."""
    source_ids: list[str] = Field(
        description='Ids of the retrieved sources (from tool results in this conversation) that support the claim.'
    )
    """Ids of the sources that support the claim; each must be a source retrieved in this run."""
    quote: str | None = Field(
        default=None,
        description='Optional: a short passage copied word for word from one of the cited sources that supports the claim.',
    )
    """A verbatim passage from one of the cited sources (checked whitespace- and quote-insensitively)."""


class Evidence(BaseModel):
    """One source backing a statement, with an optional verbatim quote. Put it in your output type."""

    source_id: str = Field(description='Id of a retrieved source (from tool results in this conversation).')
    """Id of a source retrieved in this run."""
    quote: str | None = Field(
        default=None, description='Optional: a short passage copied word for word from that source.'
    )
    """A verbatim passage from that source (checked whitespace- and quote-insensitively)."""


@dataclass(frozen=True)
class RetrievedSource:
    """A source the run retrieved, as far as the evidence check is concerned."""

    id: str
    """The id the model must use (`id` / `source_id` field, URL, or document id)."""
    origin: Literal['tool_return', 'native_tool_return', 'text_citation', 'extra']
    """Where it was found."""
    _: KW_ONLY
    texts: tuple[str, ...] = ()
    """Texts quotes are checked against (several when several results share the id)."""
    tool_name: str | None = None
    """Tool that returned it, if any."""


@dataclass(frozen=True)
class EvidenceFailure:
    """One `source_id` or `quote` in the output that the run's sources do not back."""

    code: Literal['unknown_source_id', 'quote_not_found']
    """`'unknown_source_id'`: not a source retrieved in this run (or no source named at all);
    `'quote_not_found'`: the quote is not in the text of any source the claim names."""
    path: FieldPath
    """Where in the output: e.g. `('claims', 1, 'source_ids', 0)` or `('claims', 1, 'quote')`."""
    value: str
    """The offending id or quote."""
    message: str
    """A sentence the model can act on."""

    def to_problem(self) -> CitationProblem:
        """The failure as a `CitationProblem` (same code)."""
        return CitationProblem(self.code, self.message, detail=f'{format_path(self.path)}: {self.value}'[:200])


class UnverifiedEvidenceError(AgentRunError):
    """The model kept citing sources or quotes the run does not back, and output retries ran out.

    `failures` lists them (ids, quotes, fields); the message names them too.
    """

    def __init__(self, message: str, failures: Sequence[EvidenceFailure] = ()):
        super().__init__(message)
        self.failures = list(failures)


# --- sources ----------------------------------------------------------------------------------------------------------


_QUOTES = str.maketrans(
    {
        '\u2018': "'",
        '\u2019': "'",
        '\u201a': "'",
        '\u201b': "'",
        '\u2032': "'",
        '\u201c': '"',
        '\u201d': '"',
        '\u201e': '"',
        '\u201f': '"',
        '\u2033': '"',
        '\u00ab': '"',
        '\u00bb': '"',
    }
)


def normalize_quote(text: str) -> str:
    """Normalise text for quote matching.

    NFC, curly quotes → straight, every run of whitespace (NBSP included) → one space, trimmed. Case and everything
    else are kept: matching is case-sensitive.
    """
    return ' '.join(unicodedata.normalize('NFC', text).translate(_QUOTES).split())


class _Collector:
    def __init__(self) -> None:
        self.texts: dict[str, dict[str, None]] = {}  # each source's texts, each once, in order (a dict: linear)
        self.origin: dict[
            str, tuple[Literal['tool_return', 'native_tool_return', 'text_citation', 'extra'], str | None]
        ] = {}

    def add(
        self,
        source_id: str,
        texts: Sequence[str],
        origin: Literal['tool_return', 'native_tool_return', 'text_citation', 'extra'],
        tool_name: str | None,
    ) -> None:
        known = self.texts.setdefault(source_id, {})
        for text in texts:
            if text:
                known[text] = None
        self.origin.setdefault(source_id, (origin, tool_name))

    def walk(self, value: object, origin: Literal['tool_return', 'native_tool_return'], tool_name: str | None) -> None:
        """Collect the sources in a tool's return, at any depth, in the order of a depth-first read.

        The walk keeps its own stack (no recursion limit) and visits each container once (a structure that holds
        itself ends too). A str return is read as JSON when it looks like it; JSON too deep to parse names no source.
        """
        todo: list[tuple[object, bool]] = [(value, True)]  # (value, whether a str may be the return as JSON)
        seen: dict[int, object] = {}  # containers visited (kept alive, so an id is not reused)
        while todo:
            item, top = todo.pop()
            item = _plain(item)
            if isinstance(item, str):
                stripped = item.strip()
                if top and stripped[:1] in ('{', '['):
                    with contextlib.suppress(ValueError, RecursionError):
                        todo.append((json.loads(stripped), False))
                continue
            if not isinstance(item, (list, tuple, Mapping)):
                continue
            key = id(cast(object, item))
            if key in seen:
                continue
            seen[key] = item
            if isinstance(item, (list, tuple)):
                items = cast('Sequence[object]', item)
                todo.extend((child, False) for child in reversed(items))
                continue
            mapping = cast('Mapping[object, object]', item)
            source_id = _source_id(mapping)
            if source_id is not None:
                texts = [t for k in _TEXT_KEYS if isinstance(t := mapping.get(k), str)]
                self.add(source_id, texts, origin, tool_name)
            todo.extend(
                (child, False)
                for key, child in reversed(list(mapping.items()))
                if not (key in _TEXT_KEYS and isinstance(child, str))
            )

    def result(self) -> dict[str, RetrievedSource]:
        return {
            source_id: RetrievedSource(
                source_id, self.origin[source_id][0], texts=tuple(texts), tool_name=self.origin[source_id][1]
            )
            for source_id, texts in self.texts.items()
        }


def _plain(value: object) -> object:
    if isinstance(value, BaseModel):
        return value.model_dump(mode='python')
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
    return value


def _source_id(mapping: Mapping[object, object]) -> str | None:
    for key in _ID_KEYS:
        candidate = mapping.get(key)
        if isinstance(candidate, bool):
            continue
        if isinstance(candidate, str) and candidate:
            return candidate
        if isinstance(candidate, int):
            return str(candidate)
    url = mapping.get('url')
    return url if isinstance(url, str) and url else None


def retrieved_sources(
    messages: Sequence[ModelMessage], *, run_id: str | None = None, extra: Mapping[str, str] | None = None
) -> dict[str, RetrievedSource]:
    """The sources retrieved in a run, by id (see the module docstring for the accepted shapes).

    Args:
        messages: The messages to read (`ctx.messages` during a run, `result.all_messages()` after).
        run_id: Only read messages of this run (messages without a `run_id` are read too).
        extra: Sources the application vouches for itself, id → text (e.g. documents put in the prompt).
    """
    collector = _Collector()
    for message in messages:
        if run_id is not None and message.run_id is not None and message.run_id != run_id:
            continue
        if isinstance(message, ModelRequest):
            for part in message.parts:
                if isinstance(part, ToolReturnPart):
                    collector.walk(cast(object, part.content), 'tool_return', part.tool_name)
        elif isinstance(message, ModelResponse):  # pyright: ignore[reportUnnecessaryIsInstance]
            for part in message.parts:
                if isinstance(part, NativeToolReturnPart):
                    collector.walk(cast(object, part.content), 'native_tool_return', part.tool_name)
                elif isinstance(part, TextPart) and part.citations:
                    for citation in part.citations:
                        for source in citation.sources:
                            if isinstance(source, WebCitationSource):
                                collector.add(source.url, source.excerpts, 'text_citation', None)
                            elif isinstance(source, DocumentCitationSource) and source.document_id:  # pyright: ignore[reportUnnecessaryIsInstance]
                                collector.add(source.document_id, source.excerpts, 'text_citation', None)
    for source_id, text in (extra or {}).items():
        collector.add(source_id, [text], 'extra', None)
    return collector.result()


# --- checking ---------------------------------------------------------------------------------------------------------


def check_evidence(
    output: object, sources: Mapping[str, RetrievedSource], *, check_quotes: bool = True, require_sources: bool = True
) -> list[EvidenceFailure]:
    """Check every `Claim` and `Evidence` found anywhere in `output` against `sources`.

    Args:
        output: The validated output (a Pydantic model, dataclass, list, dict… holding `Claim`/`Evidence` at any depth).
        sources: The run's sources, from `retrieved_sources`.
        check_quotes: Check quotes against the sources' text (default `True`).
        require_sources: A `Claim` with no `source_ids` fails (default `True`).
    """
    failures: list[EvidenceFailure] = []
    _check(output, sources, failures, check_quotes, require_sources)
    return failures


_Path = tuple['_Path', str | int] | None
"""Where a value is in the output: its parent's path and its own key (`None` for the output itself)."""


def _field_path(path: _Path) -> FieldPath:
    keys: list[str | int] = []
    while path is not None:
        path, key = path
        keys.append(key)
    return tuple(reversed(keys))


def _check(
    output: object,
    sources: Mapping[str, RetrievedSource],
    failures: list[EvidenceFailure],
    check_quotes: bool,
    require_sources: bool,
) -> None:
    """Check every `Claim` and `Evidence` in `output`, at any depth, in the order of a depth-first read.

    The walk keeps its own stack (no recursion limit) and visits each container once; paths are linked, and made
    into a `FieldPath` only for what is checked.
    """
    todo: list[tuple[object, _Path]] = [(output, None)]
    seen: dict[int, object] = {}
    while todo:
        value, path = todo.pop()
        if isinstance(value, (Claim, Evidence)):
            _check_one(value, _field_path(path), sources, failures, check_quotes, require_sources)
            continue
        children = _children(value)
        if children is None or id(value) in seen:
            continue
        seen[id(value)] = value
        todo.extend((child, (path, key)) for key, child in reversed(children))


def _children(value: object) -> list[tuple[str | int, object]] | None:
    """The fields or items of a model, dataclass, list, tuple or mapping (`None` for anything else)."""
    if isinstance(value, BaseModel):
        return [(name, getattr(value, name, None)) for name in type(value).model_fields]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return [(f.name, getattr(value, f.name)) for f in dataclasses.fields(value)]
    if isinstance(value, (list, tuple)):
        return list(enumerate(cast('Sequence[object]', value)))
    if isinstance(value, Mapping):
        items = cast('Mapping[object, object]', value).items()
        return [(key if isinstance(key, (str, int)) else str(key), item) for key, item in items]
    return None


def _check_one(
    value: Claim | Evidence,
    path: FieldPath,
    sources: Mapping[str, RetrievedSource],
    failures: list[EvidenceFailure],
    check_quotes: bool,
    require_sources: bool,
) -> None:
    if isinstance(value, Claim):
        if require_sources and not value.source_ids:
            failures.append(
                EvidenceFailure(
                    'unknown_source_id',
                    (*path, 'source_ids'),
                    '',
                    f'{format_path((*path, "source_ids"))}: the claim {shorten(value.text, 120)!r} names no source.',
                )
            )
        known = _check_ids([(i, (*path, 'source_ids', n)) for n, i in enumerate(value.source_ids)], sources, failures)
    else:
        known = _check_ids([(value.source_id, (*path, 'source_id'))], sources, failures)
    if check_quotes and value.quote is not None and known:
        _check_quote(value.quote, known, (*path, 'quote'), sources, failures)


def _check_ids(
    ids: list[tuple[str, FieldPath]], sources: Mapping[str, RetrievedSource], failures: list[EvidenceFailure]
) -> list[str]:
    known: list[str] = []
    for source_id, where in ids:
        if source_id in sources:
            known.append(source_id)
        else:
            failures.append(
                EvidenceFailure(
                    'unknown_source_id',
                    where,
                    source_id,
                    f'{format_path(where)}: {source_id!r} is not the id of a source retrieved in this conversation.',
                )
            )
    return known


def _check_quote(
    quote: str,
    ids: list[str],
    where: FieldPath,
    sources: Mapping[str, RetrievedSource],
    failures: list[EvidenceFailure],
) -> None:
    wanted = normalize_quote(quote)
    if not wanted:
        return
    for source_id in ids:
        if any(wanted in normalize_quote(text) for text in sources[source_id].texts):
            return
    named = ', '.join(repr(i) for i in ids)
    failures.append(
        EvidenceFailure(
            'quote_not_found',
            where,
            quote,
            f'{format_path(where)}: the quote {shorten(quote, 120)!r} does not appear word for word in {named}.',
        )
    )


def _retry_message(failures: Sequence[EvidenceFailure], sources: Mapping[str, RetrievedSource], max_ids: int) -> str:
    lines = ['The evidence in your output does not match the sources retrieved in this conversation:']
    lines += [f'- {f.message}' for f in failures]
    ids = list(sources)
    if ids:
        listed = ', '.join(repr(i) for i in ids[:max_ids]) + (
            f' (and {len(ids) - max_ids} more)' if len(ids) > max_ids else ''
        )
        lines.append(f'Valid source ids: {listed}.')
    else:
        lines.append('No sources were retrieved yet: call a tool to retrieve sources before citing them.')
    lines.append(
        'Cite only these ids, and copy quotes word for word from the source you cite (or leave the quote out).'
    )
    return '\n'.join(lines)


def _verify(
    ctx: RunContext[object],
    output: object,
    *,
    extra: Mapping[str, str] | None,
    check_quotes: bool,
    require_sources: bool,
    max_listed_ids: int,
) -> None:
    if ctx.partial_output:
        return
    sources = retrieved_sources(ctx.messages, run_id=ctx.run_id, extra=extra)
    failures = check_evidence(output, sources, check_quotes=check_quotes, require_sources=require_sources)
    if not failures:
        return
    if ctx.run_id is not None:
        record_problems(ctx, [f.to_problem() for f in failures])
    message = _retry_message(failures, sources, max_listed_ids)
    if ctx.retry >= ctx.max_retries:
        named = '; '.join(f.message for f in failures)
        raise UnverifiedEvidenceError(
            f"Evidence still not backed by the run's sources after {ctx.retry} retr{'y' if ctx.retry == 1 else 'ies'}: {named}",
            failures,
        )
    raise ModelRetry(message)


@dataclass
class VerifyEvidence(AbstractCapability[object]):
    """Checks `Claim` / `Evidence` fields in structured output against the sources retrieved in this run.

    Runs after output validation (`after_output_validate`). Unknown ids and quotes not found raise `ModelRetry` with
    a message listing the valid ids; once output retries run out, `UnverifiedEvidenceError` names them. Each failed
    attempt records `unknown_source_id` / `quote_not_found` problems for the run's `TrackCitations`. This is the application's
    own evidence protocol, not provider citations.
    """

    _: KW_ONLY
    check_quotes: bool = True
    """Check each `quote` against the text of the sources its claim names (default `True`)."""
    require_sources: bool = True
    """A `Claim` with an empty `source_ids` fails (default `True`)."""
    extra_sources: dict[str, str] = field(default_factory=dict[str, str])
    """Sources the application vouches for itself, id → text, e.g. documents put in the prompt (default none)."""
    max_listed_ids: int = 50
    """How many valid ids the retry message lists at most (default 50)."""

    def __post_init__(self) -> None:
        require_bools('VerifyEvidence', check_quotes=self.check_quotes, require_sources=self.require_sources)
        require_mapping('VerifyEvidence', 'extra_sources', self.extra_sources, str, str, 'a dict of source id to text')
        require('VerifyEvidence', 'max_listed_ids', self.max_listed_ids, int, 'an int')
        if self.max_listed_ids < 0:
            raise UserError(f'VerifyEvidence: `max_listed_ids` must not be negative, got {self.max_listed_ids!r}.')
        require_base_fields(self)

    async def after_output_validate(
        self,
        ctx: RunContext[object],
        *,
        output_context: OutputContext,
        output: object,
    ) -> object:
        _verify(
            ctx,
            output,
            extra=self.extra_sources,
            check_quotes=self.check_quotes,
            require_sources=self.require_sources,
            max_listed_ids=self.max_listed_ids,
        )
        return output


OutputT = TypeVar('OutputT')
DepsT = TypeVar('DepsT')


def verify_evidence(ctx: RunContext[DepsT], output: OutputT) -> OutputT:
    """The same check as `VerifyEvidence`, as an output validator: `agent.output_validator(verify_evidence)`."""
    _verify(
        cast('RunContext[object]', ctx),
        output,
        extra=None,
        check_quotes=True,
        require_sources=True,
        max_listed_ids=50,
    )
    return output


# --- two-step verification ------------------------------------------------------------------------------------------

Verdict = Literal['supported', 'not_supported', 'unclear']

_VERIFY_INSTRUCTIONS = (
    'You check one claim against the documents you are given, and nothing else. Start your reply with one line that '
    'is exactly SUPPORTED, NOT SUPPORTED or UNCLEAR. Then explain in a few sentences, relying only on the documents '
    'and citing the passages you rely on.'
)


@dataclass(frozen=True)
class ClaimVerification:
    """The result of checking one claim in a second, text-output, provider-cited step (`verify_claims`)."""

    claim: Claim
    """The claim checked."""
    verdict: Verdict
    """The model's verdict, read from the first line of its answer (`'unclear'` when it gave none)."""
    answer: CitedAnswer
    """The model's answer with the provider's citations."""
    _: KW_ONLY
    cited_document_ids: list[str] = field(default_factory=list[str])
    """Ids (keys of `documents`) of the documents the provider's citations point to."""
    problems: list[CitationProblem] = field(default_factory=list[CitationProblem])
    """Citations that could not be tied to a document, and the answer's own problems."""

    @property
    def supported(self) -> bool:
        """`True` when the verdict is `'supported'` and at least one provider citation backs it."""
        return self.verdict == 'supported' and bool(self.cited_document_ids)


def _document_content(doc_id: str, doc: str | BinaryContent | DocumentUrl) -> BinaryContent | DocumentUrl:
    if isinstance(doc, str):
        return BinaryContent(doc.encode('utf-8'), media_type='text/plain', identifier=doc_id)
    return doc


def _document_text(doc: str | BinaryContent | DocumentUrl) -> str | None:
    if isinstance(doc, str):
        return doc
    if isinstance(doc, BinaryContent) and doc.media_type == 'text/plain':
        try:
            return doc.data.decode('utf-8')
        except UnicodeDecodeError:
            return None
    return None


def _read_verdict(text: str) -> Verdict:
    first = next((line for line in text.splitlines() if line.strip()), '')
    word = first.strip().strip('*#_`>:. ').upper()
    if word.startswith(('NOT SUPPORTED', 'UNSUPPORTED', 'NOT_SUPPORTED')):
        return 'not_supported'
    if word.startswith('SUPPORTED'):
        return 'supported'
    return 'unclear'


def _cited_documents(
    messages: Sequence[ModelMessage],
    answer: CitedAnswer,
    ids: list[str],
    texts: dict[str, str | None],
    urls: dict[str, str],
) -> tuple[list[str], list[CitationProblem]]:
    cited: dict[str, None] = {}
    problems: list[CitationProblem] = []
    last = last_response(messages)
    by_index = False
    if last is not None:
        for part in last[1].parts:
            raw = (part.provider_details or {}).get('citations') if isinstance(part, TextPart) else None
            for item in cast('list[object]', raw) if isinstance(raw, list) else []:
                index = cast('dict[str, object]', item).get('document_index') if isinstance(item, dict) else None
                if isinstance(index, int) and not isinstance(index, bool) and 0 <= index < len(ids):
                    cited.setdefault(ids[index], None)  # Anthropic: position among the request's document blocks
                    by_index = True
    for source in answer.sources:
        if source.document_id in texts:
            cited.setdefault(source.document_id, None)
            continue
        if source.url is not None and source.url in urls:
            cited.setdefault(urls[source.url], None)
            continue
        if by_index:
            continue
        matches = {
            doc_id
            for excerpt in source.excerpts
            for doc_id, text in texts.items()
            if text is not None and normalize_quote(excerpt) and normalize_quote(excerpt) in normalize_quote(text)
        }
        if len(matches) == 1:
            cited.setdefault(matches.pop(), None)
        else:
            problems.append(
                CitationProblem(
                    'unmapped_provider_citation',
                    f'source {source.number} could not be tied to exactly one document '
                    f'({"several match" if matches else "no document matches"} its excerpts); not counted as evidence',
                    detail=shorten(source.title or source.url or (source.excerpts[0] if source.excerpts else ''), 200),
                )
            )
    return list(cited), problems


def _claim_list(claims: object) -> list[Claim]:
    """`verify_claims`' claims as a list: one string or `Claim` is one claim (never one claim per character)."""
    given = [claims] if isinstance(claims, (str, Claim)) else claims
    if isinstance(given, Sequence):
        items = cast('Sequence[object]', given)
        if all(isinstance(c, (str, Claim)) for c in items):
            return [c if isinstance(c, Claim) else Claim(text=cast(str, c), source_ids=[]) for c in items]
    raise UserError(f'verify_claims: `claims` must be a `Claim`, a string, or a list of them, got {shown(claims)}.')


async def verify_claims(
    claims: Sequence[Claim | str] | Claim | str,
    documents: Mapping[str, str | BinaryContent | DocumentUrl],
    *,
    model: Model | str,
    instructions: str | None = None,
    model_settings: ModelSettings | None = None,
    max_concurrency: int = 4,
) -> list[ClaimVerification]:
    """Check structured claims in a second, text-output step that the provider cites.

    For apps that need strict JSON *and* provider-backed citations: keep the structured output, then ask a model
    with `Citations()` and the documents in the prompt (`BinaryContent(text/plain)` / `DocumentUrl`, so Anthropic and
    Bedrock cite them) whether each claim holds. One run per claim, `max_concurrency` at a time.

    Args:
        claims: The claims to check (`Claim`, or plain strings); one `Claim` or string is one claim.
        documents: The documents, id → text (sent as `text/plain`), `BinaryContent` or `DocumentUrl`. Order matters:
            ids are tied back to provider citations by position (Anthropic `document_index`) or by excerpt.
        model: The model for the citing step (a `Model` or a model name).
        instructions: Replace the default instructions (which ask for a first line SUPPORTED / NOT SUPPORTED / UNCLEAR).
        model_settings: Extra model settings (e.g. `max_tokens`).
        max_concurrency: How many claims are checked at once.
    """
    require_at_least('verify_claims', 'max_concurrency', max_concurrency, 1, int, 'at least 1 (an int)')
    require_mapping(
        'verify_claims', 'documents', documents, str, (str, BinaryContent, DocumentUrl), 'a mapping of id to document'
    )
    if not documents:
        raise UserError('verify_claims(documents={}): give at least one document to check the claims against')
    items = _claim_list(claims)
    ids = list(documents)
    texts = {doc_id: _document_text(doc) for doc_id, doc in documents.items()}
    urls = {doc.url: doc_id for doc_id, doc in documents.items() if isinstance(doc, DocumentUrl)}
    content: list[UserContent] = ['Documents (each preceded by its id):']
    for doc_id, doc in documents.items():
        content += [f'Document id: {doc_id}', _document_content(doc_id, doc)]
    agent = Agent(model, instructions=instructions or _VERIFY_INSTRUCTIONS, capabilities=[Citations()])
    limiter = anyio.Semaphore(max_concurrency)
    results: list[ClaimVerification | None] = [None] * len(items)

    async def check(index: int, claim: Claim) -> None:
        async with limiter:
            result = await agent.run([*content, f'Claim: {claim.text}'], model_settings=model_settings)
        messages = result.all_messages()
        answer = CitedAnswer.from_messages(messages)
        cited, problems = _cited_documents(messages, answer, ids, texts, urls)
        results[index] = ClaimVerification(
            claim,
            _read_verdict(answer.text),
            answer,
            cited_document_ids=cited,
            problems=[*problems, *answer.problems],
        )

    async with anyio.create_task_group() as tg:
        for index, claim in enumerate(items):
            tg.start_soon(check, index, claim)
    return [r for r in results if r is not None]


def verify_claims_sync(
    claims: Sequence[Claim | str] | Claim | str,
    documents: Mapping[str, str | BinaryContent | DocumentUrl],
    *,
    model: Model | str,
    instructions: str | None = None,
    model_settings: ModelSettings | None = None,
    max_concurrency: int = 4,
) -> list[ClaimVerification]:
    """`verify_claims` for synchronous code (not from inside a running event loop)."""
    return anyio.run(
        functools.partial(
            verify_claims,
            claims,
            documents,
            model=model,
            instructions=instructions,
            model_settings=model_settings,
            max_concurrency=max_concurrency,
        )
    )
