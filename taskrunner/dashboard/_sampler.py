"""The dashboard's own history: throughput, queue length and pool capacity over the last hour.

Theory of operation. Nothing in the store keeps a history (the metrics hash holds
running totals, the tuning key the newest capacity), so the dashboard samples
while it runs. Every ``interval`` seconds :meth:`Sampler.run` reads, per group,
summaries: the metrics hash (``HGETALL`` of a small hash: the run counts), the
published tuning capacity (``GET``), the task catalog, the paused set and, every
minute, the queues with keys on the store (which name the group's queues,
:mod:`._queues`), and per queue the stream's length and the
group's pending and lag (``XLEN``, ``XINFO GROUPS`` and ``XINFO CONSUMERS``); a
sample holds the queues' sums.
Never a stream's entries: the cost does not grow with the queues' lengths. Each group's samples
go into a :class:`Ring` of fixed size (an hour of them), in memory; a restart
starts the history afresh.

Throughput is derived, not read: :func:`rates` turns the run-count totals into
runs per second between samples. The totals move in steps (the runners' bulk
writers flush once a second) and drop to zero when a leader resets the
metrics; a drop counts as no runs, never as negative ones.

Which groups: those on the server (:meth:`Inspection.list_groups
<taskrunner.backends.Inspection.list_groups>`, two ``SCAN`` walks, so re-read
only every :data:`GROUPS_EVERY` seconds), plus any group a page asked for
(:meth:`Sampler.watch`). A group whose read fails keeps its history and is
tried again at the next tick; the failure is logged once per streak.
"""

from __future__ import annotations

import collections
import logging
import math
from collections.abc import Sequence

import attrs
import trio

from taskrunner import _wire
from taskrunner.backends import Backend, Inspection
from taskrunner.dashboard import _queues
from taskrunner.errors import BackendError

__all__ = ["GROUPS_EVERY", "Ring", "Sample", "Sampler", "rates"]

log = logging.getLogger(__name__)

GROUPS_EVERY = 60.0
"""Seconds between re-reads of the groups on the server."""


@attrs.frozen(kw_only=True)
class Sample:
    """One group's summaries at one instant."""

    at: float
    """The backend's clock (unix seconds on Redis)."""
    runs: int
    """Timed runs in the metrics hash, all tasks together (a running total)."""
    queue_length: int
    """Entries in the streams of all the group's queues (``XLEN``)."""
    pending: int
    """Delivered to the group and not yet acked."""
    lag: int
    """Not yet delivered to the group."""
    capacity: int | None
    """The published pool capacity per instance, if one was live."""


@attrs.define
class Ring:
    """The newest ``size`` samples of one group, oldest first."""

    size: int
    _samples: collections.deque[Sample] = attrs.field(init=False)

    def __attrs_post_init__(self) -> None:
        self._samples = collections.deque(maxlen=self.size)

    def add(self, sample: Sample) -> None:
        self._samples.append(sample)

    def samples(self) -> list[Sample]:
        return list(self._samples)


def rates(samples: Sequence[Sample], *, window: float = 2.0) -> list[tuple[float, float]]:
    """Runs per second at every sample but the first, as ``(at, rate)`` (pure).

    Each rate is measured against the newest earlier sample at least ``window``
    seconds older (or the oldest one): the run counts move once per bulk-writer
    flush, so rates between samples closer than that would zigzag. A total that
    went down (a metrics reset) counts as no runs.
    """
    out: list[tuple[float, float]] = []
    for k in range(1, len(samples)):
        now = samples[k]
        j = k - 1
        while j > 0 and now.at - samples[j].at < window:
            j -= 1
        then = samples[j]
        span = now.at - then.at
        rate = max(0, now.runs - then.runs) / span if span > 0 else 0.0
        out.append((now.at, rate))
    return out


def total_runs(metrics: dict[str, float], group: str) -> int:
    """Timed runs of every task in the metrics hash (pure; nonsense fields count 0)."""
    total = 0
    for name in _wire.task_names_in(metrics, group):
        count = _wire.task_timing(metrics, name)[1]
        if math.isfinite(count) and count > 0:
            total += int(count)
    return total


