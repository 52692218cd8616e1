"""The one module that calls the APIs of features other issues bring: task lookup and
cancel, dead-letter replay and purge (issue 14), schedules (issue 15), pauses (issue 18).

Theory of operation. Those features live in :mod:`taskrunner.admin` (and, for
schedules, the backend's ``read_schedules``) once they are part of taskrunner.
Each function here looks its API up when called and raises :class:`Unavailable`
(one line naming what is missing) when this taskrunner or this backend does not
have it, so the pages say "not available here" instead of failing, and wiring a
feature that lands is a change to this module alone. What each returns is a
frozen value the pages render and the ``/api/`` twins serve.
"""

from __future__ import annotations

import importlib
import json
from collections.abc import Callable, Sequence
from typing import Any

import attrs

from taskrunner import admin
from taskrunner.backends import Backend

__all__ = [
    "ScheduleRow",
    "TaskView",
    "Unavailable",
    "cancel_task",
    "pause_queue",
    "paused_queues",
    "purge_dead",
    "read_schedules",
    "read_task",
    "replay_dead",
    "resume_queue",
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


@attrs.frozen(kw_only=True)
class ScheduleRow:
    name: str
    task: str | None
    spec: str
    next_fire: float | None
    last_fire: float | None
    """The newest tick fired."""
    fired_at: float | None
    last_outcome: str | None
    outcome_at: float | None
    running: str | None
    """The stream id of an ``overlap=False`` run in flight."""


def _next_fire(doc: dict[str, Any], name: str, after: float) -> float | None:
    periodic = importlib.import_module("taskrunner._periodic")
    try:
        schedule = periodic.Schedule(
            name=name,
            task=doc.get("task") or "task",
            cron=doc.get("cron"),
            every=doc.get("every"),
            timezone=doc.get("timezone") or "UTC",
        )
    except (TypeError, ValueError):
        return None
    moment: float | None = schedule.timetable.next_after(after)
    return moment


async def read_schedules(backend: Backend, group: str) -> list[ScheduleRow]:
    """Every schedule of ``group`` the store knows, by name: spec, next and last fire,
    last outcome.

    Raises:
        Unavailable: the backend keeps no schedules.
        BackendError: the store could not be read.
    """
    read = getattr(backend, "read_schedules", None)
    if read is None:
        raise Unavailable(
            f"schedules are not available: {type(backend).__name__} has no read_schedules()"
        )
    periodic = importlib.import_module("taskrunner._periodic")
    records = await read(group)
    now = backend.now()
    rows = []
    for name in sorted(set(records.specs) | set(records.states)):
        raw = records.specs.get(name)
        doc = (periodic.read_spec(raw) if raw is not None else None) or {}
        state = records.states.get(name)
        watermark = None if state is None else state.tick
        spec = periodic.describe(doc.get("cron"), doc.get("every"), doc.get("timezone") or "UTC")
        rows.append(
            ScheduleRow(
                name=name,
                task=doc.get("task"),
                spec=spec if doc else "(no published spec)",
                next_fire=_next_fire(doc, name, max(now, watermark or now)) if doc else None,
                last_fire=None if state is None else state.fired,
                fired_at=None if state is None else state.fired_at,
                last_outcome=None if state is None else state.outcome,
                outcome_at=None if state is None else state.outcome_at,
                running=None if state is None else state.in_flight(now),
            )
        )
    return rows


# Pauses (issue 18) --------------------------------------------------------------


def _flow(backend: Backend, name: str) -> Callable[..., Any]:
    """``admin.<name>(backend, group, ...)``, or the backend's FlowControl method of that
    name (what ``admin`` calls) when this taskrunner's admin has none."""
    found = getattr(admin, name, None)
    if found is not None:
        fn: Callable[..., Any] = found
        return lambda group, **kw: fn(backend, group, **kw)
    method = getattr(backend, name, None)
    if method is None:
        raise Unavailable(
            f"pause and resume is not available: taskrunner.admin has no {name}() and "
            f"{type(backend).__name__} has no {name}()"
        )
    bound: Callable[..., Any] = method
    return bound


async def paused_queues(backend: Backend, group: str) -> tuple[frozenset[str], frozenset[str]]:
    """The paused queues and tasks of ``group``.

    Raises:
        Unavailable: no pauses here.
    """
    found = await _flow(backend, "paused")(group)
    return frozenset(found.queues), frozenset(found.tasks)


async def pause_queue(backend: Backend, group: str, queue: str) -> bool:
    """Pause ``queue`` for every runner of ``group``: whether it was not paused already.

    Raises:
        Unavailable: no pauses here.
    """
    done: bool = await _flow(backend, "pause")(group, queue=queue)
    return done


async def resume_queue(backend: Backend, group: str, queue: str) -> bool:
    """Resume ``queue`` of ``group``: whether it was paused.

    Raises:
        Unavailable: no pauses here.
    """
    done: bool = await _flow(backend, "resume")(group, queue=queue)
    return done


def has_admin(name: str) -> bool:
    """Whether :mod:`taskrunner.admin` has ``name`` (so a page offers its action)."""
    return getattr(admin, name, None) is not None
