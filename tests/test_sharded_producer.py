"""Producers writing to a sharded group (issue 27), on fakeredis and the test server: the
shard count comes from the group's record, each dispatch lands in the shard (and under the
keys) a runner's own dispatch of the same payload writes, byte for byte, its id names the
shard, and ``result``, ``cancel`` and the runner's ``get_task`` find it by that id."""

from __future__ import annotations

import asyncio
import collections
import json
import re
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import fakeredis
import pytest
import redis
import redis.asyncio

from taskrunner import TaskRunner, TaskRunnerConfig, TaskState, _shards, _wire
from taskrunner._dispatch.routing import stable_shard
from taskrunner._serve.catalog import catalog_document
from taskrunner._shards import ShardCountError
from taskrunner.backends import Outcome
from taskrunner.backends.redis import RedisBackend
from taskrunner.backends.redis._pyredis import PyRedisClient
from taskrunner.errors import TaskAlreadyDispatched
from taskrunner.producer import AsyncProducer, Producer
from taskrunner.producer._plan import Destination, queue_of_stream

SHARDS = 4
Connect = Callable[..., redis.Redis]


@pytest.fixture(params=["fakeredis", "server"])
def connect(request: pytest.FixtureRequest) -> Iterator[Connect]:
    """Makes sync clients of one store (``protocol=2`` for the runner's transport)."""
    made: list[redis.Redis] = []

    def fake(**options: Any) -> redis.Redis:
        made.append(fakeredis.FakeRedis(server=server, **options))
        return made[-1]

    def real(**options: Any) -> redis.Redis:
        made.append(redis.Redis.from_url(url, **options))
        return made[-1]

    if request.param == "fakeredis":
        server = fakeredis.FakeServer()
        yield fake
    else:
        url = request.getfixturevalue("redis_url")
        yield real
    for client in made:
        client.close()


@pytest.fixture
def group() -> str:
    return f"shop-{uuid.uuid4().hex[:8]}"


@pytest.fixture
async def backend(connect: Connect) -> AsyncIterator[RedisBackend]:
    client = PyRedisClient(connect(protocol=2))
    async with RedisBackend(client, key_layout="cluster") as made:
        yield made


def make_runner(backend: RedisBackend, group: str, shards: int = SHARDS) -> TaskRunner:
    runner = TaskRunner(TaskRunnerConfig(consumer_group=group, shards=shards), backend)

    @runner.task(name="charge", shard_key=lambda p: p["customer"], keep_result=60.0)
    async def charge(payload: dict[str, Any]) -> None:
        raise AssertionError("not served here")

    @runner.task(name="plain")
    async def plain(payload: object) -> None:
        raise AssertionError("not served here")

    @runner.task(name="once", unique=True, unique_key=lambda p: p["order"], unique_for=60.0)
    async def once(payload: dict[str, Any]) -> None:
        raise AssertionError("not served here")

    return runner


async def publish_catalog(backend: RedisBackend, runner: TaskRunner, group: str) -> None:
    """What a serving runner publishes (a sharded one does not serve yet): its tasks'
    settings, for a strict producer."""
    stream = backend.stream_keys(group).stream
    doc = catalog_document("h1", "i1", runner._registry.tasks, stream, backend.now())
    await backend.publish_catalog(group, doc, 30.0)


def shard_of(task_id: str) -> int:
    found = _shards.parse_task_id(task_id, SHARDS)
    assert found is not None, task_id
    return found[0]


def message_keys(client: redis.Redis, group: str) -> set[str]:
    """Every key a dispatch wrote: all the group's but its catalog and shard record."""
    shared = {f"taskrunner:{{{group}}}:catalog", _shards.shard_count_key(group)}
    return {k.decode() for k in client.keys("taskrunner:*")} - shared


def clear(client: redis.Redis, keys: set[str]) -> None:
    if keys:
        client.delete(*keys)


def stored_entries(client: redis.Redis, keys: set[str]) -> dict[str, list[Any]]:
    """Each stream's payload fields and each sorted set's members (ids, times and
    tokens, which differ by nature, made equal)."""
    out: dict[str, list[Any]] = {}
    for key in sorted(keys):
        kind = client.type(key).decode()
        if kind == "stream":
            out[key] = [_token(fields[b"payload"]) for _, fields in client.xrange(key)]
        elif kind == "zset":
            out[key] = [_normal(json.loads(m)) for m in client.zrange(key, 0, -1)]
        elif kind == "string":
            out[key] = ["<lock>"]
        else:
            out[key] = [kind]  # an index: present
    return out


def _token(payload: bytes) -> bytes:
    """The stream entry's bytes, a unique lock's token (a fresh uuid) made equal."""
    return re.sub(rb'"unique_lock_value":"[0-9a-f]{32}"', b'"unique_lock_value":"<t>"', payload)


