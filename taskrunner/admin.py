"""Operator tools: pause and resume work, inspect and wipe a group's keys, follow
and cancel tasks, replay dead letters.

:func:`pause` and :func:`resume` stop and restart one queue or one task for a
whole fleet (every runner of the group notices within about a second; see
docs/flow-control.md), through the backend's
:class:`~taskrunner.backends.FlowControl`; :func:`paused` says what is paused.

:func:`get_task` and :func:`cancel` do what :meth:`TaskRunner.get_task
<taskrunner.TaskRunner.get_task>` and :meth:`TaskRunner.cancel
<taskrunner.TaskRunner.cancel>` do, with a backend and a group name alone (no
runner, no registered tasks), on every queue of the group (:func:`queues` finds
them on the store). :func:`dead_letters` lists a group's dead
letters, every queue's or one's (each task, why it failed, its payload, when,
its queue), :func:`replay_dead_letters`
dispatches some of them again (each in one atomic step: the new entry is added
and the dead letter deleted together, so a dead letter is replayed once) and
:func:`purge_dead_letters` deletes them.

:func:`flush` is the "Flushing / cleanup" recipe of the key layout
(docs/redis-key-layout.md) as one call, for development and staging: it drops
in-flight messages, forces a re-election and may let a duplicate unique job
in, so it refuses to run without ``confirm=True``. :func:`list_keys` shows
every documented key of a group that exists, with its type, size and TTL.
:func:`list_groups` lists the groups on the store (a sharded group once, with its
shard count). :func:`schedules` shows a group's periodic schedules: task, spec, next fire,
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

import attrs

from taskrunner import _keys
from taskrunner._config import queue_name_problem
from taskrunner._dispatch.dead import (
    DeadLetterInfo,
    ReplayResult,
    dead_letter_info,
    replay_of,
    replay_result,
)
from taskrunner._dispatch.events import EventReader
from taskrunner._dispatch.guards import require_inspection
from taskrunner._dispatch.handle import TaskInfo, task_info
from taskrunner._dispatch.queues import group_queues
from taskrunner._dispatch.routing import ShardRouter
from taskrunner._dispatch.tracker import with_progress
from taskrunner._dispatch.workflows import WorkflowStatus, status_of
from taskrunner._fleet import shard_groups
from taskrunner._fleet.shard_groups import GroupListing
from taskrunner._schedules.view import ScheduleRow, schedule_rows
from taskrunner.backends import Backend, EventLog, KeyInfo, Paused, Replay, WorkflowStore
from taskrunner.backends._layout import group_keys
from taskrunner.backends._protocols.inspection import PURPOSES

__all__ = [
    "DeadLetterInfo",
    "GroupListing",
    "KeyInfo",
    "ReplayResult",
    "ScheduleRow",
    "cancel",
    "cancel_workflow",
    "dead_letter",
    "dead_letters",
    "desired_instances",
    "documented_keys",
    "events",
    "flush",
    "get_task",
    "get_workflow",
    "list_groups",
    "list_keys",
    "pause",
    "paused",
    "purge_dead_letters",
    "queues",
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

    A task of a sharded group (:func:`shards_of`) is paused in every shard first,
    then in the group: a run parks in its shard, checking the shard's own paused set
    in the same step (docs/sharding.md), and runners see the pause in the group's.

    Returns:
        Whether it was not paused already (in the group).

    Raises:
        ValueError: neither or both of ``queue`` and ``task`` given.
        BackendError: the backend could not be reached (a pause cut short by it is
            made whole by calling again).
    """
    if task is not None and queue is None:
        for shard in await _task_shards(backend, group):
            await backend.pause(shard, task=task)
    return await backend.pause(group, queue=queue, task=task)


async def resume(
    backend: Backend, group: str, *, queue: str | None = None, task: str | None = None
) -> bool:
    """Resume one queue or one task (exactly one of the two) of ``group``.

    A resumed task's parked messages are due at once: they are back in their
    queues within about a second (the next scheduler pass any runner makes
    once it noticed the resume).

    A task of a sharded group is resumed in the group first (runners stop parking
    its runs), then in every shard, each making its shard's parked runs due in the
    step that ends its pause there.

    Returns:
        Whether it was paused (in the group).

    Raises:
        ValueError: neither or both of ``queue`` and ``task`` given.
        BackendError: the backend could not be reached (a resume cut short by it is
            made whole by calling again).
    """
    was = await backend.resume(group, queue=queue, task=task)
    if task is not None and queue is None:
        for shard in await _task_shards(backend, group):
            await backend.resume(shard, task=task)
    return was


