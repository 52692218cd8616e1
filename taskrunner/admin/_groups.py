"""A group's state across its fleet: pause and resume, what is paused, its schedules,
the instance count its leader asks for, the groups on the store and a group's shards.

Each call reads or writes through the backend's protocols alone, so it works the same
on every backend; a sharded group (:func:`shards_of`) has a task's pause written to
every shard as well as to the group (docs/sharding.md).
"""

from __future__ import annotations

from taskrunner._dispatch.guards import require_inspection
from taskrunner._dispatch.routing import ShardRouter
from taskrunner._fleet import shard_groups
from taskrunner._fleet.shard_groups import GroupListing
from taskrunner._schedules.view import ScheduleRow, schedule_rows
from taskrunner.backends import Backend, Paused


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
