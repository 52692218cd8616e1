"""Operator tools: pause and resume work, inspect and wipe a group's keys, follow
and cancel tasks, replay dead letters.

:func:`pause` and :func:`resume` stop and restart one queue or one task for a
whole fleet (every runner of the group notices within about a second; see
docs/flow-control.md), through the backend's
:class:`~taskrunner.backends.FlowControl`; :func:`paused` says what is paused.

:func:`get_task` and :func:`cancel` do what :meth:`TaskRunner.get_task
<taskrunner.TaskRunner.get_task>` and :meth:`TaskRunner.cancel
<taskrunner.TaskRunner.cancel>` do, with a backend and a group name alone (no
runner, no registered tasks). :func:`dead_letters` lists a group's dead
letters (each task, why it failed, its payload, when), :func:`replay_dead_letters`
dispatches some of them again (each in one atomic step: the new entry is added
and the dead letter deleted together, so a dead letter is replayed once) and
:func:`purge_dead_letters` deletes them.

:func:`flush` is the "Flushing / cleanup" recipe of the key layout
(docs/redis-key-layout.md) as one call, for development and staging: it drops
in-flight messages, forces a re-election and may let a duplicate unique job
in, so it refuses to run without ``confirm=True``. :func:`list_keys` shows
every documented key of a group that exists, with its type, size and TTL.
:func:`schedules` shows a group's periodic schedules: task, spec, next fire,
last fired tick and last outcome. :func:`desired_instances` reads the instance count
the group's leader publishes for an autoscaler (``TaskRunnerConfig(target_wait=...)``).

Both go through the backend's :class:`~taskrunner.backends.Inspection` (``SCAN``,
never ``KEYS``, on Redis), so they work the same on
:class:`~taskrunner.backends.redis.RedisBackend`,
:class:`~taskrunner.backends.memory.MemoryBackend` and any backend of your own
that implements it.
"""

from __future__ import annotations

from collections.abc import Sequence

from taskrunner._dispatch.dead import (
    DeadLetterInfo,
    ReplayResult,
    dead_letter_info,
    replay_of,
    replay_result,
)
from taskrunner._dispatch.guards import require_inspection
from taskrunner._dispatch.handle import TaskInfo, task_info
from taskrunner._schedules.view import ScheduleRow, schedule_rows
from taskrunner.backends import Backend, KeyInfo, Paused, Replay
from taskrunner.backends._layout import group_keys
from taskrunner.backends._protocols.inspection import PURPOSES

__all__ = [
    "DeadLetterInfo",
    "KeyInfo",
    "ReplayResult",
    "ScheduleRow",
    "cancel",
    "dead_letter",
    "dead_letters",
    "desired_instances",
    "documented_keys",
    "flush",
    "get_task",
    "list_keys",
    "pause",
    "paused",
    "purge_dead_letters",
    "replay_all_dead_letters",
    "replay_dead_letters",
    "resume",
    "schedules",
]

PAGE = 100
"""Dead letters read (and replayed) per backend call when going through them all."""


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


async def desired_instances(backend: Backend, group: str) -> int | None:
    """How many instances ``group``'s leader says the fleet needs now (see
    ``TaskRunnerConfig.target_wait`` and docs/tuning.md, "Autoscaling").

    Returns:
        The published count, or ``None`` when none is live (no leader with
        ``target_wait`` has published within the value's lifetime).

    Raises:
        BackendError: the backend could not be reached.
    """
    return await backend.read_desired_instances(group)


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


# Tasks by id ------------------------------------------------------------------------


async def get_task(backend: Backend, group: str, task_id: str) -> TaskInfo | None:
    """Where task ``task_id`` of ``group`` is now (see :meth:`TaskRunner.get_task
    <taskrunner.TaskRunner.get_task>`); ``None`` when the backend does not know it."""
    snapshot = await backend.lookup(group, task_id)
    return None if snapshot is None else task_info(snapshot)


async def cancel(backend: Backend, group: str, task_id: str) -> bool:
    """Cancel task ``task_id`` of ``group`` wherever it is (see :meth:`TaskRunner.cancel
    <taskrunner.TaskRunner.cancel>`): ``False`` when it is done or unknown."""
    return (await backend.cancel(group, task_id)).state is not None


