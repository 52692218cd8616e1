"""A group's recorded shard count, checked before a runner first dispatches or serves.

Theory of operation. Changing ``TaskRunnerConfig.shards`` moves every message key of a
group (:mod:`taskrunner._shards`), so a runner of one count does not see the messages of
another: they would wait unread. The group's count is recorded in a key of its own slot
(``taskrunner:{<group>}:shards``, absent for 1). Before its first dispatch (and when it
starts serving) a runner reads it; when it differs from ``shards``, the change is
allowed only if the layout recorded holds nothing (no entry queued or pending on any of
the runner's queues in any old shard, no delayed task), and then the new count is
recorded. The decision is :func:`taskrunner._shards.shard_change_problem` (pure); this is
its shell. The go layout has no shards and no record: nothing is read there.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from taskrunner import _shards
from taskrunner._dispatch.routing import ShardRouter
from taskrunner.backends import Backend

log = logging.getLogger(__name__)


async def messages_held(backend: Backend, groups: Sequence[str], queues: Sequence[str]) -> int:
    """Messages ``groups`` (a group's shards, or the group) hold on ``queues``: entries
    not yet delivered or delivered and not acknowledged, plus one if a delayed task
    waits (enough to say "not empty")."""
    held = 0
    for group in groups:
        for queue in queues:
            if group in await backend.stream_groups(group, queue=queue):
                info = await backend.group_info(group, queue=queue)
                held += info.pending + info.lag
            else:  # never read: every entry is still to be delivered
                held += await backend.length(group, queue=queue)
        if await backend.next_delayed_at(group) is not None:
            held += 1
    return held


async def check_shard_count(
    backend: Backend, group: str, shards: int, queues: Sequence[str]
) -> None:
    """Refuse ``shards`` for ``group`` when its recorded count differs and the layout
    recorded still holds messages; else record ``shards`` (if it changed).

    Raises:
        ShardCountError: the count differs and the group is not empty.
        BackendError: the backend could not be read or written.
    """
    if backend.key_layout != "cluster":
        return
    recorded = await backend.read_shard_count(group)
    if (recorded or 1) == shards:
        return
    old = ShardRouter(group, recorded or 1, start=0).groups
    held = await messages_held(backend, old, queues)
    problem = _shards.shard_change_problem(group, recorded, shards, pending=held)
    if problem is not None:
        raise _shards.ShardCountError(problem)
    await backend.record_shard_count(group, shards)
    log.info("group %s: %d shard(s) recorded (was %d)", group, shards, recorded or 1)