def _normal(member: dict[str, Any]) -> dict[str, Any]:
    return {**member, "id": "<id>", "dispatched_at": "<t>"}


# The shard count -------------------------------------------------------------------


def test_a_producer_takes_the_recorded_count_and_refuses_another(
    connect: Connect, group: str
) -> None:
    client = connect()
    client.set(_shards.shard_count_key(group), SHARDS)
    follows = Producer(client, consumer_group=group, key_layout="cluster")
    assert re.fullmatch(r"[0-3]\.\d+-\d+", follows.dispatch("plain", 1).id)
    wrong = Producer(client, consumer_group=group, shards=2)
    with pytest.raises(ShardCountError, match=r"^shards=2 differs from the 4 shard\(s\) group"):
        wrong.dispatch("plain", 1)
    unrecorded = Producer(client, consumer_group=f"{group}-new", shards=SHARDS)
    with pytest.raises(ShardCountError, match=r"shards=4 differs from the 1 shard\(s\).*no "):
        unrecorded.dispatch("plain", 1)
    assert client.xlen(f"taskrunner:{{{group}-new}}:tasks") == 0  # nothing was sent


def test_a_sharded_producer_is_refused_what_a_shard_cannot_name(connect: Connect) -> None:
    client = connect()
    with pytest.raises(ValueError, match=r"^shards=4 needs key_layout='cluster' or None"):
        Producer(client, consumer_group="shop", shards=4, key_layout="go")
    with pytest.raises(ValueError, match=r"^prefix must be None for a sharded group"):
        Producer(client, consumer_group="shop", shards=4, prefix="x:{shop}")
    with pytest.raises(ValueError, match=r"^shards must be an integer from 1 to 256, got 0"):
        Producer(client, consumer_group="shop", shards=0)
    client.set(_shards.shard_count_key("shop"), 4)
    sharded = Producer(client, consumer_group="shop", shards=4)
    with pytest.raises(TypeError, match=r"^shard_key must be a JSON value or None, got "):
        sharded.dispatch("plain", 1, shard_key={1})


def test_one_shard_is_the_layout_of_before(connect: Connect, group: str) -> None:
    client = connect()
    producer = Producer(client, consumer_group=group, key_layout="cluster")
    handle = producer.dispatch("plain", 1, shard_key="ignored")
    assert re.fullmatch(r"\d+-\d+", handle.id)
    assert client.xlen(f"taskrunner:{{{group}}}:tasks") == 1


# Byte for byte ---------------------------------------------------------------------


async def test_a_producer_writes_what_the_runners_dispatch_writes(
    connect: Connect, backend: RedisBackend, group: str
) -> None:
    client = connect()
    runner = make_runner(backend, group)
    await publish_catalog(backend, runner, group)
    producer = Producer(client, consumer_group=group, strict=True, key_layout="cluster")

    async def by_runner() -> list[str]:
        return [
            (await runner.dispatch("charge", {"customer": 7})).id,
            (await runner.dispatch("once", {"order": "a"})).id,
            (await runner.dispatch_delayed("charge", {"customer": 9}, 60.0)).id,
            *[h.id for h in await runner.dispatch_many("charge", [{"customer": 3}] * 2)],
        ]

    def by_producer() -> list[str]:
        return [
            producer.dispatch("charge", {"customer": 7}, shard_key=7).id,
            producer.dispatch("once", {"order": "a"}, unique_key="a").id,
            producer.dispatch_delayed("charge", {"customer": 9}, 60.0, shard_key=9).id,
            *[
                h.id
                for h in producer.dispatch_many("charge", [{"customer": 3}] * 2, shard_keys=[3, 3])
            ],
        ]

    theirs_ids = await by_runner()
    theirs_keys = message_keys(client, group)
    theirs = stored_entries(client, theirs_keys)
    clear(client, theirs_keys)
    mine_ids = by_producer()
    mine_keys = message_keys(client, group)
    assert mine_keys == theirs_keys
    assert stored_entries(client, mine_keys) == theirs
    assert [shard_of(i) for i in mine_ids] == [shard_of(i) for i in theirs_ids]
    assert len({shard_of(i) for i in mine_ids}) > 1  # the keys spread over shards
    # The unique lock is the runner's: one in the key's shard, whichever dispatches.
    with pytest.raises(TaskAlreadyDispatched):
        await runner.dispatch("once", {"order": "a"})
    producer.dispatch("once", {"order": "b"}, unique_key="b")
    with pytest.raises(TaskAlreadyDispatched):
        await runner.dispatch("once", {"order": "b"})


async def test_unkeyed_dispatches_go_round_robin_over_the_shards(
    connect: Connect, backend: RedisBackend, group: str
) -> None:
    client = connect()
    await make_runner(backend, group).dispatch("plain", 0)  # records the count
    producer = Producer(client, consumer_group=group, key_layout="cluster")
    ids = [producer.dispatch("plain", n).id for n in range(8)]
    ids += [h.id for h in producer.dispatch_many("plain", range(8))]
    assert collections.Counter(shard_of(i) for i in ids) == dict.fromkeys(range(SHARDS), 4)
    with pytest.raises(ValueError, match=r"^shard_keys must give one key per payload: 2 "):
        producer.dispatch_many("plain", [1, 2], shard_keys=[1])


