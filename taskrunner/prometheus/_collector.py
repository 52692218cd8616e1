"""The collector: local metrics read live at each scrape, backend-side ones from the
snapshot its updater refreshes (see the package's theory of operation), and the
per-task duration histogram fed by the runner's observer.
"""

from __future__ import annotations

import bisect
import logging
import math
import threading
import time
from collections.abc import Iterator, Sequence

import prometheus_client
import trio
from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector

from taskrunner._runner import TaskRunner
from taskrunner.backends import WorkflowEnds
from taskrunner.errors import BackendError
from taskrunner.prometheus._families import Snapshot, bound_text, gauge_family, snapshot_families

log = logging.getLogger("taskrunner.prometheus")

DURATION_BUCKETS: tuple[float, ...] = (
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
)  # fmt: skip
"""Upper bounds (seconds) of ``taskrunner_task_duration_seconds``; ``+Inf`` is implied."""

REFRESH_TIMEOUT = 10.0
"""Seconds one snapshot refresh may take (at least ``refresh_interval``) before it fails."""


class _DurationHistogram:
    """Per-task cumulative buckets; ``observe`` is safe from any thread."""

    def __init__(self, buckets: Sequence[float]) -> None:
        self.bounds = tuple(buckets)
        self._lock = threading.Lock()
        # task -> (per-bucket counts, the last one being +Inf; sum of seconds)
        self._counts: dict[str, list[int]] = {}
        self._sums: dict[str, float] = {}

    def observe(self, task: str, seconds: float) -> None:
        index = bisect.bisect_left(self.bounds, seconds)
        with self._lock:
            counts = self._counts.get(task)
            if counts is None:
                counts = self._counts[task] = [0] * (len(self.bounds) + 1)
                self._sums[task] = 0.0
            counts[index] += 1
            self._sums[task] += seconds

    def items(self) -> list[tuple[str, list[int], float]]:
        with self._lock:
            return [(t, list(c), self._sums[t]) for t, c in sorted(self._counts.items())]


