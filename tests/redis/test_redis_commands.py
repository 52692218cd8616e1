"""Every command the Redis backend uses, through every transport, with raw reply shapes."""

from __future__ import annotations

from typing import Any

import pytest
import trio

from taskrunner.backends.redis._errors import (
    BusyGroupError,
    NoGroupError,
    NoScriptError,
    ResponseError,
    WrongTypeError,
)
from taskrunner.backends.redis._protocol import RedisClient
from taskrunner.backends.redis._scripts import Script


def as_dict(flat: list[Any]) -> dict[bytes, Any]:
    """A RESP2 flat ``[k1, v1, k2, v2...]`` map as a dict."""
    assert isinstance(flat, list)
    assert len(flat) % 2 == 0
    return dict(zip(flat[::2], flat[1::2], strict=True))


async def test_strings_and_expiry(client: RedisClient) -> None:
    assert await client.execute("SET", "lock", "me", "NX", "PX", 10_000) == b"OK"
    assert await client.execute("SET", "lock", "you", "NX", "PX", 10_000) is None
    assert await client.execute("GET", "lock") == b"me"
    assert 0 < await client.execute("PTTL", "lock") <= 10_000
    assert await client.execute("PEXPIRE", "lock", 50_000) == 1
    assert await client.execute("PEXPIRE", "missing", 50_000) == 0
    assert await client.execute("EXISTS", "lock", "missing") == 1
    assert await client.execute("PTTL", "missing") == -2
    assert await client.execute("DEL", "lock", "missing") == 1
    assert await client.execute("GET", "lock") is None
    assert await client.execute("SET", b"bin\x00ary", b"\xff\x00") == b"OK"
    assert await client.execute("GET", b"bin\x00ary") == b"\xff\x00"


async def test_lists(client: RedisClient) -> None:
    assert await client.execute("LPUSH", "l", "a", "b", "c") == 3
    assert await client.execute("LTRIM", "l", 0, 1) == b"OK"
    assert await client.execute("LRANGE", "l", 0, -1) == [b"c", b"b"]
    assert await client.execute("LRANGE", "nothing", 0, -1) == []


async def test_sorted_sets(client: RedisClient) -> None:
    assert await client.execute("ZADD", "z", 1, "a", 2.5, "b", 10, "c") == 3
    assert await client.execute("ZRANGEBYSCORE", "z", "-inf", 3) == [b"a", b"b"]
    assert await client.execute("ZRANGEBYSCORE", "z", 0, "+inf", "WITHSCORES", "LIMIT", 0, 2) == [
        b"a",
        b"1",
        b"b",
        b"2.5",
    ]
    assert await client.execute("ZREM", "z", "a", "zz") == 1
    assert await client.execute("ZRANGEBYSCORE", "z", "-inf", "+inf") == [b"b", b"c"]


async def test_hashes(client: RedisClient) -> None:
    assert await client.execute("HSET", "h", "a", 1, "b", "x") == 2
    assert await client.execute("HINCRBY", "h", "a", 5) == 6
    assert await client.execute("HINCRBYFLOAT", "h", "f", 1.5) == b"1.5"
    assert as_dict(await client.execute("HGETALL", "h")) == {b"a": b"6", b"b": b"x", b"f": b"1.5"}
    assert await client.execute("HGETALL", "missing") == []


async def test_scan(client: RedisClient) -> None:
    await client.pipeline([("SET", f"scan:{i}", i) for i in range(30)] + [("SET", "other", 1)])
    cursor: bytes = b"0"
    seen: set[bytes] = set()
    for _ in range(100):
        cursor, keys = await client.execute("SCAN", cursor, "MATCH", "scan:*", "COUNT", 7)
        assert isinstance(cursor, bytes)
        seen.update(keys)
        if cursor == b"0":
            break
    assert seen == {f"scan:{i}".encode() for i in range(30)}