# Dead letters -----------------------------------------------------------------------


async def dead_letters(
    backend: Backend, group: str, *, count: int = 100, after: str | None = None
) -> list[DeadLetterInfo]:
    """The oldest ``count`` dead letters of ``group``'s stream (after the id ``after``,
    to page through them): each task, why it failed, its payload and when.

    The dead-letter stream belongs to the stream: with an explicit shared prefix,
    every group reading it sees the same dead letters.
    """
    return [dead_letter_info(d) for d in await backend.dead_letters(group, count, after=after)]


async def dead_letter(backend: Backend, group: str, dead_id: str) -> DeadLetterInfo | None:
    """The dead letter ``dead_id`` of ``group``'s stream, or ``None``."""
    found = await backend.find_dead_letters(group, [dead_id])
    return dead_letter_info(found[0]) if found else None


async def replay_dead_letters(
    backend: Backend, group: str, ids: Sequence[str]
) -> list[ReplayResult]:
    """Dispatch the dead letters ``ids`` again, one result per id, in order.

    Each is re-dispatched with a fresh attempt count (a new stream entry) and its
    task id (so :func:`get_task` and a waiting ``result`` follow it; a result it
    kept is dropped) and deleted from the dead-letter stream, in one atomic step:
    however many replay it at once, it runs again once. A unique task takes its
    lock again with a fresh token; while the lock is held (the task is queued or
    running already) it is not replayed (``"locked"``) and stays a dead letter.
    On a shared stream a replayed entry reaches every group that reads it.

    Raises:
        BackendError: the backend could not be reached (some of the dead
            letters may have been replayed: a repeat reports them ``"gone"``).
    """
    found = {d.id: d for d in await backend.find_dead_letters(group, list(ids))}
    results: dict[str, ReplayResult] = {}
    replays: list[Replay] = []
    for dead_id in ids:
        dead = found.get(dead_id)
        if dead is None:
            results[dead_id] = ReplayResult(id=dead_id, task_id=None, entry_id=None, reason="gone")
            continue
        replay = replay_of(dead)
        if replay is None:
            results[dead_id] = ReplayResult(
                id=dead_id, task_id=dead.message_id, entry_id=None, reason="no payload"
            )
        else:
            replays.append(replay)
    for replay, done in zip(
        replays, await backend.replay_dead_letters(group, replays), strict=True
    ):
        results[replay.dead_id] = replay_result(replay, done)
    return [results[dead_id] for dead_id in ids]


async def replay_all_dead_letters(
    backend: Backend, group: str, *, confirm: bool = False
) -> list[ReplayResult]:
    """Replay every dead letter of ``group``'s stream (as :func:`replay_dead_letters`),
    oldest first, :data:`PAGE` at a time.

    Args:
        confirm: Must be ``True``: every dead letter runs again.

    Raises:
        ValueError: ``confirm`` is not ``True``.
    """
    if confirm is not True:
        raise ValueError(
            f"replay_all_dead_letters dispatches every dead letter of group {group!r} "
            "again; call it with confirm=True"
        )
    results: list[ReplayResult] = []
    after: str | None = None
    while page := await backend.dead_letters(group, PAGE, after=after):
        after = page[-1].id  # the ones not replayed stay: page past them
        results += await replay_dead_letters(backend, group, [d.id for d in page])
    return results


async def purge_dead_letters(
    backend: Backend, group: str, ids: Sequence[str] | None = None, *, confirm: bool = False
) -> int:
    """Delete the dead letters ``ids`` of ``group``'s stream, or all of them (``None``).

    Args:
        confirm: Must be ``True``: what is deleted is gone.

    Returns:
        How many were deleted.

    Raises:
        ValueError: ``confirm`` is not ``True``.
    """
    if confirm is not True:
        what = "every dead letter" if ids is None else f"{len(ids)} dead letter(s)"
        raise ValueError(
            f"purge_dead_letters deletes {what} of group {group!r}; call it with confirm=True"
        )
    return await backend.purge_dead_letters(group, ids)
