"""Cancellation, connection loss, server restarts and timeouts on the native client;
an error raised inside its ``async with`` comes out as it was."""

from __future__ import annotations

import functools
import random
import traceback
from collections import Counter
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

import pytest
import trio

from taskrunner.backends.redis._client import NativeRedisClient
from taskrunner.backends.redis._errors import (
    RedisConnectionError,
    RedisTimeoutError,
    WrongTypeError,
)
from taskrunner.backends.redis._protocol import RedisClient
from taskrunner.backends.redis._pyredis import PyRedisClient

if TYPE_CHECKING:
    from conftest import ServerProcess  # tests/conftest.py


@pytest.mark.parametrize("pool_size", [1, 2])
async def test_cancel_torture_no_misaligned_replies(redis_url: str, pool_size: int) -> None:
    """Thousands of callers, many cancelled at random moments: every reply is its own."""
    rng = random.Random(1234 + pool_size)
    tally: Counter[str] = Counter()
    async with NativeRedisClient.from_url(redis_url, pool_size=pool_size) as client:

        async def caller(i: int) -> None:
            token = f"{i}:{rng.random()}"
            delay = rng.choice([0.0, 0.0001, 0.0005, 0.002, 0.01, 10.0])
            with trio.move_on_after(delay) as scope:
                if i % 3 == 0:
                    replies = await client.pipeline(
                        [("SET", f"k{i}", token), ("GET", f"k{i}"), ("ECHO", token)]
                    )
                    tally[
                        "ok" if replies == [b"OK", token.encode(), token.encode()] else "bad"
                    ] += 1
                else:
                    reply = await client.execute("ECHO", token)
                    tally["ok" if reply == token.encode() else "bad"] += 1
            if scope.cancelled_caught:
                tally["cancelled"] += 1

        with trio.fail_after(30):
            for _ in range(4):
                async with trio.open_nursery() as nursery:
                    for i in range(1000):
                        nursery.start_soon(caller, i)
            # the connection is still in step after all those abandoned replies
            for i in range(50):
                assert await client.execute("ECHO", str(i)) == str(i).encode()
    assert tally["bad"] == 0
    assert tally["ok"] > 100
    assert tally["cancelled"] > 100


async def test_cancelled_before_sending_sends_nothing(redis_url: str) -> None:
    async with NativeRedisClient.from_url(redis_url) as client:
        with trio.CancelScope() as scope:
            scope.cancel()
            await client.execute("SET", "never", 1)
        assert await client.execute("EXISTS", "never") == 0


async def _hammer(client: RedisClient, tally: Counter[str], stop: trio.Event) -> None:
    while not stop.is_set():
        try:
            assert await client.execute("INCR", "counter") > 0
            tally["ok"] += 1
        except RedisConnectionError:
            tally["lost"] += 1
            await trio.sleep(0.005)


@pytest.mark.parametrize("transport", ["native", "redis-py"])
async def test_restart_under_load(
    redis_server: ServerProcess, redis_url: str, transport: str
) -> None:
    """Kill the server mid-load: pending calls fail with our error, then calls succeed again."""
    client: RedisClient
    if transport == "native":
        client = NativeRedisClient.from_url(
            redis_url, pool_size=2, connect_timeout=1, backoff_base=0.01, backoff_cap=0.1
        )
    else:
        client = PyRedisClient.from_url(redis_url, socket_timeout=2, socket_connect_timeout=1)
    tally: Counter[str] = Counter()
    async with client:
        with trio.fail_after(30):
            for _round in range(2):
                stop = trio.Event()
                async with trio.open_nursery() as nursery:
                    for _ in range(20):
                        nursery.start_soon(_hammer, client, tally, stop)
                    await trio.sleep(0.2)
                    redis_server.kill()
                    await trio.sleep(0.2)
                    await trio.to_thread.run_sync(redis_server.start)
                    ok_at_restart = tally["ok"]
                    for _ in range(1000):  # until the callers are through again
                        if tally["ok"] > ok_at_restart + 100:
                            break
                        await trio.sleep(0.01)
                    stop.set()
                assert tally["ok"] > ok_at_restart + 100
            assert await client.execute("PING") == b"PONG"
    assert tally["lost"] > 0


async def test_blocking_read_survives_restart(redis_server: ServerProcess, redis_url: str) -> None:
    async with NativeRedisClient.from_url(redis_url, backoff_base=0.01) as client:
        await client.execute("XGROUP", "CREATE", "st", "g", "$", "MKSTREAM")
        fetcher = client.dedicated()
        with trio.fail_after(20):
            async with trio.open_nursery() as nursery:

                async def kill_soon() -> None:
                    await trio.sleep(0.2)
                    redis_server.kill()

                nursery.start_soon(kill_soon)
                with pytest.raises(RedisConnectionError):
                    await fetcher.execute(
                        "XREADGROUP", "GROUP", "g", "c", "BLOCK", 5000, "STREAMS", "st", ">",
                        reply_timeout=10,
                    )  # fmt: skip
            assert not fetcher.is_connected
            await trio.to_thread.run_sync(redis_server.start)
            await client.execute("XGROUP", "CREATE", "st", "g", "$", "MKSTREAM")
            await client.execute("XADD", "st", "5-1", "f", "v")
            got = await fetcher.execute(
                "XREADGROUP", "GROUP", "g", "c", "STREAMS", "st", "0", reply_timeout=5
            )
            assert got == [[b"st", []]]


