"""The package's dependency rule, read from the source: which modules may import which.

- `formats` (pure parsers), `support` and the values modules import nothing from the capabilities, `matrix`,
  `testing`, `ui` or the replay machinery (`_replay`);
- `matrix` does not import `testing`.

Imports are followed transitively through the package, including imports inside functions (they run when the
function does); imports under `if TYPE_CHECKING:` are left out (they never run). A capability module is one that
defines a subclass of Pydantic AI's `AbstractCapability` / `WrapperCapability`.
"""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

import pytest

import pydantic_ai_citations

PACKAGE = 'pydantic_ai_citations'
ROOT = Path(pydantic_ai_citations.__file__).parent
VALUES = ('_answer', '_problems', '_render', '_redact', '_urls', '_edit', '_json_markup')
"""The values modules (`_edit` once it exists)."""
CAPABILITY_BASES = frozenset({'AbstractCapability', 'WrapperCapability'})


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix('').parts
    return '.'.join(parts[:-1] if parts[-1] == '__init__' else parts)


MODULES: dict[str, Path] = {_module_name(p): p for p in sorted(ROOT.rglob('*.py'))}


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == 'TYPE_CHECKING') or (
        isinstance(test, ast.Attribute) and test.attr == 'TYPE_CHECKING'
    )


def _runtime_nodes(tree: ast.AST) -> list[ast.AST]:
    """Every node that can run: the bodies of `if TYPE_CHECKING:` blocks are skipped (their `else` is kept)."""
    nodes: list[ast.AST] = []
    stack: list[ast.AST] = [tree]
    while stack:
        node = stack.pop()
        nodes.append(node)
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            stack.extend(node.orelse)
            continue
        stack.extend(ast.iter_child_nodes(node))
    return nodes


def _resolve(module: str, node: ast.ImportFrom) -> list[str]:
    if node.level == 0:
        base = node.module or ''
    else:
        is_package = MODULES[module].name == '__init__.py'
        parts = module.split('.')
        parts = parts if is_package else parts[:-1]
        parts = parts[: len(parts) - (node.level - 1)]
        base = '.'.join([*parts, *([node.module] if node.module else [])])
    # `from pkg import sub` imports the submodule `pkg.sub` when there is one.
    return [f'{base}.{alias.name}' if f'{base}.{alias.name}' in MODULES else base for alias in node.names]


@cache
def direct_imports(module: str) -> frozenset[str]:
    """The package modules `module` imports when it runs (not the parent packages Python imports on the way)."""
    tree = ast.parse(MODULES[module].read_text(encoding='utf-8'))
    found: set[str] = set()
    for node in _runtime_nodes(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            found.update(_resolve(module, node))
    return frozenset(name for name in found if name in MODULES and name != module)


def imports(module: str) -> set[str]:
    """Every package module `module` imports, directly or through other package modules."""
    seen: set[str] = set()
    stack = [module]
    while stack:
        for name in direct_imports(stack.pop()):
            if name not in seen:
                seen.add(name)
                stack.append(name)
    return seen


def _defines_capability(path: Path) -> bool:
    for node in ast.walk(ast.parse(path.read_text(encoding='utf-8'))):
        if isinstance(node, ast.ClassDef):
            for base in node.bases:
                target = base.value if isinstance(base, ast.Subscript) else base
                name = target.attr if isinstance(target, ast.Attribute) else getattr(target, 'id', '')
                if name in CAPABILITY_BASES:
                    return True
    return False


CAPABILITIES = frozenset(name for name, path in MODULES.items() if _defines_capability(path))
FORBIDDEN_PACKAGES = tuple(f'{PACKAGE}.{p}' for p in ('matrix', 'testing', 'ui', '_replay'))


def _forbidden(name: str) -> bool:
    return name in CAPABILITIES or any(name == p or name.startswith(p + '.') for p in FORBIDDEN_PACKAGES)


LOWER = sorted(
    name
    for name in MODULES
    if name.startswith((f'{PACKAGE}.formats', f'{PACKAGE}.support')) or name in {f'{PACKAGE}.{v}' for v in VALUES}
)


def test_the_rule_sees_the_package() -> None:
    assert f'{PACKAGE}._track' in CAPABILITIES
    assert f'{PACKAGE}.formats.wire' in LOWER
    assert f'{PACKAGE}._answer' in LOWER
    assert f'{PACKAGE}.formats._sse' in imports(f'{PACKAGE}.formats.wire')


@pytest.mark.parametrize('module', LOWER)
def test_parsers_support_and_values_import_no_capability_matrix_testing_or_ui(module: str) -> None:
    assert sorted(name for name in imports(module) if _forbidden(name)) == []


@pytest.mark.parametrize('module', sorted(name for name in MODULES if name.startswith(f'{PACKAGE}.matrix')))
def test_matrix_does_not_import_testing(module: str) -> None:
    assert sorted(name for name in imports(module) if name.startswith(f'{PACKAGE}.testing')) == []
