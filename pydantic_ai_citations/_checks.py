"""Argument checks for the public surface: misuse raises `UserError` at the call that caused it, naming the argument.

Used by the capabilities' `__post_init__` (so an agent spec with a wrong value fails when the agent is built, not
mid-run) and by the public functions that take a run's result, an answer or a path.
"""

from __future__ import annotations

import reprlib
from collections.abc import Mapping, Sequence
from types import NoneType
from typing import TYPE_CHECKING, Any, cast

import pydantic
from pydantic_ai.agent import AbstractAgent
from pydantic_ai.exceptions import UserError
from pydantic_ai.messages import ModelRequest, ModelResponse

if TYPE_CHECKING:
    from pydantic_ai.capabilities import AbstractCapability

__all__ = (
    'is_messages',
    'require',
    'require_agent',
    'require_answer',
    'require_at_least',
    'require_base_fields',
    'require_bools',
    'require_mapping',
    'require_messages',
    'require_optional_bools',
    'require_result',
    'shown',
)

_REPR = reprlib.Repr()
_REPR.maxstring = 60
_REPR.maxother = 60


def first_error(error: pydantic.ValidationError) -> str:
    """The first error of a failed validation, as `where: what`.

    Without the input: it can be bytes that are not UTF-8, which the error's own rendering would fail on.
    """
    first = error.errors(include_url=False, include_context=False, include_input=False)[0]
    where = '.'.join(str(step) for step in first['loc'])
    return f'{where}: {first["msg"]}' if where else first['msg']


def shown(value: object) -> str:
    """`repr(value)`, shortened for an error message (a list of messages can be long)."""
    return _REPR.repr(value)


def require(where: str, name: str, value: object, expected: type | tuple[type, ...], what: str) -> None:
    """Raise `UserError` unless `value` is an instance of `expected` (where `bool` does not pass for `int`).

    Args:
        where: The call, e.g. `'TrackCitations'`.
        name: The argument.
        value: The value given.
        expected: The accepted types (`types.NoneType` for `None`).
        what: What was expected, for the message (e.g. ``'`True` or `False`'``).
    """
    types = expected if isinstance(expected, tuple) else (expected,)
    if isinstance(value, types) and (bool in types or not isinstance(value, bool)):
        return
    raise UserError(f'{where}: `{name}` must be {what}, got {shown(value)}.')


def require_at_least(
    where: str, name: str, value: object, minimum: float, expected: type | tuple[type, ...], what: str
) -> None:
    """`require` `value` to be an instance of `expected` and not less than `minimum` (`what` says both)."""
    require(where, name, value, expected, what)
    if cast(float, value) < minimum:
        raise UserError(f'{where}: `{name}` must be {what}, got {shown(value)}.')


def require_bools(where: str, **values: object) -> None:
    """`require` each of `values` (by argument name) to be a `bool`."""
    for name, value in values.items():
        require(where, name, value, bool, '`True` or `False`')


def require_optional_bools(where: str, **values: object) -> None:
    """`require` each of `values` (by argument name) to be a `bool` or `None` (a truthy string is neither)."""
    for name, value in values.items():
        require(where, name, value, (bool, NoneType), '`True`, `False` or `None`')


def require_mapping(
    where: str, name: str, value: object, keys: type, values: type | tuple[type, ...], what: str
) -> None:
    """Raise `UserError` unless `value` is a mapping of `keys` instances to `values` instances, naming a bad entry."""
    given = value
    detail = ''
    if isinstance(value, Mapping):
        items = cast('Mapping[object, object]', value).items()
        bad = next(((k, v) for k, v in items if not isinstance(k, keys) or not isinstance(v, values)), None)
        if bad is None:
            return
        detail = f' (entry {shown(bad[0])}: {shown(bad[1])})'
    raise UserError(f'{where}: `{name}` must be {what}, got {shown(given)}{detail}.')


def require_base_fields(capability: AbstractCapability[Any]) -> None:
    """`require` the fields every capability has from `AbstractCapability`: `id`, `description`, `defer_loading`."""
    where = type(capability).__name__
    require(where, 'id', capability.id, (str, NoneType), 'a string or None')
    require(where, 'description', capability.description, (str, NoneType), 'a string or None')
    require_bools(where, defer_loading=capability.defer_loading)


