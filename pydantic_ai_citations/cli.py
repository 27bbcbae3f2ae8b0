"""Command line: `pydantic-ai-citations matrix | audit | render` (also `python -m pydantic_ai_citations`).

`matrix` (the default) measures the capability matrix: built-in probes over the package's wire fixtures through
Pydantic AI's real model classes (offline), plus `--recordings` and `--live` evidence when given.
"""

from __future__ import annotations

import argparse
import atexit
import gc
import sys
from collections.abc import Generator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

if TYPE_CHECKING:
    from .matrix import CapabilityMatrix

__all__ = ('main', 'run')

_FORMATS = ('table', 'markdown', 'json', 'html')


def _parser(command: str | None = None) -> argparse.ArgumentParser:
    """The CLI's parser; `command` (the first argument) lets `matrix` and `render` skip loading the `audit` code."""
    parser = argparse.ArgumentParser(
        prog='pydantic-ai-citations',
        description='Track, measure, clean and check citations in Pydantic AI agents.',
    )
    subparsers = parser.add_subparsers(dest='command', metavar='COMMAND')
    matrix = subparsers.add_parser(
        'matrix',
        help='measure the citation capability matrix (default command)',
        description='Measure, per provider API, what Pydantic AI does with citations: every cell is run through the '
        "real model classes. Default: the built-in probes over the package's wire fixtures, offline.",
    )
    matrix.add_argument('--format', choices=_FORMATS, default='table', help='output format (default: table)')
    matrix.add_argument('-o', '--output', metavar='FILE', type=Path, help='write the report here (default: stdout)')
    matrix.add_argument(
        '--recordings',
        nargs='+',
        default=[],
        metavar='PATH',
        help='VCR cassettes (pydantic-ai format), xAI gRPC cassettes, Vercel AI SDK fixtures, or folders of them',
    )
    matrix.add_argument(
        '--live',
        nargs='+',
        default=[],
        metavar='MODEL',
        help='probe live models, e.g. anthropic:claude-sonnet-4-6, or an OpenAI-compatible gateway as URL#MODEL '
        '(its own row; skipped with a message when the key is not set)',
    )
    matrix.add_argument('--no-probes', action='store_true', help='skip the built-in probes')
    matrix.add_argument(
        '--jobs',
        type=int,
        choices=(1, 2),
        default=2,
        help='processes for the built-in probes (default: 2 where the machine has two cores or more; 1 probes every '
        'row in this process)',
    )
    matrix.add_argument('-q', '--quiet', action='store_true', help='no progress lines on stderr')
    matrix.set_defaults(func=_matrix_command)
    render = subparsers.add_parser(
        'render',
        help='render a stored CitedAnswer (JSON) as Markdown or HTML',
        description='Render a CitedAnswer written by CitedAnswer.to_json: links only for http(s), text escaped, sources '
        'without a position under "Sources used", raw-only data never shown.',
    )
    render.add_argument('answer', metavar='ANSWER', type=Path, help='JSON file holding one CitedAnswer')
    render.add_argument('--format', choices=('markdown', 'html'), default='markdown', help='output format')
    render.add_argument('--style', choices=('inline', 'footnotes'), help='Markdown citation style (default: inline)')
    render.add_argument('--redact', action='store_true', help='hide excerpts of user documents (for logs)')
    render.add_argument('--page', action='store_true', help='HTML: a standalone page instead of a fragment')
    render.add_argument('-o', '--output', metavar='FILE', type=Path, help='write here (default: stdout)')
    render.set_defaults(func=_render_command)
    if command in ('matrix', 'render'):
        # `audit` will not run: its module (and the support extra it loads) stays unloaded.
        subparsers.add_parser('audit', help='check citations against page snapshots')
        return parser
    try:
        from .support._cli import register
    except ImportError:  # the support extra is not installed: `audit` explains itself
        audit = subparsers.add_parser('audit', help='check citations against page snapshots (needs [support])')
        audit.set_defaults(func=_missing_support)
    else:
        register(subparsers)
    return parser