class Sampler:
    """Samples every group on the store every ``interval`` seconds into a ring per group.

    Args:
        backend: The store; it must implement :class:`~taskrunner.backends.Inspection`
            to find the groups (without it only watched groups are sampled).
        interval: Seconds between samples.
        history: Seconds of samples kept per group.
    """

    def __init__(self, backend: Backend, *, interval: float = 5.0, history: float = 3600.0):
        if not 0 < interval < float("inf"):
            raise ValueError(f"sample interval must be a number of seconds > 0, got {interval!r}")
        if not interval <= history < float("inf"):
            raise ValueError(
                f"history must be a number of seconds >= the interval, got {history!r}"
            )
        self.backend = backend
        self.interval = interval
        self.history = history
        self._rings: dict[str, Ring] = {}
        self._failing: set[str] = set()
        self._stored: dict[str, tuple[float, list[str]]] = {}  # group -> (read at, queues)
        self.running = False

    async def stored_queues(self, group: str) -> list[str]:
        """The queues of ``group`` with keys on the store (``Inspection.list_queues``,
        two walks of the key space), read again at most every :data:`GROUPS_EVERY`
        seconds; none without inspection. So a queue that has messages is listed
        even when no runner serves it, within a minute of its first key.

        Raises:
            BackendError: the store could not be read.
        """
        if not isinstance(self.backend, Inspection):
            return []
        now = trio.current_time()
        cached = self._stored.get(group)
        if cached is None or now - cached[0] >= GROUPS_EVERY:
            cached = self._stored[group] = now, await self.backend.list_queues(group)
        return cached[1]

    def watch(self, group: str) -> None:
        """Sample ``group`` from the next tick on (a page asked for it)."""
        self._ring(group)

    def _ring(self, group: str) -> Ring:
        ring = self._rings.get(group)
        if ring is None:
            ring = self._rings[group] = Ring(size=int(self.history / self.interval) + 1)
        return ring

    def samples(self, group: str) -> list[Sample]:
        """The samples of ``group`` kept now, oldest first (none if never sampled)."""
        ring = self._rings.get(group)
        return [] if ring is None else ring.samples()

    async def sample(self, group: str) -> Sample:
        """Read ``group``'s summaries once (four round trips and two per queue, none
        per entry).

        Raises:
            BackendError: the store could not be read.
        """
        backend = self.backend
        metrics = await backend.read_metrics(group)
        stored = await self.stored_queues(group)
        queues = await _queues.read_group_queues(backend, group, claim_delays=False, stored=stored)
        capacity = await backend.read_tuning(group)
        return Sample(
            at=backend.now(),
            runs=total_runs(metrics, group),
            queue_length=sum(q.length for q in queues),
            pending=sum(q.info.pending for q in queues),
            lag=sum(q.info.lag for q in queues),
            capacity=capacity,
        )

    async def tick(self) -> None:
        """Sample every known group once."""
        for group in list(self._rings):
            try:
                sample = await self.sample(group)
            except BackendError as exc:
                if group not in self._failing:
                    log.warning("dashboard: cannot sample group %r: %s", group, exc)
                    self._failing.add(group)
                continue
            self._failing.discard(group)
            self._ring(group).add(sample)

    async def refresh_groups(self) -> None:
        """Add the groups on the store now (a failed read is logged and skipped)."""
        if not isinstance(self.backend, Inspection):
            return
        try:
            groups = await self.backend.list_groups()
        except BackendError as exc:
            log.warning("dashboard: cannot list the groups: %s", exc)
            return
        for group in groups:
            self._ring(group)

    async def run(self) -> None:
        """Sample forever (until cancelled), every ``interval`` seconds.

        Cancellation: stops between or during reads; the rings keep what they have.
        """
        self.running = True
        try:
            next_groups = trio.current_time()
            while True:
                if trio.current_time() >= next_groups:
                    await self.refresh_groups()
                    next_groups = trio.current_time() + GROUPS_EVERY
                await self.tick()
                await trio.sleep(self.interval)
        finally:
            self.running = False
