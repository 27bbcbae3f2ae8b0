"""`audit_answers`: the support check over logged answers of any number, in partitions, streamed.

The source (a JSON Lines file, today's JSON list or single-answer file, a conversation store, any iterable of
`CitedAnswer`s) is read lazily and cut into partitions of `partition_size` answers. Each partition is checked on its
own -- here, or on a Dask cluster (`_dask.py`) -- against the same pages, with the split pages cached for the
partition, and comes back as two things: its rendered output (JSON Lines per citation, or the per-answer sections of
a JSON, Markdown or HTML report) and a `SupportTally` of raw counts. Outputs are written in input order as soon as
every earlier partition is written; tallies are merged exactly, so the summary equals the one `summarize` gives over
every check at once, whatever the partitioning and wherever the partitions ran. Reports whose summary comes first
(Markdown, HTML) keep their sections in a temporary file until the end. Nothing holds more than a few partitions.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import AsyncIterator, Callable, Generator, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal, Protocol, TextIO, cast

import anyio.from_thread
from pydantic import TypeAdapter, ValidationError
from pydantic_ai.exceptions import UserError

from .._answer import CitedAnswer
from ._audit import (
    HTML_FOOT,
    AuditedAnswer,
    html_answer,
    html_head,
    markdown_answer,
    markdown_head,
)
from ._claims import DEFAULT_MIN_CLAIM_WORDS
from ._decode import DEFAULT_MAX_BYTES
from ._passages import DEFAULT_MIN_PASSAGE_WORDS
from ._report import CitationCheck, Pages, SupportSummary, SupportTally, check_lexical, page_cache
from ._snapshots import PageSnapshot, SnapshotStore

if TYPE_CHECKING:
    from .._store import StoredAnswer

__all__ = (
    'AnswerSource',
    'AuditFormat',
    'AuditInputError',
    'AuditOptions',
    'AuditSummary',
    'AuditedCitation',
    'audit_answers',
    'audited_citation_ta',
)

AuditFormat = Literal['jsonl', 'json', 'markdown', 'html']
"""`'jsonl'`: one `AuditedCitation` per line, streamed; `'json'`: an `AuditReport` document; `'markdown'` / `'html'`:
the audit report as `audit_to_markdown` / `audit_to_html` write it."""


class StoredAnswers(Protocol):
    """A conversation store that lists its answers a batch at a time (`SQLiteConversationStore`)."""

    def iter_answers(self, *, batch_size: int = 500) -> AsyncIterator[StoredAnswer]:
        """Every stored answer, `batch_size` read at a time."""
        ...


AnswerSource = str | Path | StoredAnswers | Iterable[CitedAnswer]
"""Logged answers: a file (JSON Lines of `CitedAnswer`s, or one `CitedAnswer` or a JSON list of them), a conversation
store with `iter_answers` (`SQLiteConversationStore`), or any iterable of `CitedAnswer`s (read lazily)."""


class AuditInputError(UserError):
    """An answer of the source cannot be read (not JSON, not a `CitedAnswer`): names which one."""


@dataclass(frozen=True)
class AuditedCitation:
    """One line of the `'jsonl'` output: a citation check and the answer it belongs to."""

    answer: int
    """1-based position of the answer in the source."""
    answer_id: str | None
    """The store's entry id of the answer (`None` for files and iterables)."""
    provider_name: str | None
    """Who answered."""
    model_name: str | None
    """Which model answered."""
    check: CitationCheck
    """The check."""


audited_citation_ta: TypeAdapter[AuditedCitation] = TypeAdapter(AuditedCitation)
"""JSON round trip for the lines of the `'jsonl'` output."""
_audited_answer_ta: TypeAdapter[AuditedAnswer] = TypeAdapter(AuditedAnswer)
_support_summary_ta: TypeAdapter[SupportSummary] = TypeAdapter(SupportSummary)