async def test_error_classes(client: RedisClient) -> None:
    await client.execute("SET", "s", "v")
    with pytest.raises(WrongTypeError) as wrongtype:
        await client.execute("LPUSH", "s", "x")
    assert wrongtype.value.code == "WRONGTYPE"
    assert wrongtype.value.message.startswith("WRONGTYPE ")
    with pytest.raises(NoScriptError):
        await client.execute("EVALSHA", "0" * 40, 0)
    with pytest.raises(ResponseError) as generic:
        await client.execute("INCR", "s")
    assert type(generic.value) is ResponseError
    assert generic.value.code == "ERR"
    # the connection is still fine after error replies
    assert await client.execute("GET", "s") == b"v"


async def test_pipelines(client: RedisClient) -> None:
    assert await client.pipeline([]) == []
    assert await client.pipeline([("SET", "a", 1)]) == [b"OK"]
    replies = await client.pipeline(
        [("INCR", "n"), ("LPUSH", "a", "x"), ("INCR", "n")], raise_on_error=False
    )
    assert replies[0] == 1
    assert isinstance(replies[1], WrongTypeError)
    assert replies[2] == 2
    with pytest.raises(WrongTypeError):
        await client.pipeline([("INCR", "n"), ("LPUSH", "a", "x"), ("INCR", "n")])
    # every command ran even though one failed
    assert await client.execute("GET", "n") == b"4"


async def test_scripts(client: RedisClient) -> None:
    script = Script("redis.call('SET', KEYS[1], ARGV[1]); return {ARGV[1], 7, {KEYS[1]}}")
    assert await script(client, ["k"], ["v1"]) == [b"v1", 7, [b"k"]]
    assert await client.execute("GET", "k") == b"v1"
    # survives the server forgetting its scripts
    assert await client.execute("SCRIPT", "FLUSH") == b"OK"
    assert await script(client, ["k"], ["v2"]) == [b"v2", 7, [b"k"]]
    assert await client.execute(*script.evalsha_command(["k"], ["v3"])) == [b"v3", 7, [b"k"]]
    await script.load(client)
    replies = await client.pipeline(
        [script.evalsha_command(["k"], ["v4"]), script.eval_command(["k"], ["v5"])]
    )
    assert replies == [[b"v4", 7, [b"k"]], [b"v5", 7, [b"k"]]]
    failing = Script("return redis.error_reply('BOOM it failed')")
    with pytest.raises(ResponseError) as boom:
        await failing(client)
    assert boom.value.code == "BOOM"


async def test_stream_groups(client: RedisClient, kind: str) -> None:
    assert await client.execute("XGROUP", "CREATE", "st", "g", "$", "MKSTREAM") == b"OK"
    with pytest.raises(BusyGroupError):
        await client.execute("XGROUP", "CREATE", "st", "g", "$", "MKSTREAM")
    with pytest.raises(NoGroupError):
        await client.execute("XREADGROUP", "GROUP", "nope", "c", "STREAMS", "st", ">")
    if kind != "fakeredis":  # fakeredis says "ERR ... requires the key to exist" here
        with pytest.raises(NoGroupError):
            await client.execute("XREADGROUP", "GROUP", "g", "c", "STREAMS", "missing", ">")
    assert await client.execute("XLEN", "st") == 0
    assert await client.execute("XGROUP", "DESTROY", "st", "g") == 1
    assert await client.execute("XGROUP", "DESTROY", "st", "g") == 0


