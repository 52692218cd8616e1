"""Timing metrics, stats, the long-queue hook, resets and the tuner on a real
server with short real timings (the exact, simulated versions are
tests/test_tuner_fleet.py)."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import pytest
import trio

from taskrunner import Stats, TaskRunner, TaskRunnerConfig
from taskrunner.backends.redis import RedisBackend


def runners_on(url: str, n: int, **config: Any) -> tuple[list[RedisBackend], list[TaskRunner]]:
    queue, group = f"q{uuid.uuid4().hex[:8]}", f"g{uuid.uuid4().hex[:6]}"
    backends = [RedisBackend.from_url(url, queue=queue) for _ in range(n)]
    runners = [
        TaskRunner(
            TaskRunnerConfig(
                consumer_group=group,
                host=f"{group}-{i}",
                block_duration=0.05,
                leader_lease_ttl=1.0,
                **config,
            ),
            backend,
        )
        for i, backend in enumerate(backends)
    ]
    return backends, runners


def sleeper(runner: TaskRunner, seconds: float) -> None:
    async def slow(payload: object) -> None:
        await trio.sleep(seconds)

    runner.task(name="slow")(slow)


async def wait_until(predicate: Callable[[], bool], limit: float = 30) -> None:
    with trio.fail_after(limit):
        while not predicate():  # noqa: ASYNC110
            await trio.sleep(0.01)


async def hash_count(backend: RedisBackend, group: str) -> float:
    return (await backend.read_metrics(group)).get("slow_count", 0.0)


async def test_stats_from_a_known_workload(redis_url: str) -> None:
    (backend,), (runner,) = runners_on(redis_url, 1, num_workers=1)
    group = runner.config.consumer_group
    sleeper(runner, 0.1)
    await runner.dispatch_many("slow", [None] * 16)
    async with trio.open_nursery() as nursery:
        await nursery.start(runner.serve)
        await wait_until(lambda: runner.statistics().acked == 16)
        with trio.fail_after(30):  # a hang bound: the flush is about a second away
            while await hash_count(backend, group) < 16:  # noqa: ASYNC110
                await trio.sleep(0.05)
        stats = await runner.get_timing_statistics()
        await runner.dispatch_many("slow", [None] * 15)
        queued = await runner.get_timing_statistics()
        nursery.cancel_scope.cancel()
    assert await hash_count(backend, group) >= 16
    assert stats.avg_timing == pytest.approx(100.0, rel=0.1)
    assert stats.per_task_timing["slow"] == pytest.approx(100.0, rel=0.1)
    assert stats.tps == pytest.approx(10.0, rel=0.1)
    rf = await runner.get_number_of_replications(refresh=True)
    assert queued.predicted_wait_time == pytest.approx(
        queued.avg_timing * 15 / (1 * max(1, rf)), rel=0.15
    )
    await backend.aclose()


@pytest.mark.parametrize(
    ("workers", "threshold", "fires"), [(4, 0.05, True), (30, 0.6, False)], ids=["fires", "quiet"]
)
async def test_long_queue_hook(redis_url: str, workers: int, threshold: float, fires: bool) -> None:
    seen: list[Stats] = []
    (backend,), (runner,) = runners_on(
        redis_url, 1, num_workers=workers, long_queue_threshold=threshold,
        long_queue_hook=seen.append,
    )  # fmt: skip
    sleeper(runner, 0.1)
    async with trio.open_nursery() as nursery:
        await nursery.start(runner.serve)
        await wait_until(lambda: runner.is_leader, limit=5)
        await runner.dispatch_many("slow", [None] * 16)
        # The first timings reach the hash (the bulk writer's flush, about a second after
        # the first acks: a sleep of 1.2 s assumed a machine fast enough to keep to it).
        group = runner.config.consumer_group
        with trio.fail_after(30):
            while not await hash_count(backend, group):  # noqa: ASYNC110
                await trio.sleep(0.05)
        await runner.dispatch_many("slow", [None] * 16)
        await wait_until(lambda: runner.statistics().acked == 32)
        nursery.cancel_scope.cancel()
    if fires:
        assert seen, "the hook never fired"
        assert all(s.predicted_wait_time > threshold * 1000 for s in seen)
    else:
        assert seen == []
    await backend.aclose()


async def test_metrics_reset_after_the_interval_not_before(redis_url: str) -> None:
    (backend,), (runner,) = runners_on(
        redis_url, 1, metrics_reset_interval=2.5, long_queue_threshold=0.2
    )
    group = runner.config.consumer_group
    sleeper(runner, 0.01)
    async with trio.open_nursery() as nursery:
        await nursery.start(runner.serve)
        await runner.dispatch_many("slow", [None] * 5)
        with trio.fail_after(5):
            while await hash_count(backend, group) < 5:  # noqa: ASYNC110
                await trio.sleep(0.05)
        seen_at = trio.current_time()
        with trio.fail_after(5):
            while await hash_count(backend, group) != 0:  # noqa: ASYNC110
                await trio.sleep(0.05)
        reset_after = trio.current_time() - seen_at
        nursery.cancel_scope.cancel()
    assert 0 < reset_after <= 2.5 + 0.5, reset_after
    await backend.aclose()


async def test_tuner_grows_followers_follow_and_it_shrinks_back(redis_url: str) -> None:
    backends, runners = runners_on(
        redis_url, 3,
        num_workers=2, min_workers=1, max_workers=8,
        desired_wait_time=0.2, desired_wait_time_tolerance=0.05,
        tuning_cooldown=0.3, long_queue_threshold=0.2,
    )  # fmt: skip
    for runner in runners:
        sleeper(runner, 0.1)
    async with trio.open_nursery() as nursery:
        for runner in runners:
            await nursery.start(runner.serve)
        await runners[0].dispatch_many("slow", [None] * 20)  # seed the timings
        await wait_until(lambda: sum(r.statistics().acked for r in runners) == 20)
        await trio.sleep(1.2)
        await runners[0].dispatch_many("slow", [None] * 600)
        await wait_until(lambda: max(r.capacity for r in runners) == 8)
        await wait_until(lambda: all(r.capacity == 8 for r in runners), limit=5)
        await wait_until(lambda: sum(r.statistics().acked for r in runners) == 620)
        await wait_until(lambda: all(r.capacity == 1 for r in runners), limit=20)
        nursery.cancel_scope.cancel()
    for backend in backends:
        await backend.aclose()


async def test_every_timing_reaches_the_hash_across_shutdown(redis_url: str) -> None:
    (backend,), (runner,) = runners_on(redis_url, 1, num_workers=8)
    group = runner.config.consumer_group
    sleeper(runner, 0.005)
    await runner.dispatch_many("slow", [None] * 300)
    async with trio.open_nursery() as nursery:
        await nursery.start(runner.serve)
        await wait_until(lambda: runner.statistics().completed >= 150)
        nursery.cancel_scope.cancel()  # mid-run: the final flush must carry the rest
    stats = runner.statistics()
    assert await hash_count(backend, group) == stats.completed + stats.failed
    await backend.aclose()


async def test_an_ack_pushes_every_queues_claim_delays(redis_url: str) -> None:
    """Issue 24: each queue's claim delays reach its own ring with the ack (the ring
    was the default queue's only), so another process reads them."""
    group = f"g{uuid.uuid4().hex[:6]}"
    async with (
        RedisBackend.from_url(redis_url) as worker,
        RedisBackend.from_url(redis_url) as reader,
    ):
        for queue in ("orders", "emails"):
            await worker.add(group, [b"{}"], queue=queue)
        await trio.sleep(0.05)
        for queue in ("orders", "emails"):
            got = await worker.read(group, "c", 10, 0, queue=queue)
            await worker.ack(group, [e.id for e in got], queue=queue)
        for queue in ("orders", "emails"):
            metrics = await reader.get_metrics(group, queue=queue)
            assert metrics.message_claim_delay_max >= 0.04e9, (queue, metrics)
