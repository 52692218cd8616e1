"""The bulk writer and the aggregator as modules: fakes and a MemoryBackend, on MockClock."""

from __future__ import annotations

import itertools
import logging
import math
from collections.abc import Sequence
from typing import Any

import pytest
import trio
import trio.testing

from taskrunner._config import TaskRunnerConfig
from taskrunner._serve import aggregator, bulk_writer
from taskrunner._serve.aggregator import (
    AggregatorState,
    follow_capacity,
    hook_due,
    timing_statistics,
    tune,
)
from taskrunner._stats import Stats
from taskrunner._timings import TimingRecorder
from taskrunner._wire import TimingIncrement, task_fields
from taskrunner.backends.memory import MemoryBackend
from taskrunner.errors import BackendError

GROUP = "g"


class FlakyBackend(MemoryBackend):
    """A MemoryBackend whose shared-state calls can be made to fail or stall."""

    def __init__(self) -> None:
        super().__init__()
        self.fail_increments = 0
        """Fail this many increment_metrics calls (then succeed); -1 fails forever."""
        self.increment_delay = 0.0
        self.increment_calls: list[dict[str, tuple[int, int]]] = []
        """Per call: ``{sum field: (micros, count)}``."""
        self.fail_reads = False
        self.fail_reset = False
        self.fail_publish = False
        self.reset_calls: list[tuple[float, list[str]]] = []
        self.published: list[tuple[float, int, float]] = []

    async def increment_metrics(self, group: str, increments: Sequence[TimingIncrement]) -> None:
        if self.fail_increments:
            self.fail_increments -= 1 if self.fail_increments > 0 else 0
            await trio.lowlevel.checkpoint()
            raise BackendError("connection lost")
        if self.increment_delay:
            await trio.sleep(self.increment_delay)
        self.increment_calls.append({i.fields.sum: (i.micros, i.count) for i in increments})
        await super().increment_metrics(group, increments)

    async def read_metrics(self, group: str) -> dict[str, float]:
        if self.fail_reads:
            raise BackendError("connection lost")
        return await super().read_metrics(group)

    async def read_tuning(self, group: str) -> int | None:
        if self.fail_reads:
            raise BackendError("connection lost")
        return await super().read_tuning(group)

    async def reset_metrics(self, group: str, fields: Sequence[str]) -> None:
        if self.fail_reset:
            raise BackendError("connection lost")
        self.reset_calls.append((trio.current_time(), list(fields)))
        await super().reset_metrics(group, fields)

    async def publish_tuning(self, group: str, capacity: int, ttl: float) -> None:
        if self.fail_publish:
            raise BackendError("connection lost")
        self.published.append((trio.current_time(), capacity, ttl))
        await super().publish_tuning(group, capacity, ttl)


async def add_runs(backend: MemoryBackend, **runs: tuple[float, int]) -> None:
    """Add ``name=(total ms, count)`` to the metrics hash, as a flush would."""
    increments = [
        TimingIncrement(fields=task_fields(name), micros=round(ms * 1000), count=count)
        for name, (ms, count) in runs.items()
    ]
    await backend.increment_metrics(GROUP, increments)


# Bulk writer -----------------------------------------------------------------


async def test_flushes_once_per_interval_pre_aggregated(
    autojump_clock: trio.testing.MockClock,
) -> None:
    backend = FlakyBackend()
    recorder = TimingRecorder()
    async with trio.open_nursery() as nursery:
        await nursery.start(bulk_writer.run, backend, GROUP, recorder)
        for _ in range(3):
            recorder.record("a", 0.1)
        recorder.record("b", 0.0004)
        await trio.sleep(0.5)
        assert await backend.read_metrics(GROUP) == {}
        await trio.sleep(0.6)  # t = 1.1: one flush
        assert backend.increment_calls == [{"a_sum": (300_000, 3), "b_sum": (400, 1)}]
        await trio.sleep(3)  # nothing recorded: no calls
        assert len(backend.increment_calls) == 1
        recorder.record("a", 0.2)
        await trio.sleep(1)
        nursery.cancel_scope.cancel()
    assert await backend.read_metrics(GROUP) == {
        "a_sum": 500, "a_sum_us": 500_000, "a_count": 4,
        "b_sum": 0, "b_sum_us": 400, "b_count": 1,
    }  # fmt: skip
    assert len(backend.increment_calls) == 2


