"""Prometheus export of one runner: a collector and a small trio-native ``/metrics`` server.

Theory of operation. Prometheus calls :meth:`RunnerCollector.collect`
synchronously (from the scrape handler, or from a thread when a user serves
their registry with ``prometheus_client``'s own server), but most of what is
worth exporting lives in the backend and needs ``await``. So the collector
keeps an immutable :class:`Snapshot` of the backend-side numbers
(:class:`~taskrunner.Stats`, :class:`~taskrunner.backends.QueueMetrics`, the
replication count, the published ``desired_instances``) that
:meth:`RunnerCollector.run_updater` refreshes every ``refresh_interval``
seconds; ``collect`` only reads it, plus the runner's local state
(:meth:`~taskrunner.TaskRunner.statistics`, ``is_leader``), which is
synchronous and always current. A failed refresh is logged and the last
good snapshot stays; ``taskrunner_snapshot_age_seconds`` tells how old it is,
so a dashboard can tell stale numbers from live ones. The per-task duration
histogram is fed on the hot path by :meth:`~taskrunner.TaskRunner.add_observer`
(a bucket increment under a lock, nothing else).

:func:`serve_metrics` is the I/O shell the CLI uses (``taskrunner worker
--metrics-port``): the updater plus a minimal HTTP/1.x server on
``trio.serve_tcp`` answering ``GET /metrics`` (and ``HEAD``), 404 elsewhere.
Requests are bounded in size and time, and every connection is closed after
one response, so a stuck or hostile client costs one task for a few seconds.
"""

from __future__ import annotations

import bisect
import logging
import math
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from functools import partial

import attrs
import prometheus_client
import trio
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector, CollectorRegistry

from taskrunner._fleet.stats import Stats
from taskrunner._prometheus_workflows import workflow_families
from taskrunner._runner import TaskRunner
from taskrunner.backends import QueueMetrics, WorkflowEnds
from taskrunner.errors import BackendError

__all__ = [
    "DURATION_BUCKETS",
    "RunnerCollector",
    "Snapshot",
    "serve_metrics",
]

log = logging.getLogger(__name__)

DURATION_BUCKETS: tuple[float, ...] = (
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
)  # fmt: skip
"""Upper bounds (seconds) of ``taskrunner_task_duration_seconds``; ``+Inf`` is implied."""

MAX_REQUEST_BYTES = 8192
"""Longest request head (request line and headers) the server reads."""
REFRESH_TIMEOUT = 10.0
"""Seconds one snapshot refresh may take (at least ``refresh_interval``) before it fails."""
REQUEST_TIMEOUT = 5.0
"""Seconds a client has to send its request head and read the answer."""

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
            gauge = _gauge(name, doc)
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
                    buckets.append((_bound(bound), cumulative))
                durations.add_metric([group, task], buckets, total)
        yield durations

        snapshot = None if empty else self._snapshot
        age = _gauge(
            "snapshot_age_seconds",
            "Seconds since the backend snapshot was taken (since start-up before the first).",
        )
        if not empty:
            taken = snapshot.taken_at if snapshot else self._created
            age.add_metric(g, time.monotonic() - taken)
        yield age
        yield from _snapshot_families(group, snapshot)


def _bound(seconds: float) -> str:
    # The exposition's spelling of a bucket bound (``+Inf``, ``0.005``, ``60.0``).
    return "+Inf" if seconds == math.inf else repr(seconds)


def _gauge(name: str, doc: str, labels: Sequence[str] = ()) -> GaugeMetricFamily:
    return GaugeMetricFamily(f"taskrunner_{name}", doc, labels=["group", *labels])


def _snapshot_families(group: str, snapshot: Snapshot | None) -> Iterator[prometheus_client.Metric]:
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
        family = _gauge(name, doc)
        if value is not None:
            family.add_metric(g, float(value))
        yield family

    per_task = _gauge(
        "stats_task_avg_timing_seconds",
        "Average run time per task (Stats.per_task_timing).",
        ["task"],
    )
    for task, ms in sorted(stats.per_task_timing.items()) if stats else ():
        per_task.add_metric([group, task], ms * _MS)
    yield per_task

    # Per consumer group of the stream: ``group`` is that group here.
    pending = _gauge("group_pending", "Entries delivered to the group and not yet acked.")
    lag = _gauge("group_lag", "Entries not yet delivered to the group.")
    c_pending = _gauge("consumer_pending", "Entries pending for the consumer.", ["consumer"])
    c_idle = _gauge("consumer_idle_seconds", "Seconds since the consumer was active.", ["consumer"])
    for info in queue.groups if queue else ():
        pending.add_metric([info.name], info.pending)
        lag.add_metric([info.name], info.lag)
        for consumer in info.consumers:
            c_pending.add_metric([info.name, consumer.name], consumer.pending)
            c_idle.add_metric([info.name, consumer.name], consumer.idle)
    yield from (pending, lag, c_pending, c_idle)
    yield from workflow_families(group, snapshot.workflow_ends if snapshot else None)


