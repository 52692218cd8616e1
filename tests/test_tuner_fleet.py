"""Timing metrics, the long-queue hook, resets and the tuner, through real runners.

Runners share one MemoryBackend on trio's MockClock, so every duration below
is exact simulated time.
"""

from __future__ import annotations

import itertools
import random

import pytest
import trio
import trio.testing
from _fleet import Partition, make_runner, serving, wait_until

from taskrunner import TaskRunner
from taskrunner._fleet.stats import Stats
from taskrunner.backends.memory import MemoryBackend

GROUP = "g"


def sleeper(runner: TaskRunner, name: str, seconds: float) -> None:
    async def action(payload: object) -> None:
        await trio.sleep(seconds)

    runner.task(name=name)(action)


async def hash_count(backend: MemoryBackend, *names: str) -> float:
    metrics = await backend.read_metrics(GROUP)
    return sum(metrics.get(f"{name}_count", 0.0) for name in names)


async def wait_for_hash_count(backend: MemoryBackend, name: str, count: int) -> None:
    with trio.fail_after(60):
        while await hash_count(backend, name) != count:  # noqa: ASYNC110
            await trio.sleep(0.01)


# Stats from a known workload ---------------------------------------------------------


async def test_stats_from_a_known_workload(autojump_clock: trio.testing.MockClock) -> None:
    backend = MemoryBackend()
    runner = make_runner(backend, num_workers=1)
    sleeper(runner, "half_second", 0.5)
    await runner.dispatch_many("half_second", [None] * 16)
    async with serving(runner):
        await wait_until(lambda: runner.statistics().acked == 16)
        assert trio.current_time() == pytest.approx(8.0, abs=0.05)
        # Timings reach the hash at the next flush (once a second).
        await wait_for_hash_count(backend, "half_second", 16)
        stats = await runner.get_timing_statistics()
        rf = await runner.get_number_of_replications()
        assert rf == 1
        assert stats.avg_timing == pytest.approx(500.0, rel=0.01)
        assert stats.per_task_timing == {"half_second": pytest.approx(500.0, rel=0.01)}
        assert stats.tps == pytest.approx(2.0, rel=0.01)
        assert stats.predicted_wait_time == 0.0

        # 15 queued (the stream length counts the one running until its ack):
        # the prediction is avg * queue_len / (workers * rf).
        await runner.dispatch_many("half_second", [None] * 15)
        assert await backend.length("g") == 15
        stats = await runner.get_timing_statistics()
        assert stats.predicted_wait_time == pytest.approx(500.0 * 15 / (1 * rf), rel=0.01)
        await wait_until(lambda: runner.statistics().acked == 31)


async def test_stats_use_the_replication_count(autojump_clock: trio.testing.MockClock) -> None:
    backend = MemoryBackend()
    runners = [make_runner(backend, num_workers=2) for _ in range(3)]
    for runner in runners:
        sleeper(runner, "tenth", 0.1)
    await runners[0].dispatch_many("tenth", [None] * 30)
    async with serving(*runners):
        await wait_until(lambda: sum(r.statistics().acked for r in runners) == 30)
        await wait_for_hash_count(backend, "tenth", 30)
        stats = await runners[1].get_timing_statistics()
        assert await runners[1].get_number_of_replications() == 3
    assert stats.avg_timing == pytest.approx(100.0)
    assert stats.tps == pytest.approx(1000.0 / 100.0 * 2 * 3)


# LongQueueHook -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("workers", "threshold", "fires"),
    [(4, 0.1, True), (30, 0.6, False)],
)
async def test_long_queue_hook(
    autojump_clock: trio.testing.MockClock, workers: int, threshold: float, fires: bool
) -> None:
    seen: list[Stats] = []

    async def hook(stats: Stats) -> None:
        await trio.lowlevel.checkpoint()
        seen.append(stats)

    backend = MemoryBackend()
    runner = make_runner(
        backend, num_workers=workers, long_queue_threshold=threshold, long_queue_hook=hook
    )
    sleeper(runner, "half_second", 0.5)
    await runner.dispatch_many("half_second", [None] * 16)
    async with serving(runner):
        await wait_until(lambda: runner.statistics().acked == 16)
        await trio.sleep(5)  # several more ticks with the final timings
    if fires:
        assert seen, "the hook never fired"
        assert all(s.predicted_wait_time > threshold * 1000 for s in seen)
        assert seen[0].avg_timing == pytest.approx(500.0)
    else:
        assert seen == []


async def test_long_queue_hook_only_on_the_leader(autojump_clock: trio.testing.MockClock) -> None:
    calls: list[str] = []
    backend = MemoryBackend()
    runners = []
    for i in range(3):

        def hook(stats: Stats, i: int = i) -> None:
            calls.append(f"r{i}")

        runner = make_runner(backend, num_workers=1, long_queue_threshold=0.2, long_queue_hook=hook)
        sleeper(runner, "half_second", 0.5)
        runners.append(runner)
    await runners[0].dispatch_many("half_second", [None] * 60)
    async with serving(*runners):
        await wait_until(lambda: sum(r.statistics().acked for r in runners) == 60)
        (leader,) = (i for i, r in enumerate(runners) if r.is_leader)
    assert calls
    assert set(calls) == {f"r{leader}"}


