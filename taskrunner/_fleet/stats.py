"""Timing statistics: the :class:`Stats` formulas and the metrics-reset decision.

Theory of operation: every instance adds its task timings to one Redis hash
per consumer group, ``taskrunner:<group>:metrics``: per task, cumulative
milliseconds and runs, plus the same for the scheduler's passes. The field
names and how to read them (Go's integer milliseconds, our extra
microseconds, 0.1.0's leftovers) are the wire's, in :mod:`taskrunner._wire`.
Turning the hash into a :class:`Stats` snapshot is pure arithmetic, so it
lives here, sans-io: the runner does the ``HGETALL`` and ``XLEN``, knows its
pool capacity and replication count, and calls :func:`compute_stats`. The
leader's periodic reset is likewise a pure decision
(:func:`should_reset_metrics`); the fields it zeroes are
:func:`taskrunner._wire.reset_fields`.

Nothing in this module awaits, blocks, or touches the network.
"""

from __future__ import annotations

import math
import types
from collections.abc import Iterable, Mapping

import attrs

from taskrunner import _wire

__all__ = [
    "Stats",
    "compute_stats",
    "hook_due",
    "parse_metrics_hash",
    "should_reset_metrics",
]


def should_reset_metrics(*, now: float, last_reset: float, interval: float) -> bool:
    """Whether the metrics-reset interval has passed.

    Every instance asks this on each aggregator tick and, when it answers
    true, moves its ``last_reset`` to ``now``; only the leader also zeroes the
    hash. Followers keeping the clock too is what stops a freshly elected
    leader from wiping the metrics the moment it takes over.

    Args:
        now: The current time, on the same clock as ``last_reset`` (seconds).
        last_reset: When this instance last reset (or started counting).
        interval: ``metrics_reset_interval`` in seconds; 0 (or less) disables
            resets.

    Returns:
        True when ``now - last_reset`` is strictly greater than ``interval``
        and resets are enabled.
    """
    if not interval > 0:
        return False
    return now - last_reset > interval


def hook_due(stats: Stats, long_queue_threshold: float) -> bool:
    """Whether ``long_queue_hook`` fires: a threshold is set (seconds) and the
    predicted wait (ms) is strictly above it."""
    return long_queue_threshold > 0 and stats.predicted_wait_time > long_queue_threshold * 1000.0


_HashValue = bytes | str | float


def parse_metrics_hash(
    raw: Mapping[bytes, _HashValue] | Mapping[str, _HashValue],
) -> dict[str, float]:
    """Decode a metrics hash as ``HGETALL`` returns it into ``{field: number}``.

    Takes the raw reply (bytes, or str with ``decode_responses``).

    Values that do not parse as numbers are dropped rather than raised: a
    stray field written by someone else must not stop the aggregator, and a
    missing field counts as 0 in :func:`compute_stats` anyway.
    """
    parsed: dict[str, float] = {}
    key: bytes | str
    for key, value in raw.items():
        name = key.decode() if isinstance(key, bytes) else key
        try:
            number = float(value)
        except (TypeError, ValueError):
            continue
        parsed[name] = number
    return parsed


def _ms_mapping(value: Mapping[str, float]) -> Mapping[str, float]:
    # A read-only view over a private copy: the caller's dict cannot change
    # the snapshot, and the snapshot cannot be changed through the view.
    return types.MappingProxyType(dict(value))


_non_negative = attrs.validators.ge(0.0)


