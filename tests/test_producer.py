"""The sync Producer on redis-py: what it writes, what it refuses before anything is
queued, a unique task's lock (and its state when the add fails), its client, threads
and forks. On fakeredis and on the test server."""

from __future__ import annotations

import json
import os
import threading
import time
import warnings
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import attrs
import fakeredis
import pytest
import redis
import redis.exceptions

from taskrunner import BackendError, InvalidTaskPayload, TaskAlreadyDispatched
from taskrunner._wire import decode_delayed
from taskrunner.producer import Producer, ProducerHandle

STREAM = "taskrunner:shop:tasks"
DELAYED = "taskrunner:shop:delayed_tasks"


@pytest.fixture(params=["fakeredis", "server"])
def client(request: pytest.FixtureRequest) -> Iterator[redis.Redis]:
    if request.param == "fakeredis":
        made: redis.Redis = fakeredis.FakeRedis()
    else:
        made = redis.Redis.from_url(request.getfixturevalue("redis_url"))
    try:
        yield made
    finally:
        made.close()


@pytest.fixture
def producer(client: redis.Redis) -> Producer:
    return Producer(client, consumer_group="shop")


def entries(client: redis.Redis, stream: str = STREAM) -> list[tuple[str, dict[str, Any]]]:
    return [
        (entry_id.decode(), json.loads(fields[b"payload"]))
        for entry_id, fields in client.xrange(stream)
    ]


def test_dispatch_adds_the_message_a_runner_reads(producer: Producer, client: redis.Redis) -> None:
    handle = producer.dispatch("resize", {"w": 100})
    assert isinstance(handle, ProducerHandle)
    assert str(handle) == handle.id
    assert handle.task_name == "resize"
    [(entry_id, message)] = entries(client)
    assert entry_id == handle.id
    assert message == {
        "task_name": "resize",
        "payload": {"w": 100},
        "unique": False,
        "unique_for": 0,
        "unique_key": "",
        "unique_lock_value": "",
        "reservation_timeout": 0,
    }


def test_dispatch_many_adds_them_in_order(producer: Producer, client: redis.Redis) -> None:
    handles = producer.dispatch_many("resize", [{"w": i} for i in range(2500)])  # two chunks
    assert [h.id for h in handles] == [entry_id for entry_id, _ in entries(client)]
    assert [m["payload"]["w"] for _, m in entries(client)] == list(range(2500))
    assert producer.dispatch_many("resize", []) == []


def test_delayed_tasks_go_to_the_delayed_set(producer: Producer, client: redis.Redis) -> None:
    before = time.time()
    later = producer.dispatch_delayed("remind", {"user": 7}, delay=60)
    at = producer.schedule_for("remind", {"user": 8}, when=datetime(2031, 1, 1, tzinfo=UTC))
    members = {
        decode_delayed(m).id: (decode_delayed(m), s)
        for m, s in client.zrange(DELAYED, 0, -1, withscores=True)
    }
    member, score = members[later.id]
    assert (member.task, member.payload, member.unique_key) == ("remind", {"user": 7}, None)
    assert before + 60 <= score <= time.time() + 60
    assert member.time == int(score)
    member, score = members[at.id]
    assert score == datetime(2031, 1, 1, tzinfo=UTC).timestamp()
    assert member.payload == {"user": 8}
    assert client.xlen(STREAM) == 0


@pytest.mark.parametrize(
    ("call", "error", "match"),
    [
        (lambda p: p.dispatch("resize", {"at": object()}), InvalidTaskPayload, "not JSON"),
        (lambda p: p.dispatch("resize", "x" * 9_000_000), InvalidTaskPayload, "over the"),
        (lambda p: p.dispatch("resize", float("nan")), InvalidTaskPayload, "not JSON"),
        (lambda p: p.dispatch_many("resize", [1, {2}]), InvalidTaskPayload, "not JSON"),
        (lambda p: p.dispatch("two words"), ValueError, "task name must be"),
        (lambda p: p.dispatch("sync", 1, unique_key="k"), ValueError, "unique_for is required"),
        (lambda p: p.dispatch("sync", 1, unique_for=-1), ValueError, "unique_for must be"),
        (lambda p: p.dispatch_delayed("remind", 1, delay=-1), ValueError, "delay must be"),
        (lambda p: p.dispatch_delayed("remind", {1}, delay=5), InvalidTaskPayload, "not JSON"),
        (
            lambda p: p.schedule_for("remind", 1, when=datetime(2031, 1, 1)),  # naive
            ValueError,
            "timezone-aware",
        ),
    ],
)
def test_refused_before_anything_is_queued(
    producer: Producer, client: redis.Redis, call: Any, error: type[Exception], match: str
) -> None:
    with pytest.raises(error, match=match):
        call(producer)
    assert client.keys("*") == []