@dataclass(frozen=True)
class AuditOptions:
    """How each answer is checked (see `check_support`); the same for every partition."""

    threshold: float = 0.6
    """Score at or above which a claim is `'supported'`."""
    weak_threshold: float = 0.3
    """Score at or above which it is `'weak'`."""
    language: str | None = None
    """Language of the Latin-script words; `None` means English."""
    min_passage_words: int = DEFAULT_MIN_PASSAGE_WORDS
    """Passages shorter than this many words are dropped when splitting pages."""
    min_claim_words: int = DEFAULT_MIN_CLAIM_WORDS
    """Claims shorter than this many words are not compared (verdict `'too_short'`)."""
    max_bytes: int = DEFAULT_MAX_BYTES
    """Pages are cut at this size before parsing."""

    def __post_init__(self) -> None:
        if not 0.0 < self.threshold <= 1.0:
            raise UserError(f'threshold must be in (0, 1], got {self.threshold!r}.')
        if not 0.0 <= self.weak_threshold <= self.threshold:
            raise UserError(f'weak_threshold must be in [0, threshold], got {self.weak_threshold!r}.')
        if self.min_passage_words < 1 or self.min_claim_words < 1:
            raise UserError('min_passage_words and min_claim_words must be at least 1.')


@dataclass(frozen=True)
class AuditSummary:
    """What `audit_answers` returns once every partition is written."""

    answers: int
    """Answers checked."""
    partitions: int
    """Partitions they were checked in."""
    summary: SupportSummary
    """Aggregates over every check (equal to `summarize` over all of them at once)."""
    threshold: float
    """Score at or above which a claim counted as supported."""


# --- reading the source lazily ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Item:
    where: str
    """Where the answer came from, for error messages (`'line 3'`, `'item 2'`, `'entry e-1'`)."""
    answer_id: str | None
    answer: CitedAnswer | str
    """Parsed, or its JSON text (parsed where the partition is checked)."""


_CHUNK = 1 << 20


def _skip_space(file: TextIO, buffer: str, pos: int) -> tuple[str, int]:
    """Past the whitespace at `pos`, reading on when the buffer runs out (`pos == len(buffer)` at the end)."""
    while True:
        while pos < len(buffer) and buffer[pos] in ' \t\r\n':
            pos += 1
        if pos < len(buffer):
            return buffer, pos
        more = file.read(_CHUNK)
        if not more:
            return buffer, pos
        buffer, pos = more, 0


def _list_items(file: TextIO, buffer: str) -> Iterator[_Item]:
    """The items of a JSON list, one at a time, as JSON text (`buffer` holds what was read after the `[`)."""
    decoder = json.JSONDecoder()
    pos = n = 0
    while True:
        buffer, pos = _skip_space(file, buffer, pos)
        if pos < len(buffer) and buffer[pos] == ']':
            return
        if n:
            if pos == len(buffer) or buffer[pos] != ',':
                raise ValueError(f'expected "," or "]" after item {n}')
            buffer, pos = _skip_space(file, buffer, pos + 1)
        if pos == len(buffer):
            raise ValueError('the JSON list is not closed')
        while True:
            try:
                _, end = decoder.raw_decode(buffer, pos)
                break
            except json.JSONDecodeError:  # the item goes on past the buffer, or is broken (then the file ends)
                more = file.read(max(_CHUNK, len(buffer) - pos))
                if not more:
                    raise
                buffer, pos = buffer[pos:] + more, 0
        n += 1
        yield _Item(f'item {n}', None, buffer[pos:end])
        pos = end