# The HTTP shell -------------------------------------------------------------
def _response(status: str, body: bytes, content_type: str, *, head: bool = False) -> bytes:
    headers = (
        f"HTTP/1.1 {status}\r\n"
        f"Content-Type: {content_type}\r\n"
        f"Content-Length: {len(body)}\r\n"
        "Connection: close\r\n\r\n"
    )
    return headers.encode("latin-1") + (b"" if head else body)


def answer(request_head: bytes, registry: CollectorRegistry) -> bytes:
    """The whole HTTP response to one request head (sans-io: no sockets here).

    ``GET``/``HEAD /metrics`` (any query string) -> 200 with the exposition;
    another path -> 404; another method -> 405; an unparsable head -> 400.
    """
    text_plain = "text/plain; charset=utf-8"
    line = request_head.split(b"\r\n", 1)[0]
    parts = line.split(b" ")
    if len(parts) != 3 or not parts[2].startswith(b"HTTP/"):
        return _response("400 Bad Request", b"bad request\n", text_plain)
    method, target = parts[0], parts[1]
    if method not in (b"GET", b"HEAD"):
        return _response("405 Method Not Allowed", b"method not allowed\n", text_plain)
    head = method == b"HEAD"
    if target.split(b"?", 1)[0] != b"/metrics":
        return _response("404 Not Found", b"not found; try /metrics\n", text_plain, head=head)
    body = prometheus_client.generate_latest(registry)
    return _response("200 OK", body, prometheus_client.CONTENT_TYPE_LATEST, head=head)


async def _read_head(stream: trio.abc.Stream) -> bytes | None:
    """The request head, or ``None`` if the client closed or sent too much."""
    data = b""
    while b"\r\n\r\n" not in data and b"\n\n" not in data:
        if len(data) > MAX_REQUEST_BYTES:
            return None
        chunk = await stream.receive_some(4096)
        if not chunk:
            return data or None
        data += chunk
    return data


async def _handle(stream: trio.SocketStream, registry: CollectorRegistry) -> None:
    try:
        with trio.move_on_after(REQUEST_TIMEOUT):
            head = await _read_head(stream)
            if head is None:
                response = _response(
                    "431 Request Header Fields Too Large", b"", "text/plain; charset=utf-8"
                )
            else:
                response = answer(head, registry)
            await stream.send_all(response)
    except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
        log.debug("metrics client went away: %r", exc)
    finally:
        with trio.move_on_after(1) as cleanup:
            cleanup.shield = True
            await stream.aclose()


async def serve_metrics(
    runner: TaskRunner,
    port: int,
    *,
    host: str = "127.0.0.1",
    registry: CollectorRegistry | None = None,
    refresh_interval: float = 5.0,
    task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve ``runner``'s metrics on ``http://host:port/metrics`` until cancelled.

    Creates a :class:`RunnerCollector` for ``runner``, registers it in
    ``registry`` (default: a fresh :class:`~prometheus_client.CollectorRegistry`;
    pass ``prometheus_client.REGISTRY`` to export the process metrics too),
    runs its updater and answers scrapes.

    Args:
        runner: The runner to export.
        port: TCP port; 0 picks a free one (reported through ``task_status``).
        host: Address to listen on; the default only accepts local scrapes.
        registry: Registry to serve, with the collector added to it.
        refresh_interval: Seconds between two refreshes of the backend snapshot.

    Returns:
        Never; it runs until cancelled.

    Raises:
        OSError: the port cannot be bound (before ``task_status.started``).

    Cancellation: stops listening, drops open scrape connections, removes
    the collector from a registry that was passed in and its observer from
    ``runner``.
    """
    # Bound here, before any task starts: a busy port is a plain OSError.
    listeners = await trio.open_tcp_listeners(port, host=host)
    try:
        collector = RunnerCollector(runner, refresh_interval=refresh_interval)
        served = CollectorRegistry() if registry is None else registry
        served.register(collector)
        try:
            async with trio.open_nursery() as nursery:
                await nursery.start(collector.run_updater)

                async def handler(stream: trio.SocketStream) -> None:
                    await _handle(stream, served)

                await nursery.start(partial(trio.serve_listeners, handler, listeners))
                real_port = listeners[0].socket.getsockname()[1]
                log.info("serving metrics on http://%s:%d/metrics", host, real_port)
                task_status.started(real_port)
        finally:
            served.unregister(collector)
            collector.close()
    finally:
        # serve_listeners closes them too; this covers a start cut short before it.
        for listener in listeners:
            await trio.aclose_forcefully(listener)
