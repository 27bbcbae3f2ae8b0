"""The `audit` subcommand: check logged answers against stored page snapshots and write a report or results."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Callable, Generator
from pathlib import Path
from typing import TextIO

from ._audit import unchecked_notes
from ._audit_run import PARTITION_SIZE, AnswerSource, AuditInputError, AuditOptions, AuditSummary, audit_answers
from ._snapshots import SnapshotStore

__all__ = ('audit_command', 'register', 'run_audit')

_DESCRIPTION = """\
Check every citation of logged answers against page snapshots taken at answer time: best passage per claim, score,
verdict, threshold curve, dead links. SOURCE is a JSON Lines file of CitedAnswers (as written by
CitedAnswer.to_json), a JSON file holding one CitedAnswer or a list of them, or a SQLiteConversationStore database.
Answers are read and checked in partitions, here or on a Dask cluster (--workers, --scheduler; needs the [audit]
extra), and results are written as they come: memory stays bounded whatever the number of answers."""

_SQLITE_MAGIC = b'SQLite format 3\x00'


def _add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        'answers', metavar='SOURCE', type=Path, help='JSON Lines / JSON of CitedAnswers, or a conversation store'
    )
    parser.add_argument(
        '--snapshots', metavar='DIR', type=Path, required=True, help='snapshot store folder (or .sqlite file)'
    )
    parser.add_argument(
        '--format',
        choices=('markdown', 'html', 'json', 'jsonl'),
        default='markdown',
        help='report format; jsonl: one JSON line per citation, streamed (default: markdown)',
    )
    parser.add_argument('-o', '--output', metavar='FILE', type=Path, help='write the report here (default: stdout)')
    parser.add_argument('--threshold', type=float, default=0.6, help='score for "supported" (default 0.6)')
    parser.add_argument('--weak-threshold', type=float, default=0.3, help='score for "weak" (default 0.3)')
    parser.add_argument('--language', default=None, help='language of Latin-script words: en (default), ru, ...')
    cluster = parser.add_mutually_exclusive_group()
    cluster.add_argument('--workers', type=int, metavar='N', help='check on a local Dask cluster of N processes')
    cluster.add_argument('--scheduler', metavar='ADDRESS', help='check on the Dask cluster at this scheduler')
    parser.add_argument(
        '--partition-size',
        type=int,
        default=PARTITION_SIZE,
        metavar='N',
        help=f'answers per partition ({PARTITION_SIZE:,})',
    )
    parser.add_argument('--no-progress', action='store_true', help='no progress bar (there is none unless a TTY)')


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:  # pyright: ignore[reportPrivateUsage]
    """Add the `audit` subcommand; its handler is set as `func` (call `args.func(args)`, an exit code)."""
    parser = subparsers.add_parser('audit', help='check citations against page snapshots', description=_DESCRIPTION)
    _add_arguments(parser)
    parser.set_defaults(func=audit_command)


def _is_sqlite(path: Path) -> bool:
    try:
        with path.open('rb') as file:
            return file.read(len(_SQLITE_MAGIC)) == _SQLITE_MAGIC
    except OSError:
        return False


@contextlib.contextmanager
def _source(path: Path) -> Generator[AnswerSource]:
    if not _is_sqlite(path):
        yield path
        return
    from .._store import SQLiteConversationStore

    store = SQLiteConversationStore(path)
    try:
        yield store
    finally:
        store.close()


@contextlib.contextmanager
def _progress(err: TextIO, enabled: bool) -> Generator[Callable[[int], None] | None]:
    """A rich progress bar on a terminal (answers checked, rate, elapsed); nothing otherwise."""
    if not enabled or not err.isatty():
        yield None
        return
    try:
        from rich.console import Console
        from rich.progress import MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
    except ImportError:  # the [cli] extra is not installed: no bar
        yield None
        return
    columns = (SpinnerColumn(), TextColumn('checking answers'), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=Console(file=err), transient=True) as bar:
        task = bar.add_task('audit', total=None)
        yield lambda n: bar.advance(task, n)


def _summary_line(result: AuditSummary) -> str:
    counts = ', '.join(f'{v} {n}' for v, n in result.summary.verdicts.items() if n)
    line = f'{result.answers} answer(s), {result.summary.checks} citation check(s): {counts or "none"}'
    notes = unchecked_notes(result.summary)
    return ' '.join([f'{line}.', *notes]) if notes else line


def _run(args: argparse.Namespace, out: TextIO, err: TextIO) -> AuditSummary:
    options = AuditOptions(threshold=args.threshold, weak_threshold=args.weak_threshold, language=args.language)
    store = SnapshotStore(args.snapshots)
    with contextlib.ExitStack() as stack:
        source = stack.enter_context(_source(args.answers))
        progress = stack.enter_context(_progress(err, not args.no_progress))
        output: TextIO = out
        if args.output is not None:
            output = stack.enter_context(Path(args.output).open('w', encoding='utf-8'))
        return audit_answers(
            source,
            store,
            output,
            format=args.format,
            options=options,
            partition_size=args.partition_size,
            workers=args.workers,
            scheduler=args.scheduler,
            progress=progress,
        )


def _clash(output: Path, answers: Path, snapshots: Path) -> str | None:
    """What `output` would overwrite: the source of answers, or the snapshot store (or a file in it); else `None`."""
    target = output.resolve()
    if target == answers.resolve() or (output.exists() and os.path.samefile(output, answers)):
        return 'the SOURCE of answers'
    store = snapshots.resolve()
    if target == store or store in target.parents or (output.exists() and os.path.samefile(output, snapshots)):
        return 'the snapshot store'
    return None


def audit_command(args: argparse.Namespace, *, stdout: TextIO | None = None, stderr: TextIO | None = None) -> int:
    """Run the audit for parsed arguments; returns the exit code (0 ok, 2 bad input)."""
    out = stdout or sys.stdout
    err = stderr or sys.stderr
    answers_path: Path = args.answers
    snapshots: Path = args.snapshots
    if not answers_path.is_file():
        print(f'error: cannot read SOURCE {str(answers_path)!r}: no such file', file=err)
        return 2
    if not snapshots.exists():
        print(f'error: snapshot store {str(snapshots)!r} does not exist', file=err)
        return 2
    if args.output is not None and (clash := _clash(Path(args.output), answers_path, snapshots)):
        print(f'error: -o {str(args.output)!r} is {clash}: it would be overwritten before it is read', file=err)
        return 2
    try:
        result = _run(args, out, err)
    except AuditInputError as e:
        print(f'error: {str(answers_path)!r}: {e}' if str(answers_path) not in str(e) else f'error: {e}', file=err)
        return 2
    except OSError as e:
        print(f'error: cannot read or write {e.filename or answers_path!s}: {e.strerror or e}', file=err)
        return 2
    except Exception as e:  # a bad store, option or cluster must end with a message, not a traceback
        print(f'error: {e}', file=err)
        return 2
    if args.output is not None:
        print(f'wrote {args.output}', file=err)
    if args.format == 'jsonl':
        print(_summary_line(result), file=err)
    return 0


def run_audit(argv: list[str], *, stdout: TextIO | None = None, stderr: TextIO | None = None) -> int:
    """Run `audit` with these arguments (those after `audit`); returns the exit code. For tests and scripts."""
    parser = argparse.ArgumentParser(prog='pydantic-ai-citations')
    register(parser.add_subparsers(dest='command', required=True))
    try:
        with contextlib.redirect_stdout(stdout or sys.stdout), contextlib.redirect_stderr(stderr or sys.stderr):
            args = parser.parse_args(['audit', *argv])
    except SystemExit as e:  # argparse exits on bad usage (and on --help); report its code instead
        return e.code if isinstance(e.code, int) else 2
    return audit_command(args, stdout=stdout, stderr=stderr)
