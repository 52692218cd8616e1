"""The acker's steps for a sharded group's entries (issue 27): an entry read in a
shard is acked there, its in-flight run is in that shard's table
(:meth:`InFlight.of <taskrunner._execution.inflight.InFlight.of>`), and the events
that ride its ack go to the runner's group, whose events stream is not in the
shard's slot. An unsharded group's entries (group ``None``) take none of these
calls but :func:`running_by_group`.

Progress: a shard's run reports under its sharded id (``ctx.task_id``,
``<shard>.<id>``), and ``get_task`` reads a shard's task's progress in that shard
under the id the shard gave it, so :func:`progress_by_shard` sends each report to
its shard, stripped of the prefix (the progress writer's and the acker's way).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from taskrunner import _shards
from taskrunner.backends import Backend, EventBatch, EventLog, Outcome, ProgressUpdate

Stream = tuple[str | None, str | None]
"""(group, queue): where an entry is acked; group ``None`` is the runner's, else a
shard's tag (an entry read in one shard of a sharded group is acked there)."""
Entry = tuple[Stream, str]
"""(stream, stream id): an entry to ack."""


def running_by_group(entries: Iterable[Entry]) -> dict[str | None, list[tuple[str | None, str]]]:
    """The in-flight keys ((queue, id)) of ``entries``, by group (``None``: the
    runner's, else a shard's tag), first seen first (pure)."""
    out: dict[str | None, list[tuple[str | None, str]]] = {}
    for (group, queue), entry_id in entries:
        keys = out.get(group)
        if keys is None:
            keys = out[group] = []
        keys.append((queue, entry_id))
    return out


def progress_by_shard(
    updates: Sequence[ProgressUpdate], group: str, count: int
) -> dict[str, list[ProgressUpdate]]:
    """``updates`` by where each is written (pure): a sharded id's in its shard (named
    by its tag) under the shard's own id, any other id's (a run of the group's own
    stream, where periodic schedules fire) in ``group`` as it is; first seen first."""
    out: dict[str, list[ProgressUpdate]] = {}
    for update in updates:
        where, task_id = group, update.task_id
        found = _shards.parse_task_id(task_id, count) if count > 1 else None
        if found is not None:
            where, task_id = _shards.shard_tag(group, found[0], count), found[1]
            update = ProgressUpdate(task_id=task_id, progress=update.progress)
        out.setdefault(where, []).append(update)
    return out


async def send_in_shard(
    backend: Backend,
    group: str,
    shard: str,
    queue: str | None,
    plain: list[str],
    tracked: list[Outcome],
    events: EventBatch,
    count: int,
) -> None:
    """Ack ``plain`` in ``shard`` with the progress of ``shard``'s runs among
    ``events``' (before the acks, where ``get_task`` reads a shard's task), then write
    the rest of the progress to the shards it belongs to, and the events to ``group``
    (the runner's), in calls of their own: neither is in the shard's slot, and a run's
    last event goes after its ack, never before it.

    Args:
        count: The group's shard count (how the progress' sharded ids are read).
    """
    where = progress_by_shard(events.progress, group, count)
    own = tuple(where.pop(shard, ()))
    with_acks = EventBatch(events=(), maxlen=events.maxlen, progress=own)
    if tracked:
        await backend.finish(shard, plain, tracked, queue=queue, events=with_acks)
    else:
        await backend.ack(shard, plain, queue=queue, events=with_acks)
    if not isinstance(backend, EventLog):
        return
    only = EventBatch(events=events.events, maxlen=events.maxlen) if events.events else None
    for other, updates in where.items():
        await backend.write_events(other, only if other == group else None, updates)
        if other == group:
            only = None
    if only is not None:
        await backend.write_events(group, only)