def _read_file(path: Path) -> Iterator[_Item]:
    with path.open(encoding='utf-8') as file:
        head = file.read(_CHUNK)
        stripped = head.lstrip()
        if stripped.startswith('['):
            yield from _list_items(file, stripped[1:])
            return
        text = head + file.readline()  # the first line, whole
        first, _, rest = text.partition('\n')
        try:
            json.loads(first)
        except json.JSONDecodeError:
            # Not JSON Lines: one answer spread over several lines (or not JSON at all, reported where parsed).
            yield _Item('the file', None, text + file.read())
            return
        for n, raw in enumerate(_lines(first + '\n' + rest, file), 1):
            if raw.strip():
                yield _Item(f'line {n}', None, raw)


def _file_items(path: Path) -> Iterator[_Item]:
    """JSON Lines (one `CitedAnswer` per line), a JSON list of them, or one `CitedAnswer` (indented or not)."""
    what = 'JSON Lines of CitedAnswers, a CitedAnswer or a list of them'
    try:
        yield from _read_file(path)
    except RecursionError as e:  # the JSON decoder's own depth limit: a hostile or broken file, not a crash
        raise AuditInputError(f'{str(path)!r} is nested too deeply to be {what}') from e
    except ValueError as e:  # JSON errors, and text that is not UTF-8
        raise AuditInputError(f'{str(path)!r} is not {what}: {e}') from e


def _lines(start: str, file: TextIO) -> Iterator[str]:
    pending = start
    while True:
        *complete, pending = pending.split('\n')
        yield from complete
        more = file.read(_CHUNK)
        if not more:
            if pending:
                yield pending
            return
        pending += more


def _store_items(store: StoredAnswers, batch_size: int) -> Iterator[_Item]:
    """The store's answers through its public async interface, from sync code (a portal thread runs the loop)."""
    with anyio.from_thread.start_blocking_portal() as portal:
        answers = store.iter_answers(batch_size=batch_size)
        try:
            while True:
                try:
                    stored = portal.call(answers.__anext__)
                except StopAsyncIteration:
                    return
                yield _Item(f'entry {stored.entry_id!r}', stored.entry_id, stored.answer)
        finally:
            portal.call(answers.aclose)  # pyright: ignore[reportAttributeAccessIssue, reportUnknownMemberType, reportUnknownArgumentType]


def _items(source: AnswerSource, batch_size: int) -> Iterator[_Item]:
    if isinstance(source, str | Path):
        return _file_items(Path(source))
    if hasattr(source, 'iter_answers'):
        return _store_items(cast(StoredAnswers, source), batch_size)
    iterable = cast(Iterable[CitedAnswer], source)
    return (_Item(f'answer {n}', None, answer) for n, answer in enumerate(iterable, 1))


@dataclass(frozen=True)
class Partition:
    """Answers checked together (one task on a cluster)."""

    index: int
    """0-based position of the partition."""
    first: int
    """1-based position of its first answer in the source."""
    items: list[_Item]
    """Its answers."""


def partitions(source: AnswerSource, size: int) -> Iterator[Partition]:
    """The source, read lazily, `size` answers per partition."""
    if size < 1:
        raise UserError(f'partition_size must be at least 1, got {size!r}.')
    batch: list[_Item] = []
    index, first = 0, 1
    for item in _items(source, size):
        batch.append(item)
        if len(batch) == size:
            yield Partition(index, first, batch)
            index, first, batch = index + 1, first + size, []
    if batch:
        yield Partition(index, first, batch)


# --- checking one partition (here or on a worker) ---------------------------------------------------------------------


class _CachedPages(Mapping[str, PageSnapshot | str | bytes]):
    """Page lookups of one partition, the latest `limit` kept: a store is not asked again for every citation."""

    def __init__(self, pages: Pages, limit: int = 64) -> None:
        self.pages = pages
        self.limit = limit
        self.found: dict[str, PageSnapshot | str | bytes | None] = {}

    def get(self, key: str, default: object = None) -> PageSnapshot | str | bytes | None:  # pyright: ignore[reportIncompatibleMethodOverride]
        if key in self.found:
            return self.found[key]
        value = self.pages.get(key)
        if len(self.found) >= self.limit:
            del self.found[next(iter(self.found))]
        self.found[key] = value
        return value

    def __getitem__(self, key: str) -> PageSnapshot | str | bytes:
        value = self.get(key)
        if value is None:
            raise KeyError(key)
        return value

    def __iter__(self) -> Iterator[str]:
        if isinstance(self.pages, SnapshotStore):
            return iter([s.url for s in self.pages.latest()])
        return iter(self.pages)

    def __len__(self) -> int:
        return len(self.pages)


