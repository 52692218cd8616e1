"""The backend-side metric families, read from one :class:`Snapshot`: the replica
count, the stats formulas, the stream's size and claim delays, each consumer group's
and consumer's backlog, the workflows ended.

Pure: a snapshot in, families out; a family without a value (no snapshot yet, or a
number the backend does not publish) is yielded without a sample.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence

import attrs
import prometheus_client
from prometheus_client.core import GaugeMetricFamily

from taskrunner._fleet.stats import Stats
from taskrunner._prometheus_workflows import workflow_families
from taskrunner.backends import QueueMetrics

_NS = 1e-9
_MS = 1e-3


@attrs.frozen(kw_only=True)
class Snapshot:
    """The backend-side numbers of one successful refresh."""

    taken_at: float
    """``time.monotonic()`` when the refresh finished."""
    stats: Stats
    queue: QueueMetrics
    replication: int
    desired_instances: int | None = None
    """The instance count the group's leader publishes (``target_wait``), if any; read
    only when this runner has ``target_wait`` set."""
    workflow_ends: Mapping[str, int] | None = None
    """The group's workflows ended, by outcome (``None``: the backend counts none)."""


def bound_text(seconds: float) -> str:
    """The exposition's spelling of a bucket bound (``+Inf``, ``0.005``, ``60.0``)."""
    return "+Inf" if seconds == math.inf else repr(seconds)


def gauge_family(name: str, doc: str, labels: Sequence[str] = ()) -> GaugeMetricFamily:
    """A gauge family ``taskrunner_<name>``, labelled by group (and ``labels``)."""
    return GaugeMetricFamily(f"taskrunner_{name}", doc, labels=["group", *labels])


def snapshot_families(group: str, snapshot: Snapshot | None) -> Iterator[prometheus_client.Metric]:
    """The backend-side families of ``group`` from ``snapshot`` (without samples when
    it is ``None``: before the first refresh, or for ``describe``)."""
    g = [group]
    stats = snapshot.stats if snapshot else None
    queue = snapshot.queue if snapshot else None
    scalars: list[tuple[str, str, float | None]] = [
        (
            "replicas",
            "Live instances of the fleet (heartbeat keys).",
            snapshot.replication if snapshot else None,
        ),
        (
            "stats_predicted_wait_seconds",
            "Predicted wait of a message dispatched now (Stats.predicted_wait_time).",
            stats.predicted_wait_time * _MS if stats else None,
        ),
        (
            "stats_avg_timing_seconds",
            "Average run time over every registered task (Stats.avg_timing).",
            stats.avg_timing * _MS if stats else None,
        ),
        (
            "stats_avg_schedule_timing_seconds",
            "Average delayed-task scheduler pass (Stats.avg_schedule_timing).",
            stats.avg_schedule_timing * _MS if stats else None,
        ),
        (
            "stats_tps",
            "Theoretical throughput in tasks per second (Stats.tps).",
            stats.tps if stats else None,
        ),
        ("queue_size", "Entries in the stream.", queue.queue_size if queue else None),
        (
            "desired_instances",
            "Instances the fleet needs to keep the predicted wait under target_wait "
            "(published by the leader; absent while none is).",
            snapshot.desired_instances if snapshot else None,
        ),
    ]
    for kind in ("avg", "std", "max", "last"):
        value = getattr(queue, f"message_claim_delay_{kind}") * _NS if queue else None
        scalars.append(
            (
                f"claim_delay_{kind}_seconds",
                f"Claim delay ({kind}) over the newest 1000 deliveries.",
                value,
            )
        )
    for name, doc, value in scalars:
        family = gauge_family(name, doc)
        if value is not None:
            family.add_metric(g, float(value))
        yield family

    per_task = gauge_family(
        "stats_task_avg_timing_seconds",
        "Average run time per task (Stats.per_task_timing).",
        ["task"],
    )
    for task, ms in sorted(stats.per_task_timing.items()) if stats else ():
        per_task.add_metric([group, task], ms * _MS)
    yield per_task

    # Per consumer group of the stream: ``group`` is that group here.
    pending = gauge_family("group_pending", "Entries delivered to the group and not yet acked.")
    lag = gauge_family("group_lag", "Entries not yet delivered to the group.")
    c_pending = gauge_family("consumer_pending", "Entries pending for the consumer.", ["consumer"])
    c_idle = gauge_family(
        "consumer_idle_seconds", "Seconds since the consumer was active.", ["consumer"]
    )
    for info in queue.groups if queue else ():
        pending.add_metric([info.name], info.pending)
        lag.add_metric([info.name], info.lag)
        for consumer in info.consumers:
            c_pending.add_metric([info.name, consumer.name], consumer.pending)
            c_idle.add_metric([info.name, consumer.name], consumer.idle)
    yield from (pending, lag, c_pending, c_idle)
    yield from workflow_families(group, snapshot.workflow_ends if snapshot else None)