@attrs.frozen(kw_only=True)
class Stats:
    """A snapshot of the group's timing statistics; every time is in milliseconds.

    Estimates, not measurements: they assume the queue drains at the average
    rate seen so far. Returned by ``TaskRunner.get_timing_statistics()`` and
    handed to ``long_queue_hook``.

    Equality compares every field; the hash leaves out
    :attr:`per_task_timing` (a mapping is not hashable), which keeps it
    consistent with equality.
    """

    per_task_timing: Mapping[str, float] = attrs.field(converter=_ms_mapping, hash=False)
    """Average run time in ms per task name (read-only).

    Only tasks with at least one recorded run appear; a registered task that
    has not run since the last reset is absent rather than reported as 0 ms.
    """

    predicted_wait_time: float = attrs.field(converter=float, validator=_non_negative)
    """Estimated wait in ms for a message added now: ``avg * queue_len / (workers * rf)``.

    Uses a 1 ms average when the queue is not empty but nothing has been timed
    yet, so a fresh deployment under load does not look idle to the tuner.
    """

    avg_timing: float = attrs.field(converter=float, validator=_non_negative)
    """Average run time in ms over every registered task (0 with no data).

    The real average, never the 1 ms placeholder used for the prediction.
    """

    avg_schedule_timing: float = attrs.field(converter=float, validator=_non_negative)
    """Average duration in ms of a delayed-task scheduler pass (0 with no data)."""

    tps: float = attrs.field(converter=float, validator=_non_negative)
    """Theoretical throughput in tasks per second: ``(1000 / avg) * workers * rf``.

    0 when nothing has been timed (``avg_timing == 0``), even if the queue is
    not empty.
    """


def _counter(value: float) -> float:
    # A missing field is 0. So are nonsense values (negative, NaN, inf): the
    # hash is only ever incremented by non-negative amounts, so those can only
    # come from outside, and one bad field must not poison every estimate.
    if not math.isfinite(value) or value < 0:
        return 0.0
    return value


def compute_stats(
    *,
    metrics: Mapping[str, float],
    group: str,
    task_names: Iterable[str],
    queue_len: int,
    workers: int,
    replication: int,
) -> Stats:
    """Turn the metrics hash and the current pool/queue sizes into :class:`Stats`.

    Args:
        metrics: The metrics hash as read (see :func:`parse_metrics_hash`),
            read through :func:`taskrunner._wire.task_timing` and
            :func:`~taskrunner._wire.schedule_timing`. Missing fields count
            as 0; fields of unregistered tasks are ignored.
        group: The consumer group (it names the scheduler's fields).
        task_names: The registered task names; only these enter the averages.
        queue_len: Messages waiting in the stream (``XLEN``); negative is 0.
        workers: Current worker-pool capacity (``num_workers`` before start).
        replication: Live instances sharing the group; below 1 counts as 1,
            since the instance asking is itself live.

    Returns:
        The snapshot. ``avg_timing`` is the count-weighted average over all
        registered tasks, so a task run a thousand times weighs a thousand
        times more than one run once.
    """
    per_task: dict[str, float] = {}
    total_ms = 0.0
    total_count = 0.0
    for name in dict.fromkeys(task_names):
        task_ms, count = map(_counter, _wire.task_timing(metrics, name))
        if count <= 0:
            continue
        per_task[name] = task_ms / count
        total_ms += task_ms
        total_count += count
    avg = total_ms / total_count if total_count > 0 else 0.0

    schedule_ms, schedule_count = map(_counter, _wire.schedule_timing(metrics, group))
    avg_schedule = schedule_ms / schedule_count if schedule_count > 0 else 0.0

    queue_len = max(0, queue_len)
    rf = max(1, replication)
    # A pool of capacity 0 (paused, or reported before it exists) would make
    # the prediction a division by zero. Counting it as one slot keeps every
    # field finite, so the hook's threshold comparison and any JSON export
    # keep working; the tuner never sees a 0 capacity since min_workers >= 1.
    slots = max(1, workers) * rf

    predict_avg = 1.0 if queue_len > 0 and avg == 0 else avg
    predicted_wait = predict_avg * queue_len / slots
    # No fallback for tps: with no timing data there is no throughput to
    # report, and 1000 tasks/s per slot out of thin air would mislead any
    # dashboard. The 1 ms placeholder exists only to keep the tuner from
    # shrinking the pool on a fresh deployment.
    tps = 1000.0 / avg * slots if avg > 0 else 0.0

    return Stats(
        per_task_timing=per_task,
        predicted_wait_time=predicted_wait,
        avg_timing=avg,
        avg_schedule_timing=avg_schedule,
        tps=tps,
    )