@dataclass(frozen=True)
class PartitionResult:
    """A checked partition: its rendered output and its tally."""

    index: int
    """The partition's position."""
    answers: int
    """Answers in it."""
    output: str
    """What it adds to the output, in the requested format."""
    tally: SupportTally
    """Raw counts of its checks, for the exact merge."""


def _parse(item: _Item) -> CitedAnswer:
    if isinstance(item.answer, CitedAnswer):
        return item.answer
    try:
        return CitedAnswer.from_json(item.answer)
    except (ValidationError, ValueError) as e:
        first = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise AuditInputError(f'{item.where} is not a CitedAnswer: {first}') from e
    except RecursionError as e:
        raise AuditInputError(f'{item.where} is nested too deeply to be a CitedAnswer') from e


def _render(fmt: AuditFormat, n: int, item: _Item, audited: AuditedAnswer) -> str:
    if fmt == 'jsonl':
        return ''.join(
            audited_citation_ta.dump_json(
                AuditedCitation(n, item.answer_id, audited.provider_name, audited.model_name, check)
            ).decode()
            + '\n'
            for check in audited.report.checks
        )
    if fmt == 'json':
        return _audited_answer_ta.dump_json(audited).decode()
    if fmt == 'markdown':
        return markdown_answer(n, audited)
    return html_answer(n, audited)


def check_partition(partition: Partition, pages: Pages, options: AuditOptions, fmt: AuditFormat) -> PartitionResult:
    """Check every answer of `partition` (a module-level function: Dask ships it to workers by reference)."""
    cache = page_cache()
    lookups = _CachedPages(pages)
    outputs: list[str] = []
    tally = SupportTally()
    for n, item in enumerate(partition.items, partition.first):
        answer = _parse(item)
        report = check_lexical(
            answer,
            lookups,
            threshold=options.threshold,
            weak_threshold=options.weak_threshold,
            judge=None,
            language=options.language,
            min_passage_words=options.min_passage_words,
            min_claim_words=options.min_claim_words,
            max_bytes=options.max_bytes,
            page_cache=cache,
        )
        audited = AuditedAnswer(answer.text, answer.provider_name, answer.model_name, report)
        outputs.append(_render(fmt, n, item, audited))
        tally = tally.merge(SupportTally.of(report.checks, report.page_passages))
    separator = ',' if fmt == 'json' else ''
    return PartitionResult(partition.index, len(partition.items), separator.join(outputs), tally)


# --- writing -----------------------------------------------------------------------------------------------------------


class _Writer:
    """Writes partition outputs in order; reports that start with their summary keep sections in a temp file."""

    def __init__(self, output: TextIO, fmt: AuditFormat, threshold: float) -> None:
        self.output = output
        self.fmt = fmt
        self.threshold = threshold
        self.body: TextIO = output if fmt == 'jsonl' else cast(TextIO, tempfile.TemporaryFile('w+', encoding='utf-8'))  # noqa: SIM115  # closed by close()
        self.wrote_item = False

    def add(self, result: PartitionResult) -> None:
        if not result.output:
            return
        if self.fmt == 'json' and self.wrote_item:
            self.body.write(',')
        self.body.write(result.output)
        self.wrote_item = True
        if self.fmt == 'jsonl':
            self.body.flush()

    def finish(self, answers: int, summary: SupportSummary) -> None:
        if self.fmt == 'jsonl':
            return
        head = {
            'json': '{"answers":[',
            'markdown': markdown_head(answers, summary) if self.fmt == 'markdown' else '',
            'html': html_head(answers, summary, self.threshold) if self.fmt == 'html' else '',
        }[self.fmt]
        self.output.write(head)
        self.body.seek(0)
        shutil.copyfileobj(self.body, self.output)
        if self.fmt == 'json':
            summary_json = _support_summary_ta.dump_json(summary).decode()
            self.output.write(f'],"summary":{summary_json},"threshold":{json.dumps(self.threshold)}}}\n')
        elif self.fmt == 'html':
            self.output.write(HTML_FOOT)

    def close(self) -> None:
        if self.body is not self.output:
            self.body.close()


