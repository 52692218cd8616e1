"""The inspection protocol on Redis, where a real server can do what the contract suite
does not: names that are not UTF-8, keys of another type than the layout's, and the
cost of a listing in round trips."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from taskrunner import _keys, admin
from taskrunner.backends import KeyKind
from taskrunner.backends.redis import RedisBackend
from taskrunner.backends.redis._client import NativeRedisClient
from taskrunner.cli import stats as cli_stats


class CountingClient:
    """A client that counts the round trips it makes (one per execute or pipeline)."""

    def __init__(self, client: NativeRedisClient) -> None:
        self.client = client
        self.executes: list[Any] = []
        self.pipelines = 0

    async def execute(self, *args: Any) -> Any:
        self.executes.append(args[0])
        return await self.client.execute(*args)

    async def pipeline(self, commands: Sequence[Sequence[Any]], **options: Any) -> Any:
        self.pipelines += 1
        return await self.client.pipeline(commands, **options)

    def dedicated(self) -> Any:
        return self.client.dedicated()

    async def masters(self) -> list[Any]:
        return [self]  # one server: its SCAN calls are counted too

    async def aclose(self) -> None:
        await self.client.aclose()


async def test_listing_costs_one_round_trip_for_all_keys_found(redis_url: str) -> None:
    counting = CountingClient(NativeRedisClient.from_url(redis_url))
    backend = RedisBackend(counting)  # type: ignore[arg-type]
    async with backend:
        for i in range(200):
            await backend.acquire_lock(f"taskrunner:unique:t:{i}", "token", 30.0)
        await backend.heartbeat("h", "instance", 30.0)
        await backend.add("g", [b"entry"])
        counting.executes.clear()
        counting.pipelines = 0

        listed = await backend.list_keys("g")

        assert len(listed) == 202
        assert counting.pipelines == 1, "every key found is read in one pipeline"
        assert set(counting.executes) == {"SCAN"}, counting.executes
        counting.executes.clear()
        counting.pipelines = 0
        beats = await backend.list_heartbeats()
        assert [b.host for b in beats] == ["h"]
        assert (counting.pipelines, set(counting.executes)) == (1, {"SCAN"})


async def test_names_that_are_not_utf8_are_listed_escaped(redis_url: str) -> None:
    async with RedisBackend.from_url(redis_url) as backend:
        heartbeat_key, lock_key = b"taskrunner:replication:h\xff", b"taskrunner:unique:t\xfe"
        await backend.client.execute("SET", heartbeat_key, "instance", "PX", 30_000)
        await backend.client.execute("SET", lock_key, "token")
        await backend.add("g", [b"entry"])

        listed = {k.name: k for k in await admin.list_keys(backend, "g")}
        beats = await backend.list_heartbeats()
        stats = await cli_stats.collect(backend, "g", None)
        deleted = await admin.flush(backend, "g", confirm=True)
        left = await backend.client.execute("EXISTS", heartbeat_key, lock_key)

    heartbeat = listed["taskrunner:replication:h\\xff"]
    assert (heartbeat.kind, heartbeat.size) == (KeyKind.HEARTBEAT, len("instance"))
    lock = listed["taskrunner:unique:t\\xfe"]
    assert (lock.kind, lock.ttl) == (KeyKind.UNIQUE_LOCK, None)
    assert [(b.host, b.instance_id) for b in beats] == [("h\\xff", "instance")]
    assert [i["host"] for i in stats["instances"]] == ["h\\xff"]
    assert {"taskrunner:replication:h\\xff", "taskrunner:unique:t\\xfe"} <= set(deleted)
    assert left == 0, "the keys flush reports deleted are deleted"


async def test_a_key_of_another_type_is_listed_as_it_is(redis_url: str) -> None:
    async with RedisBackend.from_url(redis_url) as backend:
        ring = backend.stream_keys("g").claim_delay_ring
        await backend.client.execute("SET", ring, "not a list")
        await backend.client.execute("SADD", _keys.metrics("g"), "a", "b")

        listed = {k.name: k for k in await backend.list_keys("g")}
        counts = await backend.count_keys("g")

    assert (listed[ring].kind, listed[ring].type, listed[ring].size) == (
        KeyKind.CLAIM_DELAY_RING,
        "string",
        len("not a list"),
    )
    metrics = listed[_keys.metrics("g")]
    assert (metrics.kind, metrics.type, metrics.size) == (KeyKind.METRICS, "set", 2)
    assert (counts.claim_delay_ring, counts.metrics, counts.total) == (1, 1, 2)


async def test_groups_are_found_by_the_backends_queue_name(redis_url: str) -> None:
    """A group that only dispatched (no consumer group yet) is found by its own stream's
    name, ``taskrunner:<group>:<queue>``, for the queue the backend reads."""
    async with RedisBackend.from_url(redis_url, queue="orders") as backend:
        await backend.add("shop", [b"entry"])
        assert await backend.list_groups() == ["shop"]
    async with RedisBackend.from_url(redis_url) as other_queue:
        assert await other_queue.list_groups() == []
