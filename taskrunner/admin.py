"""Operator tools: pause and resume work, inspect and wipe a group's keys.

:func:`pause` and :func:`resume` stop and restart one queue or one task for a
whole fleet (every runner of the group notices within about a second; see
docs/flow-control.md), through the backend's
:class:`~taskrunner.backends.FlowControl`; :func:`paused` says what is paused.

:func:`flush` is the "Flushing / cleanup" recipe of the key layout
(docs/redis-key-layout.md) as one call, for development and staging: it drops
in-flight messages, forces a re-election and may let a duplicate unique job
in, so it refuses to run without ``confirm=True``. :func:`list_keys` shows
every documented key of a group that exists, with its type, size and TTL.
:func:`schedules` shows a group's periodic schedules: task, spec, next fire,
last fired tick and last outcome.

Both go through the backend's :class:`~taskrunner.backends.Inspection` (``SCAN``,
never ``KEYS``, on Redis), so they work the same on
:class:`~taskrunner.backends.redis.RedisBackend`,
:class:`~taskrunner.backends.memory.MemoryBackend` and any backend of your own
that implements it.
"""

from __future__ import annotations

from taskrunner._guards import require_inspection
from taskrunner._schedule_view import ScheduleRow, schedule_rows
from taskrunner.backends import Backend, KeyInfo, Paused
from taskrunner.backends._inspection import PURPOSES, group_keys

__all__ = [
    "KeyInfo",
    "ScheduleRow",
    "documented_keys",
    "flush",
    "list_keys",
    "pause",
    "paused",
    "resume",
    "schedules",
]


async def pause(
    backend: Backend, group: str, *, queue: str | None = None, task: str | None = None
) -> bool:
    """Pause one queue or one task (exactly one of the two) for every runner of ``group``.

    A paused queue is not read (its messages stay queued); a paused task's
    messages are parked in the delayed set as runners meet them (not failed,
    not counted as attempts). Runners notice within about a second; a message
    read just before may still run.

    Returns:
        Whether it was not paused already.

    Raises:
        ValueError: neither or both of ``queue`` and ``task`` given.
        BackendError: the backend could not be reached.
    """
    return await backend.pause(group, queue=queue, task=task)


async def resume(
    backend: Backend, group: str, *, queue: str | None = None, task: str | None = None
) -> bool:
    """Resume one queue or one task (exactly one of the two) of ``group``.

    A resumed task's parked messages are due at once: they are back in their
    queues within about a second (the next scheduler pass any runner makes
    once it noticed the resume).

    Returns:
        Whether it was paused.

    Raises:
        ValueError: neither or both of ``queue`` and ``task`` given.
        BackendError: the backend could not be reached.
    """
    return await backend.resume(group, queue=queue, task=task)


async def paused(backend: Backend, group: str) -> Paused:
    """What is paused in ``group`` now: its paused queues and tasks.

    Raises:
        BackendError: the backend could not be reached.
    """
    return await backend.paused(group)


async def schedules(backend: Backend, group: str) -> list[ScheduleRow]:
    """The periodic schedules of ``group``, one :class:`ScheduleRow` each, by name:
    the task, the spec, the next fire, the last fired tick and the last outcome.

    Read from the store (what serving instances published and what the leader
    recorded), so it works from any process, serving or not. A schedule removed
    from code keeps its row (without a task or next fire) until the group is
    flushed.

    Raises:
        BackendError: the store could not be read.
    """
    return schedule_rows(await backend.read_schedules(group), backend.now())


def documented_keys(backend: Backend, group: str) -> dict[str, str]:
    """The fixed key names of ``group`` on ``backend``, with their purpose.

    Per-instance (``taskrunner:replication:*``) and per-job
    (``taskrunner:unique:*``) keys are found by pattern instead.
    """
    return {
        name: PURPOSES[kind] for name, kind in group_keys(backend.stream_keys(group), group).items()
    }


async def list_keys(backend: Backend, group: str) -> list[KeyInfo]:
    """Every documented key of ``group`` that exists now (plus all heartbeat and
    unique-lock keys, which are not per group): ``backend.list_keys(group)``.

    Raises:
        TypeError: ``backend`` does not implement :class:`~taskrunner.backends.Inspection`.
    """
    return await require_inspection(backend, "taskrunner.admin.list_keys").list_keys(group)


async def flush(
    backend: Backend, group: str, *, confirm: bool = False, replication: bool = True
) -> list[str]:
    """Delete every key of ``group`` (the stream and its dead letters too, unless shared).

    The same on every backend (:meth:`Inspection.flush_group
    <taskrunner.backends.Inspection.flush_group>`): ``group`` is destroyed
    (``XGROUP DESTROY``, dropping its pending entries and cursor); when other
    consumer groups read the same stream (an explicit shared prefix), the
    stream, the dead-letter stream and the claim-delay ring are kept for them.
    Other groups' leases, delayed sets, metrics and tuning values are never
    touched. Unique locks and (with ``replication``) heartbeats are not per
    group: they are deleted either way.

    Args:
        confirm: Must be ``True``: this drops in-flight messages.
        replication: Also delete all heartbeat keys (they repopulate within
            10 s from live instances).

    Returns:
        The names of the keys deleted (not those kept for other groups).

    Raises:
        ValueError: ``confirm`` is not ``True``.
        TypeError: ``backend`` does not implement :class:`~taskrunner.backends.Inspection`.
    """
    if confirm is not True:
        raise ValueError(
            f"flush deletes every key of group {group!r}, including in-flight messages; "
            "call it with confirm=True (dev and staging only)"
        )
    inspection = require_inspection(backend, "taskrunner.admin.flush")
    return await inspection.flush_group(group, heartbeats=replication)
