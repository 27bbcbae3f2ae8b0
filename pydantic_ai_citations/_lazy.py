"""Lazy public names for a package's `__init__.py`: each is imported from its module on first use.

The package's pytest plugin makes every pytest session of a project that installs it import
`pydantic_ai_citations/__init__.py` and `testing/__init__.py`, so those must cost nothing until a name is used.
Type checkers read the names from an `if TYPE_CHECKING:` block of explicit imports next to the table.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from importlib import import_module

__all__ = ('lazy_attributes',)


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