def test_a_unique_task_takes_the_runners_lock(producer: Producer, client: redis.Redis) -> None:
    handle = producer.dispatch("sync_account", {"id": 1}, unique_key="acct-1", unique_for=60)
    [(_, message)] = entries(client)
    lock = "taskrunner:unique:sync_account:acct-1"
    assert message["unique"] is True
    assert (message["unique_for"], message["unique_key"]) == (60, "sync_account:acct-1")
    assert client.get(lock) == message["unique_lock_value"].encode()
    assert 59_000 < client.pttl(lock) <= 60_000
    with pytest.raises(TaskAlreadyDispatched) as held:
        producer.dispatch("sync_account", {"id": 1}, unique_key="acct-1", unique_for=60)
    assert held.value.lock_key == lock
    assert client.xlen(STREAM) == 1, "a refused duplicate adds nothing"
    other = producer.dispatch("sync_account", {"id": 2}, unique_key="acct-2", unique_for=60)
    assert other.id != handle.id
    client.delete(lock)  # as the worker does when the task is done
    producer.dispatch("sync_account", {"id": 1}, unique_key="acct-1", unique_for=60)
    assert client.xlen(STREAM) == 3


def test_unique_for_alone_locks_the_task_name(producer: Producer, client: redis.Redis) -> None:
    producer.dispatch("nightly", unique_for=5)
    assert client.exists("taskrunner:unique:nightly")
    with pytest.raises(TaskAlreadyDispatched, match="'taskrunner:unique:nightly' is held"):
        producer.dispatch("nightly", unique_for=5)


def test_a_refused_add_gives_the_lock_back(producer: Producer, client: redis.Redis) -> None:
    """An error reply means the add did not happen: the lock is released."""
    client.set(STREAM, "not a stream")
    with pytest.raises(BackendError, match="WRONGTYPE") as failed:
        producer.dispatch("sync_account", 1, unique_key="acct-1", unique_for=60)
    assert failed.value.maybe_applied is False
    assert not client.exists("taskrunner:unique:sync_account:acct-1")


class LosesXaddReplies(fakeredis.FakeRedis):
    """A connection that breaks while XADD's reply is on its way: it may have run."""

    def execute_command(self, *args: Any, **options: Any) -> Any:
        if args and args[0] == "XADD":
            super().execute_command(*args, **options)
            raise redis.exceptions.ConnectionError("connection lost while reading the reply")
        return super().execute_command(*args, **options)


def test_an_add_that_may_have_happened_keeps_the_lock(caplog: pytest.LogCaptureFixture) -> None:
    client = LosesXaddReplies()
    producer = Producer(client, consumer_group="shop")
    with pytest.raises(BackendError, match="connection lost") as failed:
        producer.dispatch("sync_account", 1, unique_key="acct-1", unique_for=60)
    assert failed.value.maybe_applied is True
    assert client.exists("taskrunner:unique:sync_account:acct-1"), "no duplicate may get in"
    assert client.xlen(STREAM) == 1, "the add did happen: the worker releases the lock"
    assert "keeping lock taskrunner:unique:sync_account:acct-1" in caplog.text


@attrs.frozen
class Resize:
    width: int
    height: int


def test_typed_payloads_are_unstructured(producer: Producer, client: redis.Redis) -> None:
    producer.dispatch("resize", Resize(100, 50))
    [(_, message)] = entries(client)
    assert message["payload"] == {"width": 100, "height": 50}


def test_the_stream_follows_prefix_and_queue(client: redis.Redis) -> None:
    Producer(client, consumer_group="shop", queue="emails").dispatch("send", 1)
    Producer(client, consumer_group="shop", prefix="taskrunner").dispatch("send", 2)
    assert [m["payload"] for _, m in entries(client, "taskrunner:shop:emails")] == [1]
    assert [m["payload"] for _, m in entries(client, "taskrunner:tasks")] == [2]


def test_a_delayed_task_goes_back_to_the_producers_queue(client: redis.Redis) -> None:
    emails = Producer(client, consumer_group="shop", queue="emails")
    later = emails.dispatch_delayed("send", 1, delay=60)
    default = Producer(client, consumer_group="shop").dispatch_delayed("send", 2, delay=60)
    members = {decode_delayed(m).id: decode_delayed(m) for m in client.zrange(DELAYED, 0, -1)}
    assert members[later.id].queue == "emails"
    assert members[default.id].queue is None, "the default queue writes no field"


def test_a_client_that_decodes_responses(redis_url: str) -> None:
    with redis.Redis.from_url(redis_url, decode_responses=True) as client:
        producer = Producer(client, consumer_group="shop")
        handle = producer.dispatch("resize", 1)
        assert handle.id == client.xrange(STREAM)[0][0]
        producer.dispatch("sync", 1, unique_key="k", unique_for=5)
        assert [h.id for h in producer.dispatch_many("resize", [2])] == [
            client.xrange(STREAM)[-1][0]
        ]


