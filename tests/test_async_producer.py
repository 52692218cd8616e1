"""The AsyncProducer on redis.asyncio, under asyncio (the tests run their own loops):
the same writes and refusals as the sync Producer, shared by concurrent asyncio tasks,
closing cleanly, and forks."""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Awaitable, Callable
from typing import Any

import fakeredis
import pytest
import redis
import redis.asyncio
import redis.exceptions
from test_producer import _clients, _fork

from taskrunner import BackendError, InvalidTaskPayload, TaskAlreadyDispatched
from taskrunner._wire import decode_delayed
from taskrunner.producer import AsyncProducer, AsyncProducerHandle

STREAM = "taskrunner:shop:tasks"


def run(main: Callable[[], Awaitable[Any]]) -> Any:
    return asyncio.run(main())  # type: ignore[arg-type]


@pytest.fixture(params=["fakeredis", "server"])
def connect(request: pytest.FixtureRequest) -> Callable[[], redis.asyncio.Redis]:
    """Makes the client inside the test's event loop."""
    if request.param == "fakeredis":
        server = fakeredis.FakeServer()
        return lambda: fakeredis.FakeAsyncRedis(server=server)
    url = request.getfixturevalue("redis_url")
    return lambda: redis.asyncio.Redis.from_url(url)


async def _messages(client: redis.asyncio.Redis) -> list[tuple[str, dict[str, Any]]]:
    return [
        (entry_id.decode(), json.loads(fields[b"payload"]))
        for entry_id, fields in await client.xrange(STREAM)
    ]


def test_the_same_writes_as_the_sync_producer(connect: Callable[[], redis.asyncio.Redis]) -> None:
    async def main() -> None:
        client = connect()
        async with AsyncProducer(client, consumer_group="shop") as producer:
            handle = await producer.dispatch("resize", {"w": 100})
            assert isinstance(handle, AsyncProducerHandle)
            assert str(handle) == handle.id
            many = await producer.dispatch_many("resize", [{"w": 1}, {"w": 2}])
            unique = await producer.dispatch("sync", 1, unique_key="acct-1", unique_for=60)
            with pytest.raises(TaskAlreadyDispatched):
                await producer.dispatch("sync", 1, unique_key="acct-1", unique_for=60)
            later = await producer.dispatch_delayed("remind", {"user": 7}, delay=60)
            at = await producer.schedule_for("remind", {"user": 7}, when=2e9)
            messages = await _messages(client)
            assert [i for i, _ in messages] == [handle.id, *(h.id for h in many), unique.id]
            assert [m["payload"] for _, m in messages] == [{"w": 100}, {"w": 1}, {"w": 2}, 1]
            assert messages[0][1]["reservation_timeout"] == 0
            assert messages[3][1]["unique_key"] == "sync:acct-1"
            assert await client.get("taskrunner:unique:sync:acct-1") == (
                messages[3][1]["unique_lock_value"].encode()
            )
            members = await client.zrange("taskrunner:shop:delayed_tasks", 0, -1, withscores=True)
            assert {decode_delayed(m).id: s for m, s in members}[at.id] == 2e9
            assert later.id in {decode_delayed(m).id for m, _ in members}
        assert await client.ping(), "a given client stays open"
        await client.aclose()

    run(main)


def test_refusals_queue_nothing(connect: Callable[[], redis.asyncio.Redis]) -> None:
    async def main() -> None:
        client = connect()
        producer = AsyncProducer(client, consumer_group="shop")
        with pytest.raises(InvalidTaskPayload, match="not JSON"):
            await producer.dispatch("resize", {"at": object()})
        with pytest.raises(InvalidTaskPayload, match="over the"):
            await producer.dispatch_many("resize", [1, "x" * 9_000_000])
        with pytest.raises(ValueError, match="delay must be"):
            await producer.dispatch_delayed("remind", 1, delay=float("inf"))
        with pytest.raises(ValueError, match="unique_for is required"):
            await producer.dispatch("sync", 1, unique_key="k")
        assert await client.keys("*") == []
        await client.aclose()

    run(main)


class LosesXaddReplies(fakeredis.FakeAsyncRedis):
    async def execute_command(self, *args: Any, **options: Any) -> Any:
        reply = await super().execute_command(*args, **options)
        if args and args[0] == "XADD":
            raise redis.exceptions.ConnectionError("connection lost while reading the reply")
        return reply


