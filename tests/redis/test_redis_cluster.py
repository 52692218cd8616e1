"""PyRedisClient over ``redis.RedisCluster`` (a one-node cluster owning every slot)."""

from __future__ import annotations

import socket
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
import redis
import trio

from taskrunner.backends.redis._client import NativeRedisClient
from taskrunner.backends.redis._errors import NoGroupError, WrongTypeError
from taskrunner.backends.redis._pyredis import PyRedisClient
from taskrunner.backends.redis._scripts import Script

if TYPE_CHECKING:
    from conftest import ServerProcess  # tests/conftest.py


async def test_cluster_client_gives_raw_replies(
    redis_server_factory: Callable[..., ServerProcess], tmp_path: Path
) -> None:
    with socket.socket() as sock:  # the bus port, else it is port + 10000 (too high for some)
        sock.bind(("127.0.0.1", 0))
        bus_port = sock.getsockname()[1]
    server = redis_server_factory(
        "--cluster-enabled", "yes", "--cluster-config-file", str(tmp_path / "nodes.conf"),
        "--cluster-port", str(bus_port),
    )  # fmt: skip
    async with NativeRedisClient.from_url(server.url) as admin:
        assert await admin.execute("CLUSTER", "ADDSLOTSRANGE", 0, 16383) == b"OK"
        for _ in range(500):
            if b"cluster_state:ok" in await admin.execute("CLUSTER", "INFO"):
                break
            await trio.sleep(0.01)
        else:
            pytest.fail("the one-node cluster never became ready")

    cluster = redis.RedisCluster(host="127.0.0.1", port=server.port, protocol=2)
    async with PyRedisClient(cluster) as client:
        assert await client.execute("HSET", "h", "a", 1) == 1
        assert await client.execute("HGETALL", "h") == [b"a", b"1"]
        assert await client.execute("SET", "lock", "me", "NX", "PX", 1000) == b"OK"
        assert await client.execute("PEXPIRE", "lock", 5000) == 1
        await client.execute("XGROUP", "CREATE", "st", "g", "0", "MKSTREAM")
        await client.execute("XADD", "st", "1-1", "f", "v")
        read = await client.execute("XREADGROUP", "GROUP", "g", "c", "STREAMS", "st", ">")
        assert read == [[b"st", [[b"1-1", [b"f", b"v"]]]]]
        claimed = await client.execute("XAUTOCLAIM", "st", "g", "c2", 0, "0-0")
        assert claimed == [b"0-0", [[b"1-1", [b"f", b"v"]]], []]
        with pytest.raises(NoGroupError):
            await client.execute("XREADGROUP", "GROUP", "nope", "c", "STREAMS", "st", ">")
        replies = await client.pipeline(
            [("GET", "lock"), ("HGETALL", "h"), ("LPUSH", "h", "x")], raise_on_error=False
        )
        assert replies[:2] == [b"me", [b"a", b"1"]]
        assert isinstance(replies[2], WrongTypeError)
        assert await Script("return redis.call('HGETALL', KEYS[1])")(client, ["h"]) == [b"a", b"1"]
        async with client.dedicated() as fetcher:
            blocked = await fetcher.execute(
                "XREADGROUP", "GROUP", "g", "c", "BLOCK", 50, "STREAMS", "st", ">",
                reply_timeout=5,
            )  # fmt: skip
            assert blocked is None
