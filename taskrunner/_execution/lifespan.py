"""The runner's lifespan: resources opened once per ``serve``, shared as ``ctx.state``.

Theory of operation. ``@runner.lifespan`` registers an async generator
function, or a function returning an async context manager (an
``@asynccontextmanager``), that receives the runner. :func:`open_lifespan`
enters it before anything is fetched and yields what it yielded, as a
read-only mapping, which every :class:`~taskrunner.TaskContext` of that
``serve`` carries as ``state``. An exception while entering it becomes
:class:`~taskrunner.errors.LifespanError` naming it, and ``serve`` starts
nothing. It is exited once the workers have drained, always as a normal exit
(whatever stopped ``serve``), shielded from cancellation for at most
``exit_timeout`` seconds, so a cleanup that awaits still runs when ``serve``
was cancelled, and a cleanup that hangs cannot hang the shutdown.
"""

from __future__ import annotations

import contextlib
import inspect
import logging
from collections.abc import AsyncIterator, Callable, Mapping
from types import MappingProxyType
from typing import Any

import trio

from taskrunner._execution.context import EMPTY_STATE
from taskrunner.errors import LifespanError

log = logging.getLogger(__name__)

Lifespan = Callable[[Any], Any]
"""``lifespan(runner)``: an async generator, or an async context manager, that yields
a mapping (or ``None``)."""


def check_lifespan(fn: object) -> None:
    """Refuse what cannot be a lifespan.

    Raises:
        TypeError: ``fn`` is not callable, or is a coroutine function (it must
            yield: an async generator function or an ``@asynccontextmanager``).
    """
    if not callable(fn) or inspect.iscoroutinefunction(fn):
        raise TypeError(
            "lifespan must be an async generator function or an @asynccontextmanager "
            f"function taking the runner, got {fn!r}"
        )


def _name(fn: Lifespan) -> str:
    return getattr(fn, "__qualname__", None) or repr(fn)


def _manager(fn: Lifespan, runner: Any) -> contextlib.AbstractAsyncContextManager[Any]:
    if inspect.isasyncgenfunction(fn):
        return contextlib.asynccontextmanager(fn)(runner)
    manager = fn(runner)
    if not hasattr(manager, "__aenter__") or not hasattr(manager, "__aexit__"):
        raise TypeError(f"it returned {manager!r}, not an async context manager")
    return manager  # type: ignore[no-any-return]


@contextlib.asynccontextmanager
async def open_lifespan(
    fn: Lifespan | None, runner: Any, exit_timeout: float
) -> AsyncIterator[Mapping[str, Any]]:
    """Enter the lifespan ``fn(runner)`` (if any) and yield its state.

    Raises:
        LifespanError: it raised while entering (``__cause__``), or yielded
            neither a mapping nor ``None``.
    """
    if fn is None:
        yield EMPTY_STATE
        return
    name = _name(fn)
    # One scope around both the entry and the exit, shielded and given its deadline
    # only at the exit: a lifespan that opens a nursery on entry closes it on exit,
    # so no cancel scope may be opened between the two (trio's nesting rule).
    failure: BaseException | None = None
    with trio.CancelScope() as scope:
        try:
            manager = _manager(fn, runner)
            state = await manager.__aenter__()
        except Exception as exc:
            raise LifespanError(name, f"{type(exc).__name__}: {exc}") from exc
        try:
            if state is None:
                view: Mapping[str, Any] = EMPTY_STATE
            elif isinstance(state, Mapping):
                view = MappingProxyType(state) if isinstance(state, dict) else state
            else:
                raise LifespanError(name, f"it yielded {state!r}, not a mapping or None")
            yield view
        except BaseException as exc:
            failure = exc
            raise
        finally:
            scope.shield = True
            scope.deadline = trio.current_time() + exit_timeout
            try:
                await manager.__aexit__(None, None, None)
            except Exception:
                log.exception("lifespan %s raised while exiting", name)
    if scope.cancelled_caught:
        log.error("lifespan %s did not exit within %.3gs; left as it was", name, exit_timeout)
        if failure is not None:  # what was unwinding serve when the exit timed out
            raise failure
