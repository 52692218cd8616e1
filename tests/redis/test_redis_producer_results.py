"""Producers wait for results and cancel tasks a trio runner runs, on one real server.

The runner serves in the test's trio loop; the sync producer runs in a worker
thread (or in another process) and the asyncio one under ``asyncio.run`` in a
thread, as an application's would. Their handles' ``result`` and ``cancel``
use the runner's keys and scripts, so what they see is what ``TaskHandle``
sees.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import attrs
import pytest
import redis
import trio

from taskrunner import (
    TaskCancelled,
    TaskFailed,
    TaskRunner,
    TaskRunnerConfig,
    TaskState,
)
from taskrunner.backends.redis import RedisBackend
from taskrunner.producer import AsyncProducer, Producer, ResultTimeout

FAST = {
    "reclaim_delay": 3.0,
    "block_duration": 0.1,
    "leader_lease_ttl": 1.0,
    "delayed_poll_interval": 0.2,
    "shutdown_grace": 2.0,
}


@attrs.frozen
class Doubled:
    doubled: int


@pytest.fixture
async def backend(redis_url: str) -> AsyncIterator[RedisBackend]:
    async with RedisBackend.from_url(redis_url) as b:
        yield b


def shop(backend: RedisBackend, started: list[str], **config: Any) -> TaskRunner:
    runner = TaskRunner(TaskRunnerConfig(consumer_group="shop", **{**FAST, **config}), backend)

    @runner.task(name="double", keep_result=60)
    async def double(payload: dict[str, int]) -> Doubled:
        return Doubled(doubled=payload["n"] * 2)

    @runner.task(name="charge", keep_result=60, max_retry=1)
    async def charge(payload: dict[str, int]) -> None:
        raise ValueError(f"card declined for {payload['cents']} cents")

    @runner.task(name="crunch", keep_result=60, timeout=3600)  # interruptible
    async def crunch(payload: None) -> None:
        started.append("crunch")
        await trio.sleep(3600)

    @runner.task(name="remind", keep_result=60)
    async def remind(payload: dict[str, int]) -> None:
        pass

    return runner


async def wait_until(predicate: Callable[[], bool], limit: float = 20) -> None:
    with trio.fail_after(limit):
        while not predicate():  # noqa: ASYNC110
            await trio.sleep(0.02)


def _keys(url: str, pattern: str) -> list[bytes]:
    with redis.Redis.from_url(url) as client:
        return sorted(client.scan_iter(match=pattern))


def sync_producer(url: str, started: list[str]) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    with Producer.from_url(url, consumer_group="shop") as producer:
        handle = producer.dispatch("double", {"n": 21})
        seen["value"] = handle.result(timeout=10)
        seen["typed"] = handle.result(timeout=1, type=Doubled)

        with pytest.raises(TaskFailed) as failed:
            producer.dispatch("charge", {"cents": 1250}).result(timeout=10)
        seen["failed"] = (failed.value.error_type, failed.value.error)

        # Cancelled before it ran, a task is recorded as cancelled when its entry or
        # member says it keeps results: a strict producer's do (the catalog says so).
        strict = Producer.from_url(url, consumer_group="shop", strict=True)
        later = strict.dispatch_delayed("remind", {"user": 7}, delay=3600)
        with redis.Redis.from_url(url) as client:
            seen["indexed"] = client.hexists("taskrunner:shop:delayed_ids", later.id)
        seen["cancel_scheduled"] = later.cancel()
        with pytest.raises(TaskCancelled):
            later.result(timeout=5)
        strict.close()

        running = producer.dispatch("crunch")
        deadline = 200
        while "crunch" not in started and deadline:  # the runner's own thread appends it
            deadline -= 1
            time.sleep(0.05)
        seen["cancel_running"] = producer.cancel(running.id)
        with pytest.raises(TaskCancelled):
            running.result(timeout=10)
        seen["cancel_again"] = running.cancel()

        with pytest.raises(ResultTimeout) as slow:
            producer.result("1-1", timeout=0.3, task_name="nobody")
        seen["timeout"] = (isinstance(slow.value, TimeoutError), str(slow.value))
    return seen


async def async_producer(url: str) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    async with AsyncProducer.from_url(url, consumer_group="shop") as producer:
        handles = await asyncio.gather(*(producer.dispatch("double", {"n": n}) for n in range(8)))
        seen["values"] = await asyncio.gather(*(h.result(timeout=10) for h in handles))
        strict = AsyncProducer.from_url(url, consumer_group="shop", strict=True)
        later = await strict.schedule_for("remind", {"user": 8}, when=4102444800.0)
        seen["cancel_scheduled"] = await producer.cancel(later.id)
        try:
            await later.result(timeout=5)
        except TaskCancelled as exc:
            seen["cancelled"] = str(exc)
        await strict.aclose()
        try:
            await producer.result("1-2", timeout=0.2)
        except ResultTimeout as exc:
            seen["timeout"] = isinstance(exc, TimeoutError)
    return seen


async def test_producers_wait_for_results_and_cancel_tasks(
    backend: RedisBackend, redis_url: str
) -> None:
    started: list[str] = []
    runner = shop(backend, started)
    async with trio.open_nursery() as nursery:
        await nursery.start(runner.serve)
        seen = await trio.to_thread.run_sync(sync_producer, redis_url, started)
        seen_async = await trio.to_thread.run_sync(asyncio.run, async_producer(redis_url))
        nursery.cancel_scope.cancel()

    assert seen["value"] == {"doubled": 42}
    assert seen["typed"] == Doubled(doubled=42)
    assert seen["failed"] == ("ValueError", "card declined for 1250 cents")
    assert seen["indexed"], "a delayed dispatch is indexed under its id"
    assert seen["cancel_scheduled"] is True
    assert seen["cancel_running"] is True
    assert seen["cancel_again"] is False, "finished (cancelled): nothing left to cancel"
    assert seen["timeout"] == (True, "no outcome for task 1-1 (nobody) within 0.3s")
    assert seen_async["values"] == [{"doubled": 2 * n} for n in range(8)]
    assert seen_async["cancel_scheduled"] is True
    assert "was cancelled" in seen_async["cancelled"]
    assert seen_async["timeout"] is True
    # The waiters that timed out left nothing behind (no key of those ids).
    assert _keys(redis_url, "taskrunner:shop:*:1-[12]") == []
    assert _keys(redis_url, "taskrunner:shop:delayed_tasks") == []
    assert runner.statistics().cancelled == 1, "the running crunch, stopped by its runner"


WAITER = textwrap.dedent(
    """
    import sys
    from taskrunner.producer import Producer

    with Producer.from_url(sys.argv[1], consumer_group="shop") as producer:
        handle = producer.dispatch("double", {"n": 50})
        print(handle.id, handle.result(timeout=20)["doubled"])
    """
)


async def test_a_result_is_waited_for_from_another_process(
    backend: RedisBackend, redis_url: str
) -> None:
    runner = shop(backend, [])
    async with trio.open_nursery() as nursery:
        await nursery.start(runner.serve)
        done = await trio.to_thread.run_sync(
            lambda: subprocess.run(
                [sys.executable, "-c", WAITER, redis_url],
                capture_output=True,
                text=True,
                timeout=60,
                check=False,
            )
        )
        assert done.returncode == 0, done.stderr
        task_id, value = done.stdout.split()
        info = await runner.get_task(task_id)
        nursery.cancel_scope.cancel()
    assert value == "100"
    assert info is not None
    assert (info.state, info.result, info.attempts) == (TaskState.SUCCEEDED, {"doubled": 100}, 1)


async def test_a_plain_producers_task_cancelled_before_it_ran_is_recorded_cancelled(
    backend: RedisBackend, redis_url: str
) -> None:
    """Issue 24: a producer that is not strict writes no ``keep_result``; its task
    cancelled while queued or delayed is recorded ``CANCELLED`` from the catalog."""
    started: list[str] = []
    runner = shop(backend, started, num_workers=1)

    def produce() -> list[object]:
        seen: list[object] = []
        with Producer.from_url(redis_url, consumer_group="shop") as producer:  # not strict
            busy = producer.dispatch("crunch")
            deadline = 200
            while "crunch" not in started and deadline:  # the pool of one is taken
                deadline -= 1
                time.sleep(0.05)
            queued = producer.dispatch("remind", {"user": 9})
            later = producer.dispatch_delayed("remind", {"user": 10}, delay=3600)
            seen += [queued.cancel(), later.cancel()]
            for handle in (queued, later):
                try:
                    handle.result(timeout=5)
                except TaskCancelled:
                    seen.append("cancelled")
            seen.append(busy.cancel())
        return seen

    async with trio.open_nursery() as nursery:
        await nursery.start(runner.serve)
        seen = await trio.to_thread.run_sync(produce)
        nursery.cancel_scope.cancel()
    assert seen == [True, True, "cancelled", "cancelled", True]
    assert started == ["crunch"]
