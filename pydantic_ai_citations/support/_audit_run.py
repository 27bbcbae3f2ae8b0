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

import codecs
import gc
import json
import os
import shutil
import tempfile
from collections.abc import AsyncIterator, Callable, Generator, Iterable, Iterator, Mapping, MutableMapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO, Literal, Protocol, TextIO, TypeVar, cast

import anyio.from_thread
from pydantic import TypeAdapter, ValidationError
from pydantic_ai.exceptions import UserError
from pydantic_core import PydanticSerializationError

from .._answer import CitedAnswer, RawCitation
from .._checks import first_error
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
from ._report import CitationCheck, Pages, SupportSummary, SupportTally, TallySum, check_lexical, page_cache
from ._snapshots import PageSnapshot, SnapshotStore
from ._terms import StemCache, latin_algorithm

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
    """One line of the `'jsonl'` output: a citation of an answer, checked (`check`) or audit-only (`not_checked`).

    Every citation of every answer gets a line: its checks first, then its audit-only citations (`raw_only`).
    """

    answer: int
    """1-based position of the answer in the source."""
    answer_id: str | None
    """The store's entry id of the answer (`None` for files and iterables)."""
    provider_name: str | None
    """Who answered."""
    model_name: str | None
    """Which model answered."""
    check: CitationCheck | None
    """The check (`None` for an audit-only citation: see `not_checked`)."""
    not_checked: RawCitation | None = None
    """An audit-only citation of the answer (`CitedAnswer.raw_only`): no position or claim to check it against."""
    answer_complete: bool = True
    """Whether the answer completed (`CitedAnswer.complete`): a cut-off answer's text and citations may be missing."""


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
        latin_algorithm(self.language)  # an unknown language fails here, not at the first citation checked (if any)


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
            buffer, pos = _skip_space(file, buffer, pos + 1)
            if pos < len(buffer):  # (what follows was dropped without a word: another list, JSON Lines, junk)
                raise ValueError(f'the JSON list of {n} item(s) is followed by more: {buffer[pos : pos + 40]!r}')
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
            except json.JSONDecodeError as e:
                if not _item_goes_on(e, buffer) or len(buffer) - pos > MAX_ITEM_CHARS:
                    raise ValueError(f'item {n + 1} is not JSON: {e.msg}') from None  # (not read on to the end)
                more = file.read(max(_CHUNK, len(buffer) - pos))
                if not more:
                    raise
                buffer, pos = buffer[pos:] + more, 0
        n += 1
        yield _Item(f'item {n}', None, buffer[pos:end])
        pos = end


MAX_ITEM_CHARS = 64 << 20
"""A list item (one `CitedAnswer`) longer than this is refused: memory stays bounded whatever the file holds."""


def _item_goes_on(error: json.JSONDecodeError, buffer: str) -> bool:
    """Whether a list item failed to parse because the buffer ends inside it (else it is broken where it failed).

    The decoder stops where the text stops making sense: at the buffer's end (give or take a literal or an escape
    cut off there) when the item goes on, or in a string it never found the end of.
    """
    return error.pos >= len(buffer) - 16 or error.msg.startswith('Unterminated string')


def _is_json_lines(path: Path) -> bool:
    """Whether the file is JSON Lines: not a JSON list, and its first line that is not blank is JSON on its own.

    A file of nothing but blank lines (or nothing) is JSON Lines of no answers; a UTF-8 byte-order mark is skipped.
    """
    with path.open('rb') as file:
        head = file.read(_CHUNK).removeprefix(codecs.BOM_UTF8).lstrip()
        if head.startswith(b'['):
            return False
        if not head:  # (blank for a whole chunk: the lines are read, and skipped, one by one)
            return True
        first = (head + file.readline()).partition(b'\n')[0]
    try:
        json.loads(first)
    except ValueError:  # not JSON, or not UTF-8: read as one answer, where what is wrong is reported
        return False
    return True


def _read_file(path: Path) -> Iterator[_Item]:
    if _is_json_lines(path):
        with path.open('rb') as file:
            yield from _json_lines(file, 1)
        return
    with path.open(encoding='utf-8-sig') as file:  # (a byte-order mark skipped)
        head = file.read(_CHUNK)
        stripped = head.lstrip()
        if stripped.startswith('['):
            yield from _list_items(file, stripped[1:])
            return
        # Not JSON Lines: one answer spread over several lines (or not JSON at all, reported where parsed).
        yield _Item('the file', None, head + file.read())


def _file_items(path: Path) -> Iterator[_Item]:
    """JSON Lines (one `CitedAnswer` per line), a JSON list of them, or one `CitedAnswer` (indented or not)."""
    what = 'JSON Lines of CitedAnswers, a CitedAnswer or a list of them'
    try:
        yield from _read_file(path)
    except RecursionError as e:  # the JSON decoder's own depth limit: a hostile or broken file, not a crash
        raise AuditInputError(f'{str(path)!r} is nested too deeply to be {what}') from e
    except ValueError as e:  # JSON errors, and text that is not UTF-8
        raise AuditInputError(f'{str(path)!r} is not {what}: {e}') from e