# Metrics reset -------------------------------------------------------------------------


async def test_metrics_reset_after_the_interval_not_before(
    autojump_clock: trio.testing.MockClock,
) -> None:
    backend = MemoryBackend()
    # Ticks every 10 s; resets once more than 100 s have passed on the clock.
    runner = make_runner(backend, long_queue_threshold=20.0, metrics_reset_interval=100.0)
    sleeper(runner, "quick", 0.01)
    await runner.dispatch_many("quick", [None] * 5)
    async with serving(runner):
        await trio.sleep(100.5)
        assert await hash_count(backend, "quick") == 5
        await trio.sleep(10)  # the tick at 110
        assert await hash_count(backend, "quick") == 0
        assert (await backend.read_metrics(GROUP))["quick_sum"] == 0.0
        await runner.dispatch_many("quick", [None] * 3)
        await trio.sleep(99)  # t = 209.5; the tick at 210 is not yet 100 s past 110
        assert await hash_count(backend, "quick") == 3
        await trio.sleep(11)
        assert await hash_count(backend, "quick") == 0


async def test_no_metrics_reset_when_the_interval_is_zero(
    autojump_clock: trio.testing.MockClock,
) -> None:
    backend = MemoryBackend()
    runner = make_runner(backend, metrics_reset_interval=0.0, block_duration=30.0)
    sleeper(runner, "quick", 0.01)
    await runner.dispatch_many("quick", [None] * 5)
    async with serving(runner):
        # Three hours of ticks (every 60 s with no threshold): the decision
        # itself is tested for every interval in test_stats.py.
        await trio.sleep(3 * 3600)
        assert await hash_count(backend, "quick") == 5


async def test_a_follower_that_becomes_leader_does_not_reset_at_once(
    autojump_clock: trio.testing.MockClock,
) -> None:
    backend = MemoryBackend()
    config = {"long_queue_threshold": 20.0, "metrics_reset_interval": 100.0}
    first = make_runner(backend, **config)
    second = make_runner(backend, **config)
    for runner in (first, second):
        sleeper(runner, "quick", 0.01)
    async with trio.open_nursery() as nursery:
        first_scope = trio.CancelScope()

        async def serve_first() -> None:
            with first_scope:
                await first.serve()

        nursery.start_soon(serve_first)
        await wait_until(lambda: first.is_leader)
        await nursery.start(second.serve)
        await trio.sleep(115)  # the first reset, at t = 110
        assert not second.is_leader
        await first.dispatch_many("quick", [None] * 4)
        await trio.sleep(35)  # t = 150: recorded and flushed
        assert await hash_count(backend, "quick") == 4

        first_scope.cancel()  # the leader leaves; the follower takes over
        await wait_until(lambda: second.is_leader)
        took_over = trio.current_time()
        assert took_over < 160
        # Its reset clock moved at 110 too: nothing is reset before 210.
        await trio.sleep(209.5 - took_over)
        assert await hash_count(backend, "quick") == 4
        await trio.sleep(11)
        assert await hash_count(backend, "quick") == 0
        nursery.cancel_scope.cancel()


# Tuner in a fleet ------------------------------------------------------------------------


async def record_capacities(
    runners: list[TaskRunner], history: list[list[tuple[float, int]]]
) -> None:
    for i, runner in enumerate(runners):
        history[i].append((trio.current_time(), runner.capacity))
    while True:
        await trio.sleep(0.01)
        for i, runner in enumerate(runners):
            if runner.capacity != history[i][-1][1]:
                history[i].append((trio.current_time(), runner.capacity))


