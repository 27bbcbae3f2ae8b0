"""Examples, README and docs use the public API only, and run.

- Every example in `examples/` runs offline (the ones with their own dedicated tests are run there too).
- Every import in an example or in a Python code block of README.md / docs/*.md names no private module (no `_x`
  component) and only names that exist: each module is imported and each imported name looked up.
"""

from __future__ import annotations

import ast
import importlib
import re
import runpy
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / 'examples'
SCRIPTS = sorted(p for p in EXAMPLES.glob('*.py') if not p.name.endswith('_test.py'))
DOCS = [ROOT / 'README.md', *sorted((ROOT / 'docs').glob('*.md'))]
_FENCE = re.compile(r'^```python[^\n]*\n(.*?)^```', re.MULTILINE | re.DOTALL)


def code_blocks(path: Path) -> Iterator[tuple[int, str]]:
    """The Python code blocks of a Markdown file, with the line each starts on."""
    text = path.read_text()
    for match in _FENCE.finditer(text):
        yield text.count('\n', 0, match.start(1)) + 1, match.group(1)


def _sources() -> Iterator[tuple[str, str]]:
    for path in sorted(EXAMPLES.glob('*.py')):
        yield str(path.relative_to(ROOT)), path.read_text()
    for path in DOCS:
        for line, code in code_blocks(path):
            yield f'{path.relative_to(ROOT)}:{line}', code


SOURCES = list(_sources())


def imported_names(code: str) -> Iterator[tuple[str, str | None]]:
    """`(module, name)` for each `from module import name`, `(module, None)` for each `import module`."""
    for node in ast.walk(ast.parse(code)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, None
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                yield node.module, alias.name


def import_problems(code: str) -> list[str]:
    """What is wrong with the imports of `code`: private modules, modules or names that do not exist."""
    problems: list[str] = []
    for module_name, name in imported_names(code):
        if module_name == '__future__':
            continue
        private = [part for part in module_name.split('.') if part.startswith('_')]
        if private or (name is not None and name.startswith('_')):
            problems.append(f'private: {module_name}{"" if name is None else f" import {name}"}')
            continue
        try:
            module = importlib.import_module(module_name)
        except ImportError as exc:
            missing = getattr(exc, 'name', None)
            if missing is not None and module_name.startswith(missing) and module_name.startswith('pydantic_ai'):
                problems.append(f'no module {module_name!r}')
            continue  # an optional dependency the tests do not install (e.g. `ag_ui` for `pydantic_ai.ui.ag_ui`)
        if name is not None and name != '*' and not hasattr(module, name):
            try:
                importlib.import_module(f'{module_name}.{name}')
            except ModuleNotFoundError:
                problems.append(f'{module_name} has no {name!r}')
    return problems


@pytest.mark.parametrize(('where', 'code'), SOURCES, ids=[where for where, _ in SOURCES])
def test_examples_and_docs_import_only_public_names_that_exist(where: str, code: str):
    assert import_problems(code) == []


def test_the_import_check_catches_private_and_missing_names():
    code = (
        'from pydantic_ai_citations._history import find_stale\n'
        'from pydantic_ai_citations import cited_answer_chunk, TrackCitations\n'
        'import pydantic_ai_citations.testing._citing_model\n'
        'from pydantic_ai_citations.ui import CitedVercelAIAdapter\n'
        'from pydantic_ai_citations import support\n'
    )
    assert import_problems(code) == [
        'private: pydantic_ai_citations._history import find_stale',
        "pydantic_ai_citations has no 'cited_answer_chunk'",
        'private: pydantic_ai_citations.testing._citing_model',
    ]


@pytest.fixture(autouse=True)
def plain_argv(monkeypatch: pytest.MonkeyPatch) -> None:
    """Examples run as scripts: they must not see pytest's own arguments (one writes to `sys.argv[1]`)."""
    monkeypatch.setattr('sys.argv', ['example.py'])


@pytest.mark.parametrize('path', SCRIPTS, ids=[p.stem for p in SCRIPTS])
def test_example_runs(path: Path, capsys: pytest.CaptureFixture[str]):
    runpy.run_path(str(path), run_name='__main__')
    assert capsys.readouterr().out.strip()


def test_track_run_example_output(capsys: pytest.CaptureFixture[str]):
    runpy.run_path(str(EXAMPLES / 'track_run.py'), run_name='__main__')
    out = capsys.readouterr().out
    assert "google-gemini: streamed=True [(0, 'after_part_end')]" in out
    assert '| Google Gemini API <sub>citing-google</sub> | yes <sub>observed 1</sub> | content' in out