@pytest.mark.parametrize("transport", ["native", "redis-py"])
async def test_cancelled_blocking_read_closes_dedicated_connection(
    redis_url: str, transport: str
) -> None:
    client: RedisClient = (
        NativeRedisClient.from_url(redis_url)
        if transport == "native"
        else PyRedisClient.from_url(redis_url)
    )
    async with client:
        await client.execute("XGROUP", "CREATE", "st", "g", "$", "MKSTREAM")
        await client.execute("CLIENT", "SETNAME", "shared")
        async with client.dedicated() as fetcher:
            await fetcher.execute("CLIENT", "SETNAME", "fetcher")
            with trio.fail_after(5):
                with trio.move_on_after(0.1):
                    await fetcher.execute(
                        "XREADGROUP", "GROUP", "g", "c", "BLOCK", 4000, "STREAMS", "st", ">",
                        reply_timeout=10,
                    )  # fmt: skip
                for _ in range(400):  # until the server saw the connection close
                    if b"name=fetcher" not in await client.execute("CLIENT", "LIST"):
                        break
                    await trio.sleep(0.01)
                else:
                    pytest.fail("the cancelled blocking read's connection is still open")
                # reopened on demand, as a fresh connection
                assert await fetcher.execute("CLIENT", "GETNAME") is None
                assert await fetcher.execute("PING") == b"PONG"


async def _silent_server(nursery: trio.Nursery) -> int:
    """A TCP server that accepts and reads but never answers; returns its port."""

    async def handler(stream: trio.SocketStream) -> None:
        async with stream:
            while await stream.receive_some():
                pass

    listeners = await nursery.start(functools.partial(trio.serve_tcp, host="127.0.0.1"), handler, 0)
    port: int = listeners[0].socket.getsockname()[1]
    return port


@pytest.fixture
async def silent_port() -> AsyncIterator[int]:
    async with trio.open_nursery() as nursery:
        yield await _silent_server(nursery)
        nursery.cancel_scope.cancel()


async def test_connect_timeout(silent_port: int) -> None:
    url = f"redis://:secret@127.0.0.1:{silent_port}/0"  # AUTH is never answered
    async with NativeRedisClient.from_url(url, connect_timeout=0.2) as client:
        with trio.fail_after(5), pytest.raises(RedisTimeoutError):
            await client.execute("PING")


async def test_command_timeout_fails_every_pending_call(silent_port: int) -> None:
    url = f"redis://127.0.0.1:{silent_port}/0"
    errors: list[BaseException] = []
    async with NativeRedisClient.from_url(url, command_timeout=0.2) as client:

        async def call() -> None:
            try:
                await client.execute("PING")
            except RedisTimeoutError as exc:
                errors.append(exc)

        with trio.fail_after(5):
            async with trio.open_nursery() as nursery:
                for _ in range(10):
                    nursery.start_soon(call)
        dedicated = client.dedicated()
        with trio.fail_after(5), pytest.raises(RedisTimeoutError):
            await dedicated.execute("PING", reply_timeout=0.1)
    assert len(errors) == 10


async def test_redis_py_transport_timeouts(silent_port: int) -> None:
    url = f"redis://127.0.0.1:{silent_port}/0"
    async with PyRedisClient.from_url(url, socket_timeout=0.2) as client:
        with trio.fail_after(5), pytest.raises(RedisTimeoutError):
            await client.execute("PING")
        dedicated = client.dedicated()
        with trio.fail_after(5), pytest.raises(RedisTimeoutError):
            await dedicated.execute("PING", reply_timeout=0.2)


@pytest.mark.parametrize("transport", ["native", "redis-py"])
async def test_closing_the_client_closes_everything(redis_url: str, transport: str) -> None:
    client: RedisClient = (
        NativeRedisClient.from_url(redis_url)
        if transport == "native"
        else PyRedisClient.from_url(redis_url)
    )
    async with client:
        kept = client.dedicated()
        closed_early = client.dedicated()
        assert await kept.execute("PING") == b"PONG"
        assert await closed_early.execute("PING") == b"PONG"
        await closed_early.aclose()
        assert await client.execute("PING") == b"PONG"
    with pytest.raises(trio.ClosedResourceError):
        await kept.execute("PING")
    with pytest.raises(trio.ClosedResourceError):
        await client.execute("PING")
    with pytest.raises(trio.ClosedResourceError):
        client.dedicated()


