"""The timing recorder and the metrics-hash increments it turns into."""

from __future__ import annotations

import math

import pytest

from taskrunner._fleet.stats import compute_stats
from taskrunner._fleet.timings import TimingRecorder
from taskrunner._serve.bulk_writer import FieldNames, flush
from taskrunner._wire import (
    SCHEDULE_TIMING_NAME,
    TimingFields,
    TimingIncrement,
    task_fields,
    timing_increment,
)
from taskrunner.backends.memory import MemoryBackend

Batch = dict[str, tuple[float, int]]


def assert_batch(actual: Batch, expected: Batch) -> None:
    """Equal names and counts, sums equal up to float rounding, counts are ints."""
    assert actual.keys() == expected.keys()
    for name, (sum_ms, count) in expected.items():
        assert actual[name][0] == pytest.approx(sum_ms), name
        assert actual[name][1] == count, name
        assert isinstance(actual[name][1], int)


def test_record_aggregates_per_task_in_milliseconds() -> None:
    recorder = TimingRecorder()
    recorder.record("email", 0.5)
    recorder.record("email", 0.25)
    recorder.record("resize", 2.0)
    assert recorder.pending() == 3
    drained = recorder.drain()
    assert_batch(drained, {"email": (750.0, 2), "resize": (2000.0, 1)})


def test_drain_clears() -> None:
    recorder = TimingRecorder()
    recorder.record("a", 0.001)
    assert_batch(recorder.drain(), {"a": (1.0, 1)})
    assert recorder.pending() == 0
    assert_batch(recorder.drain(), {})
    recorder.record("a", 0.002)
    assert_batch(recorder.drain(), {"a": (2.0, 1)})


def test_drained_batch_is_not_changed_by_later_records() -> None:
    recorder = TimingRecorder()
    recorder.record("a", 0.001)
    drained = recorder.drain()
    recorder.record("a", 1.0)
    assert_batch(drained, {"a": (1.0, 1)})


def test_restore_merges_with_records_made_since() -> None:
    recorder = TimingRecorder()
    recorder.record("a", 0.010)
    recorder.record("b", 0.020)
    failed = recorder.drain()
    recorder.record("a", 0.005)  # recorded while the flush was failing
    recorder.record("c", 0.001)
    recorder.restore(failed)
    assert recorder.pending() == 4
    assert_batch(recorder.drain(), {"a": (15.0, 2), "b": (20.0, 1), "c": (1.0, 1)})


def test_restore_into_an_empty_recorder_and_again() -> None:
    recorder = TimingRecorder()
    recorder.restore({"a": (3.0, 2)})
    recorder.restore({"a": (4.0, 1)})
    recorder.record("a", 0.001)
    assert_batch(recorder.drain(), {"a": (8.0, 4)})


def test_record_schedule_goes_to_go_s_scheduler_fields() -> None:
    recorder = TimingRecorder()
    recorder.record_schedule(0.0125)
    recorder.record_schedule(0.0075)
    drained = recorder.drain()
    assert_batch(drained, {SCHEDULE_TIMING_NAME: (20.0, 2)})
    names = FieldNames("g")
    assert names(SCHEDULE_TIMING_NAME) == TimingFields(
        "taskrunner:g:delayed_tasks_schedule_sum",
        "taskrunner:g:delayed_tasks_schedule_sum_us",
        "taskrunner:g:delayed_tasks_schedule_count",
    )
    assert names("a") == TimingFields("a_sum", "a_sum_us", "a_count")
    assert names("a") is names("a"), "built once per name"


A = task_fields("a")


@pytest.mark.parametrize(
    ("sum_ms", "count", "expected"),
    [
        (1.5, 3, TimingIncrement(fields=A, micros=1500, count=3)),
        (0.3, 1, TimingIncrement(fields=A, micros=300, count=1)),
        (1000.0004, 10, TimingIncrement(fields=A, micros=1_000_000, count=10)),
        (0.0, 0, None),  # no samples: nothing to send
        (math.nan, 2, None),
        (math.inf, 2, None),
        (-4.0, 2, TimingIncrement(fields=A, micros=0, count=2)),  # clock went backwards
    ],
)
def test_timing_increment(sum_ms: float, count: int, expected: TimingIncrement | None) -> None:
    assert timing_increment(A, sum_ms, count) == expected


async def test_sub_millisecond_tasks_do_not_average_zero() -> None:
    recorder = TimingRecorder()
    for _ in range(1000):
        recorder.record("fast", 0.0003)
    backend = MemoryBackend()
    assert await flush(backend, "g", recorder) == 1000
    metrics = await backend.read_metrics("g")
    assert metrics == {"fast_sum": 300, "fast_sum_us": 300_000, "fast_count": 1000}
    stats = compute_stats(
        metrics=metrics, group="g", task_names=["fast"], queue_len=0, workers=1, replication=1
    )
    assert stats.avg_timing == pytest.approx(0.3)
    assert stats.per_task_timing["fast"] == pytest.approx(0.3)
    assert stats.tps == pytest.approx(1000 / 0.3)

    for _ in range(3):
        recorder.record("rare", 0.0003)
    await flush(backend, "g", recorder)
    metrics = await backend.read_metrics("g")
    assert (metrics["rare_sum"], metrics["rare_sum_us"]) == (0, 900), "_sum is whole ms"
    rare = compute_stats(
        metrics=metrics, group="g", task_names=["rare"], queue_len=0, workers=1, replication=1
    )
    assert rare.per_task_timing["rare"] == pytest.approx(0.3)
