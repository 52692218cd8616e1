"""RedisQueue on a real server: a group's lag when XINFO GROUPS reports none, and a
claim-delay ring of the wrong type never failing an ack."""

from __future__ import annotations

import logging
from typing import Any

import pytest
import trio

from taskrunner.backends.redis import RedisBackend


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
