"""Fleet coordination simulated deterministically: several runners, one
MemoryBackend, trio's MockClock."""

from __future__ import annotations

import random
from collections import Counter
from typing import Any

import trio
import trio.testing
from _fleet import Partition, make_runner, serving, start_each, wait_until

from taskrunner import TaskRunner, _keys
from taskrunner.backends.memory import MemoryBackend

TTL = 5.0
RETRY_MAX = TTL / 2 * 1.1  # a follower's retry interval, with jitter


async def monitor_single_leader(runners: list[TaskRunner], leaders: list[set[int]]) -> None:
    """Check, every millisecond of simulated time, that at most one runner leads."""
    while True:
        now_leading = {i for i, r in enumerate(runners) if r.is_leader}
        assert len(now_leading) <= 1, f"two leaders at t={trio.current_time()}: {now_leading}"
        if now_leading and (not leaders or leaders[-1] != now_leading):
            leaders.append(now_leading)
        await trio.sleep(0.001)


async def test_three_runners_elect_exactly_one_leader(
    autojump_clock: trio.testing.MockClock,
) -> None:
    backend = MemoryBackend()
    runners = [make_runner(backend) for _ in range(3)]
    leaders: list[set[int]] = []
    async with serving(*runners) as nursery:
        nursery.start_soon(monitor_single_leader, runners, leaders)
        await trio.sleep(60)
        assert sum(r.is_leader for r in runners) == 1
    assert len(leaders) == 1, f"leadership changed hands without a failure: {leaders}"
    assert await backend.lease_owner("g") is None, "the leader resigns on shutdown"


async def test_crashed_leader_is_replaced_within_ttl_plus_one_retry(
    autojump_clock: trio.testing.MockClock,
) -> None:
    backend = MemoryBackend()
    links = [Partition(backend) for _ in range(3)]
    runners = [make_runner(link) for link in links]
    leaders: list[set[int]] = []
    async with trio.open_nursery() as outer:
        outer.start_soon(monitor_single_leader, runners, leaders)
        scopes = start_each(outer, runners)
        await wait_until(lambda: any(r.is_leader for r in runners))
        await trio.sleep(7)
        (old,) = (i for i, r in enumerate(runners) if r.is_leader)
        crashed_at = trio.current_time()
        links[old].cut = True  # the process vanishes: no resign, no more renews
        scopes[old].cancel()
        await wait_until(lambda: any(r.is_leader for i, r in enumerate(runners) if i != old))
        failover = trio.current_time() - crashed_at
        await trio.sleep(30)
        outer.cancel_scope.cancel()
    assert failover <= TTL + RETRY_MAX, failover
    assert failover > TTL / 2, "took over before the crashed lease could have expired"
    assert [len(s) for s in leaders] == [1, 1]
    assert leaders[0] != leaders[1]


async def test_graceful_stop_hands_over_faster_than_a_crash(
    autojump_clock: trio.testing.MockClock,
) -> None:
    backend = MemoryBackend()
    runners = [make_runner(backend) for _ in range(3)]
    async with trio.open_nursery() as outer:
        scopes = start_each(outer, runners)
        await wait_until(lambda: any(r.is_leader for r in runners))
        (old,) = (i for i, r in enumerate(runners) if r.is_leader)
        stopped_at = trio.current_time()
        scopes[old].cancel()
        await wait_until(lambda: any(r.is_leader for i, r in enumerate(runners) if i != old))
        handover = trio.current_time() - stopped_at
        outer.cancel_scope.cancel()
    assert handover <= RETRY_MAX, handover


async def test_partitioned_leader_steps_down_before_its_lease_expires(
    autojump_clock: trio.testing.MockClock,
) -> None:
    backend = MemoryBackend()
    links = [Partition(backend) for _ in range(2)]
    runners = [make_runner(link) for link in links]
    async with serving(*runners):
        await wait_until(lambda: any(r.is_leader for r in runners))
        (old,) = (i for i, r in enumerate(runners) if r.is_leader)
        links[old].cut = True
        cut_at = trio.current_time()
        await wait_until(lambda: not runners[old].is_leader)
        stepped_down = trio.current_time() - cut_at
        lease_left = backend.ttl(_keys.leader("g"))
        await wait_until(lambda: runners[1 - old].is_leader)
        links[old].cut = False
    assert stepped_down < TTL
    assert lease_left is not None, "stepped down only after the store expired the lease"


async def test_delayed_tasks_run_exactly_once_on_time_across_a_leader_crash(
    autojump_clock: trio.testing.MockClock,
) -> None:
    rng = random.Random(7)
    backend = MemoryBackend()
    links = [Partition(backend) for _ in range(3)]
    runners = [make_runner(link, delayed_poll_interval=1.0) for link in links]
    runs: Counter[int] = Counter()
    late: list[float] = []
    due: dict[int, float] = {}
    for runner in runners:

        @runner.task(name="job")
        async def job(payload: dict[str, Any]) -> None:
            runs[payload["i"]] += 1
            late.append(trio.current_time() - due[payload["i"]])

    async with trio.open_nursery() as outer:
        scopes = start_each(outer, runners)
        await wait_until(lambda: any(r.is_leader for r in runners))
        (old,) = (i for i, r in enumerate(runners) if r.is_leader)
        producer = runners[(old + 1) % 3]
        for i in range(1000):
            delay = rng.uniform(0, 60)
            due[i] = trio.current_time() + delay
            await producer.dispatch_delayed("job", {"i": i}, delay)
        await trio.sleep(20)
        links[old].cut = True  # crash the leader mid-way
        scopes[old].cancel()
        await wait_until(lambda: len(runs) == 1000)
        await trio.sleep(30)
        outer.cancel_scope.cancel()
    assert set(runs.values()) == {1}, "a delayed task ran twice"
    assert min(late) >= 0, "a delayed task ran early"
    failover = TTL + RETRY_MAX
    assert max(late) <= 1.0 + failover + 0.1, max(late)


async def test_replication_count_follows_instances_joining_and_leaving(
    autojump_clock: trio.testing.MockClock,
) -> None:
    backend = MemoryBackend()
    links = [Partition(backend) for _ in range(3)]
    runners = [make_runner(link) for link in links]
    assert await runners[0].get_number_of_replications() == 0  # not serving yet
    async with trio.open_nursery() as outer:
        await outer.start(runners[0].serve)
        assert await runners[0].get_number_of_replications() == 1
        await outer.start(runners[1].serve)
        await outer.start(runners[2].serve)
        assert await runners[0].get_number_of_replications() == 1  # cached for 10 s
        await trio.sleep(10)
        assert await runners[0].get_number_of_replications() == 3
        links[2].cut = True  # a crash: its key is not deleted, it expires in 15 s
        await trio.sleep(10)
        assert await runners[0].get_number_of_replications() == 3
        await trio.sleep(10)
        assert await runners[0].get_number_of_replications() == 2
        outer.cancel_scope.cancel()
