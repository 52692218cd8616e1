"""The Stats formulas, the reset decision and the long-queue hook's (pure, no I/O).

The metrics field names, and the reset's field list, are the wire's: tests/test_wire.py.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import attrs
import pytest

from taskrunner._fleet.stats import (
    Stats,
    compute_stats,
    hook_due,
    parse_metrics_hash,
    should_reset_metrics,
)


@pytest.mark.parametrize(
    ("now", "last_reset", "interval", "expected"),
    [
        (100.0, 0.0, 86400.0, False),  # well before the interval
        (86400.0, 0.0, 86400.0, False),  # exactly the interval: strictly greater needed
        (86400.5, 0.0, 86400.0, True),  # just after
        (1e9, 0.0, 86400.0, True),  # long after
        (1e9, 0.0, 0.0, False),  # 0 disables
        (1e9, 0.0, -1.0, False),  # negative is treated as disabled too
        (50.0, 40.0, 5.0, True),  # clock that does not start at 0
        (44.0, 40.0, 5.0, False),
    ],
)
def test_should_reset_metrics(
    now: float, last_reset: float, interval: float, expected: bool
) -> None:
    assert should_reset_metrics(now=now, last_reset=last_reset, interval=interval) is expected


def test_parse_metrics_hash_decodes_bytes_and_drops_garbage() -> None:
    raw = {b"a_sum": b"1500.25", b"a_count": b"3", b"junk": b"not a number", b"b": b""}
    assert parse_metrics_hash(raw) == {"a_sum": 1500.25, "a_count": 3.0}
    decoded: dict[str, str | float] = {"b_sum": "7", "c_count": 2}
    assert parse_metrics_hash(decoded) == {"b_sum": 7.0, "c_count": 2.0}


def _stats(
    metrics: Mapping[str, float],
    task_names: list[str],
    *,
    queue_len: int = 0,
    workers: int = 1,
    replication: int = 1,
) -> Stats:
    return compute_stats(
        metrics=metrics,
        group="g",
        task_names=task_names,
        queue_len=queue_len,
        workers=workers,
        replication=replication,
    )


# (metrics, task names, queue_len, workers, replication) ->
# (per_task_timing, predicted_wait_time, avg_timing, tps)
STATS_TABLE = [
    pytest.param(
        {"t_sum": 16 * 500.0, "t_count": 16},
        ["t"],
        15,
        1,
        1,
        ({"t": 500.0}, 7500.0, 500.0, 2.0),
        id="16 runs of 500 ms, one worker, 15 queued",
    ),
    pytest.param(
        {"t_sum": 16 * 500.0, "t_count": 16},
        ["t"],
        15,
        5,
        3,
        ({"t": 500.0}, 500.0, 500.0, 30.0),
        id="five workers on three instances",
    ),
    pytest.param(
        {},
        ["t"],
        10,
        2,
        1,
        ({}, 5.0, 0.0, 0.0),
        id="queue but no data: 1 ms placeholder for the prediction only",
    ),
    pytest.param(
        {"t_sum": 0.0, "t_count": 0},
        ["t"],
        0,
        2,
        1,
        ({}, 0.0, 0.0, 0.0),
        id="no data, empty queue",
    ),
    pytest.param(
        {"fast_sum": 90 * 10.0, "fast_count": 90, "slow_sum": 10 * 1000.0, "slow_count": 10},
        ["fast", "slow"],
        100,
        10,
        1,
        ({"fast": 10.0, "slow": 1000.0}, 1090.0, 109.0, 1000 / 109 * 10),
        id="weighted by count, not a mean of means",
    ),
    pytest.param(
        {"t_sum": 400.0, "t_count": 4, "other_sum": 1e9, "other_count": 1},
        ["t"],
        3,
        1,
        1,
        ({"t": 100.0}, 300.0, 100.0, 10.0),
        id="unregistered task fields ignored",
    ),
    pytest.param(
        {"t_sum": 400.0, "t_count": 4},
        ["t", "idle"],
        0,
        1,
        1,
        ({"t": 100.0}, 0.0, 100.0, 10.0),
        id="registered task with no runs is absent from per_task_timing",
    ),
    pytest.param(
        {"t_sum": 200.0, "t_count": 2},
        ["t"],
        10,
        2,
        0,
        ({"t": 100.0}, 500.0, 100.0, 20.0),
        id="replication 0 counts as 1",
    ),
    pytest.param(
        {"t_sum": 200.0, "t_count": 2},
        ["t"],
        10,
        0,
        1,
        ({"t": 100.0}, 1000.0, 100.0, 10.0),
        id="workers 0 counts as one slot",
    ),
    pytest.param(
        {"t_sum": 0, "t_sum_us": 900, "t_count": 3},
        ["t"],
        1000,
        1,
        1,
        ({"t": 0.3}, 300.0, 0.3, 1000 / 0.3),
        id="sub-millisecond tasks do not average 0",
    ),
    pytest.param(
        {"t_sum": 0.9, "t_count": 3},
        ["t"],
        1000,
        1,
        1,
        ({"t": 0.3}, 300.0, 0.3, 1000 / 0.3),
        id="a float sum left by 0.1.0",
    ),
    pytest.param(
        {"t_sum": 1500, "t_sum_us": 1_500_400, "t_count": 3},
        ["t"],
        0,
        1,
        1,
        ({"t": 500.1333333}, 0.0, 500.1333333, 1000 / 500.1333333),
        id="_sum_us agreeing with _sum refines it",
    ),
    pytest.param(
        {"t_sum": 1507, "t_sum_us": 1_500_400, "t_count": 4},
        ["t"],
        0,
        1,
        1,
        ({"t": 376.75}, 0.0, 376.75, 1000 / 376.75),
        id="a Go worker added 7 ms since: _sum counts them",
    ),
    pytest.param(
        {"t_sum": 3, "t_sum_us": 1_500_400, "t_count": 1},
        ["t"],
        0,
        1,
        1,
        ({"t": 3.0}, 0.0, 3.0, 1000 / 3.0),
        id="a Go leader reset _sum and _count: the old _sum_us is ignored",
    ),
    pytest.param(
        {"t_sum": 100.0},
        ["t"],
        4,
        1,
        1,
        ({}, 4.0, 0.0, 0.0),
        id="sum without a count is no data",
    ),
    pytest.param(
        {"t_sum": math.nan, "t_count": 2, "u_sum": 30.0, "u_count": -1},
        ["t", "u"],
        2,
        1,
        1,
        ({"t": 0.0}, 2.0, 0.0, 0.0),
        id="nonsense values count as 0",
    ),
    pytest.param(
        {"t_sum": 300.0, "t_count": 3},
        ["t"],
        -5,
        1,
        1,
        ({"t": 100.0}, 0.0, 100.0, 10.0),
        id="negative queue length counts as 0",
    ),
]


@pytest.mark.parametrize(
    ("metrics", "task_names", "queue_len", "workers", "replication", "expected"), STATS_TABLE
)
def test_compute_stats(
    metrics: Mapping[str, float],
    task_names: list[str],
    queue_len: int,
    workers: int,
    replication: int,
    expected: tuple[dict[str, float], float, float, float],
) -> None:
    per_task, predicted, avg, tps = expected
    stats = _stats(
        metrics, task_names, queue_len=queue_len, workers=workers, replication=replication
    )
    assert dict(stats.per_task_timing) == pytest.approx(per_task)
    assert stats.predicted_wait_time == pytest.approx(predicted)
    assert stats.avg_timing == pytest.approx(avg)
    assert stats.tps == pytest.approx(tps)
    assert stats.avg_schedule_timing == 0.0


GO_SCHEDULE = "taskrunner:g:delayed_tasks_schedule"


@pytest.mark.parametrize(
    ("schedule", "expected"),
    [
        ({}, 0.0),
        ({f"{GO_SCHEDULE}_sum": 0, f"{GO_SCHEDULE}_count": 0}, 0.0),
        ({f"{GO_SCHEDULE}_sum": 50, f"{GO_SCHEDULE}_count": 4}, 12.5),
        ({f"{GO_SCHEDULE}_sum": 0, f"{GO_SCHEDULE}_sum_us": 600, f"{GO_SCHEDULE}_count": 3}, 0.2),
        ({"delayed_tasks_schedule_sum": 0.6, "delayed_tasks_schedule_count": 3}, 0.2),
        (
            {
                f"{GO_SCHEDULE}_sum": 30,
                f"{GO_SCHEDULE}_count": 2,
                "delayed_tasks_schedule_sum": 10.5,
                "delayed_tasks_schedule_count": 1,
            },
            13.5,
        ),
    ],
    ids=["none", "zero", "Go's names", "with _sum_us", "0.1.0's names", "both sets add up"],
)
def test_avg_schedule_timing(schedule: dict[str, float], expected: float) -> None:
    metrics: dict[str, float] = {"t_sum": 10.0, "t_count": 1, **schedule}
    stats = _stats(metrics, ["t"])
    assert stats.avg_schedule_timing == pytest.approx(expected)
    # the scheduler's own time never leaks into the task average
    assert stats.avg_timing == 10.0


def test_stats_is_a_frozen_snapshot() -> None:
    source = {"t": 5.0}
    stats = Stats(
        per_task_timing=source,
        predicted_wait_time=1,
        avg_timing=5,
        avg_schedule_timing=0,
        tps=200,
    )
    source["t"] = 99.0
    assert stats.per_task_timing == {"t": 5.0}
    with pytest.raises(TypeError):
        stats.per_task_timing["t"] = 1.0  # type: ignore[index]
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        stats.tps = 1.0  # type: ignore[misc]
    assert isinstance(stats.predicted_wait_time, float)


def test_stats_equality_and_hash() -> None:
    a = _stats({"t_sum": 10.0, "t_count": 1}, ["t"], queue_len=3)
    b = _stats({"t_sum": 10.0, "t_count": 1}, ["t"], queue_len=3)
    c = _stats({"t_sum": 20.0, "t_count": 1}, ["t"], queue_len=3)
    assert a == b
    assert hash(a) == hash(b)
    assert a != c


def test_stats_rejects_negative_times() -> None:
    with pytest.raises(ValueError, match="tps"):
        Stats(
            per_task_timing={},
            predicted_wait_time=0,
            avg_timing=0,
            avg_schedule_timing=0,
            tps=-1,
        )


def stats(predicted_wait: float) -> Stats:
    return Stats(
        per_task_timing={},
        predicted_wait_time=predicted_wait,
        avg_timing=1.0,
        avg_schedule_timing=0.0,
        tps=0.0,
    )


@pytest.mark.parametrize(
    ("predicted_wait", "threshold", "due"),
    [(2001.0, 2.0, True), (2000.0, 2.0, False), (10.0, 0.0, False), (0.0, 0.0, False)],
)
def test_hook_due(predicted_wait: float, threshold: float, due: bool) -> None:
    assert hook_due(stats(predicted_wait), threshold) is due
