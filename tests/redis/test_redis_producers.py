"""Producers and trio runners on one real server: what the sync and asyncio producers
send is run; a strict producer knows what the live runners serve, and writes the bytes
the runner's own dispatch writes."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
import redis
import redis.asyncio
import trio

from taskrunner import TaskAlreadyDispatched, TaskNotFound, TaskRunner, TaskRunnerConfig
from taskrunner.backends.redis import RedisBackend
from taskrunner.producer import AsyncProducer, Producer

FAST = {
    "reclaim_delay": 3.0,
    "block_duration": 0.1,
    "leader_lease_ttl": 1.0,
    "delayed_poll_interval": 0.2,
    "shutdown_grace": 2.0,
}


@pytest.fixture
async def backend(redis_url: str) -> AsyncIterator[RedisBackend]:
    async with RedisBackend.from_url(redis_url) as b:
        yield b


def shop(backend: RedisBackend, ran: list[tuple[str, Any]], host: str = "worker-1") -> TaskRunner:
    runner = TaskRunner(TaskRunnerConfig(consumer_group="shop", host=host, **FAST), backend)

    @runner.task(name="resize")
    async def resize(payload: Any) -> None:
        ran.append(("resize", payload))

    @runner.task(name="remind")
    async def remind(payload: Any) -> None:
        ran.append(("remind", payload))

    @runner.task(name="sync_account", unique=True, unique_for=60, unique_key=lambda p: p["id"])
    async def sync_account(payload: dict[str, str]) -> None:
        await trio.sleep(1)  # holds its lock a while
        ran.append(("sync_account", payload))

    @runner.task(name="nightly", unique=True, unique_for=45)
    async def nightly(payload: Any) -> None:
        await trio.sleep(1.5)  # holds its lock a while
        ran.append(("nightly", payload))

    return runner


async def wait_until(predicate: Callable[[], bool], limit: float = 20) -> None:
    with trio.fail_after(limit):
        while not predicate():  # noqa: ASYNC110
            await trio.sleep(0.02)


def produce_sync(url: str) -> list[str]:
    with Producer.from_url(url, consumer_group="shop") as producer:
        ids = [producer.dispatch("resize", {"w": 100}).id]
        ids += [h.id for h in producer.dispatch_many("resize", [{"w": 1}, {"w": 2}])]
        ids.append(producer.dispatch_delayed("remind", {"user": 7}, delay=0.3).id)
        ids.append(producer.schedule_for("remind", {"user": 8}, when=time.time() + 0.4).id)
        ids.append(producer.dispatch("sync_account", {"id": "a"}, unique_key="a", unique_for=60).id)
    return ids


async def produce_async(url: str) -> list[str]:
    async with AsyncProducer.from_url(url, consumer_group="shop") as producer:
        handles = await asyncio.gather(*(producer.dispatch("resize", {"n": n}) for n in range(32)))
        later = await producer.dispatch_delayed("remind", {"user": 9}, delay=0.2)
        return [h.id for h in handles] + [later.id]


async def test_a_trio_runner_runs_what_producers_send(
    backend: RedisBackend, redis_url: str
) -> None:
    ran: list[tuple[str, Any]] = []
    runner = shop(backend, ran)
    async with trio.open_nursery() as nursery:
        await nursery.start(runner.serve)
        ids = await trio.to_thread.run_sync(produce_sync, redis_url)
        ids += await trio.to_thread.run_sync(asyncio.run, produce_async(redis_url))
        await wait_until(lambda: len(ran) == 6 + 33)
        await wait_until(lambda: runner.statistics().acked >= 39)
        nursery.cancel_scope.cancel()
    assert len(set(ids)) == 39
    assert sorted(p["w"] for n, p in ran if n == "resize" and "w" in p) == [1, 2, 100]
    assert sorted(p["n"] for n, p in ran if n == "resize" and "n" in p) == list(range(32))
    assert sorted(p["user"] for n, p in ran if n == "remind") == [7, 8, 9]
    assert ("sync_account", {"id": "a"}) in ran
    with redis.Redis.from_url(redis_url) as client:
        assert client.keys("taskrunner:unique:*") == [], "the worker released the lock"
        assert client.xlen("taskrunner:shop:tasks:dead") == 0


def _message(client: redis.Redis, entry_id: str) -> dict[str, Any]:
    [(_, fields)] = client.xrange("taskrunner:shop:tasks", entry_id, entry_id)
    message: dict[str, Any] = json.loads(fields[b"payload"])
    return message


async def test_a_strict_producer_knows_what_live_runners_serve(redis_url: str) -> None:
    ran: list[tuple[str, Any]] = []
    backend = RedisBackend.from_url(redis_url, delete_on_ack=False)  # entries stay to be read
    runner = shop(backend, ran)

    def strict_calls() -> None:
        with (
            Producer.from_url(redis_url, consumer_group="shop", strict=True) as producer,
            redis.Redis.from_url(redis_url) as client,
        ):
            with pytest.raises(TaskNotFound, match="no live runner of group 'shop' serves"):
                producer.dispatch("resise", {"w": 1})
            with pytest.raises(TaskNotFound):
                producer.dispatch_delayed("resise", {"w": 1}, delay=1)
            with pytest.raises(ValueError, match="pass unique_key="):
                producer.dispatch("sync_account", {"id": "b"})
            with pytest.raises(ValueError, match=r"is unique; dispatch it with dispatch\(\)"):
                producer.dispatch_many("nightly", [1, 2])

            # The runner's settings, by name: the bytes its own dispatch writes.
            mine = _message(
                client, producer.dispatch("sync_account", {"id": "b"}, unique_key="b").id
            )
            with pytest.raises(TaskAlreadyDispatched):  # the runner's key for this payload
                trio.from_thread.run(runner.dispatch, "sync_account", {"id": "b"})
            theirs = _message(client, trio.from_thread.run(runner.dispatch, "resize", {"w": 5}).id)
            assert theirs["reservation_timeout"] == FAST["reclaim_delay"] / 3 * 1e9
            resize = _message(client, producer.dispatch("resize", {"w": 5}).id)
            assert resize == theirs
            assert mine["unique_key"] == "sync_account:b"
            assert (mine["unique"], mine["unique_for"]) == (True, 60)
            assert mine["reservation_timeout"] == theirs["reservation_timeout"]

            # A unique task without a key function: its lock and lifetime by name alone.
            producer.dispatch("nightly")
            assert 44_000 < client.pttl("taskrunner:unique:nightly") <= 45_000
            with pytest.raises(TaskAlreadyDispatched):
                producer.dispatch("nightly")
            with pytest.raises(TaskAlreadyDispatched):
                trio.from_thread.run(runner.dispatch, "nightly")

            other = Producer.from_url(redis_url, consumer_group="mail", strict=True)
            with other, pytest.raises(TaskNotFound, match="group 'mail'"):
                other.dispatch("resize", 1)
            queue = Producer.from_url(redis_url, consumer_group="shop", queue="low", strict=True)
            with queue:
                # Strict, a dispatch without queue= goes where a live runner serves the
                # task (issue 24); one to a queue nobody serves it on is refused.
                sent = queue.dispatch("resize", 1)
                assert client.xrange("taskrunner:shop:tasks", sent.id, sent.id)
                with pytest.raises(TaskNotFound, match=r"served on taskrunner:shop:tasks"):
                    queue.dispatch("resize", 1, queue="low")

    async with backend, trio.open_nursery() as nursery:
        await nursery.start(runner.serve)
        await trio.to_thread.run_sync(strict_calls)
        await wait_until(lambda: ("nightly", None) in ran)
        nursery.cancel_scope.cancel()

    def after_stop() -> None:
        with Producer.from_url(redis_url, consumer_group="shop", strict=True) as producer:
            with pytest.raises(TaskNotFound):
                producer.dispatch("resize", 1)
            # Without strict, it sends what it is told.
            producer._core.strict = False
            producer.dispatch("resize", 1)

    await trio.to_thread.run_sync(after_stop)


async def test_a_strict_asyncio_producer(backend: RedisBackend, redis_url: str) -> None:
    ran: list[tuple[str, Any]] = []
    runner = shop(backend, ran)

    async def calls() -> None:
        async with AsyncProducer.from_url(redis_url, consumer_group="shop", strict=True) as p:
            with pytest.raises(TaskNotFound):
                await p.dispatch("resise", 1)
            await p.dispatch("nightly", "async")
            with pytest.raises(TaskAlreadyDispatched):
                await p.dispatch("nightly", "async")

    async with trio.open_nursery() as nursery:
        await nursery.start(runner.serve)
        await trio.to_thread.run_sync(asyncio.run, calls())
        await wait_until(lambda: ("nightly", "async") in ran)
        nursery.cancel_scope.cancel()


def test_producers_take_a_queue_per_call(redis_url: str) -> None:
    """Issue 24: ``queue=`` on dispatch, dispatch_many, dispatch_delayed and
    schedule_for; cancel finds a task on any queue the producer sent to; and the
    asyncio producer does the same."""
    with (
        redis.Redis.from_url(redis_url) as client,
        Producer(client, consumer_group="shop") as producer,
    ):
        one = producer.dispatch("charge", 1, queue="orders")
        many = producer.dispatch_many("mail", [1, 2], queue="emails")
        later = producer.dispatch_delayed("mail", 3, 60, queue="emails")
        at = producer.schedule_for("mail", 4, 2e9, queue="emails")
        assert [e[0].decode() for e in client.xrange("taskrunner:shop:orders")] == [one.id]
        assert [e[0].decode() for e in client.xrange("taskrunner:shop:emails")] == [
            h.id for h in many
        ]
        assert client.xlen("taskrunner:shop:tasks") == 0
        members = [json.loads(m) for m in client.zrange("taskrunner:shop:delayed_tasks", 0, -1)]
        assert {m["id"]: m.get("queue") for m in members} == {later.id: "emails", at.id: "emails"}
        assert producer.cancel(many[1].id) is True, "found on the queue it was sent to"
        assert client.xlen("taskrunner:shop:emails") == 1
        assert producer.cancel(one.id) is True
        assert client.xlen("taskrunner:shop:orders") == 0
        assert producer.cancel(later.id) is True
        with pytest.raises(ValueError, match="queue must have no spaces"):
            producer.dispatch("charge", 1, queue="no such")
        fresh = Producer(client, consumer_group="shop")
        assert fresh.cancel(many[0].id) is False, "a queue it never saw, with no catalog"

    async def with_asyncio() -> None:
        client = redis.asyncio.Redis.from_url(redis_url)
        async with AsyncProducer(client, consumer_group="shop") as producer:
            handle = await producer.dispatch("charge", 5, queue="orders")
            (other,) = await producer.dispatch_many("charge", [6], queue="orders")
            await producer.dispatch_delayed("charge", 7, 60, queue="orders")
            await producer.schedule_for("charge", 8, 2e9, queue="orders")
            assert await client.xlen("taskrunner:shop:orders") == 2
            assert await producer.cancel(handle.id) is True
            assert await producer.cancel(other.id) is True
        await client.aclose()

    asyncio.run(with_asyncio())