Checker = Callable[[Iterator[Partition], Pages, AuditOptions, AuditFormat], Iterator[PartitionResult]]


def _in_process(
    parts: Iterator[Partition], pages: Pages, options: AuditOptions, fmt: AuditFormat
) -> Iterator[PartitionResult]:
    for partition in parts:
        yield check_partition(partition, pages, options, fmt)


@contextmanager
def _checker(workers: int | None, scheduler: str | None, client: object | None) -> Generator[Checker]:
    if workers is None and scheduler is None and client is None:
        yield _in_process
        return
    from ._dask import dask_checker  # only now: the support module works without the [audit] extra

    with dask_checker(workers=workers, scheduler=scheduler, client=client) as checker:
        yield checker


def audit_answers(
    source: AnswerSource,
    pages: Pages,
    output: TextIO,
    *,
    format: AuditFormat = 'jsonl',
    options: AuditOptions | None = None,
    partition_size: int = 500,
    workers: int | None = None,
    scheduler: str | None = None,
    client: object | None = None,
    progress: Callable[[int], None] | None = None,
) -> AuditSummary:
    """Check every logged answer of `source` against `pages`, in partitions, here or on a Dask cluster.

    Results are written to `output` as partitions finish, in input order: one `AuditedCitation` JSON line per
    citation (`format='jsonl'`), or the audit report as JSON, Markdown or HTML. Memory stays bounded whatever the
    number of answers: the source is read a partition at a time and only a few partitions are in flight.

    Args:
        source: The answers (see `AnswerSource`).
        pages: Pages to check against; on a cluster every worker must reach them (a `SnapshotStore` on a shared
            path, or a mapping, which is sent to each worker once).
        output: Where results go (text).
        format: `'jsonl'` (default), `'json'`, `'markdown'` or `'html'`.
        options: Thresholds and page options (default `AuditOptions()`).
        partition_size: Answers per partition (a task on a cluster).
        workers: Start a local Dask cluster with this many worker processes (needs the `[audit]` extra).
        scheduler: Use the Dask cluster at this scheduler address instead (needs the `[audit]` extra).
        client: Use this `distributed.Client` instead.
        progress: Called with the number of answers of each partition written.

    Raises:
        AuditInputError: An answer of the source cannot be read.
        UserError: Bad options (more than one of `workers`, `scheduler`, `client`; thresholds out of range).
    """
    options = options or AuditOptions()
    if sum(x is not None for x in (workers, scheduler, client)) > 1:
        raise UserError('Pass at most one of `workers`, `scheduler` and `client`.')
    if workers is not None and workers < 1:
        raise UserError(f'workers must be at least 1, got {workers!r}.')
    writer = _Writer(output, format, options.threshold)
    tally = SupportTally()
    answers = count = 0
    try:
        with _checker(workers, scheduler, client) as checker:
            for result in checker(partitions(source, partition_size), pages, options, format):
                writer.add(result)
                tally = tally.merge(result.tally)
                answers += result.answers
                count += 1
                if progress is not None:
                    progress(result.answers)
        summary = tally.summary()
        writer.finish(answers, summary)
    finally:
        writer.close()
    return AuditSummary(answers, count, summary, options.threshold)
