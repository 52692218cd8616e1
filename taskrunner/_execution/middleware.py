"""Middleware: ``async def middleware(ctx, call_next)`` wrapped around every run.

Theory of operation. Middlewares are kept in registration order, the first
registered outermost. When ``serve`` starts, the worker takes a snapshot of
them (a tuple: registering one while serving takes effect at the next
``serve``). For each run :func:`run_chain` nests them around the innermost
call, which runs the action (in a thread for a plain ``def`` one), so each
middleware's ``call_next()`` runs the ones inside it and returns the
action's result. A middleware that raises fails the attempt exactly as the
action raising would. With none registered the worker calls the action
directly and builds no chain at all.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from functools import partial
from typing import Any

from taskrunner._execution.action import is_async_callable
from taskrunner._execution.context import TaskContext

CallNext = Callable[[], Awaitable[Any]]
"""What a middleware calls to run the rest of the chain; returns the action's result."""
Middleware = Callable[[TaskContext, CallNext], Awaitable[Any]]
"""``async def middleware(ctx, call_next) -> result``."""


def check_middleware(fn: object) -> None:
    """Refuse what cannot be a middleware.

    Raises:
        TypeError: ``fn`` is not an async function (or async callable).
    """
    if not callable(fn) or not is_async_callable(fn):
        raise TypeError(f"middleware must be an async function taking (ctx, call_next), got {fn!r}")


def run_chain(middlewares: Sequence[Middleware], ctx: TaskContext, innermost: CallNext) -> Any:
    """``middlewares`` nested around ``innermost`` (the first outermost), called:
    the awaitable of the outermost middleware."""
    call_next = innermost
    for middleware in reversed(middlewares):
        call_next = partial(middleware, ctx, call_next)
    return call_next()
