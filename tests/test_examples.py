"""Examples, README and docs use the public API only, and run.

- Every example in `examples/` runs offline (the ones with their own dedicated tests are run there too).
- Every import in an example or in a Python code block of README.md / docs/*.md names no private module (no `_x`
  component) and only names that exist: each module is imported and each imported name looked up.
- Every Python code block of README.md / docs/*.md runs, the blocks of one file in order in one namespace (as a
  reader would paste them), top-level `await` allowed, in a temporary directory. A model name such as
  `'anthropic:claude-sonnet-4-6'` gets a `CitingModel` in that provider's style (`TestModel` when the request wants
  structured output), so nothing leaves the machine. A block preceded by `<!-- not run: reason -->` is only
  import-checked; the reason says why.
"""

from __future__ import annotations

import ast
import asyncio
import importlib
import inspect
import json
import re
import runpy
import sys
import types
from collections.abc import AsyncGenerator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, cast

import pytest
from pydantic_ai import RunContext, WebCitationSource, models
from pydantic_ai.messages import ModelMessage, ModelResponse
from pydantic_ai.models import Model, ModelRequestParameters, StreamedResponse
from pydantic_ai.models.test import TestModel
from pydantic_ai.models.wrapper import WrapperModel
from pydantic_ai.settings import ModelSettings

from pydantic_ai_citations.testing import CitingModel, CitingStyle, ScriptedCitation

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / 'examples'
SCRIPTS = sorted(p for p in EXAMPLES.glob('*.py') if not p.name.endswith('_test.py'))
DOCS = [ROOT / 'README.md', *sorted((ROOT / 'docs').glob('*.md'))]
_FENCE = re.compile(
    r'^(?:<!-- not run: (?P<skip>[^\n]*?) -->\n)?```python[^\n]*\n(?P<code>.*?)^```', re.MULTILINE | re.DOTALL
)


def code_blocks(path: Path) -> Iterator[tuple[int, str, str | None]]:
    """The Python code blocks of a Markdown file: the line each starts on, its code, why it is not run (or `None`)."""
    text = path.read_text()
    for match in _FENCE.finditer(text):
        yield text.count('\n', 0, match.start('code')) + 1, match.group('code'), match.group('skip')


def _sources() -> Iterator[tuple[str, str]]:
    for path in sorted(EXAMPLES.glob('*.py')):
        yield str(path.relative_to(ROOT)), path.read_text()
    for path in DOCS:
        for line, code, _ in code_blocks(path):
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


# --- README and docs code blocks run --------------------------------------------------------------------------------

TEXT = 'K2 is 8,611 m tall. It lies on the China–Pakistan border.'
CITATIONS = [
    ScriptedCitation('K2 is 8,611 m tall.', [WebCitationSource('https://en.wikipedia.org/wiki/K2', title='K2')]),
    ScriptedCitation('China–Pakistan border', [WebCitationSource('https://example.com/border', title='Border')]),
]
_STYLES: dict[str, CitingStyle] = {
    'anthropic': 'anthropic',
    'bedrock': 'bedrock',
    'openai': 'openai-responses',
    'openai-chat': 'openai-chat',
    'openrouter': 'openrouter',
    'google': 'google',
    'google-gla': 'google',
    'google-vertex': 'google',
    'xai': 'xai',
}


class DocModel(WrapperModel):
    """Answers like the named provider with `CitingModel`; structured output from `TestModel`."""

    def __init__(self, style: CitingStyle) -> None:
        super().__init__(CitingModel(TEXT, CITATIONS, style=style, part_after_text=style == 'google'))
        self.structured = TestModel()

    def _pick(self, params: ModelRequestParameters) -> Model:
        return self.structured if params.output_tools or params.output_mode != 'text' else self.wrapped

    async def request(
        self,
        messages: list[ModelMessage],
        model_settings: ModelSettings | None,
        model_request_parameters: ModelRequestParameters,
    ) -> ModelResponse:
        return await self._pick(model_request_parameters).request(messages, model_settings, model_request_parameters)

    @asynccontextmanager
    async def request_stream(
        self,
        messages: list[ModelMessage],
        model_settings: ModelSettings | None,
        model_request_parameters: ModelRequestParameters,
        run_context: RunContext[Any] | None = None,
    ) -> AsyncGenerator[StreamedResponse]:
        model = self._pick(model_request_parameters)
        async with model.request_stream(messages, model_settings, model_request_parameters, run_context) as stream:
            yield stream


def doc_model(model: Model | str, *args: object, **kwargs: object) -> Model:
    if isinstance(model, Model):
        return model
    provider = model.split(':', 1)[0]
    if provider not in _STYLES:
        raise AssertionError(f'a docs block uses model {model!r}; map its provider in tests/test_examples.py')
    return DocModel(_STYLES[provider])


DOC_FILES = [p for p in DOCS if any(True for _ in code_blocks(p))]


@pytest.mark.parametrize('path', DOC_FILES, ids=[str(p.relative_to(ROOT)) for p in DOC_FILES])
def test_docs_code_blocks_run(
    path: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
):
    monkeypatch.setattr(models, 'infer_model', doc_model)
    monkeypatch.chdir(tmp_path)
    module = types.ModuleType('docs_code_blocks')  # a real module, so Pydantic resolves the blocks' annotations
    monkeypatch.setitem(sys.modules, module.__name__, module)
    namespace = module.__dict__
    loop = asyncio.new_event_loop()  # one per file, current on the thread: `await` blocks and `run_sync` share it
    asyncio.set_event_loop(loop)
    try:
        for line, code, skip in code_blocks(path):
            if skip is not None:
                continue
            where = f'{path.relative_to(ROOT)}:{line}'
            compiled = compile(code, where, 'exec', flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
            result = eval(compiled, namespace)  # the repository's own docs
            if inspect.iscoroutine(result):  # a block with top-level `await`
                loop.run_until_complete(result)
    finally:
        loop.close()
        asyncio.set_event_loop(None)


def test_docs_matrix_schema_names_every_column_api_and_top_level_key():
    from pydantic_ai_citations.matrix import COLUMNS, EVIDENCE, CapabilityMatrix

    doc = (ROOT / 'docs' / 'matrix.md').read_text()
    matrix = CapabilityMatrix()
    matrix.add('anthropic-messages', 'citations', 'yes', 'probe')
    data = matrix.to_dict()
    row = json.loads(matrix.to_json())['rows'][0]
    documented = [f'"{key}"' for key in [*data, *cast(dict[str, object], row)]] + [f'`{c.key}`' for c in COLUMNS]
    documented += [f'`{e}`' for e in EVIDENCE]
    assert [name for name in documented if name not in doc] == []
    assert f'"version": {data["version"]}' in doc
