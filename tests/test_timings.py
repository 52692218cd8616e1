"""The timing recorder and its hash increments (pure, no I/O)."""

from __future__ import annotations

import math

import pytest

from taskrunner._stats import compute_stats, parse_metrics_hash
from taskrunner._timings import TimingRecorder, to_hash_increments

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


def test_record_schedule_uses_the_scheduler_fields() -> None:
    recorder = TimingRecorder()
    recorder.record_schedule(0.0125)
    recorder.record_schedule(0.0075)
    assert to_hash_increments(recorder.drain()) == {
        "delayed_tasks_schedule_sum": pytest.approx(20.0),
        "delayed_tasks_schedule_count": 2,
    }


@pytest.mark.parametrize(
    ("drained", "expected"),
    [
        ({}, {}),
        ({"a": (1.5, 3)}, {"a_sum": 1.5, "a_count": 3}),
        (
            {"a": (0.3, 1), "b": (1000.0, 10)},
            {"a_sum": 0.3, "a_count": 1, "b_sum": 1000.0, "b_count": 10},
        ),
        ({"a": (0.0, 0)}, {}),  # no samples: nothing to send
        ({"a": (math.nan, 2), "b": (1.0, 1)}, {"b_sum": 1.0, "b_count": 1}),
        ({"a": (math.inf, 2)}, {}),
        ({"a": (-4.0, 2)}, {"a_sum": 0.0, "a_count": 2}),  # clock went backwards
    ],
)
def test_to_hash_increments(
    drained: dict[str, tuple[float, int]], expected: dict[str, float]
) -> None:
    increments = to_hash_increments(drained)
    assert increments == expected
    for field, value in increments.items():
        # counts go to HINCRBY, which refuses "3.0"; sums go to HINCRBYFLOAT
        assert isinstance(value, int) is field.endswith("_count")


def test_sub_millisecond_tasks_do_not_average_zero() -> None:
    recorder = TimingRecorder()
    for _ in range(1000):
        recorder.record("fast", 0.0003)
    increments = to_hash_increments(recorder.drain())
    assert increments["fast_sum"] == pytest.approx(300.0)
    assert increments["fast_count"] == 1000

    # Round trip through the hash as Redis would store it (strings).
    hash_as_read = {field.encode(): str(value).encode() for field, value in increments.items()}
    stats = compute_stats(
        metrics=parse_metrics_hash(hash_as_read),
        task_names=["fast"],
        queue_len=0,
        workers=1,
        replication=1,
    )
    assert stats.avg_timing == pytest.approx(0.3)
    assert stats.per_task_timing["fast"] == pytest.approx(0.3)
    assert stats.tps == pytest.approx(1000 / 0.3)
