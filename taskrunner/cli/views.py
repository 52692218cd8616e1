"""Terminal views shared by ``taskrunner demo`` and ``taskrunner top``.

Theory of operation: every function here is pure, from plain data (frozen
snapshots gathered elsewhere) to a rich renderable or a string, so a screen
can be rendered once to text in a test (:func:`render_text`) and the I/O (the
``Live`` loop, reading Redis) stays in the command modules. :class:`History`
is the one stateful piece: a bounded ring of samples from which ``top`` draws
throughput and queue length over the last minutes; it takes the sample time
as an argument, so it is as testable as the rest.
"""

from __future__ import annotations

import collections
import io
import math
from collections.abc import Iterable, Mapping, Sequence

import attrs
from rich import box
from rich.console import Console, Group, RenderableType
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

from taskrunner import _wire
from taskrunner._fleet.shard_counts import ShardCounts
from taskrunner._fleet.stats import Stats
from taskrunner._flow.limits import Paused
from taskrunner._runner import RunnerStatistics
from taskrunner._schedules.view import ScheduleRow
from taskrunner.backends import KeyInfo, QueueMetrics
from taskrunner.cli.base import paused_text
from taskrunner.cli.shard_table import shards_table

__all__ = [
    "DemoFrame",
    "FleetSnapshot",
    "History",
    "RunnerView",
    "demo_line",
    "demo_view",
    "keys_table",
    "queue_table",
    "render_text",
    "runners_table",
    "sparkline",
    "stats_table",
    "top_line",
    "top_view",
]

SPARK = "▁▂▃▄▅▆▇█"
STATISTICS_COLUMNS = (
    "capacity running fetched reclaimed completed failed retried dead_lettered handled acked"
).split()
"""The :class:`RunnerStatistics` fields shown per runner, in order."""
COMPACT_COLUMNS = {
    "capacity": "pool",
    "running": "running",
    "completed": "completed",
    "failed": "failed",
    "reclaimed": "reclaimed",
    "dead_lettered": "dead",
    "acked": "acked",
}
"""The fields (and their short headers) of a table that fits 80 columns."""


def render_text(renderable: RenderableType, *, width: int = 100) -> str:
    """``renderable`` as plain text, ``width`` columns wide (no colours, no cursor codes)."""
    console = Console(
        file=io.StringIO(), width=width, record=True, color_system=None, force_terminal=False
    )
    console.print(renderable)
    return console.export_text()


def sparkline(values: Sequence[float], width: int | None = None) -> str:
    """One block character per value (the newest ``width`` of them), scaled 0..max."""
    if width is not None:
        values = values[-width:] if width > 0 else []
    finite = [v if math.isfinite(v) and v > 0 else 0.0 for v in values]
    top = max(finite, default=0.0)
    if top <= 0:
        return SPARK[0] * len(finite)
    last = len(SPARK) - 1
    return "".join(SPARK[min(last, round(v / top * last))] for v in finite)


def _ms(value: float) -> str:
    return f"{value:,.1f} ms" if value >= 10 else f"{value:.3f} ms"


def _table(*columns: str, title: str | None = None, numeric: bool = True) -> Table:
    """A plain table; with ``numeric`` every column but the first is right-aligned."""
    table = Table(box=box.SIMPLE_HEAD, title=title, title_justify="left", pad_edge=False)
    for i, name in enumerate(columns):
        right = numeric and i > 0
        table.add_column(name, justify="right" if right else "left", no_wrap=True)
    return table


# Runners ------------------------------------------------------------------------
@attrs.frozen(kw_only=True)
class RunnerView:
    """One in-process runner as the demo shows it."""

    host: str
    leader: bool
    statistics: RunnerStatistics