async def test_stream_consume_ack_claim(client: RedisClient, kind: str) -> None:
    await client.execute("XGROUP", "CREATE", "st", "g", "0", "MKSTREAM")
    ids = [await client.execute("XADD", "st", "*", "payload", f"p{i}") for i in range(3)]
    assert all(isinstance(i, bytes) and b"-" in i for i in ids)
    assert await client.execute("XLEN", "st") == 3

    read = await client.execute("XREADGROUP", "GROUP", "g", "c1", "COUNT", 2, "STREAMS", "st", ">")
    assert read == [[b"st", [[ids[0], [b"payload", b"p0"]], [ids[1], [b"payload", b"p1"]]]]]
    nothing = await client.execute(
        "XREADGROUP", "GROUP", "g", "c1", "COUNT", 5, "STREAMS", "st", "0"
    )
    assert nothing[0][0] == b"st"
    assert len(nothing[0][1]) == 2  # c1's own pending entries

    summary = await client.execute("XPENDING", "st", "g")
    # fakeredis gives the per-consumer count as an int, Redis as a bulk string
    count = 2 if kind == "fakeredis" else b"2"
    assert summary == [2, ids[0], ids[1], [[b"c1", count]]]
    # fakeredis leaves out entries delivered in the same millisecond from IDLE 0
    # (it compares idle > 0): let a few milliseconds pass first.
    await trio.sleep(0.01)
    detail = await client.execute("XPENDING", "st", "g", "IDLE", 0, "-", "+", 10)
    assert [row[0] for row in detail] == ids[:2]
    # [id, consumer, idle ms, deliveries]: reading history ("0") counted as a delivery
    assert all(row[1] == b"c1" and isinstance(row[2], int) and row[3] == 2 for row in detail)

    claimed = await client.execute("XAUTOCLAIM", "st", "g", "c2", 0, "0-0", "COUNT", 1)
    assert claimed[0] == ids[1]  # the cursor: where the next call continues
    assert claimed[1] == [[ids[0], [b"payload", b"p0"]]]
    assert claimed[2] == []  # ids deleted meanwhile (Redis 7+)
    just = await client.execute("XCLAIM", "st", "g", "c2", 0, ids[1], "JUSTID")
    assert just == [ids[1]]

    consumers = [as_dict(c) for c in await client.execute("XINFO", "CONSUMERS", "st", "g")]
    by_name = {c[b"name"]: c for c in consumers}
    assert by_name[b"c2"][b"pending"] == 2
    assert isinstance(by_name[b"c2"][b"idle"], int)
    groups = [as_dict(g) for g in await client.execute("XINFO", "GROUPS", "st")]
    assert groups[0][b"name"] == b"g"
    assert groups[0][b"consumers"] == 2
    assert groups[0][b"pending"] == 2
    assert groups[0][b"last-delivered-id"] == ids[1]
    stream = as_dict(await client.execute("XINFO", "STREAM", "st"))
    assert stream[b"length"] == 3
    assert stream[b"groups"] == 1
    assert stream[b"first-entry"] == [ids[0], [b"payload", b"p0"]]
    assert stream[b"last-entry"] == [ids[2], [b"payload", b"p2"]]
    assert stream[b"last-generated-id"] == ids[2]

    assert await client.execute("XACK", "st", "g", ids[0], ids[1], ids[2]) == 2
    assert await client.execute("XDEL", "st", ids[0]) == 1
    assert await client.execute("XGROUP", "DELCONSUMER", "st", "g", "c2") == 0
    assert await client.execute("XGROUP", "DELCONSUMER", "st", "g", "c1") == 0
    assert await client.execute("XINFO", "CONSUMERS", "st", "g") == []
    assert await client.execute("XLEN", "st") == 2


async def test_blocking_read_on_dedicated_connection(client: RedisClient) -> None:
    await client.execute("XGROUP", "CREATE", "st", "g", "$", "MKSTREAM")
    async with client.dedicated() as fetcher:
        with trio.fail_after(5):
            timed_out = await fetcher.execute(
                "XREADGROUP", "GROUP", "g", "c", "COUNT", 10, "BLOCK", 50, "STREAMS", "st", ">",
                reply_timeout=5,
            )  # fmt: skip
        assert timed_out is None

        async def add_later() -> None:
            await trio.sleep(0.1)
            await client.execute("XADD", "st", "1-1", "f", "v")

        async with trio.open_nursery() as nursery:
            nursery.start_soon(add_later)
            with trio.fail_after(5):
                got = await fetcher.execute(
                    "XREADGROUP", "GROUP", "g", "c", "BLOCK", 3000, "STREAMS", "st", ">",
                    reply_timeout=5,
                )  # fmt: skip
        assert got == [[b"st", [[b"1-1", [b"f", b"v"]]]]]
        with pytest.raises(NoGroupError):
            await fetcher.execute("XREADGROUP", "GROUP", "x", "c", "STREAMS", "st", ">")
        assert await fetcher.execute("PING") == b"PONG"