class RunnerCollector(Collector):
    """Exports one :class:`~taskrunner.TaskRunner` to Prometheus.

    Register it in any registry, and run its updater next to the runner::

        collector = RunnerCollector(runner)
        registry.register(collector)
        nursery.start_soon(collector.run_updater)

    Without the updater only the local metrics (pool, counters, leader flag,
    durations) are exported; the backend-side ones appear after the first
    successful refresh. One collector per registry: two would export the same
    metric names.

    Args:
        runner: The runner to export. An observer is added to it at once, so
            the duration histogram counts every run from now on.
        refresh_interval: Seconds between two backend refreshes.

    Raises:
        ValueError: ``refresh_interval`` is not a positive number of seconds.
    """

    def __init__(self, runner: TaskRunner, *, refresh_interval: float = 5.0) -> None:
        if not 0 < refresh_interval < math.inf:
            raise ValueError(f"refresh_interval must be > 0 seconds, got {refresh_interval!r}")
        self.runner = runner
        self.refresh_interval = refresh_interval
        self._durations = _DurationHistogram(DURATION_BUCKETS)
        self._created = time.monotonic()
        self._snapshot: Snapshot | None = None
        self._refresh_errors = 0
        runner.add_observer(self._observe)

    def close(self) -> None:
        """Stop observing ``runner``'s runs (the histogram stops growing). Idempotent."""
        self.runner.remove_observer(self._observe)

    @property
    def snapshot(self) -> Snapshot | None:
        """The last good snapshot, or ``None`` before the first successful refresh."""
        return self._snapshot

    def _observe(self, task_name: str, seconds: float, succeeded: bool) -> None:
        self._durations.observe(task_name, seconds)

    # The async side ------------------------------------------------------------
    async def refresh(self) -> Snapshot:
        """Read the backend-side numbers once and make them the current snapshot.

        Raises:
            BackendError: the backend could not be reached; the previous
                snapshot stays.
        """
        stats = await self.runner.get_timing_statistics()
        queue = await self.runner.backend.get_metrics(self.runner.config.consumer_group)
        replication = await self.runner.get_number_of_replications()
        config = self.runner.config
        # Only a runner that autoscales asks, so one without target_wait costs no read.
        desired = (
            None
            if config.target_wait is None
            else await self.runner.backend.read_desired_instances(config.consumer_group)
        )
        backend = self.runner.backend
        ends = (
            await backend.workflow_ends(config.consumer_group)
            if isinstance(backend, WorkflowEnds)
            else None
        )
        snapshot = Snapshot(
            taken_at=time.monotonic(),
            stats=stats,
            queue=queue,
            replication=replication,
            desired_instances=desired,
            workflow_ends=ends,
        )
        self._snapshot = snapshot
        return snapshot

    async def run_updater(
        self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """Refresh the snapshot every ``refresh_interval`` seconds until cancelled.

        Calls ``task_status.started()`` after the first attempt (successful or
        not), so a scrape right after ``nursery.start`` sees backend numbers
        when the backend is up. Errors never end the loop: they are logged,
        counted in ``taskrunner_snapshot_errors_total``, and the last good
        snapshot is kept.
        """
        started = False
        while True:
            try:
                # A backend call that hangs must not freeze the snapshot silently.
                with trio.fail_after(max(REFRESH_TIMEOUT, self.refresh_interval)):
                    await self.refresh()
            except (BackendError, trio.TooSlowError) as exc:
                self._refresh_errors += 1
                log.warning(
                    "metrics refresh failed, keeping the last snapshot: %s", exc or "timed out"
                )
            except Exception:
                # A backend that breaks its contract must not take the exporter
                # (and the worker beside it) down with it.
                self._refresh_errors += 1
                log.exception("metrics refresh failed unexpectedly, keeping the last snapshot")
            if not started:
                task_status.started()
                started = True
            await trio.sleep(self.refresh_interval)

    # The sync side ---------------------------------------------------------------
    def describe(self) -> Iterator[prometheus_client.Metric]:
        """Every metric family, without samples (lets a registry detect name clashes)."""
        yield from self._families(empty=True)

    def collect(self) -> Iterator[prometheus_client.Metric]:
        """The current metrics: local ones live, backend ones from the snapshot."""
        yield from self._families(empty=False)

    def _families(self, *, empty: bool) -> Iterator[prometheus_client.Metric]:
        group = self.runner.config.consumer_group
        g = [group]
        # Local state: always current.
        local = self.runner.statistics()
        counters = [
            ("tasks_completed", "Task runs whose action returned.", local.completed),
            ("tasks_failed", "Task attempts whose action raised.", local.failed),
            ("tasks_retried", "Failed attempts left pending for another try.", local.retried),
            (
                "tasks_dead_lettered",
                "Messages moved to the dead-letter stream.",
                local.dead_lettered,
            ),
            ("tasks_handled", "Messages accepted by failed_task_handler.", local.handled),
            ("messages_fetched", "Messages handed to workers (new and reclaimed).", local.fetched),
            ("messages_reclaimed", "Messages claimed from idle consumers.", local.reclaimed),
            ("messages_acked", "Messages acknowledged.", local.acked),
            ("snapshot_errors", "Failed refreshes of the backend snapshot.", self._refresh_errors),
        ]
        for name, doc, value in counters:
            family = CounterMetricFamily(f"taskrunner_{name}", doc, labels=["group"])
            if not empty:
                family.add_metric(g, value)
            yield family
        gauges = [
            ("pool_capacity", "Current worker-pool capacity.", local.capacity),
            ("pool_running", "Tasks running now.", local.running),
            ("ack_backlog", "Finished messages waiting for their ack.", local.ack_backlog),
            ("is_leader", "1 while this instance leads its group, else 0.", self.runner.is_leader),
        ]
        for name, doc, number in gauges:
            gauge = gauge_family(name, doc)
            if not empty:
                gauge.add_metric(g, float(number))
            yield gauge

        durations = HistogramMetricFamily(
            "taskrunner_task_duration_seconds",
            "Run time of each task attempt, successful or not.",
            labels=["group", "task"],
        )
        if not empty:
            for task, counts, total in self._durations.items():
                cumulative, buckets = 0, []
                for bound, count in zip((*DURATION_BUCKETS, math.inf), counts, strict=True):
                    cumulative += count
                    buckets.append((bound_text(bound), cumulative))
                durations.add_metric([group, task], buckets, total)
        yield durations

        snapshot = None if empty else self._snapshot
        age = gauge_family(
            "snapshot_age_seconds",
            "Seconds since the backend snapshot was taken (since start-up before the first).",
        )
        if not empty:
            taken = snapshot.taken_at if snapshot else self._created
            age.add_metric(g, time.monotonic() - taken)
        yield age
        yield from snapshot_families(group, snapshot)
