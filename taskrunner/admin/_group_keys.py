"""A group's keys: the documented names, those that exist now, and flushing them all.

:func:`flush` is the "Flushing / cleanup" recipe of the key layout
(docs/redis-key-layout.md) as one call; a sharded group has every shard's keys
listed and flushed too, through the shards the group records (:func:`shards_of`).
"""

from __future__ import annotations

from taskrunner._dispatch.guards import require_inspection
from taskrunner.admin._groups import shards_of
from taskrunner.backends import Backend, KeyInfo
from taskrunner.backends._layout import group_keys
from taskrunner.backends._protocols.inspection import PURPOSES


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