def require_agent(agent: object, *, where: str, name: str = 'agent') -> None:
    """Raise `UserError` unless `agent` is an agent (`Agent`, or an `AbstractAgent` such as one wrapping it)."""
    if isinstance(agent, AbstractAgent):
        return
    hint = ''
    if callable(getattr(agent, 'all_messages', None)):
        hint = " That is a run's result: pass the agent that ran it."
    raise UserError(
        f'{where}: `{name}` must be an agent (`Agent`, or an agent wrapping one), got {shown(agent)}.{hint}'
    )


def require_answer(answer: object, *, where: str, name: str = 'answer') -> None:
    """Raise `UserError` unless `answer` is a `CitedAnswer`, pointing a run's result or messages to what builds one."""
    from ._answer import CitedAnswer  # here, not at the top: `_answer` itself imports this module

    given = answer  # (not narrowed by the checks below: they would make its type partly unknown)
    if isinstance(answer, CitedAnswer):
        return
    hint = ''
    if callable(getattr(answer, 'all_messages', None)):
        hint = " For a run's result, pass `CitedAnswer.from_result(result)`."
    elif isinstance(answer, (list, tuple)):
        hint = ' For a list of messages, pass `CitedAnswer.from_messages(messages)`.'
    raise UserError(f'{where}: `{name}` must be a `CitedAnswer`, got {shown(given)}.{hint}')


def require_result(result: object, *, where: str, name: str = 'result') -> None:
    """Raise `UserError` unless `result` looks like a run's result (it has `all_messages()`).

    The result of `run`, `run_sync`, `run_stream` (`StreamedRunResult`) or `iter` (`AgentRun`) passes; the message
    points callers with a run id or a list of messages to the call that takes those.
    """
    given = result
    if callable(getattr(result, 'all_messages', None)):
        return
    hint = ''
    if isinstance(result, str):
        hint = ' For a run id, use `TrackCitations.report_run(run_id)`.'
    elif isinstance(result, (list, tuple)):
        hint = ' For a list of messages, use `CitedAnswer.from_messages(messages)`.'
    raise UserError(
        f'{where}: `{name}` must be the result of `agent.run`, `run_sync`, `run_stream` or `iter`, '
        f'got {shown(given)}.{hint}'
    )


_MESSAGE_CLASSES = (ModelRequest, ModelResponse)
_MESSAGE_CLASS_SET = frozenset(_MESSAGE_CLASSES)


def is_messages(value: object) -> bool:
    """Whether `value` is a non-empty list (or tuple) of messages: for a hint where a run's messages are not expected."""
    if not isinstance(value, (list, tuple)):
        return False
    items = cast('Sequence[object]', value)
    return bool(items) and all(isinstance(item, _MESSAGE_CLASSES) for item in items)


def require_messages(messages: object, *, where: str) -> None:
    """Raise `UserError` unless `messages` is a sequence of `ModelRequest` / `ModelResponse`, naming a bad item.

    Points a run's result to `all_messages()` and dicts (stored JSON) to `ModelMessagesTypeAdapter`. On hot paths:
    the item check is one C-level pass over the items' classes (10,000 messages in a fraction of a millisecond);
    items are looked at one by one only when another class is found (a subclass passes).
    """
    if isinstance(messages, Sequence) and not isinstance(messages, (str, bytes)):
        items = cast('Sequence[object]', messages)
        if _MESSAGE_CLASS_SET.issuperset(map(type, items)):
            return
        bad = next((i for i, item in enumerate(items) if not isinstance(item, _MESSAGE_CLASSES)), None)
        if bad is None:
            return
        hint = (
            ' For stored JSON, load it with `ModelMessagesTypeAdapter.validate_python(...)` first.'
            if isinstance(items[bad], Mapping)
            else ''
        )
        raise UserError(
            f'{where}: `messages` must be a list of messages (`ModelRequest` / `ModelResponse`), got {shown(items)} '
            f'(item {bad}: {shown(items[bad])}).{hint}'
        )
    hint = " For a run's result, pass `result.all_messages()`." if hasattr(messages, 'all_messages') else ''
    raise UserError(f'{where}: `messages` must be a list of messages, got {shown(messages)}.{hint}')