async def _task_shards(backend: Backend, group: str) -> list[str]:
    """The shards a task's pause is also written to: every shard of a sharded group,
    none of another."""
    router = await shards_of(backend, group)
    return router.groups if router.count > 1 else []


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
    return schedule_rows(
        await backend.read_schedules(group), backend.now(), unix_time=backend.unix_time
    )


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
        name: PURPOSES[kind]
        for name, kind in group_keys(backend.stream_keys(group), group, backend.key_layout).items()
    }


async def list_keys(backend: Backend, group: str) -> list[KeyInfo]:
    """Every documented key of ``group`` that exists now (plus all heartbeat and
    unique-lock keys, which are not per group): ``backend.list_keys(group)``, then, for
    a sharded group (its recorded shard count, :func:`shards_of`), each shard's.

    Raises:
        TypeError: ``backend`` does not implement :class:`~taskrunner.backends.Inspection`.
    """
    inspection = require_inspection(backend, "taskrunner.admin.list_keys")
    found = await inspection.list_keys(group)
    router = await shards_of(backend, group)
    for shard in router.groups if router.count > 1 else ():
        found += await inspection.list_keys(shard)
    return found


async def list_groups(backend: Backend) -> list[GroupListing]:
    """Every group on the store, by name, with its shard count: a sharded group once
    (``GroupListing(name="shop", shards=16)``), never its shards' tags, which the
    backend's own :meth:`~taskrunner.backends.Inspection.list_groups` names as groups
    of their own (docs/sharding.md). Reads the recorded count of each group a
    shard-like name points to, one read each.

    Raises:
        TypeError: ``backend`` does not implement :class:`~taskrunner.backends.Inspection`.
        BackendError: the store could not be read.
    """
    inspection = require_inspection(backend, "taskrunner.admin.list_groups")
    return await shard_groups.list_groups(inspection)


async def shards_of(backend: Backend, group: str) -> ShardRouter:
    """The shards ``group`` is laid out in, as recorded (docs/sharding.md): one shard
    (the group itself) when none is recorded or in the go layout.

    Raises:
        BackendError: the store could not be read.
    """
    read = getattr(backend, "read_shard_count", None)  # an Inspection alone has none
    if read is None or getattr(backend, "key_layout", "go") != "cluster":
        return ShardRouter(group, 1, start=0)
    return ShardRouter(group, await read(group) or 1, start=0)


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
    group: they are deleted either way. A sharded group (:func:`shards_of`) has every
    shard flushed too, and its recorded shard count deleted.

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
    router = await shards_of(backend, group)
    deleted = await inspection.flush_group(group, heartbeats=replication)
    if router.count > 1:  # every shard's keys, then the record: the group is empty now
        for shard in router.groups:
            deleted += await inspection.flush_group(shard, heartbeats=replication)
        await backend.record_shard_count(group, 1)
    return deleted


# Tasks by id ------------------------------------------------------------------------


async def queues(backend: Backend, group: str) -> list[str]:
    """Every queue of ``group`` the store shows: the backend's own first, then, by
    name, those the task catalog names, the paused ones and those with keys on the
    store (a stream, dead letters or a claim-delay ring), so a queue that has
    messages is listed even when no runner serves it yet.

    Raises:
        BackendError: the store could not be read.
    """
    return await group_queues(backend, group)


async def _queues(backend: Backend, group: str, queue: str | None) -> list[str]:
    if queue is None:
        return await group_queues(backend, group)
    problem = queue_name_problem(queue)
    if problem is not None:
        raise ValueError(f"queue {problem}, got {queue!r}")
    return [queue]


async def get_task(
    backend: Backend, group: str, task_id: str, *, queue: str | None = None
) -> TaskInfo | None:
    """Where task ``task_id`` of ``group`` is now (see :meth:`TaskRunner.get_task
    <taskrunner.TaskRunner.get_task>`); ``None`` when the backend does not know it.

    Args:
        queue: The queue its entry is on; by default every queue of the group
            (:func:`queues`), the first holding it winning (stream ids are unique
            per stream only).

    Raises:
        ValueError: ``queue`` is not a queue name.
        BackendError: the store could not be read.
    """
    names = await _queues(backend, group, queue)
    where = (await shards_of(backend, group)).locate(task_id)
    if where is None:
        return None
    snapshot = await backend.lookup(where[0], where[1], queues=names)
    if snapshot is None:
        return None
    info = await with_progress(backend, where[0], task_info(snapshot, backend.unix_time))
    return info if where[1] == task_id else attrs.evolve(info, id=task_id)