def runners_table(
    runners: Sequence[RunnerView],
    *,
    title: str | None = None,
    mark_stopped: bool = True,
    compact: bool = False,
) -> Table:
    """Per-runner :class:`RunnerStatistics` and a ``total`` row.

    The leader is starred; with ``mark_stopped`` a runner that is not serving
    says so. The full table's headers are the field names; ``compact`` shows
    fewer fields under short headers (:data:`COMPACT_COLUMNS`).
    """
    columns = dict(COMPACT_COLUMNS) if compact else {c: c for c in STATISTICS_COLUMNS}
    table = _table("runner", *columns.values(), title=title)
    totals = dict.fromkeys(columns, 0)
    for view in runners:
        values = attrs.asdict(view.statistics)
        for column in columns:
            totals[column] += values[column]
        name = f"{view.host}*" if view.leader else view.host
        if mark_stopped and not view.statistics.serving:
            name += " (off)"
        table.add_row(name, *(str(values[c]) for c in columns))
    table.add_section()
    table.add_row("total", *(str(totals[c]) for c in columns))
    return table


# Stats, queue, keys ---------------------------------------------------------------
def stats_table(stats: Stats, *, runs: Mapping[str, int] | None = None) -> Table:
    """The :class:`Stats` fields, then one row per task (with its run count if given)."""
    table = _table("timing", "value", title="timing statistics (Stats)", numeric=False)
    table.add_row("predicted_wait_time", _ms(stats.predicted_wait_time))
    table.add_row("avg_timing", _ms(stats.avg_timing))
    table.add_row("avg_schedule_timing", _ms(stats.avg_schedule_timing))
    table.add_row("tps", f"{stats.tps:,.1f} tasks/s")
    for task, avg in sorted(stats.per_task_timing.items()):
        count = f"  ({runs[task]:,} runs)" if runs and task in runs else ""
        table.add_row(f"  {task}", _ms(avg) + count)
    return table


def queue_table(queue: QueueMetrics) -> Table:
    """Queue size, claim delays (ms), and every group's pending/lag and consumers."""
    table = _table("queue", "value", title="queue", numeric=False)
    table.add_row("queue_size", f"{queue.queue_size:,}")
    delays = ", ".join(
        f"{kind} {getattr(queue, f'message_claim_delay_{kind}') / 1e6:,.1f}"
        for kind in ("avg", "std", "max", "last")
    )
    table.add_row("claim delay (ms)", delays)
    for group in queue.groups:
        table.add_row(f"group {group.name}", f"pending {group.pending:,}, lag {group.lag:,}")
        for consumer in group.consumers:
            table.add_row(
                f"  {consumer.name}", f"pending {consumer.pending:,}, idle {consumer.idle:.1f}s"
            )
    return table


def keys_table(keys: Sequence[KeyInfo]) -> Table:
    """``admin.list_keys`` output."""
    table = _table("key", "type", "size", "ttl", "purpose", title="keys", numeric=False)
    for key in keys:
        ttl = "-" if key.ttl is None else f"{key.ttl:.1f}s"
        table.add_row(key.name, key.type, f"{key.size:,}", ttl, key.purpose)
    return table


# The demo --------------------------------------------------------------------------
@attrs.frozen(kw_only=True)
class DemoFrame:
    """What the demo's progress display shows at one moment."""

    expected: int
    """Outcomes to wait for: every accepted dispatch, delayed ones included."""
    planned: int
    """Tasks the demo set out to dispatch."""
    dispatched: int
    """Accepted dispatches so far (immediate and delayed)."""
    refused: int
    """Unique dispatches refused as duplicates so far."""
    done: int
    """Messages that reached a final outcome."""
    rate: float
    """Attempts per second, recently."""
    elapsed: float
    runners: tuple[RunnerView, ...]
    stats: Stats | None
    """The latest ``get_timing_statistics()``, if one was read."""
    events: tuple[str, ...] = ()
    """Recent notable events (leader changes, a runner leaving), newest last."""


def _leader(runners: Iterable[RunnerView]) -> str:
    return next((r.host for r in runners if r.leader), "none")


def demo_line(frame: DemoFrame) -> str:
    """The demo's progress as one plain line (for logs and non-terminals)."""
    failed = sum(r.statistics.failed for r in frame.runners)
    retried = sum(r.statistics.retried for r in frame.runners)
    dead = sum(r.statistics.dead_lettered for r in frame.runners)
    pools = "/".join(
        str(r.statistics.capacity) if r.statistics.serving else "-" for r in frame.runners
    )
    wait = f"{frame.stats.predicted_wait_time:.1f} ms" if frame.stats else "n/a"
    return (
        f"progress: {frame.done}/{frame.expected} outcomes, {frame.dispatched} dispatched, "
        f"{frame.rate:.0f} processed/s, leader {_leader(frame.runners)}, pools {pools}, "
        f"predicted wait {wait}, failed {failed}, retried {retried}, dead-lettered {dead}"
    )


