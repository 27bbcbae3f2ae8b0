"""Reading raw provider JSON defensively: each helper returns the value in the expected shape, or nothing."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import cast


def as_map(value: object) -> Mapping[str, object] | None:
    """`value` if it is a mapping (a JSON object), else `None`."""
    # (Casts to a quoted type: a subscripted one is built anew at every call, and these run on every raw entry.)
    if value.__class__ is dict:  # the usual case, without the slower ABC check
        return cast('Mapping[str, object]', value)
    return cast('Mapping[str, object]', value) if isinstance(value, Mapping) else None


def as_list(value: object) -> Sequence[object]:
    """`value` if it is a list or tuple (a JSON array), else an empty sequence."""
    return cast('Sequence[object]', value) if isinstance(value, (list, tuple)) else ()


def as_maps(value: object) -> list[Mapping[str, object]]:
    """The objects in the array `value`, skipping items that are not objects."""
    return [m for item in as_list(value) if (m := as_map(item)) is not None]


def as_str(value: object) -> str | None:
    """`value` if it is a non-empty string, else `None`."""
    return value if isinstance(value, str) and value else None


def as_int(value: object) -> int | None:
    """`value` if it is an integer (not a bool), else `None`."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None
