"""The Stats formulas, metrics field names and reset decision (pure, no I/O)."""

from __future__ import annotations

import math
from collections.abc import Mapping

import attrs
import pytest

from taskrunner._stats import (
    SCHEDULE_COUNT_FIELD,
    SCHEDULE_SUM_FIELD,
    SCHEDULE_TIMING_NAME,
    Stats,
    compute_stats,
    count_field,
    parse_metrics_hash,
    reset_fields,
    should_reset_metrics,
    sum_field,
)


def test_field_names_match_the_go_layout() -> None:
    assert sum_field("email") == "email_sum"
    assert count_field("email") == "email_count"
    assert SCHEDULE_SUM_FIELD == "delayed_tasks_schedule_sum"
    assert SCHEDULE_COUNT_FIELD == "delayed_tasks_schedule_count"
    assert sum_field(SCHEDULE_TIMING_NAME) == SCHEDULE_SUM_FIELD
    assert count_field(SCHEDULE_TIMING_NAME) == SCHEDULE_COUNT_FIELD


@pytest.mark.parametrize(
    ("task_names", "expected"),
    [
        ([], ["delayed_tasks_schedule_sum", "delayed_tasks_schedule_count"]),
        (
            ["a", "b"],
            [
                "a_sum",
                "a_count",
                "b_sum",
                "b_count",
                "delayed_tasks_schedule_sum",
                "delayed_tasks_schedule_count",
            ],
        ),
        (
            ("a", "a"),
            ["a_sum", "a_count", "delayed_tasks_schedule_sum", "delayed_tasks_schedule_count"],
        ),
    ],
)
def test_reset_fields(task_names: list[str], expected: list[str]) -> None:
    assert reset_fields(task_names) == expected


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
        {"t_sum": 0.9, "t_count": 3},
        ["t"],
        1000,
        1,
        1,
        ({"t": 0.3}, 300.0, 0.3, 1000 / 0.3),
        id="sub-millisecond tasks do not average 0",
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


@pytest.mark.parametrize(
    ("schedule_sum", "schedule_count", "expected"),
    [(None, None, 0.0), (0.0, 0, 0.0), (50.0, 4, 12.5), (0.6, 3, 0.2)],
)
def test_avg_schedule_timing(
    schedule_sum: float | None, schedule_count: int | None, expected: float
) -> None:
    metrics: dict[str, float] = {"t_sum": 10.0, "t_count": 1}
    if schedule_sum is not None and schedule_count is not None:
        metrics[SCHEDULE_SUM_FIELD] = schedule_sum
        metrics[SCHEDULE_COUNT_FIELD] = schedule_count
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