def test_the_lock_after_a_failed_add() -> None:
    async def main() -> None:
        refused = fakeredis.FakeAsyncRedis()
        await refused.set(STREAM, "not a stream")
        with pytest.raises(BackendError, match="WRONGTYPE"):
            await AsyncProducer(refused, consumer_group="shop").dispatch(
                "sync", 1, unique_key="k", unique_for=60
            )
        assert not await refused.exists("taskrunner:unique:sync:k"), "not applied: given back"
        lost = LosesXaddReplies()
        with pytest.raises(BackendError, match="connection lost") as failed:
            await AsyncProducer(lost, consumer_group="shop").dispatch(
                "sync", 1, unique_key="k", unique_for=60
            )
        assert failed.value.maybe_applied is True
        assert await lost.exists("taskrunner:unique:sync:k"), "maybe applied: kept"

    run(main)


def test_shared_by_32_asyncio_tasks(redis_url: str) -> None:
    async def main() -> None:
        async with AsyncProducer.from_url(
            redis_url, consumer_group="shop", client_name="shared"
        ) as producer:

            async def request(n: int) -> list[str]:
                ids = []
                for i in range(40):
                    ids.append((await producer.dispatch("resize", {"task": n, "i": i})).id)
                ids.append((await producer.dispatch("sync", n, unique_key=str(n), unique_for=9)).id)
                return ids

            results = await asyncio.gather(*(request(n) for n in range(32)))
            ids = [i for ids in results for i in ids]
            assert len(ids) == len(set(ids)) == 32 * 41
            assert _clients(redis_url, "shared") <= 32
        assert _clients(redis_url, "shared") == 0, "aclose() closed the client from_url made"
        with pytest.raises(RuntimeError, match="is closed"):
            await producer.dispatch("resize", 1)
        await producer.aclose()  # idempotent
        with redis.Redis.from_url(redis_url) as check:
            assert check.xlen(STREAM) == 32 * 41

    run(main)


def test_made_at_import_time_outside_any_loop(redis_url: str) -> None:
    """from_url opens nothing: a module-level producer is used in the app's loop later."""
    producer = AsyncProducer.from_url(redis_url, consumer_group="shop")

    async def main() -> str:
        async with producer:
            return (await producer.dispatch("resize", 1)).id

    assert run(main)


def test_only_an_asyncio_client_will_do() -> None:
    with pytest.raises(TypeError, match=r"from sync code use taskrunner\.producer\.Producer"):
        AsyncProducer(fakeredis.FakeRedis(), consumer_group="shop")  # type: ignore[arg-type]


def _in_child(work: Callable[[], Awaitable[bool]]) -> int:
    pid = _fork()
    if pid == 0:  # pragma: no cover - the child's coverage is not collected
        code = 1
        try:
            code = 0 if asyncio.run(work()) else 2  # type: ignore[arg-type]
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


def test_a_fork_gets_a_fresh_client(redis_url: str) -> None:
    """The fork happens while the parent's client holds a connection (forked from a
    worker thread, whose child can run an event loop of its own)."""
    producer = AsyncProducer.from_url(redis_url, consumer_group="shop")

    async def child() -> bool:
        await producer.dispatch("resize", "child")
        return producer._conn.client is not parent_client

    async def parent() -> int:
        async with producer:
            await producer.dispatch("resize", "parent")
            status = await asyncio.get_running_loop().run_in_executor(None, _in_child, child)
            await producer.dispatch("resize", "parent again")
            return status

    parent_client = producer._conn.client
    assert run(parent) == 0
    with redis.Redis.from_url(redis_url) as check:
        assert check.xlen(STREAM) == 3


def test_a_given_asyncio_client_is_refused_after_a_fork(redis_url: str) -> None:
    async def main() -> bool:
        async with redis.asyncio.Redis.from_url(redis_url) as given:
            producer = AsyncProducer(given, consumer_group="shop")
            producer._conn.pid = -1  # as if made in the parent before the fork
            try:
                await producer.dispatch("resize", 1)
            except RuntimeError as exc:
                return "cannot share after a fork" in str(exc)
            return False

    assert run(main) is True
