"""A runner serving in the cluster key layout on a real server: every key it creates
carries the group's hash tag (one slot), a flush leaves none, and a producer in the
same layout reaches it."""

from __future__ import annotations

import binascii
import json
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
import redis
import trio

from taskrunner import RateLimit, TaskRunner, TaskRunnerConfig, admin
from taskrunner.backends.redis import RedisBackend
from taskrunner.cli import main
from taskrunner.producer import Producer

FAST = {
    "reclaim_delay": 1.0,
    "block_duration": 0.1,
    "leader_lease_ttl": 1.0,
    "delayed_poll_interval": 0.5,
    "shutdown_grace": 0.2,
}


def slot(key: str) -> int:
    start = key.find("{")
    end = key.find("}", start + 1)
    tag = key[start + 1 : end] if 0 <= start < end - 1 else key
    return binascii.crc_hqx(tag.encode(), 0) % 16384


@pytest.fixture
async def backend(redis_url: str) -> AsyncIterator[RedisBackend]:
    queue = f"q{uuid.uuid4().hex[:8]}"
    async with RedisBackend.from_url(redis_url, queue=queue, key_layout="cluster") as b:
        yield b


async def _all_keys(backend: RedisBackend) -> list[str]:
    cursor: Any = b"0"
    keys: set[str] = set()
    while True:
        cursor, batch = await backend.client.execute("SCAN", cursor, "COUNT", 1000)
        keys.update(k.decode() for k in batch)
        if cursor == b"0":
            return sorted(keys)


async def wait_until(predicate: Callable[[], bool], limit: float = 30) -> None:
    with trio.fail_after(limit):
        while not predicate():  # noqa: ASYNC110
            await trio.sleep(0.01)


async def test_every_key_of_a_serving_group_is_in_its_slot(
    backend: RedisBackend, redis_url: str
) -> None:
    config = TaskRunnerConfig(
        consumer_group="g", host="h", key_layout="cluster", max_workers=4, **FAST
    )
    runner = TaskRunner(config, backend)

    @runner.task(max_retry=1)
    async def work(payload: int) -> None:
        if payload == 0:
            raise RuntimeError("to the dead-letter stream")

    @runner.task(unique=True, unique_for=60, unique_key=lambda p: str(p))
    async def unique(payload: int) -> None:
        await trio.sleep(30)  # holds its lock past the snapshot; cancelled at shutdown

    @runner.task(keep_result=60, max_concurrency=2, rate_limit=RateLimit(100, per=1.0))
    async def kept(payload: int) -> int:
        return payload

    runner.add_schedule("beat", task="work", every=1.0, payload=1)
    await runner.dispatch_many("work", range(20))
    held = await runner.dispatch("unique", 1)
    await runner.dispatch_delayed("work", 99, 60)
    done = await runner.dispatch("kept", 0)
    producer = Producer.from_url(
        redis_url, consumer_group="g", queue=backend.queue, key_layout="cluster"
    )
    sent = producer.dispatch("kept", 7)
    async with trio.open_nursery() as nursery:
        await nursery.start(runner.serve)
        await wait_until(lambda: runner.statistics().completed >= 20)
        assert await done.result(timeout=5) == 0
        assert await trio.to_thread.run_sync(lambda: producer.result(sent.id, 5)) == 7
        await trio.sleep(1.5)  # metrics flushed, schedules fired
        keys = await _all_keys(backend)
        assert await runner.cancel(held.id), "the running unique task: a stop request"
        nursery.cancel_scope.cancel()
    producer.close()
    keys = sorted({*keys, *await _all_keys(backend)})

    assert {slot(k) for k in keys} == {slot("{g}")}, keys
    for name in ("leader", "replication:h", "unique:unique:1", "delayed_tasks", "catalog"):
        assert f"taskrunner:{{g}}:{name}" in keys, (name, keys)
    deleted = await admin.flush(backend, "g", confirm=True)
    assert backend.stream_keys("g").stream in deleted
    assert await _all_keys(backend) == []


async def test_a_producer_cancels_a_unique_task_in_the_cluster_layout(
    backend: RedisBackend, redis_url: str
) -> None:
    """A cancel of a unique task names the lock first, then gets it in KEYS: the lock
    is released all the same."""
    producer = Producer.from_url(
        redis_url, consumer_group="g", queue=backend.queue, key_layout="cluster"
    )
    try:
        handle = producer.dispatch("sync", {"id": 1}, unique_key="1", unique_for=60)
        lock = "taskrunner:{g}:unique:sync:1"
        assert await backend.client.execute("EXISTS", lock) == 1
        assert producer.cancel(handle.id) is True
        assert await backend.client.execute("EXISTS", lock) == 0
        assert producer.cancel(handle.id) is False
    finally:
        producer.close()


def test_the_cli_lists_and_flushes_a_group_in_the_cluster_layout(
    redis_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--key-layout cluster`` names the group's keys as the runners did; without it the
    go layout finds no such group."""
    producer = Producer.from_url(redis_url, consumer_group="shop", key_layout="cluster")
    producer.dispatch("invoice", {"n": 1}, unique_key="A-17", unique_for=60)
    producer.dispatch_delayed("invoice", {"n": 2}, delay=600)
    producer.close()
    group = ("--url", redis_url, "--group", "shop")

    assert main(["keys", *group, "--json"]) == 1  # the go layout: no group shop here
    capsys.readouterr()
    assert main(["keys", *group, "--key-layout", "cluster", "--json"]) == 0
    names = {key["name"] for key in json.loads(capsys.readouterr().out)["keys"]}
    assert names == {
        "taskrunner:{shop}:tasks",
        "taskrunner:{shop}:delayed_tasks",
        "taskrunner:{shop}:delayed_ids",
        "taskrunner:{shop}:unique:invoice:A-17",
    }
    assert main(["flush", *group, "--key-layout", "cluster", "--yes"]) == 0
    assert redis.Redis.from_url(redis_url).keys("*") == []
