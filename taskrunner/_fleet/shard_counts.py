"""What each shard of a sharded group holds (issue 27), for ``stats``, ``top`` and the dashboard.

Theory of operation. A sharded group's messages wait in its shards' keys
(docs/sharding.md), each shard named to the backend as the group of its hash tag, and in
the group's own stream (where periodic schedules fire). An operator view reads, per
shard, one :meth:`~taskrunner.backends.Inspection.count_messages` (one round trip:
``XLEN`` of each queue's stream and dead-letter stream, ``ZCARD`` of the delayed set),
and, for the counts per queue, one ``length`` per shard and queue, added to the group's
own (:func:`queue_sizes`). ``stats`` also finds the queues only the shards hold
(:func:`shard_queues`, a key walk per shard); ``top`` and the dashboard, refreshed every
few seconds, count the queues the group's catalog, pauses and own keys name. An
unsharded group has no shard rows, and its views read what they read before. The shard
count is the group's record, read by the caller (``taskrunner.admin.shards_of``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, Protocol

import attrs

from taskrunner import _shards
from taskrunner.backends import MessageCounts


class _Counting(Protocol):  # an Inspection
    async def count_messages(self, group: str, queues: Iterable[str | None]) -> MessageCounts: ...


class _Listing(Protocol):  # an Inspection
    async def list_queues(self, group: str) -> list[str]: ...


class _Measuring(Protocol):  # a MessageQueue
    async def length(self, group: str, *, queue: str | None = None) -> int: ...


@attrs.frozen(kw_only=True)
class ShardCounts:
    """The messages one shard holds, over every queue of the group."""

    shard: int
    """Its number, ``0..shards-1`` (the head of its tasks' ids)."""
    tag: str
    """Its hash tag, ``<group>:<shard>:<salt>`` (its keys are ``taskrunner:{<tag>}:...``)."""
    queued: int
    """Entries in its queues' streams."""
    delayed: int
    """Members of its delayed set."""
    dead: int
    """Entries in its queues' dead-letter streams."""

    def document(self) -> dict[str, Any]:
        """Its ``stats --json`` form (see docs/operations.md)."""
        return attrs.asdict(self)


def shard_tags(group: str, count: int) -> list[str]:
    """Every shard's tag, shard 0 first; none for an unsharded group."""
    return [] if count <= 1 else [_shards.shard_tag(group, i, count) for i in range(count)]


async def read_shard_counts(
    backend: _Counting, group: str, count: int, queues: Sequence[str]
) -> tuple[ShardCounts, ...]:
    """Each of ``group``'s ``count`` shards' messages on ``queues`` (``()`` when unsharded).

    Raises:
        BackendError: the store could not be read.
    """
    rows = []
    for index, tag in enumerate(shard_tags(group, count)):
        counts = await backend.count_messages(tag, queues)
        rows.append(
            ShardCounts(
                shard=index,
                tag=tag,
                queued=counts.queued,
                delayed=counts.delayed,
                dead=counts.dead,
            )
        )
    return tuple(rows)


async def shard_queues(backend: _Listing, group: str, count: int) -> list[str]:
    """The queues with keys in any shard of ``group``, by name (none when unsharded):
    a queue only the shards hold (dispatched to, not yet served) is found too.

    Cost: two walks of the key space per shard (``Inspection.list_queues``): for a
    one-off command (``taskrunner stats``), not a refresh every few seconds.

    Raises:
        BackendError: the store could not be read.
    """
    found: set[str] = set()
    for tag in shard_tags(group, count):
        found.update(await backend.list_queues(tag))
    return sorted(found)


async def queue_sizes(
    backend: _Measuring, group: str, count: int, own: dict[str, int]
) -> dict[str, int]:
    """``own`` (each queue's entries in the group's own stream) with every shard's
    entries on that queue added (``own`` itself when unsharded).

    Raises:
        BackendError: the store could not be read.
    """
    sizes = dict(own)
    for tag in shard_tags(group, count):
        for name in sizes:
            sizes[name] += await backend.length(tag, queue=name)
    return sizes


def totals(rows: Iterable[ShardCounts]) -> MessageCounts:
    """The shards' counts added up."""
    total = MessageCounts()
    for row in rows:
        total += MessageCounts(queued=row.queued, delayed=row.delayed, dead=row.dead)
    return total