def _clients(url: str, name: str) -> int:
    """Connections on the server named ``name`` (``client_name=``): the session's server
    also holds whatever other tests on this worker left open, CI once counted 59
    connections where one producer's 32 tasks had at most 32."""
    with redis.Redis.from_url(url) as admin:
        return sum(client["name"] == name for client in admin.client_list())


def test_from_url_owns_its_client_and_a_given_one_stays_open(redis_url: str) -> None:
    with Producer.from_url(redis_url, consumer_group="shop", client_name="made") as producer:
        producer.dispatch("resize", 1)
        assert _clients(redis_url, "made") == 1
    assert _clients(redis_url, "made") == 0, "close() closes the client from_url made"
    with pytest.raises(RuntimeError, match="is closed"):
        producer.dispatch("resize", 1)
    producer.close()  # idempotent

    with redis.Redis.from_url(redis_url, client_name="given") as client:
        given = Producer(client, consumer_group="shop")
        given.dispatch("resize", 2)
        given.close()
        assert client.xlen(STREAM) == 2, "the given client still works"
        assert _clients(redis_url, "given") == 1


def test_only_a_sync_client_will_do() -> None:
    with pytest.raises(TypeError, match=r"use taskrunner\.producer\.AsyncProducer"):
        Producer(fakeredis.FakeAsyncRedis(), consumer_group="shop")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="needs a sync redis-py client"):
        Producer("redis://localhost", consumer_group="shop")  # type: ignore[arg-type]


def test_repr() -> None:
    producer = Producer(fakeredis.FakeRedis(), consumer_group="shop", strict=True)
    assert repr(producer) == "<Producer group='shop' stream='taskrunner:shop:tasks' strict>"
    assert producer.stream == STREAM
    assert producer.strict is True


def test_one_producer_shared_by_threads(redis_url: str) -> None:
    """Django under threaded gunicorn: many request threads, one producer, one pool."""
    producer = Producer.from_url(redis_url, consumer_group="shop", client_name="shared")
    ids: list[str] = []
    errors: list[BaseException] = []
    start = threading.Barrier(8)

    def requests(n: int) -> None:
        try:
            start.wait()
            mine = [producer.dispatch("resize", {"thread": n, "i": i}).id for i in range(150)]
            mine += [h.id for h in producer.dispatch_many("resize", [{"thread": n}] * 50)]
            mine.append(producer.dispatch("sync", n, unique_key=str(n), unique_for=30).id)
            ids.extend(mine)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=requests, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    with producer:
        assert errors == []
        assert len(ids) == len(set(ids)) == 8 * 201
        with redis.Redis.from_url(redis_url) as client:
            assert client.xlen(STREAM) == 8 * 201
            assert len(client.keys("taskrunner:unique:sync:*")) == 8
        assert _clients(redis_url, "shared") <= 8, (
            "the pool holds at most one connection per thread"
        )


def _fork() -> int:
    with warnings.catch_warnings():  # 3.12+ warns about forking a multi-threaded process
        warnings.simplefilter("ignore", DeprecationWarning)
        return os.fork()


def _in_child(work: Any) -> int:
    """Run ``work()`` in a forked child; its exit status (0: it returned True)."""
    pid = _fork()
    if pid == 0:  # pragma: no cover - the child's coverage is not collected
        code = 1
        try:
            code = 0 if work() else 2
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


def test_a_fork_gets_fresh_connections(redis_url: str) -> None:
    """gunicorn --preload: the producer is made (and used) before the fork; each child
    dispatches on connections of its own, and the parent's keep working."""
    producer = Producer.from_url(redis_url, consumer_group="shop")
    producer.dispatch("resize", "parent")
    parent_client = producer._conn.client
    parent_connection = parent_client.client_id()

    def child() -> bool:
        producer.dispatch("resize", "child")
        producer.dispatch_many("resize", ["child"] * 3)
        fresh = producer._conn.client is not parent_client
        return fresh and producer._conn.client.client_id() != parent_connection

    assert _in_child(child) == 0
    assert _in_child(child) == 0
    producer.dispatch("resize", "parent again")
    assert parent_client.client_id() == parent_connection, "the child never closed our sockets"
    with producer, redis.Redis.from_url(redis_url) as client:
        payloads = [m["payload"] for _, m in entries(client)]
    assert sorted(payloads) == sorted(["parent", "parent again"] + ["child"] * 8)


def test_a_fork_with_a_given_client(redis_url: str) -> None:
    """A given client is not replaced (it stays the caller's); redis-py's pool starts
    afresh in the child by itself."""
    with redis.Redis.from_url(redis_url) as client:
        producer = Producer(client, consumer_group="shop")
        producer.dispatch("resize", "parent")
        parent_connection = client.client_id()

        def child() -> bool:
            producer.dispatch("resize", "child")
            return producer._conn.client is client and client.client_id() != parent_connection

        assert _in_child(child) == 0
        producer.dispatch("resize", "parent again")
        assert client.client_id() == parent_connection
        assert client.xlen(STREAM) == 3