def _byte_lines(file: BinaryIO, end: int | None = None) -> Iterator[tuple[bytes, int]]:
    """The lines of `file` from where it is up to byte `end` (default: its end), without their `\\n`.

    Each comes with its size in the file (`\\n` included), so callers can keep byte offsets.
    """
    left = None if end is None else end - file.tell()
    pending = b''
    while True:
        more = file.read(_CHUNK if left is None else min(_CHUNK, left))
        if not more:
            if pending:
                yield pending, len(pending)
            return
        if left is not None:
            left -= len(more)
        *complete, pending = (pending + more).split(b'\n')
        for line in complete:
            yield line, len(line) + 1


def _decoded(line: bytes, n: int) -> str:
    """Line `n` of a JSON Lines file as text (the first without a UTF-8 byte-order mark)."""
    try:
        return line.decode('utf-8-sig' if n == 1 else 'utf-8')
    except UnicodeDecodeError as e:
        raise AuditInputError(f'line {n} is not UTF-8 text: {e}') from e


def _json_lines(file: BinaryIO, first_line: int, end: int | None = None) -> Iterator[_Item]:
    """The answers of JSON Lines from where `file` is (line number `first_line`) up to byte `end`, blank lines skipped.

    Lines end at `\\n` (a `\\r` before it is JSON whitespace), whether the file is read here or by a partition.
    """
    for n, (line, _) in enumerate(_byte_lines(file, end), first_line):
        text = _decoded(line, n)
        if text.strip():
            yield _Item(f'line {n}', None, text)


@dataclass(frozen=True)
class FileLines:
    """A partition's lines of a JSON Lines file, read where the partition is checked (a worker on this machine)."""

    path: str
    """The file."""
    stamp: tuple[int, int]
    """Its size and modification time (ns) when it was cut into partitions: the reader checks it reads the same."""
    start: int
    """Byte offset of the partition's first line."""
    end: int
    """Byte offset just past its last line."""
    first_line: int
    """Line number of its first line (1-based)."""
    answers: int
    """Answers (non-blank lines) in it."""

    def read(self) -> list[_Item]:
        """The partition's answers, as JSON text."""
        try:
            with open(self.path, 'rb') as file:
                found = os.fstat(file.fileno())
                if (found.st_size, found.st_mtime_ns) != self.stamp:
                    raise AuditInputError(f'{self.path!r} changed while it was audited, or is another file here.')
                file.seek(self.start)
                return list(_json_lines(file, self.first_line, self.end))
        except OSError as e:
            raise AuditInputError(f'{self.path!r} cannot be read where its answers are checked: {e}') from e


def _file_ranges(path: Path, size: int) -> Iterator[Partition]:
    """A JSON Lines file cut into partitions of `size` answers by byte range, read only to find the line ends."""
    found = path.stat()
    stamp = (found.st_size, found.st_mtime_ns)
    index, first, answers, start, first_line, offset = 0, 1, 0, 0, 1, 0
    with path.open('rb') as file:
        for n, (line, length) in enumerate(_byte_lines(file), 1):
            offset += length
            if not _decoded(line, n).strip():
                continue
            answers += 1
            if answers == size:
                yield Partition(index, first, [], FileLines(str(path), stamp, start, offset, first_line, answers))
                index, first, answers, start, first_line = index + 1, first + size, 0, offset, n + 1
    if answers:
        yield Partition(index, first, [], FileLines(str(path), stamp, start, offset, first_line, answers))


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
    if isinstance(source, (str, Path)):
        return _file_items(Path(source))
    if hasattr(source, 'iter_answers'):
        return _store_items(cast(StoredAnswers, source), batch_size)
    iterable = cast('Iterable[CitedAnswer]', source)
    return (_Item(f'answer {n}', None, answer) for n, answer in enumerate(iterable, 1))


@dataclass(frozen=True)
class Partition:
    """Answers checked together (one task on a cluster)."""

    index: int
    """0-based position of the partition."""
    first: int
    """1-based position of its first answer in the source."""
    items: list[_Item]
    """Its answers (none when `lines` says where to read them)."""
    lines: FileLines | None = None
    """Where its answers are in a JSON Lines file, when they are read where the partition is checked."""

    @property
    def answers(self) -> int:
        """How many answers it has."""
        return len(self.items) if self.lines is None else self.lines.answers