def demo_view(frame: DemoFrame) -> RenderableType:
    """The demo's live screen: progress bar, rates, the runners, recent events."""
    share = frame.done / frame.expected if frame.expected else 0.0
    head = Table.grid(padding=(0, 2))
    head.add_row(
        ProgressBar(total=max(1, frame.expected), completed=frame.done, width=40),
        Text(f"{frame.done:,}/{frame.expected:,} ({share:.0%})", style="bold"),
        Text(f"{frame.rate:,.0f} processed/s"),
        Text(f"{frame.elapsed:5.1f}s"),
    )
    wait = _ms(frame.stats.predicted_wait_time) if frame.stats else "n/a"
    tps = f"{frame.stats.tps:,.0f}/s" if frame.stats else "n/a"
    info = Text.assemble(
        ("dispatched ", "dim"),
        f"{frame.dispatched:,} of {frame.planned:,}",
        ("   refused duplicates ", "dim"),
        str(frame.refused),
        ("   leader ", "dim"),
        (_leader(frame.runners), "bold green"),
        ("   predicted wait ", "dim"),
        wait,
        ("   theoretical tps ", "dim"),
        tps,
    )
    parts: list[RenderableType] = [head, info, runners_table(frame.runners, compact=True)]
    parts += [Text(f"  {event}", style="yellow") for event in frame.events[-4:]]
    return Group(*parts)


# top -------------------------------------------------------------------------------
@attrs.frozen(kw_only=True)
class FleetSnapshot:
    """A group's state as read from Redis by ``taskrunner top`` (one refresh)."""

    group: str
    stream: str
    taken_at: float
    """Unix seconds of the read."""
    metrics: Mapping[str, float]
    """The raw metrics hash."""
    stats: Stats
    queue: QueueMetrics
    leader: str | None
    """The lease holder's instance id."""
    leader_host: str | None
    instances: tuple[tuple[str, str], ...]
    """Live heartbeats as ``(host, instance_id)``, sorted by host."""
    tuning_capacity: int | None
    workers: int
    """The per-instance pool size used for :attr:`stats` (published, or assumed)."""
    paused: Paused = attrs.field(factory=Paused)
    """The group's paused queues and tasks."""
    schedules: tuple[ScheduleRow, ...] = ()
    """The group's periodic schedules (``taskrunner.admin.schedules``)."""
    desired_instances: int | None = None
    """The instance count the leader publishes for an autoscaler (``target_wait``)."""
    shards: tuple[ShardCounts, ...] = ()
    """A sharded group's messages per shard (none when unsharded); ``queue`` then counts
    the entries of every shard's stream of the queue with the group's own."""

    @property
    def runs(self) -> dict[str, int]:
        """Timed runs per task (``<task>_count``)."""
        return {
            name: int(_wire.task_timing(self.metrics, name)[1])
            for name in _wire.task_names_in(self.metrics, self.group)
        }

    @property
    def total_runs(self) -> int:
        return sum(self.runs.values())


@attrs.define
class History:
    """The newest ``size`` samples of (time, total runs, queue size).

    Throughput at a sample is measured against the latest earlier sample at
    least ``window`` seconds older (or the oldest one), not just the previous
    sample: the run counts in the metrics hash move in steps, once per bulk
    writer flush (every second), so rates between refreshes closer than that
    would zigzag between 0 and double.
    """

    size: int = 120
    window: float = 2.0
    _samples: collections.deque[tuple[float, int, int]] = attrs.field(init=False)

    def __attrs_post_init__(self) -> None:
        self._samples = collections.deque(maxlen=self.size + 1)

    def add(self, now: float, total_runs: int, queue_size: int) -> None:
        self._samples.append((now, total_runs, queue_size))

    def throughput(self) -> list[float]:
        """Runs per second at every sample but the oldest (a metrics reset counts as 0)."""
        samples = list(self._samples)
        rates = []
        for k in range(1, len(samples)):
            now, runs, _ = samples[k]
            j = k - 1
            while j > 0 and now - samples[j][0] < self.window:
                j -= 1
            then, before, _ = samples[j]
            rates.append(max(0, runs - before) / (now - then) if now > then else 0.0)
        return rates

    def queue_sizes(self) -> list[float]:
        return [float(s[2]) for s in list(self._samples)[-self.size :]]

    @property
    def span(self) -> float:
        """Seconds covered by the samples."""
        return self._samples[-1][0] - self._samples[0][0] if len(self._samples) > 1 else 0.0


