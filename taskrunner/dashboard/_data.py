"""What each page shows, read through the backend: the dashboard's data layer.

Theory of operation. Every page has a reader that returns a frozen value
(:class:`~._fleet.FleetPage`, :class:`GroupPage` here, :class:`~._dead.DeadPage`:
the fleet's and the dead letters' readers are in :mod:`._fleet` and :mod:`._dead`,
the group's, the largest, in this module); the HTML pages render
it and the ``/api/`` twins serve it as JSON (:func:`as_json`), so both always say
the same thing. The readers use only what main's backends expose to operator
tools: :class:`~taskrunner.backends.Inspection` (groups, heartbeats, the lease),
each queue's summaries (``XLEN``, ``XINFO GROUPS``/``CONSUMERS``, the claim-delay
ring; the queues are found as :mod:`._queues` says), the metrics hash, the
published tuning capacity and desired instance count, the task catalog, the
paused set, and the first 100 dead letters. Nothing reads a stream's entries but the dead letters'.

The history (charts, the tuner's capacity) is the :class:`~._sampler.Sampler`'s:
the store keeps none. What :mod:`taskrunner.admin` offers (task lookup and
cancel, dead letters, replay and purge, schedules, pauses) is called in
:mod:`._features`, the one module of those calls.

An *instance* of a group is a host that publishes in the group's task catalog
(every serving Python runner does, from its start) or has a consumer in the
group on any of its queues (consumers are named ``<group>_<host>_<fetcher>``;
Redis lists one only once it has read an entry), joined with its heartbeat key
(``taskrunner:replication:<host>``; heartbeats are not per group, so only those
of this group's hosts are shown). Its *running* tasks are its
consumers' pending entries; its *pool* is the published tuning capacity (the
leader's, the same for every instance) or, when none is live, the
``num_workers`` default the operator commands assume.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

import attrs

from taskrunner import _wire
from taskrunner._config import TaskRunnerConfig
from taskrunner._fleet.shard_counts import (
    ShardCounts,
    queue_sizes,
    read_shard_counts,
)
from taskrunner._fleet.stats import compute_stats
from taskrunner._wire import CatalogDocument
from taskrunner.admin import shards_of
from taskrunner.backends import Backend, Heartbeat, Inspection
from taskrunner.dashboard import _features, _queues
from taskrunner.dashboard._queues import QueueRead
from taskrunner.dashboard._sampler import Sample, Sampler, rates

__all__ = ["GroupPage", "as_json", "host_of", "read_group"]

DEFAULT_WORKERS = cast(int, attrs.fields(TaskRunnerConfig).num_workers.default)
"""The pool size per instance assumed when no tuning capacity is published (the
``num_workers`` default, as ``taskrunner stats`` assumes)."""


def as_json(value: Any) -> Any:
    """A page value as a JSON-ready document (attrs classes become objects)."""
    return attrs.asdict(value, recurse=True) if attrs.has(type(value)) else value


def host_of(consumer: str, group: str) -> str:
    """The host in consumer name ``<group>_<host>_<fetcher>`` (pure); a name of
    another form (someone else's consumer) is its own host."""
    head = f"{group}_"
    if consumer.startswith(head):
        host, _, fetcher = consumer[len(head) :].rpartition("_")
        if host and fetcher.isdigit():
            return host
    return consumer


# A group -------------------------------------------------------------------------


@attrs.frozen(kw_only=True)
class ConsumerRow:
    name: str
    host: str
    queue: str
    pending: int
    idle: float


@attrs.frozen(kw_only=True)
class Instance:
    host: str
    instance_id: str | None
    """From its catalog document, else its heartbeat; ``None`` when it has neither
    (gone, or not a Python taskrunner)."""
    heartbeat_ttl: float | None
    alive: bool
    leader: bool
    pool: int
    running: int
    """Its consumers' pending entries on every queue: delivered, not yet acked."""
    consumers: int
    """Its consumer names (one consumer reads every queue under the same name)."""
    tasks: tuple[str, ...]
    """The tasks it serves, from its catalog document (none for a Go runner)."""


@attrs.frozen(kw_only=True)
class Leader:
    owner: str
    host: str | None
    ttl: float | None


@attrs.frozen(kw_only=True)
class Queue:
    name: str
    stream: str
    length: int
    pending: int
    lag: int
    claim_delay_avg_ms: float
    claim_delay_max_ms: float
    claim_delay_last_ms: float
    paused: bool


@attrs.frozen(kw_only=True)
class QueueTotals:
    """All the group's queues together."""

    length: int
    pending: int
    lag: int


@attrs.frozen(kw_only=True)
class TaskTiming:
    name: str
    queue: str | None
    """Its queue, from the catalog (``None``: no serving runner names it)."""
    paused: bool
    avg_ms: float
    runs: int


@attrs.frozen(kw_only=True)
class Timing:
    avg_ms: float
    predicted_wait_ms: float
    tps: float
    """Capacity estimate: runs per second if every slot of every live instance were
    busy (slots x 1000 / average run time), not what runs now."""
    measured_tps: float | None
    """Runs per second measured by the sampler, its newest point (the chart's last
    value); ``None`` before two samples."""
    avg_schedule_ms: float
    tasks: tuple[TaskTiming, ...]


@attrs.frozen(kw_only=True)
class Charts:
    """Series of ``[unix seconds, value]`` points from the sampler, oldest first."""

    throughput: tuple[tuple[float, float], ...]
    queue_length: tuple[tuple[float, float], ...]
    capacity: tuple[tuple[float, float], ...]
    interval: float
    sampling: bool


@attrs.frozen(kw_only=True)
class CapacityChange:
    at: float
    capacity: int | None
    """``None``: no capacity was published (the tuner's key expired or was never set)."""


@attrs.frozen(kw_only=True)
class GroupPage:
    group: str
    taken_at: float
    leader: Leader | None
    instances: tuple[Instance, ...]
    consumers: tuple[ConsumerRow, ...]
    pool: int
    pool_source: str
    """``"published"`` (the tuner's capacity) or ``"assumed"`` (no capacity is live)."""
    queue: QueueTotals
    queues: tuple[Queue, ...]
    """Each queue (see :mod:`._queues`), the backend's own first."""
    paused_queues: tuple[str, ...]
    paused_tasks: tuple[str, ...]
    timing: Timing
    charts: Charts
    tuner: tuple[CapacityChange, ...]
    """Each change of the published capacity the sampler saw, newest first."""
    desired_instances: int | None = None
    """How many instances the leader says the fleet needs (``target_wait``); ``None``
    while none is published."""
    live_instances: int = 0
    """The group's instances with a live heartbeat (to set beside it)."""
    shards: tuple[ShardCounts, ...] = ()
    """A sharded group's messages per shard (none when unsharded); each queue's
    ``length`` then counts its entries in every shard with the group's own."""


def capacity_changes(samples: Sequence[Sample]) -> list[CapacityChange]:
    """The samples at which the published capacity changed, newest first (pure)."""
    changes: list[CapacityChange] = []
    for k, sample in enumerate(samples):
        if k == 0 or sample.capacity != samples[k - 1].capacity:
            changes.append(CapacityChange(at=sample.at, capacity=sample.capacity))
    return changes[::-1]


def instances_of(
    consumers: Sequence[ConsumerRow],
    catalog: Sequence[CatalogDocument],
    beats: Sequence[Heartbeat],
    *,
    leader: str | None,
    pool: int,
) -> list[Instance]:
    """The group's instances (pure): the hosts that publish in its catalog (serving
    runners, even before their first read) and those with a consumer in it,
    joined with their heartbeats. ``consumers`` may name a consumer once per queue."""
    by_host: dict[str, list[ConsumerRow]] = {doc.host: [] for doc in catalog}
    for consumer in consumers:
        by_host.setdefault(consumer.host, []).append(consumer)
    published = {doc.host: doc for doc in catalog}
    beat_of = {beat.host: beat for beat in beats}
    out = []
    for host in sorted(by_host):
        beat = beat_of.get(host)
        doc = published.get(host)
        instance_id = doc.instance if doc is not None else None
        if instance_id is None and beat is not None:
            instance_id = beat.instance_id
        out.append(
            Instance(
                host=host,
                instance_id=instance_id,
                heartbeat_ttl=None if beat is None else beat.ttl,
                alive=beat is not None and beat.instance_id == instance_id,
                leader=instance_id is not None and instance_id == leader,
                pool=pool,
                running=sum(c.pending for c in by_host[host]),
                consumers=len({c.name for c in by_host[host]}),
                tasks=() if doc is None else tuple(sorted(t.name for t in doc.tasks)),
            )
        )
    return out


def queue_row(read: QueueRead) -> Queue:
    """What the group page shows of one queue (pure; claim delays 0 when not read)."""
    metrics = read.metrics
    return Queue(
        name=read.name,
        stream=read.stream,
        length=read.length,
        pending=read.info.pending,
        lag=read.info.lag,
        claim_delay_avg_ms=0.0 if metrics is None else metrics.message_claim_delay_avg / 1e6,
        claim_delay_max_ms=0.0 if metrics is None else metrics.message_claim_delay_max / 1e6,
        claim_delay_last_ms=0.0 if metrics is None else metrics.message_claim_delay_last / 1e6,
        paused=read.paused,
    )


def consumer_rows(queues: Sequence[QueueRead], group: str) -> list[ConsumerRow]:
    """Every consumer of the group on every queue, by name, then queue (pure)."""
    rows = [
        ConsumerRow(
            name=c.name, host=host_of(c.name, group), queue=q.name, pending=c.pending, idle=c.idle
        )
        for q in queues
        for c in q.info.consumers
    ]
    return sorted(rows, key=lambda r: (r.name, r.queue))


async def read_group(
    backend: Backend, inspection: Inspection, sampler: Sampler, group: str
) -> GroupPage:
    """One group's state: leader, instances, queue, timing, and the sampler's history.

    Raises:
        BackendError: the store could not be read.
    """
    sampler.watch(group)
    metrics = await backend.read_metrics(group)
    published = await backend.read_tuning(group)
    desired = await backend.read_desired_instances(group)
    lease = await inspection.read_lease(group)
    beats = await inspection.list_heartbeats()
    catalog = await backend.read_catalog(group)
    paused = await _features.paused(backend, group)
    # Not metrics.groups: on Redis those come from XINFO GROUPS alone, without consumers.
    stored = await sampler.stored_queues(group)
    queues = await _queues.read_queues(backend, group, catalog, paused, stored=stored)
    count = (await shards_of(backend, group)).count
    shards: tuple[ShardCounts, ...] = ()
    if count > 1:  # a sharded group's entries are in its shards too
        queue_names = [q.name for q in queues]
        sizes = await queue_sizes(backend, group, count, {q.name: q.length for q in queues})
        queues = [attrs.evolve(q, length=sizes[q.name]) for q in queues]
        shards = await read_shard_counts(inspection, group, count, queue_names)
    pool = published if published is not None else DEFAULT_WORKERS
    consumers = consumer_rows(queues, group)
    instances = instances_of(
        consumers, catalog, beats, leader=None if lease is None else lease.owner, pool=pool
    )
    names = _wire.task_names_in(metrics, group)
    stats = compute_stats(
        metrics=metrics,
        group=group,
        task_names=names,
        queue_len=sum(q.length for q in queues),
        workers=pool,
        replication=max(1, sum(1 for i in instances if i.alive)),
    )
    queue_of = _queues.task_queues(
        catalog, backend.stream_keys(group), _queues.stream_of(backend, group)
    )
    tasks = tuple(
        TaskTiming(
            name=name,
            queue=queue_of.get(name),
            paused=name in paused.tasks,
            avg_ms=stats.per_task_timing.get(name, 0.0),
            runs=int(max(0.0, _wire.task_timing(metrics, name)[1])),
        )
        for name in sorted(set(names) | set(queue_of) | paused.tasks)
    )
    samples = sampler.samples(group)
    throughput = tuple(rates(samples))
    leader = None
    if lease is not None:
        host = next((b.host for b in beats if b.instance_id == lease.owner), None)
        leader = Leader(owner=lease.owner, host=host, ttl=lease.ttl)
    return GroupPage(
        group=group,
        taken_at=backend.now(),
        leader=leader,
        instances=tuple(instances),
        consumers=tuple(consumers),
        pool=pool,
        pool_source="published" if published is not None else "assumed",
        queue=QueueTotals(
            length=sum(q.length for q in queues),
            pending=sum(q.info.pending for q in queues),
            lag=sum(q.info.lag for q in queues),
        ),
        queues=tuple(queue_row(q) for q in queues),
        paused_queues=tuple(sorted(paused.queues)),
        paused_tasks=tuple(sorted(paused.tasks)),
        timing=Timing(
            avg_ms=stats.avg_timing,
            predicted_wait_ms=stats.predicted_wait_time,
            tps=stats.tps,
            measured_tps=throughput[-1][1] if throughput else None,
            avg_schedule_ms=stats.avg_schedule_timing,
            tasks=tasks,
        ),
        charts=Charts(
            throughput=throughput,
            queue_length=tuple((s.at, float(s.queue_length)) for s in samples),
            capacity=tuple((s.at, float(s.capacity)) for s in samples if s.capacity is not None),
            interval=sampler.interval,
            sampling=sampler.running,
        ),
        tuner=tuple(capacity_changes(samples)),
        desired_instances=desired,
        live_instances=sum(1 for i in instances if i.alive),
        shards=shards,
    )