async def test_tuner_grows_the_fleet_under_a_burst_and_shrinks_it_after(
    autojump_clock: trio.testing.MockClock,
) -> None:
    backend = MemoryBackend()
    runners = [
        make_runner(
            backend,
            num_workers=4,
            min_workers=2,
            max_workers=12,
            desired_wait_time=1.0,
            desired_wait_time_tolerance=0.2,
            tuning_cooldown=10.0,
            long_queue_threshold=4.0,  # tick every 2 s
        )
        for _ in range(3)
    ]
    for runner in runners:
        sleeper(runner, "slow", 1.0)
    history: list[list[tuple[float, int]]] = [[] for _ in runners]
    async with serving(*runners) as nursery:
        nursery.start_soon(record_capacities, runners, history)
        await wait_until(lambda: any(r.is_leader for r in runners))
        (leader,) = (i for i, r in enumerate(runners) if r.is_leader)
        await trio.sleep(30)  # idle: the pool sheds 10 % per decision, down to min
        assert all(r.capacity == 2 for r in runners), history
        burst_at = trio.current_time()
        await runners[0].dispatch_many("slow", [None] * 400)
        await wait_until(lambda: all(r.capacity == 12 for r in runners), limit=60)
        grown_at = trio.current_time()
        await wait_until(lambda: sum(r.statistics().acked for r in runners) == 400)
        drained_at = trio.current_time()
        await wait_until(lambda: all(r.capacity == 2 for r in runners), limit=300)
        await trio.sleep(0.1)  # let the monitor see the last change
        nursery.cancel_scope.cancel()

    assert grown_at - burst_at < 20, history
    # Without growth 400 one-second tasks on 3 x 2 slots would take ~67 s.
    assert drained_at - burst_at < 40
    for capacities in history:
        assert all(2 <= c <= 12 for _, c in capacities), history
    # Cooldown: the leader's own changes are at least 10 s apart (give or take
    # the monitor's 0.01 s polling step).
    leader_changes = [t for t, _ in history[leader][1:]]
    assert all(b - a >= 10.0 - 0.011 for a, b in itertools.pairwise(leader_changes)), (
        leader,
        [[f"{t:.2f}:{c}" for t, c in h] for h in history],
    )
    # Followers take exactly the values the leader chose, a tick later at most.
    leader_values = [c for _, c in history[leader][1:]]
    for i, capacities in enumerate(history):
        if i != leader:
            assert [c for _, c in capacities[1:]] == leader_values, history


async def test_a_new_runner_starts_from_the_published_capacity(
    autojump_clock: trio.testing.MockClock,
) -> None:
    backend = MemoryBackend()
    tuning = {
        "num_workers": 4,
        "min_workers": 1,
        "max_workers": 8,
        "desired_wait_time": 1.0,
        "long_queue_threshold": 4.0,
    }
    first = make_runner(backend, **tuning)
    async with serving(first) as nursery:
        await trio.sleep(11)  # idle: 4 -> 3 published at t = 2 (first decision)
        published = await backend.read_tuning(GROUP)
        assert published == first.capacity
        late = make_runner(backend, **tuning)
        await nursery.start(late.serve)
        await trio.sleep(2.1)
        assert late.capacity == first.capacity


# The bulk writer loses nothing ---------------------------------------------------------


async def test_every_timing_reaches_the_hash_across_shutdown(
    autojump_clock: trio.testing.MockClock,
) -> None:
    backend = MemoryBackend()
    runners = [make_runner(backend, num_workers=8) for _ in range(3)]
    invocations = 0
    rng = random.Random(7)

    async def work(payload: object) -> None:
        nonlocal invocations
        invocations += 1
        await trio.sleep(rng.uniform(0.01, 0.4))
        if rng.random() < 0.1:
            raise RuntimeError("fails sometimes")

    for runner in runners:
        runner.task(name="work", max_retry=1)(work)
    await runners[0].dispatch_many("work", [None] * 2000)
    async with serving(*runners):
        await trio.sleep(7.37)  # mid-run, between two flushes
    # serving() returned: every runner drained, acked and flushed.
    assert 0 < invocations < 2000
    assert await hash_count(backend, "work") == invocations
    done = sum(r.statistics().completed + r.statistics().failed for r in runners)
    assert done == invocations


async def test_no_timing_is_lost_across_a_backend_outage(
    autojump_clock: trio.testing.MockClock,
) -> None:
    backend = MemoryBackend()
    link = Partition(backend)
    runner = make_runner(link, num_workers=4)
    invocations = 0

    async def work(payload: object) -> None:
        nonlocal invocations
        invocations += 1
        await trio.sleep(0.25)

    runner.task(name="work")(work)
    await runner.dispatch_many("work", [None] * 200)
    async with serving(runner):
        await trio.sleep(2.1)
        link.cut = True  # flushes fail; running tasks finish and are timed meanwhile
        await trio.sleep(5)
        assert invocations > await hash_count(backend, "work")
        link.cut = False
        await wait_until(lambda: runner.statistics().acked == 200, limit=600)
    assert invocations >= 200
    assert await hash_count(backend, "work") == invocations


async def test_a_follower_out_of_phase_follows_with_the_default_threshold(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """With long_queue_threshold 0 every instance ticks once a minute, each from its
    own start: the published value must outlive a tick, or a follower whose tick
    falls 20-60 s after the leader's never sees it."""
    backend = MemoryBackend()
    config = {
        "num_workers": 10,
        "min_workers": 1,
        "max_workers": 10,
        "desired_wait_time": 1.0,
        "tuning_cooldown": 0.0,
    }
    leader = make_runner(backend, **config)
    follower = make_runner(backend, **config)
    async with serving(leader) as nursery:
        await wait_until(lambda: leader.is_leader)
        await trio.sleep(30)
        await nursery.start(follower.serve)
        await trio.sleep(600)  # idle: the leader sheds 10 % a tick down to 1
        assert leader.capacity == 1
        assert follower.capacity == 1, "the follower never saw the published value"