def schedules_table(rows: Sequence[ScheduleRow]) -> Table:
    """The periodic schedules: what ``taskrunner schedules`` prints, as a table."""
    from taskrunner.cli.schedules import COLUMNS, cells

    table = _table(*(c.lower() for c in COLUMNS), title="periodic schedules", numeric=False)
    for row in rows:
        table.add_row(*cells(row.as_dict()))
    return table


def top_line(snapshot: FleetSnapshot, history: History) -> str:
    """One plain summary line of a ``top`` frame."""
    rates = history.throughput()
    rate = f"{rates[-1]:.1f}/s" if rates else "n/a"
    desired = snapshot.desired_instances
    return (
        f"group {snapshot.group}: queue {snapshot.queue.queue_size}, throughput {rate}, "
        f"predicted wait {snapshot.stats.predicted_wait_time:.1f} ms, "
        f"leader {snapshot.leader_host or snapshot.leader or 'none'}, "
        f"{len(snapshot.instances)} instance(s)"
        + ("" if desired is None else f" ({desired} desired)")
        + f", paused: {paused_text(snapshot.paused)}"
    )


def top_view(snapshot: FleetSnapshot, history: History, *, width: int = 60) -> RenderableType:
    """The ``top`` screen: fleet, trends, Stats, queue, and the periodic schedules if any."""
    if snapshot.leader is None:
        leader = "none (no lease held)"
    else:
        leader = f"{snapshot.leader_host or '?'} ({snapshot.leader})"
    tuning = (
        "none published"
        if snapshot.tuning_capacity is None
        else f"published capacity {snapshot.tuning_capacity}"
    )
    fleet = _table(
        "fleet", "value", title=f"group {snapshot.group} on {snapshot.stream}", numeric=False
    )
    fleet.add_row("leader", leader)
    fleet.add_row("live instances", str(len(snapshot.instances)))
    for host, instance_id in snapshot.instances:
        mark = " (leader)" if instance_id == snapshot.leader else ""
        fleet.add_row(f"  {host}", instance_id + mark)
    fleet.add_row("tuning", tuning)
    fleet.add_row(
        "desired instances",
        "none published" if snapshot.desired_instances is None else str(snapshot.desired_instances),
    )
    fleet.add_row("workers per instance", str(snapshot.workers))
    fleet.add_row("paused", paused_text(snapshot.paused))

    rates = history.throughput()
    queue_sizes = history.queue_sizes()
    trends = _table("trend", "now", "max", f"last {history.span:.0f}s", title="trends")
    trends.columns[-1].justify = "left"
    trends.add_row(
        "throughput (runs/s)",
        f"{rates[-1]:,.1f}" if rates else "n/a",
        f"{max(rates, default=0.0):,.1f}",
        Text(sparkline(rates, width), style="cyan"),
    )
    trends.add_row(
        "queue length",
        f"{snapshot.queue.queue_size:,}",
        f"{max(queue_sizes, default=0.0):,.0f}",
        Text(sparkline(queue_sizes, width), style="magenta"),
    )
    parts: list[RenderableType] = [
        fleet,
        trends,
        stats_table(snapshot.stats, runs=snapshot.runs),
        queue_table(snapshot.queue),
    ]
    if snapshot.shards:
        parts.append(shards_table(snapshot.shards))
    if snapshot.schedules:
        parts.append(schedules_table(snapshot.schedules))
    return Group(*parts)