def events(backend: Backend, group: str, *, after: str | None = None) -> EventReader:
    """The events of ``group`` (see :meth:`TaskRunner.events
    <taskrunner.TaskRunner.events>`): ``async for event in admin.events(backend, "app")``.

    Raises:
        ValueError: ``after`` is not ``None``, ``"0"`` or an event id, or the backend
            has no event log.
    """
    if not isinstance(backend, EventLog):
        raise ValueError(f"{type(backend).__name__} has no event log to read")
    return EventReader(backend, group, after)


async def cancel(backend: Backend, group: str, task_id: str, *, queue: str | None = None) -> bool:
    """Cancel task ``task_id`` of ``group`` wherever it is (see :meth:`TaskRunner.cancel
    <taskrunner.TaskRunner.cancel>`), its entry looked for as :func:`get_task` does:
    ``False`` when it is done or unknown.

    Raises:
        ValueError: ``queue`` is not a queue name.
        BackendError: the store could not be reached.
    """
    names = await _queues(backend, group, queue)
    where = (await shards_of(backend, group)).locate(task_id)
    if where is None:
        return False
    return (await backend.cancel(where[0], where[1], queues=names)).state is not None


# Dead letters -----------------------------------------------------------------------


def _workflows(backend: Backend) -> WorkflowStore:
    if not isinstance(backend, WorkflowStore):
        raise TypeError(f"{type(backend).__name__} keeps no workflows")
    return backend


async def get_workflow(backend: Backend, group: str, workflow_id: str) -> WorkflowStatus | None:
    """Workflow ``workflow_id`` of ``group`` as ``wf.status()`` shows it (its state,
    counts per state, each step's state, parents and policy), in one round trip;
    ``None`` when there is none (never dispatched, or expired).

    Raises:
        TypeError: the backend keeps no workflows.
        BackendError: the store could not be read.
    """
    record = await _workflows(backend).read_workflow(group, workflow_id)
    return None if record is None else status_of(record)


async def cancel_workflow(backend: Backend, group: str, workflow_id: str) -> bool:
    """Cancel workflow ``workflow_id`` of ``group`` as ``wf.cancel()`` does (its queued,
    delayed and running steps fleet-wide).

    Returns:
        Whether it was running (``False``: over already, or unknown).

    Raises:
        TypeError: the backend keeps no workflows.
        BackendError: the store could not be reached.
    """
    return await _workflows(backend).cancel_workflow(group, workflow_id)


async def dead_letters(
    backend: Backend,
    group: str,
    *,
    count: int = 100,
    after: str | None = None,
    queue: str | None = None,
) -> list[DeadLetterInfo]:
    """The oldest ``count`` dead letters of ``group`` (after the id ``after``, to page
    through them): each task, why it failed, its payload, when, and its queue.

    Args:
        queue: One queue's dead letters; by default every queue's (:func:`queues`),
            merged oldest first (ids are unique per queue only: page one queue to
            be exact).

    The dead-letter stream belongs to the stream: with an explicit shared prefix,
    every group reading it sees the same dead letters.

    Raises:
        ValueError: ``queue`` is not a queue name.
        BackendError: the store could not be read.
    """
    found: list[DeadLetterInfo] = []
    for name in await _queues(backend, group, queue):
        letters = await backend.dead_letters(group, count, after=after, queue=name)
        found += [dead_letter_info(d, queue=name, unix_time=backend.unix_time) for d in letters]
    found.sort(key=lambda d: _id_order(d.id))
    return found[:count]


def _id_order(entry_id: str) -> tuple[int, int]:
    ms, _, seq = entry_id.partition("-")
    return (int(ms), int(seq)) if ms.isdigit() and seq.isdigit() else (0, 0)


async def dead_letter(
    backend: Backend, group: str, dead_id: str, *, queue: str | None = None
) -> DeadLetterInfo | None:
    """The dead letter ``dead_id`` of ``group``, or ``None``: in ``queue``, by default
    in the first queue (of :func:`queues`) that holds one of that id."""
    for name in await _queues(backend, group, queue):
        found = await backend.find_dead_letters(group, [dead_id], queue=name)
        if found:
            return dead_letter_info(found[0], queue=name, unix_time=backend.unix_time)
    return None