def _render_command(args: argparse.Namespace, *, stdout: TextIO | None = None, stderr: TextIO | None = None) -> int:
    from pydantic import ValidationError

    from ._answer import CitedAnswer
    from ._render import render_html, render_markdown

    out = stdout or sys.stdout
    err = stderr or sys.stderr
    if args.format == 'html' and args.style is not None:
        print('error: --style applies to Markdown only; HTML has one citation style', file=err)
        return 2
    if args.format == 'markdown' and args.page:
        print('error: --page applies to HTML only (--format html)', file=err)
        return 2
    try:
        answer = CitedAnswer.from_json(Path(args.answer).read_bytes())
    except OSError as e:
        print(f'error: cannot read {str(args.answer)!r}: {e.strerror or e}', file=err)
        return 2
    except ValidationError as e:
        print(f'error: {str(args.answer)!r} is not a CitedAnswer: {e.error_count()} validation error(s)', file=err)
        return 2
    if args.format == 'html':
        text = render_html(answer, redact=args.redact, document=args.page)
    else:
        text = render_markdown(answer, style=args.style or 'inline', redact=args.redact)
    return _write(text, args.output, out, err)


def _write(text: str, output: Path | None, out: TextIO, err: TextIO) -> int:
    if output is None:
        out.write(text)
        return 0
    try:
        Path(output).write_text(text, encoding='utf-8')
    except OSError as e:
        print(f'error: cannot write {str(output)!r}: {e.strerror or e}', file=err)
        return 1
    print(f'wrote {output}', file=err)
    return 0


def _missing_support(args: argparse.Namespace) -> int:
    print('error: `audit` needs the support extra: pip install "pydantic-ai-citations[support]"', file=sys.stderr)
    return 2


def _matrix_command(args: argparse.Namespace, *, stdout: TextIO | None = None, stderr: TextIO | None = None) -> int:
    from .matrix._split import measure_matrix, start_child

    child = start_child(args.jobs, probes=not args.no_probes)  # first: it imports while this process does
    out = stdout or sys.stdout
    err = stderr or sys.stderr

    def progress(line: str) -> None:
        if not args.quiet:
            print(f'… {line}', file=err, flush=True)

    matrix = measure_matrix(
        probes=not args.no_probes,
        recordings=args.recordings,
        live=args.live,
        progress=progress,
        child=child,
    )
    unusable = matrix.unusable_lines()
    written = _write_matrix(matrix, args, out, err)
    for line in unusable:
        print(f'error: {line}', file=err)
    return written or (1 if unusable else 0)


def _write_matrix(matrix: CapabilityMatrix, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    fmt: str = args.format
    if fmt == 'table':
        try:
            from rich.console import Console
        except ImportError:
            fmt = 'markdown'
            print('note: `rich` is not installed (extra [cli]); printing Markdown', file=err)
        else:
            if args.output is None:
                Console(file=out, width=200).print(matrix.to_rich_table())
                return 0
            fmt = 'markdown'
    text = {'markdown': matrix.to_markdown, 'json': matrix.to_json, 'html': matrix.to_html}[fmt]()
    return _write(text, args.output, out, err)


def run(argv: Sequence[str] | None = None) -> int:
    """Run the CLI with `argv` (default: `sys.argv[1:]`); returns the exit code."""
    args_list = list(sys.argv[1:] if argv is None else argv)
    if not args_list or args_list[0].startswith('-') and args_list[0] not in ('-h', '--help'):
        args_list.insert(0, 'matrix')  # `matrix` is the default command
    args = _parser(args_list[0]).parse_args(args_list)
    return int(args.func(args))


def main() -> None:
    """Console-script entry point."""
    with one_process_run():
        code = run()
    sys.exit(code)


_GC_THRESHOLDS = (10_000, 10, 10)
"""The cyclic collector's thresholds while a command runs (Python's default: 700, 10, 10)."""


@contextmanager
def one_process_run() -> Generator[None]:
    """Tune the cyclic garbage collector for one command in a process that ends with it.

    The provider SDKs a matrix run imports leave some 450,000 long-lived objects, and at the default thresholds the
    collector's full passes over them (during the imports, and again at interpreter shutdown) cost about 1.5 s of a
    4 s run while freeing next to nothing. A larger first threshold keeps memory bounded (collections still run) and
    makes those passes rare; freezing what is alive when the process exits spares shutdown the passes over it.
    Memory freed by reference counting is not affected, and the thresholds are restored after the command.
    """
    thresholds = gc.get_threshold()
    gc.set_threshold(*_GC_THRESHOLDS)
    atexit.unregister(gc.freeze)
    atexit.register(gc.freeze)  # runs before interpreter shutdown collects
    try:
        yield
    finally:
        gc.set_threshold(*thresholds)
