"""The one module that calls the APIs of the features the dashboard shows and acts
on: task lookup and cancel, dead-letter replay and purge (issue 14), schedules
(issue 15), pauses (issue 18).

Theory of operation. Those features live in :mod:`taskrunner.admin`. Schedules
and pauses are called directly (every :class:`~taskrunner.backends.Backend`
has them). Task lookup, cancel, replay and purge come with issue 14: until it
is part of taskrunner, each of those functions looks its API up when called
and raises :class:`Unavailable` (one line naming what is missing), so the
pages say "not available here" instead of failing. What each returns is a
frozen value the pages render and the ``/api/`` twins serve.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

import attrs

from taskrunner import admin
from taskrunner.admin import ScheduleRow
from taskrunner.backends import Backend, Paused

__all__ = [
    "ScheduleRow",
    "TaskView",
    "Unavailable",
    "cancel_task",
    "has_admin",
    "pause_queue",
    "pause_task",
    "paused",
    "purge_dead",
    "read_schedules",
    "read_task",
    "replay_dead",
    "resume_queue",
    "resume_task",
]


class Unavailable(Exception):
    """A feature this taskrunner or this backend does not have (the message says which)."""


def _admin(name: str, feature: str) -> Callable[..., Any]:
    found = getattr(admin, name, None)
    if found is None:
        raise Unavailable(f"{feature} is not available: taskrunner.admin has no {name}()")
    fn: Callable[..., Any] = found
    return fn


def _json_text(value: Any) -> str | None:
    return None if value is None else json.dumps(value, ensure_ascii=False, indent=2, default=str)


# Tasks by id (issue 14) ---------------------------------------------------------


@attrs.frozen(kw_only=True)
class TaskView:
    id: str
    state: str
    task_name: str | None
    attempts: int
    error: str | None
    result: str | None
    """JSON text of the kept result."""
    payload: str | None
    """JSON text of the payload, while queued, running or scheduled."""
    enqueued_at: float | None
    started_at: float | None
    finished_at: float | None
    run_at: float | None
    consumer: str | None
    cancelling: bool
    cancellable: bool
    """Queued, scheduled or running: a cancel can still stop it."""


DONE_STATES = frozenset({"succeeded", "failed", "cancelled"})


async def read_task(backend: Backend, group: str, task_id: str) -> TaskView | None:
    """Task ``task_id`` of ``group`` (``admin.get_task``); ``None`` when unknown.

    Raises:
        Unavailable: no task lookup here.
        BackendError: the store could not be read.
    """
    get_task = _admin("get_task", "task lookup")
    info = await get_task(backend, group, task_id)
    if info is None:
        return None
    state = str(getattr(info.state, "value", info.state))
    return TaskView(
        id=info.id,
        state=state,
        task_name=info.task_name,
        attempts=info.attempts,
        error=None if info.error is None else str(info.error),
        result=_json_text(info.result),
        payload=_json_text(info.payload),
        enqueued_at=info.enqueued_at,
        started_at=info.started_at,
        finished_at=info.finished_at,
        run_at=info.run_at,
        consumer=info.consumer,
        cancelling=info.cancelling,
        cancellable=state not in DONE_STATES,
    )


async def cancel_task(backend: Backend, group: str, task_id: str) -> bool:
    """Cancel ``task_id`` (``admin.cancel``): ``False`` when done or unknown.

    Raises:
        Unavailable: no cancel here.
    """
    cancel = _admin("cancel", "cancel")
    done: bool = await cancel(backend, group, task_id)
    return done


# Dead letters (issue 14) --------------------------------------------------------


async def replay_dead(backend: Backend, group: str, ids: Sequence[str] | None) -> int:
    """Replay the dead letters ``ids``, or all (``None``); how many were dispatched again.

    Raises:
        Unavailable: no replay here.
    """
    if ids is None:
        replay_all = _admin("replay_all_dead_letters", "dead-letter replay")
        results = await replay_all(backend, group, confirm=True)
    else:
        replay = _admin("replay_dead_letters", "dead-letter replay")
        results = await replay(backend, group, list(ids))
    return sum(1 for r in results if r.entry_id is not None)


async def purge_dead(backend: Backend, group: str, ids: Sequence[str] | None) -> int:
    """Delete the dead letters ``ids``, or all (``None``); how many were deleted.

    Raises:
        Unavailable: no purge here.
    """
    purge = _admin("purge_dead_letters", "dead-letter purge")
    count: int = await purge(backend, group, None if ids is None else list(ids), confirm=True)
    return count


# Schedules (issue 15) -----------------------------------------------------------


async def read_schedules(backend: Backend, group: str) -> list[ScheduleRow]:
    """Every schedule of ``group`` the store knows, by name: task, spec, next and last
    fire, last outcome (``admin.schedules``).

    Raises:
        BackendError: the store could not be read.
    """
    return await admin.schedules(backend, group)


# Pauses (issue 18) --------------------------------------------------------------


async def paused(backend: Backend, group: str) -> Paused:
    """The paused queues and tasks of ``group`` (``admin.paused``).

    Raises:
        BackendError: the store could not be read.
    """
    return await admin.paused(backend, group)


async def pause_queue(backend: Backend, group: str, queue: str) -> bool:
    """Pause ``queue`` for every runner of ``group``: whether it was not paused already.

    Raises:
        ValueError: ``queue`` is not a queue name.
        BackendError: the store could not be reached.
    """
    return await admin.pause(backend, group, queue=queue)


async def resume_queue(backend: Backend, group: str, queue: str) -> bool:
    """Resume ``queue`` of ``group``: whether it was paused.

    Raises:
        ValueError: ``queue`` is not a queue name.
        BackendError: the store could not be reached.
    """
    return await admin.resume(backend, group, queue=queue)


async def pause_task(backend: Backend, group: str, task: str) -> bool:
    """Pause task ``task`` for every runner of ``group`` (its runs are parked):
    whether it was not paused already.

    Raises:
        ValueError: ``task`` is not a task name.
        BackendError: the store could not be reached.
    """
    return await admin.pause(backend, group, task=task)


async def resume_task(backend: Backend, group: str, task: str) -> bool:
    """Resume task ``task`` of ``group`` (its parked runs are due at once): whether
    it was paused.

    Raises:
        ValueError: ``task`` is not a task name.
        BackendError: the store could not be reached.
    """
    return await admin.resume(backend, group, task=task)


def has_admin(name: str) -> bool:
    """Whether :mod:`taskrunner.admin` has ``name`` (so a page offers its action)."""
    return getattr(admin, name, None) is not None