def partitions(source: AnswerSource, size: int, *, ranges: bool = False) -> Iterator[Partition]:
    """The source, read lazily, `size` answers per partition.

    With `ranges`, a JSON Lines file is cut into byte ranges that the partitions read themselves (the places that
    check them must see the same file), instead of carrying their answers.
    """
    if size < 1:
        raise UserError(f'partition_size must be at least 1, got {size!r}.')
    if ranges and isinstance(source, (str, Path)) and _is_json_lines(Path(source)):
        yield from _file_ranges(Path(source), size)
        return
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
    """What it adds to the output, in the requested format (empty when `spool` holds it)."""
    tally: SupportTally
    """Raw counts of its checks, for the exact merge."""
    spool: str | None = None
    """A file on this machine holding the output instead (UTF-8, lone surrogates passed through), written where the
    partition was checked: the writer copies it to the output and removes it."""


def _parse(item: _Item) -> CitedAnswer:
    if isinstance(item.answer, CitedAnswer):
        return item.answer
    try:
        return CitedAnswer.from_json(item.answer)
    except ValidationError as e:
        raise AuditInputError(f'{item.where} is not a CitedAnswer: {first_error(e)}') from e
    except ValueError as e:
        raise AuditInputError(f'{item.where} is not a CitedAnswer: {e or type(e).__name__}') from e
    except RecursionError as e:
        raise AuditInputError(f'{item.where} is nested too deeply to be a CitedAnswer') from e


def _render(fmt: AuditFormat, n: int, item: _Item, audited: AuditedAnswer) -> str:
    if fmt == 'jsonl':
        report = audited.report

        def line(check: CitationCheck | None, raw: RawCitation | None) -> str:
            cited = AuditedCitation(
                n, item.answer_id, audited.provider_name, audited.model_name, check, raw, report.complete
            )
            return audited_citation_ta.dump_json(cited).decode() + '\n'

        return ''.join([*(line(c, None) for c in report.checks), *(line(None, r) for r in report.not_checked)])
    if fmt == 'json':
        return _audited_answer_ta.dump_json(audited).decode()
    if fmt == 'markdown':
        return markdown_answer(n, audited)
    return html_answer(n, audited)


def _rendered(fmt: AuditFormat, n: int, item: _Item, audited: AuditedAnswer) -> tuple[str, str | None]:
    """`_render`'s output, or why it cannot be written as UTF-8 text."""
    try:
        rendered = _render(fmt, n, item, audited)
        if fmt in ('markdown', 'html'):
            rendered.encode()  # (the JSON formats' serializer checks as it writes)
    except (UnicodeEncodeError, PydanticSerializationError) as e:
        return '', str(e)
    return rendered, None


_V = TypeVar('_V')


class _Renewed(MutableMapping[str, _V]):
    """A cache of split pages whose entries are dropped after `uses` look-ups each (then split again when next cited).

    A page's index keeps what it learns from the claims checked against it (their stems and word pairs), so one kept
    for a whole run would grow with the number of answers. Splitting a page again after `uses` claims bounds that;
    results do not change (the index is a cache), and a page costs one more split per `uses` claims.
    """

    def __init__(self, inner: MutableMapping[str, _V], uses: int) -> None:
        self.inner = inner
        self.uses = uses
        self.left: dict[str, int] = {}

    def __getitem__(self, key: str) -> _V:
        value = self.inner.get(key)  # the inner cache's `get`: it keeps its own order of use
        left = self.left.get(key, 0)
        if value is None or left <= 0:
            self.inner.pop(key, None)
            self.left.pop(key, None)
            raise KeyError(key)
        self.left[key] = left - 1
        return value

    def __setitem__(self, key: str, value: _V) -> None:
        self.inner[key] = value
        self.left[key] = self.uses
        if len(self.left) > 2 * len(self.inner):  # forget the pages the inner cache dropped for its limit
            self.left = {k: n for k, n in self.left.items() if k in self.inner}

    def __delitem__(self, key: str) -> None:
        del self.inner[key]
        del self.left[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.inner)

    def __len__(self) -> int:
        return len(self.inner)


PARTITION_SIZE = 1_000
"""Answers per partition by default: each a task of about half a second on a cluster. Measured on 2 local workers,
20,000 answers over the 30 real pages: 1,000 finishes 3-4 % sooner than 500 (a third fewer tasks for the driver to
submit and collect), and the tail (one worker finishing the last partition) stays short."""

PAGE_USES = 1_000
"""Claims a split page serves before it is split again: bounds what its index learns from claims (measured on the
30 real pages: peak memory flat from 20,000 to 80,000 answers, where 2,000 still let it grow by a tenth)."""


