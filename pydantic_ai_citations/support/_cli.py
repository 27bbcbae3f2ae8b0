"""The `audit` subcommand: check stored answers against stored page snapshots and write a report."""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from pathlib import Path
from typing import TextIO, cast

from pydantic import ValidationError

from .._answer import CitedAnswer
from ._audit import audit, audit_report_ta, audit_to_html, audit_to_markdown
from ._snapshots import SnapshotStore

__all__ = ('audit_command', 'register', 'run_audit')

_DESCRIPTION = """\
Check every citation of stored answers against page snapshots taken at answer time: best passage per claim,
score, verdict, threshold curve, dead links. ANSWERS is a JSON file holding one CitedAnswer (as written by
CitedAnswer.to_json) or a list of them."""


def _add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument('answers', metavar='ANSWERS', type=Path, help='JSON file: one CitedAnswer or a list')
    parser.add_argument(
        '--snapshots', metavar='DIR', type=Path, required=True, help='snapshot store folder (or .sqlite file)'
    )
    parser.add_argument('--format', choices=('markdown', 'html', 'json'), default='markdown', help='report format')
    parser.add_argument('-o', '--output', metavar='FILE', type=Path, help='write the report here (default: stdout)')
    parser.add_argument('--threshold', type=float, default=0.6, help='score for "supported" (default 0.6)')
    parser.add_argument('--weak-threshold', type=float, default=0.3, help='score for "weak" (default 0.3)')
    parser.add_argument('--language', default=None, help='language of Latin-script words: en (default), ru, ...')


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:  # pyright: ignore[reportPrivateUsage]
    """Add the `audit` subcommand; its handler is set as `func` (call `args.func(args)`, an exit code)."""
    parser = subparsers.add_parser('audit', help='check citations against page snapshots', description=_DESCRIPTION)
    _add_arguments(parser)
    parser.set_defaults(func=audit_command)


def _load_answers(path: Path) -> list[CitedAnswer]:
    data: object = json.loads(path.read_text(encoding='utf-8'))
    items: list[object] = cast(list[object], data) if isinstance(data, list) else [data]
    return [CitedAnswer.from_json(json.dumps(item)) for item in items]


def audit_command(args: argparse.Namespace, *, stdout: TextIO | None = None, stderr: TextIO | None = None) -> int:
    """Run the audit for parsed arguments; returns the exit code (0 ok, 2 bad input)."""
    out = stdout or sys.stdout
    err = stderr or sys.stderr
    answers_path: Path = args.answers
    snapshots: Path = args.snapshots
    try:
        answers = _load_answers(answers_path)
    except OSError as e:
        print(f'error: cannot read ANSWERS file {str(answers_path)!r}: {e.strerror or e}', file=err)
        return 2
    except (ValueError, ValidationError) as e:
        first = str(e).splitlines()[0] if str(e) else type(e).__name__
        print(f'error: {str(answers_path)!r} is not a CitedAnswer or a list of them: {first}', file=err)
        return 2
    except RecursionError:  # the JSON decoder's own depth limit: a hostile or broken file, not a crash
        print(f'error: {str(answers_path)!r} is nested too deeply to be a CitedAnswer or a list of them', file=err)
        return 2
    if not snapshots.exists():
        print(f'error: snapshot store {str(snapshots)!r} does not exist', file=err)
        return 2
    try:
        store = SnapshotStore(snapshots)
        report = audit(
            answers,
            store,
            threshold=args.threshold,
            weak_threshold=args.weak_threshold,
            language=args.language,
        )
    except Exception as e:  # a bad store or a bad option must end with a message, not a traceback
        print(f'error: {e}', file=err)
        return 2
    fmt: str = args.format
    if fmt == 'html':
        text = audit_to_html(report)
    elif fmt == 'json':
        text = audit_report_ta.dump_json(report, indent=2).decode() + '\n'
    else:
        text = audit_to_markdown(report)
    output: Path | None = args.output
    if output is None:
        out.write(text)
    else:
        output.write_text(text, encoding='utf-8')
        print(f'wrote {output}', file=err)
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