# By id -------------------------------------------------------------------------------


async def test_the_runner_finds_cancels_and_answers_a_producers_task_by_id(
    connect: Connect, backend: RedisBackend, group: str
) -> None:
    client = connect()
    runner = make_runner(backend, group)
    await runner.dispatch("plain", 0)  # records the count
    producer = Producer(client, consumer_group=group, key_layout="cluster")
    queued = producer.dispatch("charge", {"customer": 7}, shard_key=7)
    later = producer.dispatch_delayed("charge", {"customer": 8}, 60.0, shard_key=8)
    for handle, state in ((queued, TaskState.QUEUED), (later, TaskState.SCHEDULED)):
        info = await runner.get_task(handle.id)
        assert info is not None
        assert (info.id, info.state) == (handle.id, state)
    assert producer.cancel(later.id)
    assert not producer.cancel(later.id)
    assert not producer.cancel(f"{SHARDS}.1-0")  # names no shard
    assert not producer.cancel("1-0")

    # A result kept in the shard is what the producer's handle waits for.
    index, inner = _shards.parse_task_id(queued.id, SHARDS)  # type: ignore[misc]
    shard = _shards.shard_tag(group, index, SHARDS)
    # The runner's "plain" went round-robin from a random shard: it may share this one.
    read = await backend.read(shard, "c", 10, 0)
    (entry,) = [e for e in read if e.id == inner]
    assert len(read) <= 2, read
    doc = _wire.encode_result(
        _wire.succeeded("charge", 42, attempts=1, enqueued_at=None, started_at=None, finished_at=1)
    )
    outcome = Outcome(entry_id=entry.id, task_id=inner, document=doc, keep=60.0, notify=60.0)
    await backend.finish(shard, [entry.id], [outcome])
    assert queued.result(timeout=1.0) == 42
    with pytest.raises(ValueError, match=r"^task id '1-0' names no shard of group"):
        producer.result("1-0", timeout=0)


def test_the_async_producer_routes_and_finds_as_the_sync_one(connect: Connect, group: str) -> None:
    client = connect()
    client.set(_shards.shard_count_key(group), SHARDS)
    sync = Producer(client, consumer_group=group, key_layout="cluster")
    pool = client.connection_pool.connection_kwargs

    async def main() -> list[str]:
        if isinstance(client, fakeredis.FakeRedis):
            made = fakeredis.FakeAsyncRedis(
                server=client.connection_pool.connection_kwargs["server"]
            )
        else:
            made = redis.asyncio.Redis(host=pool["host"], port=pool["port"])
        async with made, AsyncProducer(made, consumer_group=group, shards=SHARDS) as producer:
            keyed = await producer.dispatch("charge", {"customer": 7}, shard_key=7)
            many = await producer.dispatch_many("plain", range(4))
            later = await producer.dispatch_delayed("charge", {"c": 1}, 60.0, shard_key=7)
            assert await producer.cancel(later.id)
            assert not await producer.cancel(f"{SHARDS}.1-0")
            return [keyed.id, *(h.id for h in many)]

    keyed, *many = asyncio.run(main())
    assert shard_of(keyed) == shard_of(sync.dispatch("charge", {"customer": 7}, shard_key=7).id)
    assert sorted(shard_of(i) for i in many) == list(range(SHARDS))
    index, inner = _shards.parse_task_id(keyed, SHARDS)  # type: ignore[misc]
    stream = f"taskrunner:{{{_shards.shard_tag(group, index, SHARDS)}}}:tasks"
    assert client.xrange(stream, inner, inner)


def test_shard_keys_hash_as_the_runner_hashes(connect: Connect, group: str) -> None:
    client = connect()
    client.set(_shards.shard_count_key(group), SHARDS)
    producer = Producer(client, consumer_group=group, key_layout="cluster")
    for key in (7, "7", "customer-1", 2.5, ["a", 1]):
        text = json.dumps(key, separators=(",", ":")) if not isinstance(key, str) else key
        assert shard_of(producer.dispatch("plain", 1, shard_key=key).id) == stable_shard(
            text, SHARDS
        )


def test_a_cluster_layout_stream_maps_back_to_its_queue() -> None:
    # Cancel looks in each queue's stream of the id's shard, found by queue name: in
    # the cluster layout the name was compared with the go layout's stream (None).
    destination = Destination(consumer_group="shop", key_layout="cluster")
    assert queue_of_stream(destination, "taskrunner:{shop}:low") == "low"
    assert queue_of_stream(destination, "taskrunner:shop:low") is None