class AuditCache:
    """What the partitions of one audit checked in one place (this process, or a worker thread) share.

    The split and indexed pages and the page lookups, each bounded (`limit` pages, each page split again after
    `PAGE_USES` claims), so a page is split once per place and `PAGE_USES` claims, not once per partition. Valid for
    one `pages` and one `AuditOptions`: made for a run and dropped with it.
    """

    def __init__(self, pages: Pages, limit: int = 64) -> None:
        self.pages: Mapping[str, PageSnapshot | str | bytes] = _CachedPages(pages, limit)
        """Page lookups (a snapshot store is not asked again for every citation)."""
        self.split = _Renewed(page_cache(limit), PAGE_USES)
        """Split and indexed pages, by page key."""
        self.stems = StemCache()
        """The stems of their words (and of the claims' words), bounded by its own limit."""


def check_partition(
    partition: Partition, cache: AuditCache, options: AuditOptions, fmt: AuditFormat
) -> PartitionResult:
    """Check every answer of `partition` against the pages of `cache` (made for these `options`)."""
    items = partition.items if partition.lines is None else partition.lines.read()
    outputs: list[str] = []
    checks: list[CitationCheck] = []
    page_passages: dict[str, int] = {}
    incomplete = not_checked = 0
    for n, item in enumerate(items, partition.first):
        answer = _parse(item)
        report = check_lexical(
            answer,
            cache.pages,
            threshold=options.threshold,
            weak_threshold=options.weak_threshold,
            judge=None,
            language=options.language,
            min_passage_words=options.min_passage_words,
            min_claim_words=options.min_claim_words,
            max_bytes=options.max_bytes,
            page_cache=cache.split,
            stems=cache.stems,
            summarized=fmt == 'json',  # (the other formats show checks; the partition's tally sums them)
        )
        audited = AuditedAnswer(answer.text, answer.provider_name, answer.model_name, report)
        rendered, unwritable = _rendered(fmt, n, item, audited)
        if unwritable is not None:  # (raised here, not where it was caught: its context would not pickle back)
            raise AuditInputError(
                f'{item.where} holds text that cannot be written as UTF-8 (a lone surrogate, in the answer or in a page '
                f"it cites): {unwritable}. Replace it first (`text.encode('utf-8', 'replace').decode()`)."
            )
        outputs.append(rendered)
        checks += report.checks
        page_passages.update(report.page_passages)
        incomplete += not report.complete
        not_checked += len(report.not_checked)
    separator = ',' if fmt == 'json' else ''
    # One tally of the partition's checks in order: the same counts as merging one tally per answer.
    tally = SupportTally.of(checks, page_passages, incomplete_answers=incomplete, not_checked=not_checked)
    return PartitionResult(partition.index, len(items), separator.join(outputs), tally)


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
        if not (result.output or result.spool):
            return
        if self.fmt == 'json' and self.wrote_item:
            self.body.write(',')
        if result.spool is None:
            self.body.write(result.output)
        else:
            with open(result.spool, encoding='utf-8', errors='surrogatepass', newline='') as spooled:
                shutil.copyfileobj(spooled, self.body, _CHUNK)
            os.remove(result.spool)
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


Checker = Callable[[AnswerSource, int, Pages, AuditOptions, AuditFormat], Iterator[PartitionResult]]
"""Checks the partitions of `size` answers of a source, and yields their results in order."""


def freeze_heap() -> bool:
    """Leave what is alive now out of the cyclic collector's passes, unless something else froze objects already.

    An audit builds many long-lived objects (split pages) and discards many more, so the collector makes full
    passes, and each one walks every object of the process: in a Dask worker, some 130,000 of Dask's and the
    imports' own, which made a worker's full passes cost several times a single process's. Frozen objects are
    skipped, and still freed by reference counting. Returns whether it froze: then `gc.unfreeze()` when the audit
    ends (not when the process had frozen objects itself, e.g. before forking: unfreezing would undo that).
    """
    if gc.get_freeze_count():
        return False
    gc.freeze()
    return True


def _in_process(
    source: AnswerSource, size: int, pages: Pages, options: AuditOptions, fmt: AuditFormat
) -> Iterator[PartitionResult]:
    cache = AuditCache(pages)  # this run's, dropped when it ends
    frozen = freeze_heap()
    try:
        for partition in partitions(source, size):
            yield check_partition(partition, cache, options, fmt)
    finally:
        if frozen:
            gc.unfreeze()


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
    partition_size: int = PARTITION_SIZE,
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
        partition_size: Answers per partition (a task on a cluster; default `PARTITION_SIZE`, 1,000).
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
    total = TallySum()  # (each partition's counts added once: `SupportTally.merge` copied all so far each time)
    answers = count = 0
    try:
        with _checker(workers, scheduler, client) as checker:
            for result in checker(source, partition_size, pages, options, format):
                writer.add(result)
                total.add(result.tally)
                answers += result.answers
                count += 1
                if progress is not None:
                    progress(result.answers)
        summary = total.tally().summary()
        writer.finish(answers, summary)
    finally:
        writer.close()
    return AuditSummary(answers, count, summary, options.threshold)
