"""What is made on first use: a package's public names, and the Pydantic type adapters of its modules.

The package's pytest plugin makes every pytest session of a project that installs it import
`pydantic_ai_citations/__init__.py` and `testing/__init__.py`, so those must cost nothing until a name is used.
Type checkers read the names from an `if TYPE_CHECKING:` block of explicit imports next to the table.
A module-level `TypeAdapter` builds its schema when made (about 10 ms for `CitedAnswer`), which every importer would pay
whether it serialises anything or not: `lazy_adapter` builds it at its first use instead.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from importlib import import_module
from typing import TYPE_CHECKING, Any, cast

if TYPE_CHECKING:
    from pydantic import TypeAdapter  # (imported when an adapter is made: the package's `__init__` imports this module)

__all__ = ('lazy_adapter', 'lazy_attributes')


def lazy_attributes(package: str, homes: Mapping[str, str]) -> tuple[Callable[[str], object], Callable[[], list[str]]]:
    """Module `__getattr__` and `__dir__` for `package`, importing each name from `homes[name]` (a submodule).

    Args:
        package: The package's `__name__`.
        homes: Public name -> the submodule holding it, relative to `package` (`'_answer'`, `'matrix._matrix'`).
    """
    namespace = sys.modules[package].__dict__

    def __getattr__(name: str) -> object:
        home = homes.get(name)
        if home is None:
            raise AttributeError(f'module {package!r} has no attribute {name!r}')
        value = getattr(import_module(f'.{home}', package), name)
        namespace[name] = value  # later lookups find the name directly, as after a plain import
        return value

    def __dir__() -> list[str]:
        return sorted({*namespace, *homes})

    return __getattr__, __dir__


class _LazyAdapter:
    """Stands for `TypeAdapter(type_)`, made on the first attribute looked up (two threads may both make one)."""

    __slots__ = ('_adapter', '_type')

    def __init__(self, type_: Any) -> None:
        self._type: Any = type_
        self._adapter: TypeAdapter[Any] | None = None

    def __getattr__(self, name: str) -> object:
        adapter = self._adapter
        if adapter is None:
            from pydantic import TypeAdapter

            adapter = self._adapter = TypeAdapter[Any](self._type)
        return getattr(adapter, name)

    def __repr__(self) -> str:
        return f'lazy_adapter({self._type!r})'


def lazy_adapter(type_: Any) -> TypeAdapter[Any]:
    """A `TypeAdapter(type_)` that builds its schema on first use (annotate the variable with the adapter's type)."""
    return cast('TypeAdapter[Any]', _LazyAdapter(type_))
