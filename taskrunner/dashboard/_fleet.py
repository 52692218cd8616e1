"""The fleet page's data: every group on the store with its queue summaries (a sharded
group once, its shards' queues counted in), and every live instance.
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs

from taskrunner._fleet.shard_counts import shard_tags
from taskrunner.admin import list_groups
from taskrunner.backends import Backend, Inspection, Paused
from taskrunner.dashboard import _queues
from taskrunner.dashboard._queues import QueueRead


@attrs.frozen(kw_only=True)
class GroupRow:
    name: str
    queues: int
    """How many queues the group has (see :mod:`._queues`)."""
    queue_length: int
    """Entries in all its queues' streams together (as the lengths below)."""
    pending: int
    lag: int
    consumers: int
    paused: tuple[str, ...]
    """Its paused queues."""
    leader: str | None
    """The lease holder's instance id."""
    leader_host: str | None
    """Its host, from its heartbeat."""
    shards: int = 1
    """Its recorded shard count (1: not sharded); a sharded group's row counts every
    shard's queues besides its own stream's (docs/sharding.md)."""


@attrs.frozen(kw_only=True)
class InstanceRow:
    host: str
    instance_id: str
    ttl: float | None


@attrs.frozen(kw_only=True)
class FleetPage:
    server: str
    """The store, as may be shown (a Redis URL without its password)."""
    ping_ms: float
    groups: tuple[GroupRow, ...]
    instances: tuple[InstanceRow, ...]
    """Every live heartbeat on the store (of every group)."""


async def read_fleet(backend: Backend, inspection: Inspection, *, server: str) -> FleetPage:
    """The groups on the store with their queue summaries, and every live instance.

    Raises:
        BackendError: the store could not be read.
    """
    ping = await inspection.ping()
    beats = await inspection.list_heartbeats()
    host_of_instance = {b.instance_id: b.host for b in beats}
    rows = []
    for listed in await list_groups(backend):
        name = listed.name
        queues = await _queues.read_group_queues(backend, name, claim_delays=False)
        # A sharded group's queues are in every shard too (each shard named as a group).
        everywhere = [*queues, *await _shard_queues(backend, name, listed.shards, queues)]
        lease = await inspection.read_lease(name)
        rows.append(
            GroupRow(
                name=name,
                queues=len(queues),
                queue_length=sum(q.length for q in everywhere),
                pending=sum(q.info.pending for q in everywhere),
                lag=sum(q.info.lag for q in everywhere),
                consumers=len({c.name for q in everywhere for c in q.info.consumers}),
                paused=tuple(q.name for q in queues if q.paused),
                leader=None if lease is None else lease.owner,
                leader_host=None if lease is None else host_of_instance.get(lease.owner),
                shards=listed.shards,
            )
        )
    return FleetPage(
        server=server,
        ping_ms=ping * 1000,
        groups=tuple(rows),
        instances=tuple(
            InstanceRow(host=b.host, instance_id=b.instance_id, ttl=b.ttl) for b in beats
        ),
    )


async def _shard_queues(
    backend: Backend, group: str, count: int, queues: Sequence[QueueRead]
) -> list[QueueRead]:
    """The summaries of ``queues`` (the group's own) in each of its ``count`` shards
    (none when unsharded): their lengths, pending entries, lag and consumers."""
    if count <= 1:
        return []
    paused = Paused(queues=frozenset(q.name for q in queues if q.paused), tasks=frozenset())
    names = [q.name for q in queues]
    out = []
    for tag in shard_tags(group, count):
        read = await _queues.read_queues(backend, tag, (), paused, claim_delays=False, stored=names)
        out += [q for q in read if q.name in names]
    return out