async def replay_dead_letters(
    backend: Backend, group: str, ids: Sequence[str], *, queue: str | None = None
) -> list[ReplayResult]:
    """Dispatch the dead letters ``ids`` again, one result per id, in order.

    Each is re-dispatched to its own queue with a fresh attempt count (a new stream
    entry) and its task id (so :func:`get_task` and a waiting ``result`` follow it;
    a result it kept is dropped) and deleted from the dead-letter stream, in one
    atomic step: however many replay it at once, it runs again once. A unique task
    takes its lock again with a fresh token; while the lock is held (the task is
    queued or running already) it is not replayed (``"locked"``) and stays a dead
    letter. On a shared stream a replayed entry reaches every group that reads it.

    Args:
        queue: The queue whose dead letters these are; by default each id is looked
            for in every queue (:func:`queues`), the first holding it winning.

    Raises:
        ValueError: ``queue`` is not a queue name.
        BackendError: the backend could not be reached (some of the dead
            letters may have been replayed: a repeat reports them ``"gone"``).
    """
    results: dict[str, ReplayResult] = {}
    left = list(dict.fromkeys(ids))
    lock_prefix = _keys.unique_prefix(group, backend.key_layout)
    for name in await _queues(backend, group, queue):
        if not left:
            break
        found = {d.id: d for d in await backend.find_dead_letters(group, left, queue=name)}
        replays: list[Replay] = []
        for dead_id in [i for i in left if i in found]:
            dead = found[dead_id]
            replay = replay_of(dead, lock_prefix=lock_prefix)
            if replay is None:
                results[dead_id] = ReplayResult(
                    id=dead_id, task_id=dead.message_id, entry_id=None, reason="no payload"
                )
            else:
                replays.append(replay)
        done = await backend.replay_dead_letters(group, replays, queue=name)
        for replay, outcome in zip(replays, done, strict=True):
            results[replay.dead_id] = replay_result(replay, outcome)
        left = [i for i in left if i not in found]
    for dead_id in left:
        results[dead_id] = ReplayResult(id=dead_id, task_id=None, entry_id=None, reason="gone")
    return [results[dead_id] for dead_id in ids]


async def replay_all_dead_letters(
    backend: Backend, group: str, *, confirm: bool = False, queue: str | None = None
) -> list[ReplayResult]:
    """Replay every dead letter of ``group`` (as :func:`replay_dead_letters`), queue by
    queue (``queue``: that one only), oldest first, :data:`PAGE` at a time.

    Args:
        confirm: Must be ``True``: every dead letter runs again.

    Raises:
        ValueError: ``confirm`` is not ``True``, or ``queue`` is not a queue name.
    """
    if confirm is not True:
        raise ValueError(
            f"replay_all_dead_letters dispatches every dead letter of group {group!r} "
            "again; call it with confirm=True"
        )
    results: list[ReplayResult] = []
    for name in await _queues(backend, group, queue):
        after: str | None = None
        while page := await backend.dead_letters(group, PAGE, after=after, queue=name):
            after = page[-1].id  # the ones not replayed stay: page past them
            results += await replay_dead_letters(backend, group, [d.id for d in page], queue=name)
    return results


async def purge_dead_letters(
    backend: Backend,
    group: str,
    ids: Sequence[str] | None = None,
    *,
    confirm: bool = False,
    queue: str | None = None,
) -> int:
    """Delete the dead letters ``ids`` of ``group``, or all of them (``None``).

    Args:
        confirm: Must be ``True``: what is deleted is gone.
        queue: The queue whose dead letters to delete; by default every queue's
            (:func:`queues`), each id from the first queue holding it.

    Returns:
        How many were deleted.

    Raises:
        ValueError: ``confirm`` is not ``True``, or ``queue`` is not a queue name.
    """
    if confirm is not True:
        what = "every dead letter" if ids is None else f"{len(ids)} dead letter(s)"
        raise ValueError(
            f"purge_dead_letters deletes {what} of group {group!r}; call it with confirm=True"
        )
    names = await _queues(backend, group, queue)
    if ids is None:
        return sum([await backend.purge_dead_letters(group, None, queue=name) for name in names])
    deleted, left = 0, list(dict.fromkeys(ids))
    for name in names:
        if not left:
            break
        found = {d.id for d in await backend.find_dead_letters(group, left, queue=name)}
        if found:
            deleted += await backend.purge_dead_letters(group, sorted(found), queue=name)
        left = [i for i in left if i not in found]
    return deleted
