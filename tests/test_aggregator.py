"""The aggregator as a service: a fake host over a flaky MemoryBackend, on MockClock."""

from __future__ import annotations

import itertools
import logging
from collections.abc import Sequence
from typing import Any

import pytest
import trio
import trio.testing
from _flaky import GROUP, FlakyBackend, add_runs

from taskrunner._config import TaskRunnerConfig
from taskrunner._fleet.stats import Stats
from taskrunner._serve import aggregator
from taskrunner._serve.aggregator import AggregatorState, timing_statistics
from taskrunner.backends.memory import MemoryBackend
from taskrunner.errors import BackendError


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
    caplog.set_level(logging.INFO, "taskrunner._serve.aggregator")
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
