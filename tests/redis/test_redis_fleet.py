"""Fleet coordination on a real server with short real timings: leader
election, failover, partition step-down, delayed tasks across a crash, unique
jobs and the replication count (the simulated versions are tests/test_fleet.py)."""

from __future__ import annotations

import random
import uuid
from collections import Counter
from collections.abc import Callable
from typing import Any

import trio
from _fleet import start_each

from taskrunner import TaskRunner, TaskRunnerConfig
from taskrunner.backends.redis import RedisBackend
from taskrunner.testing import PartitionedBackend

TTL = 1.0
RETRY_MAX = TTL / 2 * 1.1
SLACK = 0.3  # real-time scheduling noise on a shared machine


def fleet(url: str, n: int, **config: Any) -> tuple[list[PartitionedBackend], list[TaskRunner]]:
    queue = f"q{uuid.uuid4().hex[:8]}"
    group = f"g{uuid.uuid4().hex[:6]}"
    links = [PartitionedBackend(RedisBackend.from_url(url, queue=queue)) for _ in range(n)]
    runners = [
        TaskRunner(
            TaskRunnerConfig(
                consumer_group=group,
                host=f"{group}-h{i}",
                leader_lease_ttl=TTL,
                block_duration=0.1,
                reclaim_delay=2.0,
                delayed_poll_interval=0.5,
                shutdown_grace=1.0,
                **config,
            ),
            link,
        )
        for i, link in enumerate(links)
    ]
    return links, runners


async def wait_until(predicate: Callable[[], bool], limit: float = 20) -> None:
    with trio.fail_after(limit):
        while not predicate():  # noqa: ASYNC110
            await trio.sleep(0.005)


async def watch_single_leader(runners: list[TaskRunner]) -> None:
    while True:
        leading = [i for i, r in enumerate(runners) if r.is_leader]
        assert len(leading) <= 1, f"two leaders at once: {leading}"
        await trio.sleep(0.002)


async def close(links: list[PartitionedBackend]) -> None:
    for link in links:
        link.cut = False
        await link.aclose()


async def test_one_leader_then_crash_failover_then_graceful_handover(redis_url: str) -> None:
    links, runners = fleet(redis_url, 3)
    async with trio.open_nursery() as outer:
        outer.start_soon(watch_single_leader, runners)
        scopes = start_each(outer, runners)
        await wait_until(lambda: any(r.is_leader for r in runners))
        await trio.sleep(2 * TTL)  # renewals keep the same leader
        (first,) = (i for i, r in enumerate(runners) if r.is_leader)
        assert runners[first].is_leader

        crashed_at = trio.current_time()
        links[first].cut = True  # crash: no resign, no renew
        scopes[first].cancel()
        await wait_until(lambda: any(r.is_leader for i, r in enumerate(runners) if i != first))
        failover = trio.current_time() - crashed_at
        (second,) = (i for i, r in enumerate(runners) if r.is_leader)

        stopped_at = trio.current_time()
        scopes[second].cancel()  # graceful: resigns
        await wait_until(
            lambda: any(r.is_leader for i, r in enumerate(runners) if i not in (first, second))
        )
        handover = trio.current_time() - stopped_at
        outer.cancel_scope.cancel()
    await close(links)
    print(f"real failover after a crash: {failover:.2f}s; graceful handover: {handover:.2f}s")
    assert failover <= TTL + RETRY_MAX + SLACK, failover
    assert handover <= RETRY_MAX + SLACK, handover


async def test_partitioned_leader_steps_down_before_its_lease_expires(redis_url: str) -> None:
    links, runners = fleet(redis_url, 2)
    async with trio.open_nursery() as outer:
        outer.start_soon(watch_single_leader, runners)
        start_each(outer, runners)
        await wait_until(lambda: any(r.is_leader for r in runners))
        (old,) = (i for i, r in enumerate(runners) if r.is_leader)
        links[old].cut = True
        cut_at = trio.current_time()
        await wait_until(lambda: not runners[old].is_leader)
        stepped_down = trio.current_time() - cut_at
        await wait_until(lambda: runners[1 - old].is_leader)
        links[old].cut = False
        outer.cancel_scope.cancel()
    await close(links)
    assert stepped_down < TTL, stepped_down


async def test_delayed_tasks_exactly_once_across_a_leader_crash(redis_url: str) -> None:
    links, runners = fleet(redis_url, 3)
    rng = random.Random(3)
    runs: Counter[int] = Counter()
    late: list[float] = []
    due: dict[int, float] = {}
    for runner in runners:

        @runner.task(name="job")
        async def job(payload: dict[str, int]) -> None:
            runs[payload["i"]] += 1
            late.append(trio.current_time() - due[payload["i"]])

    async with trio.open_nursery() as outer:
        scopes = start_each(outer, runners)
        await wait_until(lambda: any(r.is_leader for r in runners))
        (old,) = (i for i, r in enumerate(runners) if r.is_leader)
        producer = runners[(old + 1) % 3]
        for i in range(300):
            delay = rng.uniform(0, 4)
            due[i] = trio.current_time() + delay
            await producer.dispatch_delayed("job", {"i": i}, delay)
        await trio.sleep(1.5)
        links[old].cut = True  # crash mid-way
        scopes[old].cancel()
        await wait_until(lambda: len(runs) == 300)
        await trio.sleep(1.0)  # nothing runs twice later either
        outer.cancel_scope.cancel()
    await close(links)
    assert set(runs.values()) == {1}
    assert min(late) >= -0.01, "a delayed task ran early"  # clocks: unix vs trio's
    assert max(late) <= 0.5 + TTL + RETRY_MAX + SLACK, max(late)


async def test_replication_count_follows_joins_and_leaves(redis_url: str) -> None:
    links, runners = fleet(redis_url, 3)  # the server was flushed for this test
    probe = runners[0]
    async with trio.open_nursery() as outer:
        await outer.start(probe.serve)
        assert await probe.get_number_of_replications() == 1
        await outer.start(runners[1].serve)
        await outer.start(runners[2].serve)
        assert await probe.get_number_of_replications() == 1, "cached for 10 s"
        assert await probe.get_number_of_replications(refresh=True) == 3
        links[2].cut = True  # a crash leaves its key to expire (15 s): still counted
        assert await probe.get_number_of_replications(refresh=True) == 3
        links[2].cut = False
        outer.cancel_scope.cancel()
    # Graceful stops delete their keys; the "crashed" one's link is back, so it did too.
    assert await probe.get_number_of_replications(refresh=True) == 0
    await close(links)
