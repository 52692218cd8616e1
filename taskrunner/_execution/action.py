"""How an action is called, decided once when its task is made.

An action is ``async def`` (run in the worker's trio task) or a plain
function (run in a worker thread). It takes the payload first, and may take
the run's :class:`~taskrunner.TaskContext` too:

- as a parameter annotated ``TaskContext``, passed by keyword (so it may
  come anywhere after the payload, with a default or keyword-only);
- else as a second positional parameter without a default, passed
  positionally (``async def fetch(payload, ctx)``).

An action with one parameter, or whose second one has a default, is called
with the payload alone, as before contexts existed. The signature is read
here once (``Task`` calls :func:`action_shape`), never per run.
"""

from __future__ import annotations

import functools
import inspect
import typing
from typing import Any

import attrs

from taskrunner._execution.context import TaskContext

_POSITIONAL = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)


def is_async_callable(fn: object) -> bool:
    """An ``async def`` function, method or callable object, possibly wrapped in
    ``functools.partial``."""
    while isinstance(fn, functools.partial):
        fn = fn.func
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(
        getattr(fn, "__call__", None)  # noqa: B004 - the method, not callability
    )


@attrs.frozen
class ActionShape:
    """How the worker calls an action."""

    sync: bool
    """A plain function: it runs in a worker thread."""
    context: str | int | None = None
    """Where the context goes: a keyword (``str``), the second positional
    argument (``1``), or nowhere (``None``)."""


def _annotations(action: Any) -> dict[str, Any]:
    target = action
    while isinstance(target, functools.partial):
        target = target.func
    if not (inspect.isfunction(target) or inspect.ismethod(target)):
        target = getattr(target, "__call__", target)  # noqa: B004 - a callable object's method
    try:
        return typing.get_type_hints(target)
    except Exception:  # unresolvable names: compare the annotations as written
        return dict(getattr(target, "__annotations__", {}))


def _is_context(annotation: object) -> bool:
    if annotation is TaskContext:
        return True
    if isinstance(annotation, str):  # as written, when it could not be resolved
        return any(
            part.strip().rpartition(".")[2] == "TaskContext" for part in annotation.split("|")
        )
    return any(arg is TaskContext for arg in typing.get_args(annotation))  # TaskContext | None


def action_shape(action: Any) -> ActionShape:
    """How to call ``action`` (see the module docstring).

    Raises:
        ValueError: ``action`` is not callable, its first parameter (the
            payload's) is annotated ``TaskContext``, or a positional-only
            ``TaskContext`` parameter is not the second.
    """
    if not callable(action):
        raise ValueError(f"Task.action must be callable, got {action!r}")
    sync = not is_async_callable(action)
    try:
        params = list(inspect.signature(action).parameters.values())
    except (TypeError, ValueError):  # a builtin without a signature: payload only
        return ActionShape(sync=sync)
    hints = _annotations(action)
    for index, param in enumerate(params):
        if not _is_context(hints.get(param.name, param.annotation)):
            continue
        if index == 0:
            raise ValueError(
                f"Task.action's first parameter is the payload, but {param.name!r} of "
                f"{action!r} is annotated TaskContext"
            )
        if param.kind is inspect.Parameter.POSITIONAL_ONLY:
            if index != 1:
                raise ValueError(
                    f"Task.action's TaskContext parameter {param.name!r} of {action!r} is "
                    "positional-only but not the second: it cannot be passed"
                )
            return ActionShape(sync=sync, context=1)
        if param.kind is inspect.Parameter.VAR_POSITIONAL:
            break
        return ActionShape(sync=sync, context=param.name)
    positional = [p for p in params if p.kind in _POSITIONAL]
    if len(positional) >= 2 and positional[1].default is inspect.Parameter.empty:
        return ActionShape(sync=sync, context=1)
    return ActionShape(sync=sync)