async def test_failed_flush_restores_the_batch(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    backend = FlakyBackend()
    backend.fail_increments = 3
    recorder = TimingRecorder()
    caplog.set_level(logging.INFO, "taskrunner.metrics")
    async with trio.open_nursery() as nursery:
        await nursery.start(bulk_writer.run, backend, GROUP, recorder)
        recorder.record("a", 0.01)
        await trio.sleep(1.5)  # first flush failed
        assert recorder.pending() == 1
        recorder.record("a", 0.02)
        await trio.sleep(1)  # second failed, now holding both
        assert recorder.pending() == 2
        await trio.sleep(2)  # third failed, fourth succeeds
        assert recorder.pending() == 0
        nursery.cancel_scope.cancel()
    metrics = await backend.read_metrics(GROUP)
    assert metrics == {"a_sum": 30, "a_sum_us": 30_000, "a_count": 2}
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1, "an outage warns once, not once a second"
    assert "connection lost" in warnings[0].getMessage()
    assert any("recovered after 3 failure(s)" in r.getMessage() for r in caplog.records)


async def test_final_flush_on_cancel(autojump_clock: trio.testing.MockClock) -> None:
    backend = FlakyBackend()
    recorder = TimingRecorder()
    with trio.CancelScope() as scope:
        async with trio.open_nursery() as nursery:
            await nursery.start(bulk_writer.run, backend, GROUP, recorder)
            for _ in range(5):
                recorder.record("a", 0.001)
            await trio.sleep(0.3)
            scope.cancel()
    assert scope.cancelled_caught
    assert await backend.read_metrics(GROUP) == {"a_sum": 5, "a_sum_us": 5000, "a_count": 5}
    assert recorder.pending() == 0


async def test_final_flush_retries_a_transient_failure(
    autojump_clock: trio.testing.MockClock,
) -> None:
    backend = FlakyBackend()
    recorder = TimingRecorder()
    async with trio.open_nursery() as nursery:
        await nursery.start(bulk_writer.run, backend, GROUP, recorder)
        recorder.record("a", 0.5)
        backend.fail_increments = 2
        nursery.cancel_scope.cancel()
    assert await backend.read_metrics(GROUP) == {"a_sum": 500, "a_sum_us": 500_000, "a_count": 1}


async def test_final_flush_is_bounded_and_reports_what_it_lost(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    backend = FlakyBackend()
    backend.fail_increments = -1
    recorder = TimingRecorder()
    async with trio.open_nursery() as nursery:
        await nursery.start(bulk_writer.run, backend, GROUP, recorder)
        recorder.record("a", 0.5)
        recorder.record("b", 0.5)
        start = trio.current_time()
        nursery.cancel_scope.cancel()
    took = trio.current_time() - start
    assert bulk_writer.FINAL_FLUSH_TIMEOUT <= took < bulk_writer.FINAL_FLUSH_TIMEOUT + 1.5
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert errors == [
        "2 timing sample(s) could not be written to the metrics hash of group g "
        "at shutdown; they are lost"
    ]


async def test_a_write_in_flight_is_not_cut_by_cancellation(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # Cancelling while a write is in flight must neither lose the batch nor
    # write it twice: the write completes, and the final flush finds nothing.
    backend = FlakyBackend()
    backend.increment_delay = 0.5
    recorder = TimingRecorder()
    async with trio.open_nursery() as nursery:
        await nursery.start(bulk_writer.run, backend, GROUP, recorder)
        recorder.record("a", 0.1)
        await trio.sleep(1.2)  # the write started at t = 1.0 and is in flight
        assert backend.increment_calls == []
        nursery.cancel_scope.cancel()
    assert backend.increment_calls == [{"a_sum": (100_000, 1)}]
    assert await backend.read_metrics(GROUP) == {"a_sum": 100, "a_sum_us": 100_000, "a_count": 1}


async def test_a_stalled_write_is_abandoned_and_its_batch_kept(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    backend = FlakyBackend()
    backend.increment_delay = 3600.0
    recorder = TimingRecorder()
    async with trio.open_nursery() as nursery:
        await nursery.start(bulk_writer.run, backend, GROUP, recorder)
        recorder.record("a", 0.1)
        await trio.sleep(1 + bulk_writer.FLUSH_TIMEOUT + 0.1)
        assert recorder.pending() == 1
        assert any("abandoned it" in r.getMessage() for r in caplog.records)
        backend.increment_delay = 0.0
        await trio.sleep(1)
        assert recorder.pending() == 0
        nursery.cancel_scope.cancel()
    assert await backend.read_metrics(GROUP) == {"a_sum": 100, "a_sum_us": 100_000, "a_count": 1}


async def test_flush_drops_unwritable_entries_instead_of_restoring_them() -> None:
    backend = FlakyBackend()
    recorder = TimingRecorder()
    recorder.record("bad", math.inf)
    recorder.record("good", 0.001)
    backend.fail_increments = 1
    with pytest.raises(BackendError):
        await bulk_writer.flush(backend, GROUP, recorder)
    assert recorder.drain() == {"good": (pytest.approx(1.0), 1)}
    recorder.record("bad", math.nan)
    assert await bulk_writer.flush(backend, GROUP, recorder) == 0
    assert recorder.pending() == 0
    assert backend.increment_calls == []


# Aggregator: pure decisions -----------------------------------------------------


def config(**overrides: Any) -> TaskRunnerConfig:
    values: dict[str, Any] = {
        "consumer_group": GROUP,
        "num_workers": 10,
        "min_workers": 2,
        "max_workers": 20,
        "desired_wait_time": 0.1,
        "desired_wait_time_tolerance": 0.01,
        "tuning_cooldown": 10.0,
        "long_queue_threshold": 2.0,
    }
    values.update(overrides)
    return TaskRunnerConfig(**values)


def stats(pwt: float) -> Stats:
    return Stats(
        per_task_timing={},
        predicted_wait_time=pwt,
        avg_timing=1.0,
        avg_schedule_timing=0.0,
        tps=0.0,
    )


@pytest.mark.parametrize(
    ("published", "current", "overrides", "expected"),
    [
        (None, 10, {}, None),
        (10, 10, {}, None),
        (12, 10, {}, 12),
        (50, 10, {}, 20),  # clamped to this instance's max
        (1, 10, {}, 2),  # and min
        (0, 10, {}, 2),
        (-3, 10, {}, 2),
        (50, 20, {}, None),  # clamped value is the current one
        (12, 10, {"min_workers": 0}, None),  # tuning off here: ignore the fleet
        (12, 10, {"desired_wait_time": 0.0}, None),
        (12, 10, {"max_workers": 0, "min_workers": 0}, None),
    ],
)
def test_follow_capacity(
    published: int | None, current: int, overrides: dict[str, Any], expected: int | None
) -> None:
    assert follow_capacity(published, current=current, config=config(**overrides)) == expected


@pytest.mark.parametrize(
    ("pwt", "expected"),
    # The spec's examples: cur 10, rf 1, d 100 ms, t 10 ms.
    [(120.0, 11), (80.0, 9), (151.0, 15), (49.0, 5), (100.0, 10), (0.0, 9)],
)
def test_tune_converts_seconds_to_ms(pwt: float, expected: int) -> None:
    decision = tune(
        now=100.0, state=AggregatorState(last_reset=0.0), config=config(), cur=10, rf=1, pwt=pwt
    )
    assert decision is not None
    assert decision.capacity == expected


@pytest.mark.parametrize(
    ("last_change", "now", "allowed"),
    [(None, 0.0, True), (90.0, 99.9, False), (90.0, 100.0, True), (90.0, 150.0, True)],
)
def test_tune_respects_the_cooldown(last_change: float | None, now: float, allowed: bool) -> None:
    state = AggregatorState(last_reset=0.0, last_change=last_change)
    decision = tune(now=now, state=state, config=config(), cur=10, rf=1, pwt=500.0)
    assert (decision is not None) is allowed


def test_tune_off_without_tuning_config() -> None:
    state = AggregatorState(last_reset=0.0)
    assert tune(now=0, state=state, config=config(min_workers=0), cur=10, rf=1, pwt=1e6) is None


@pytest.mark.parametrize(
    ("pwt", "threshold", "due"),
    [(2001.0, 2.0, True), (2000.0, 2.0, False), (10.0, 0.0, False), (0.0, 0.0, False)],
)
def test_hook_due(pwt: float, threshold: float, due: bool) -> None:
    assert hook_due(stats(pwt), threshold) is due


# Aggregator: the service with a fake host ------------------------------------------


class FakeHost:
    """Implements AggregatorHost over a MemoryBackend; the test sets leadership."""

    def __init__(
        self,
        backend: MemoryBackend,
        cfg: TaskRunnerConfig,
        *,
        leader: bool = True,
        replication: int = 1,
        task_names: Sequence[str] = ("work",),
    ) -> None:
        self.config = cfg
        self.backend = backend
        self.is_leader = leader
        self.capacity = cfg.num_workers
        self.replication = replication
        self._task_names = list(task_names)
        self.resizes: list[tuple[float, int]] = []
        self.fail_replication = False

    @property
    def task_names(self) -> list[str]:
        return list(self._task_names)

    def resize(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError(capacity)
        self.capacity = capacity
        self.resizes.append((trio.current_time(), capacity))

    async def get_timing_statistics(self) -> Stats:
        return await timing_statistics(
            self.backend, self.config.consumer_group, self._task_names, self.capacity, 1
        )

    async def get_number_of_replications(self) -> int:
        if self.fail_replication:
            raise BackendError("connection lost")
        await trio.lowlevel.checkpoint()
        return self.replication


async def test_timing_statistics_reads_hash_and_stream() -> None:
    backend = MemoryBackend()
    await add_runs(backend, a=(300.0, 3), other=(9.0, 1))
    await backend.add("g", [b"x"] * 6)
    result = await timing_statistics(backend, GROUP, ["a", "b"], workers=2, replication=3)
    assert result.avg_timing == 100.0
    assert dict(result.per_task_timing) == {"a": 100.0}
    assert result.predicted_wait_time == 100.0 * 6 / (2 * 3)
    assert result.tps == 1000.0 / 100.0 * 6


async def test_leader_tunes_publishes_and_logs(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "taskrunner.tuner")
    backend = FlakyBackend()
    host = FakeHost(backend, config(long_queue_threshold=2.0))  # tick every 1 s
    # avg 10 ms, 160 queued, 10 workers: pwt 160 ms (> 1.5 * 100 -> target 100): 16
    await add_runs(backend, work=(100.0, 10))
    await backend.add("g", [b"x"] * 160)
    async with trio.open_nursery() as nursery:
        await nursery.start(aggregator.run, host)
        await trio.sleep(0.9)
        assert host.resizes == []
        await trio.sleep(0.2)
        assert host.resizes == [(pytest.approx(1.0), 16)]
        assert backend.published == [(pytest.approx(1.0), 16, 20.0)]
        assert await backend.read_tuning(GROUP) == 16
        nursery.cancel_scope.cancel()
    (line,) = [r.getMessage() for r in caplog.records if "tuner resized" in r.getMessage()]
    assert "10 -> 16" in line
    assert "predicted wait 160" in line


async def test_cooldown_holds_back_the_next_change(autojump_clock: trio.testing.MockClock) -> None:
    backend = FlakyBackend()
    host = FakeHost(backend, config(long_queue_threshold=2.0, tuning_cooldown=10.0))
    await add_runs(backend, work=(100.0, 10))
    await backend.add("g", [b"x"] * 1000)  # pwt 1000 ms at 10 workers: 100 -> max 20
    async with trio.open_nursery() as nursery:
        await nursery.start(aggregator.run, host)
        await trio.sleep(1.1)
        assert host.capacity == 20
        # Queue drains: pwt 0 -> shrink 10% per decision, once per cooldown.
        entries = await backend.read(GROUP, "c", 1000, 0)
        await backend.ack(GROUP, [e.id for e in entries])
        assert await backend.length("g") == 0
        await trio.sleep(30)
        nursery.cancel_scope.cancel()
    times = [t for t, _ in host.resizes]
    assert [c for _, c in host.resizes] == [20, 18, 16, 14]
    assert all(b - a >= 10.0 for a, b in itertools.pairwise(times))


async def test_follower_applies_published_value_and_never_tunes(
    autojump_clock: trio.testing.MockClock,
) -> None:
    backend = FlakyBackend()
    host = FakeHost(backend, config(long_queue_threshold=2.0, max_workers=16), leader=False)
    await backend.add("g", [b"x"] * 1000)
    async with trio.open_nursery() as nursery:
        await nursery.start(aggregator.run, host)
        await trio.sleep(3.5)
        assert host.resizes == []  # nothing published, and followers do not tune
        await backend.publish_tuning(GROUP, 30, 20.0)
        await trio.sleep(1)
        assert host.capacity == 16  # clamped to its own max
        await backend.publish_tuning(GROUP, 4, 20.0)
        await trio.sleep(1)
        assert host.capacity == 4
        nursery.cancel_scope.cancel()
    assert backend.published == [(pytest.approx(3.5), 30, 20.0), (pytest.approx(4.5), 4, 20.0)]


async def test_tuning_off_follows_nothing_and_publishes_nothing(
    autojump_clock: trio.testing.MockClock,
) -> None:
    backend = FlakyBackend()
    host = FakeHost(backend, config(long_queue_threshold=2.0, min_workers=0, max_workers=0))
    await backend.publish_tuning(GROUP, 3, 3600.0)
    await backend.add("g", [b"x"] * 1000)
    async with trio.open_nursery() as nursery:
        await nursery.start(aggregator.run, host)
        await trio.sleep(10)
        nursery.cancel_scope.cancel()
    assert host.resizes == []
    assert len(backend.published) == 1


async def test_long_queue_hook_fires_with_stats_and_a_raising_hook_is_not_fatal(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    seen: list[tuple[float, Stats]] = []

    async def hook(s: Stats) -> None:
        await trio.lowlevel.checkpoint()
        seen.append((trio.current_time(), s))
        raise RuntimeError("hook bug")

    backend = FlakyBackend()
    cfg = config(long_queue_threshold=0.5, long_queue_hook=hook, min_workers=0, max_workers=0)
    host = FakeHost(backend, cfg)
    await add_runs(backend, work=(100.0, 1))
    await backend.add("g", [b"x"] * 60)  # 100 ms * 60 / 10 = 600 ms > 500 ms
    async with trio.open_nursery() as nursery:
        await nursery.start(aggregator.run, host)
        await trio.sleep(0.6)
        assert len(seen) == 2  # ticks at 0.25 and 0.5
        assert seen[0][1].predicted_wait_time == 600.0
        host.is_leader = False
        await trio.sleep(1)
        assert len(seen) == 2  # followers never call it
        host.is_leader = True
        entries = await backend.read(GROUP, "c", 12, 0)  # 48 left: 480 ms, below
        await backend.ack(GROUP, [e.id for e in entries])
        await trio.sleep(1)
        assert len(seen) == 2
        nursery.cancel_scope.cancel()
    assert any("long_queue_hook hook" in r.getMessage() for r in caplog.records)


async def test_plain_hook_is_called() -> None:
    seen: list[Stats] = []
    backend = FlakyBackend()
    host = FakeHost(backend, config(long_queue_threshold=0.1, long_queue_hook=seen.append))
    await backend.add("g", [b"x"] * 5)  # no timings: 1 ms fallback, 5 * 1 / 10 = 0.5 ms
    await aggregator.tick(host, AggregatorState(last_reset=0.0))
    assert seen == []
    await backend.add("g", [b"x"] * 1000)
    await aggregator.tick(host, AggregatorState(last_reset=0.0))
    assert len(seen) == 1


async def test_reset_after_the_interval_not_before_and_only_by_the_leader(
    autojump_clock: trio.testing.MockClock,
) -> None:
    backend = FlakyBackend()
    cfg = config(long_queue_threshold=20.0, metrics_reset_interval=100.0)  # tick every 10 s
    leader = FakeHost(backend, cfg, task_names=["work", "other"])
    follower = FakeHost(backend, cfg, leader=False)
    await add_runs(backend, work=(5.0, 1), foreign=(7.0, 1))
    async with trio.open_nursery() as nursery:
        await nursery.start(aggregator.run, leader)
        await nursery.start(aggregator.run, follower)
        await trio.sleep(100.5)  # ticks at 10..100: 100 - 0 is not > 100
        assert backend.reset_calls == []
        await trio.sleep(10)  # tick at 110
        nursery.cancel_scope.cancel()
    assert backend.reset_calls == [
        (
            pytest.approx(110.0),
            [
                "work_sum",
                "work_sum_us",
                "work_count",
                "other_sum",
                "other_sum_us",
                "other_count",
                "taskrunner:g:delayed_tasks_schedule_sum",
                "taskrunner:g:delayed_tasks_schedule_sum_us",
                "taskrunner:g:delayed_tasks_schedule_count",
                "delayed_tasks_schedule_sum",
                "delayed_tasks_schedule_count",
            ],
        )
    ]
    metrics = await backend.read_metrics(GROUP)
    assert metrics["work_sum"] == 0.0
    assert metrics["work_count"] == 0.0
    assert metrics["foreign_sum"] == 7.0


async def test_no_reset_when_the_interval_is_zero(autojump_clock: trio.testing.MockClock) -> None:
    backend = FlakyBackend()
    host = FakeHost(backend, config(long_queue_threshold=0.0, metrics_reset_interval=0.0))
    async with trio.open_nursery() as nursery:
        await nursery.start(aggregator.run, host)
        await trio.sleep(7 * 24 * 3600)
        nursery.cancel_scope.cancel()
    assert backend.reset_calls == []


async def test_new_leader_does_not_reset_at_once(autojump_clock: trio.testing.MockClock) -> None:
    backend = FlakyBackend()
    cfg = config(long_queue_threshold=20.0, metrics_reset_interval=100.0)
    old_leader = FakeHost(backend, cfg)
    follower = FakeHost(backend, cfg, leader=False)
    async with trio.open_nursery() as nursery:
        await nursery.start(aggregator.run, old_leader)
        await nursery.start(aggregator.run, follower)
        await trio.sleep(115)  # reset at 110; both clocks moved to 110
        assert [t for t, _ in backend.reset_calls] == [pytest.approx(110.0)]
        await trio.sleep(90)  # t = 205: the old leader stops; the follower leads
        old_leader.is_leader = False
        follower.is_leader = True
        await trio.sleep(10)  # tick at 210: 210 - 110 = 100, not > 100: no reset yet
        assert len(backend.reset_calls) == 1
        await trio.sleep(10)  # tick at 220: the new leader resets, on schedule
        nursery.cancel_scope.cancel()
    assert [t for t, _ in backend.reset_calls] == [pytest.approx(110.0), pytest.approx(220.0)]


async def test_failed_reset_is_retried_next_tick(autojump_clock: trio.testing.MockClock) -> None:
    backend = FlakyBackend()
    backend.fail_reset = True
    host = FakeHost(backend, config(long_queue_threshold=20.0, metrics_reset_interval=100.0))
    async with trio.open_nursery() as nursery:
        await nursery.start(aggregator.run, host)
        await trio.sleep(115)
        backend.fail_reset = False
        await trio.sleep(10)
        nursery.cancel_scope.cancel()
    assert [t for t, _ in backend.reset_calls] == [pytest.approx(120.0)]


async def test_backend_errors_are_never_fatal(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    backend = FlakyBackend()
    host = FakeHost(backend, config(long_queue_threshold=2.0, metrics_reset_interval=1.0))
    backend.fail_reads = True
    backend.fail_reset = True
    backend.fail_publish = True
    await add_runs(backend, work=(100.0, 10))
    await backend.add("g", [b"x"] * 1000)
    async with trio.open_nursery() as nursery:
        await nursery.start(aggregator.run, host)
        await trio.sleep(3.5)
        assert host.resizes == []
        backend.fail_reads = False
        host.fail_replication = True
        await trio.sleep(1)
        assert host.resizes == []
        host.fail_replication = False
        await trio.sleep(1)  # tunes locally; the publish fails and is logged
        assert host.capacity == 20
        assert backend.published == []
        nursery.cancel_scope.cancel()
    messages = " ".join(r.getMessage() for r in caplog.records)
    assert "could not read the published pool capacity" in messages
    assert "reset of group g failed" in messages
    assert "timing statistics of group g unavailable" in messages
    assert "could not publish the pool capacity 20" in messages
