"""The one module that calls the APIs of the features the dashboard shows and acts
on: task lookup and cancel, dead-letter replay and purge (issue 14), schedules
(issue 15), pauses (issue 18).

Theory of operation. Those features live in :mod:`taskrunner.admin`, which works
with a backend and a group name alone (no runner), and every
:class:`~taskrunner.backends.Backend` implements what they need; each function
here is one typed call to it, turning what it returns into the frozen value the
pages render and the ``/api/`` twins serve where they need one (:class:`TaskView`:
the result and payload as JSON text). Keeping the calls here means a change of
those APIs is a change to this module alone.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import attrs

from taskrunner import TaskInfo, TaskState, admin
from taskrunner.admin import DeadLetterInfo, ScheduleRow
from taskrunner.backends import Backend, Paused

__all__ = [
    "ScheduleRow",
    "TaskView",
    "cancel_task",
    "dead_letters",
    "pause_queue",
    "pause_task",
    "paused",
    "purge_dead",
    "read_schedules",
    "read_task",
    "replay_dead",
    "resume_queue",
    "resume_task",
    "task_view",
]


def _json_text(value: Any) -> str | None:
    return None if value is None else json.dumps(value, ensure_ascii=False, indent=2, default=str)


# Tasks by id (issue 14) ---------------------------------------------------------


@attrs.frozen(kw_only=True)
class TaskView:
    id: str
    state: str
    """A :class:`~taskrunner.TaskState` value: ``queued``, ``scheduled``, ``running``,
    ``succeeded``, ``failed`` or ``cancelled``."""
    task_name: str | None
    attempts: int
    error: str | None
    """``Type: message`` of a failed task's error."""
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
    progress: str | None = None
    """Its last ``ctx.progress`` report, ``42% (the note)``."""
    progress_at: float | None = None
    """Queued, scheduled or running: a cancel can still stop it."""
    workflow: str | None = None
    """The workflow it is a step of (its page links there), if any."""
    step: str | None = None
    """Its step id in :attr:`workflow`."""


DONE_STATES = frozenset({TaskState.SUCCEEDED, TaskState.FAILED, TaskState.CANCELLED})


def task_view(info: TaskInfo) -> TaskView:
    """What the task page shows of ``info`` (pure)."""
    return TaskView(
        id=info.id,
        state=info.state.value,
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
        cancellable=info.state not in DONE_STATES,
        progress=None if info.progress is None else str(info.progress),
        progress_at=None if info.progress is None else info.progress.at,
        workflow=info.workflow,
        step=info.step,
    )


async def read_task(backend: Backend, group: str, task_id: str) -> TaskView | None:
    """Task ``task_id`` of ``group`` (``admin.get_task``); ``None`` when unknown (or
    done without a kept result).

    Raises:
        BackendError: the store could not be read.
    """
    info = await admin.get_task(backend, group, task_id)
    return None if info is None else task_view(info)


async def cancel_task(backend: Backend, group: str, task_id: str) -> bool:
    """Cancel ``task_id`` wherever it is (``admin.cancel``): ``False`` when it is done
    or unknown.

    Raises:
        BackendError: the store could not be reached.
    """
    return await admin.cancel(backend, group, task_id)


# Dead letters (issue 14) --------------------------------------------------------


async def dead_letters(backend: Backend, group: str, count: int) -> list[DeadLetterInfo]:
    """The oldest ``count`` dead letters of every queue of ``group`` (``admin.dead_letters``).

    Raises:
        BackendError: the store could not be read.
    """
    return await admin.dead_letters(backend, group, count=count)


def by_queue(ids: Sequence[str]) -> dict[str | None, list[str]]:
    """The page's ``<queue>:<id>`` values (an id alone: any queue) by queue (pure;
    neither a queue name nor a stream id holds a ``:``)."""
    out: dict[str | None, list[str]] = {}
    for value in ids:
        queue, found, dead_id = value.rpartition(":")
        out.setdefault(queue if found and queue else None, []).append(dead_id)
    return out


async def replay_dead(backend: Backend, group: str, ids: Sequence[str] | None) -> int:
    """Replay the dead letters ``ids`` (``<queue>:<id>``, or an id of any queue), or all
    (``None``, every queue's); how many were dispatched again (one that is gone,
    whose unique task is queued or running, or that has no payload is not).

    Raises:
        BackendError: the store could not be reached (some may have been replayed).
    """
    if ids is None:
        results = await admin.replay_all_dead_letters(backend, group, confirm=True)
    else:
        results = []
        for queue, some in by_queue(ids).items():
            results += await admin.replay_dead_letters(backend, group, some, queue=queue)
    return sum(1 for r in results if r.replayed)


async def purge_dead(backend: Backend, group: str, ids: Sequence[str] | None) -> int:
    """Delete the dead letters ``ids`` (as :func:`replay_dead` takes them), or all
    (``None``, every queue's); how many were deleted.

    Raises:
        BackendError: the store could not be reached.
    """
    if ids is None:
        return await admin.purge_dead_letters(backend, group, None, confirm=True)
    deleted = 0
    for queue, some in by_queue(ids).items():
        deleted += await admin.purge_dead_letters(backend, group, some, confirm=True, queue=queue)
    return deleted


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