async def _scripted_server(nursery: trio.Nursery, answer: bytes, accepted: list[int]) -> int:
    """A TCP server answering each connection's first request with ``answer``; returns its port."""

    async def handler(stream: trio.SocketStream) -> None:
        accepted.append(1)
        async with stream:
            if await stream.receive_some():
                await stream.send_all(answer)
            while await stream.receive_some():
                pass

    listeners = await nursery.start(functools.partial(trio.serve_tcp, host="127.0.0.1"), handler, 0)
    port: int = listeners[0].socket.getsockname()[1]
    return port


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        pytest.param(b"?garbage\r\n", RedisConnectionError, id="protocol-error"),
        # the reply is delivered, then the connection is dropped for the extra one
        pytest.param(b"+PONG\r\n+EXTRA\r\n", b"PONG", id="unsolicited-reply"),
        pytest.param(b"", RedisTimeoutError, id="silent"),
    ],
)
async def test_broken_server_fails_calls_cleanly(answer: bytes, expected: object) -> None:
    accepted: list[int] = []
    outcomes: list[object] = []
    async with trio.open_nursery() as servers:
        port = await _scripted_server(servers, answer, accepted)
        url = f"redis://127.0.0.1:{port}/0"
        async with NativeRedisClient.from_url(url, command_timeout=0.3, backoff_base=0) as client:
            with trio.fail_after(5):
                for _ in range(3):
                    try:
                        outcomes.append(await client.execute("PING"))
                    except RedisConnectionError as exc:
                        outcomes.append(type(exc))
        servers.cancel_scope.cancel()
    assert outcomes == [expected] * 3
    assert len(accepted) == 3  # each failure made the next call reconnect


async def test_large_pipeline_does_not_deadlock(redis_url: str) -> None:
    """Writing megabytes while the server already answers needs reading and writing at once."""
    value = b"v" * 2048
    async with NativeRedisClient.from_url(redis_url) as client:
        with trio.fail_after(20):
            commands = [("SET", f"big:{i}", value) for i in range(5000)]
            commands += [("GET", f"big:{i}") for i in range(5000)]
            replies = await client.pipeline(commands)
    assert replies[:5000] == [b"OK"] * 5000
    assert replies[5000:] == [value] * 5000


async def test_statistics_and_pool_spreading(redis_url: str) -> None:
    async with NativeRedisClient.from_url(redis_url, pool_size=2) as client:
        stats = client.statistics()
        assert (stats.shared_connections, stats.pending_requests) == (0, 0)
        async with trio.open_nursery() as nursery:
            # a slow (blocking) command keeps one connection busy...
            nursery.start_soon(client.execute, "BLPOP", "nothing", 0.3)
            for _ in range(100):
                if client.statistics().pending_requests:
                    break
                await trio.sleep(0.001)
            assert client.statistics().pending_requests == 1
            # ...so other calls go to the second connection instead of queueing behind it
            with trio.fail_after(0.25):
                assert await client.execute("PING") == b"PONG"
        fetcher = client.dedicated()
        stats = client.statistics()
        assert stats.shared_connections == 2
        assert stats.pending_requests == 0
        assert stats.dedicated_connections == 1
        assert stats.connect_failures == 0
        await fetcher.aclose()
        assert client.statistics().dedicated_connections == 0


async def test_native_client_works_without_async_with(redis_url: str) -> None:
    """Not entered: connections run as system tasks until ``aclose``."""
    client = NativeRedisClient.from_url(redis_url)
    try:
        assert await client.execute("PING") == b"PONG"
        assert await client.pipeline([("SET", "a", 1), ("GET", "a")]) == [b"OK", b"1"]
        assert client.statistics().shared_connections == 1
    finally:
        await client.aclose()
    with pytest.raises(trio.ClosedResourceError):
        await client.execute("PING")


async def test_unexpected_reader_error_fails_calls_not_the_run(
    redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A bug in reply handling reaches the callers as our error; the system task survives."""
    import hiredis

    from taskrunner.backends.redis import _connection

    def exploding_error(message: str) -> Exception:
        raise ValueError("bug in reply handling")

    def make_reader() -> hiredis.Reader:
        return hiredis.Reader(replyError=exploding_error, notEnoughData=_connection.NOT_ENOUGH_DATA)

    monkeypatch.setattr(_connection, "make_reader", make_reader)
    client = NativeRedisClient.from_url(redis_url)  # not entered: system tasks
    try:
        with trio.fail_after(5):
            assert await client.execute("PING") == b"PONG"
            with pytest.raises(RedisConnectionError, match="unexpected ValueError"):
                await client.execute("INCR", "not-a-number-but-a-missing-arg", "extra")
            assert await client.execute("PING") == b"PONG"  # a fresh connection
    finally:
        await client.aclose()


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
