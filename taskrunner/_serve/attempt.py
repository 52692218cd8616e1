"""What one attempt calls: the action, with its context, middlewares or thread.

Theory of operation (the worker that awaits it is :mod:`taskrunner._serve.worker`).
A plain ``async`` action without middleware and without a context is awaited
by the worker as it is, and builds nothing here. Otherwise :func:`attempt_call`
builds the :class:`~taskrunner.TaskContext` when someone reads it (an action
that takes it, or a middleware), nests the middlewares around the action
(:func:`~taskrunner._execution.middleware.run_chain`), and runs a plain
``def`` action in a worker thread (:class:`Thread`: whether it returned, for a
run that keeps its pool slot until it has). It returns the awaitable of the
action's result, not awaited here: a coroutine layer less per run.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import Any

import trio

from taskrunner import _shards
from taskrunner._execution.context import EMPTY_STATE, TaskContext
from taskrunner._execution.middleware import CallNext, Middleware, run_chain
from taskrunner._execution.outcomes import entry_time
from taskrunner._execution.progress import Reports
from taskrunner._serve.steps import step_context
from taskrunner._task import Task
from taskrunner._wire import MessageExtras, TaskMessage
from taskrunner.backends import QueueEntry

NO_EXTRAS = MessageExtras()
"""The extras of a message that has none: every field its default."""


class Thread:
    """A plain ``def`` action's thread: whether it returned, and an event set then
    (its run keeps its pool slot until it has)."""

    def __init__(self) -> None:
        self._token = trio.lowlevel.current_trio_token()
        self.returned = False
        self.done = trio.Event()

    def call(self, fn: Callable[[], Any]) -> Any:
        try:
            return fn()
        finally:
            self.returned = True
            try:
                self._token.run_sync_soon(self.done.set)
            except trio.RunFinishedError:  # the runner is gone: nobody waits any more
                pass


def attempt_call(
    entry: QueueEntry,
    task: Task,
    message: TaskMessage,
    payload: Any,
    deadline: float,
    thread: Thread | None,
    *,
    middlewares: Sequence[Middleware],
    state: Mapping[str, Any],
    unix_time: Callable[[float], float],
    limiter: trio.CapacityLimiter,
    reports: Reports | None = None,
) -> Any:
    """The awaitable of the attempt's result, with its context, ``middlewares`` or thread.

    Args:
        entry, task, message, payload: What runs.
        deadline: The run's deadline on trio's clock (``inf``: no timeout).
        thread: Where a plain ``def`` action runs; ``None`` for an async one.
        middlewares: Wrapped around the action, the first outermost.
        state: What the lifespan yielded (``ctx.state``).
        unix_time: The backend's clock to unix seconds (``ctx.dispatched_at``).
        limiter: Bounds the threads.
        reports: Where ``ctx.progress`` keeps its reports (the runner's).
    """
    shape = task.shape
    ctx = None
    if shape.context is not None or middlewares:
        # The extras read once (each of the message's properties reads them again); a
        # message without any reads the defaults, which are what those properties say.
        extras = message.extras or NO_EXTRAS
        task_id = extras.id or entry.id
        if entry.group is not None:  # a shard's run: known by its sharded id
            task_id = _shards.run_task_id(entry.group, task_id)
        first = extras.dispatched_at
        ctx = TaskContext(
            message_id=entry.id,
            task_id=task_id,
            task_name=task.name,
            attempt=extras.attempts + entry.delivery_count,
            max_attempts=task.attempts,
            deadline=None if deadline == math.inf else deadline,
            dispatched_at=unix_time(first if first is not None else entry_time(entry.id)),
            state=state,
            trace=extras.trace or EMPTY_STATE,
            schedule=extras.schedule,
            tick=extras.tick,
            reports=reports,
        )
        if extras.workflow is not None:  # a workflow's step: its parents' results
            ctx = step_context(ctx, message)
    if thread is None and not middlewares:  # a context alone: called as it is
        if shape.context == 1:
            return task.action(payload, ctx)
        return task.action(payload, **{str(shape.context): ctx})
    if shape.context is None:
        action: CallNext = partial(task.action, payload)
    elif shape.context == 1:
        action = partial(task.action, payload, ctx)
    else:
        action = partial(task.action, payload, **{str(shape.context): ctx})
    if thread is not None:
        action = partial(
            trio.to_thread.run_sync,
            partial(thread.call, action),
            limiter=limiter,
            abandon_on_cancel=True,
        )
    if not middlewares:
        return action()
    assert ctx is not None
    return run_chain(middlewares, ctx, action)
