"""ClusterRedisClient on real clusters (3 masters + 3 replicas of the suite's server kind,
started by ``taskrunner.testing.running_cluster``): routing, scripts, fan-out, detection,
MOVED after ``CLUSTER SETSLOT``, ASK during a migration, and a manual failover."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis
import redis.asyncio
import trio

from taskrunner import _keys, admin
from taskrunner.backends.redis import RedisBackend
from taskrunner.backends.redis._client import NativeRedisClient
from taskrunner.backends.redis._cluster_client import ClusterRedisClient
from taskrunner.backends.redis._cluster_slots import key_slot
from taskrunner.backends.redis._config import ConnectionConfig
from taskrunner.backends.redis._detect import DetectingRedisClient
from taskrunner.backends.redis._errors import (
    ClusterCommandError,
    CrossSlotError,
    RedisConnectionError,
    ResponseError,
)
from taskrunner.backends.redis._pyredis import PyRedisClient
from taskrunner.backends.redis._scripts import Script
from taskrunner.backends.redis._state import scan
from taskrunner.producer import AsyncProducer, Producer
from taskrunner.producer import _async_client as producer_async
from taskrunner.testing import ClusterNode, ClusterProcess, running_cluster


def _binary() -> str:
    # The server kind the suite runs on ($TASKRUNNER_TEST_SERVER): .ci/run runs
    # tests/redis once on redis-server and once on valkey-server.
    return os.environ.get("TASKRUNNER_TEST_SERVER", "auto")


@pytest.fixture(scope="module")
def shared_cluster() -> Iterator[ClusterProcess]:
    """One cluster for the tests that leave its topology alone."""
    with running_cluster(_binary()) as cluster:
        yield cluster


@pytest.fixture
def own_cluster() -> Iterator[ClusterProcess]:
    """A fresh cluster for a test that moves slots or fails a master over."""
    with running_cluster(_binary()) as cluster:
        yield cluster


async def _until(condition: Callable[[], bool]) -> None:
    while not condition():  # noqa: ASYNC110 - the conditions are outside trio's reach
        await trio.sleep(0.02)


def make_client(cluster: ClusterProcess) -> ClusterRedisClient:
    return ClusterRedisClient(ConnectionConfig.from_url(cluster.url))


async def test_routes_pipelines_and_scans_over_every_master(
    shared_cluster: ClusterProcess,
) -> None:
    keys = [f"route-{n}" for n in range(30)]
    async with make_client(shared_cluster) as client:
        assert len(await client.masters()) == 3
        assert await client.pipeline([("SET", key, key) for key in keys]) == [b"OK"] * 30
        for key in keys:
            owner = shared_cluster.master_of_slot(key_slot(key))
            assert owner.command("GET", key) == key.encode()  # it is on its own master
        assert await client.pipeline([("GET", key) for key in keys]) == [k.encode() for k in keys]
        found = await scan(client, "route-*")
        assert found == {key.encode() for key in keys}
        on = {shared_cluster.master_of_slot(key_slot(key)).port for key in keys}
        assert len(on) == 3  # the walk had to visit all three
        assert await client.pipeline([("DEL", key) for key in keys]) == [1] * 30


async def test_scripts_blocking_reads_and_refusals(shared_cluster: ClusterProcess) -> None:
    script = Script("return {redis.call('INCR', KEYS[1]), redis.call('INCR', KEYS[2])}")
    async with make_client(shared_cluster) as client:
        assert await script(client, ["{t}:a", "{t}:b"]) == [1, 1]  # NOSCRIPT, then EVAL
        assert await script(client, ["{t}:a", "{t}:b"]) == [2, 2]  # EVALSHA
        with pytest.raises(CrossSlotError, match="EVALSHA"):
            await script(client, ["{t}:a", "{u}:b"])
        with pytest.raises(ClusterCommandError, match="SELECT"):
            await client.execute("SELECT", 1)
        await client.execute("XGROUP", "CREATE", "{t}:s", "g", "$", "MKSTREAM")
        async with client.dedicated() as reader:
            args = ("XREADGROUP", "GROUP", "g", "c", "BLOCK", 50, "STREAMS", "{t}:s", ">")
            assert await reader.execute(*args, reply_timeout=5) is None
            await client.execute("XADD", "{t}:s", "*", "f", "v")
            (stream, rows), = await reader.execute(*args, reply_timeout=5)  # fmt: skip
            assert stream == b"{t}:s"
            assert rows[0][1] == [b"f", b"v"]
        await client.execute("DEL", "{t}:a", "{t}:b", "{t}:s")


async def test_from_url_detects_a_cluster(shared_cluster: ClusterProcess) -> None:
    backend = RedisBackend.from_url(shared_cluster.url)
    async with backend:
        assert isinstance(backend.client, DetectingRedisClient)
        await backend.ping()
        assert isinstance(backend.client.chosen, ClusterRedisClient)
    with pytest.raises(ClusterCommandError, match="database 0"):
        RedisBackend.from_url(shared_cluster.url.replace("/0", "/3"), cluster=True)
    async with RedisBackend.from_url(shared_cluster.url.replace("/0", "/3")) as backend:
        with pytest.raises(ClusterCommandError, match="names database 3"):
            await backend.ping()


async def test_from_url_detects_a_standalone_server(redis_url: str) -> None:
    async with RedisBackend.from_url(redis_url) as backend:
        await backend.ping()
        assert isinstance(backend.client, DetectingRedisClient)
        assert isinstance(backend.client.chosen, NativeRedisClient)


def _move_empty_slot(cluster: ClusterProcess, slot: int) -> tuple[int, int]:
    source = cluster.master_of_slot(slot)
    target = next(m for m in cluster.masters_at_start if m is not source)
    for node in (
        target,
        source,
        *(m for m in cluster.masters_at_start if m not in (source, target)),
    ):
        reply = node.command("CLUSTER", "SETSLOT", slot, "NODE", target.node_id)
        assert reply == b"OK", f"SETSLOT {slot} NODE on {node.port}: {reply!r}"
    return source.port, target.port


async def test_moved_after_setslot(own_cluster: ClusterProcess) -> None:
    key = "{moving}"
    slot = key_slot(key)
    async with make_client(own_cluster) as client:
        await client.execute("GET", key)
        _, target = _move_empty_slot(own_cluster, slot)
        assert await client.execute("SET", key, "here") == b"OK"
        assert client.owner_of(slot) == ("127.0.0.1", target)
        assert client.statistics().redirects >= 1
        assert own_cluster.node_at(target).command("GET", key) == b"here"


async def test_ask_during_a_manual_migration(own_cluster: ClusterProcess) -> None:
    slot = key_slot("{mig}")
    source = own_cluster.master_of_slot(slot)
    target = next(m for m in own_cluster.masters_at_start if m is not source)
    async with make_client(own_cluster) as client:
        await client.pipeline([("SET", "{mig}:stays", "s"), ("SET", "{mig}:goes", "g")])
        target.command("CLUSTER", "SETSLOT", slot, "IMPORTING", source.node_id)
        source.command("CLUSTER", "SETSLOT", slot, "MIGRATING", target.node_id)
        source.command("MIGRATE", "127.0.0.1", target.port, "", 0, 5000, "KEYS", "{mig}:goes")
        assert await client.execute("GET", "{mig}:goes") == b"g"  # ASK, then ASKING + GET
        assert await client.execute("GET", "{mig}:stays") == b"s"  # still on the source
        assert client.owner_of(slot) == ("127.0.0.1", source.port)  # ASK changes no map
        with pytest.raises(ResponseError, match="TRYAGAIN"):  # keys on both sides: bounded
            await client.execute("MGET", "{mig}:stays", "{mig}:goes")
        source.command("MIGRATE", "127.0.0.1", target.port, "", 0, 5000, "KEYS", "{mig}:stays")
        for node in own_cluster.masters_at_start:
            node.command("CLUSTER", "SETSLOT", slot, "NODE", target.node_id)
        assert await client.execute("MGET", "{mig}:stays", "{mig}:goes") == [b"s", b"g"]
        assert client.owner_of(slot) == ("127.0.0.1", target.port)  # MOVED updated it


async def test_manual_failover_under_load(own_cluster: ClusterProcess) -> None:
    key = "{fail}:n"
    old_master = own_cluster.master_of_slot(key_slot(key))
    (replica,) = own_cluster.replicas_of[old_master.port]
    done = unknown = 0
    refused: list[ResponseError] = []
    async with make_client(own_cluster) as client:
        with trio.fail_after(60):
            async with trio.open_nursery() as nursery:

                async def load() -> None:
                    nonlocal done, unknown
                    while True:
                        try:
                            await client.execute("INCR", key)
                            done += 1
                        except RedisConnectionError:
                            unknown += 1  # may or may not have run
                        except ResponseError as exc:
                            refused.append(exc)
                        await trio.sleep(0.002)

                nursery.start_soon(load)
                await trio.sleep(0.3)
                before = done
                await trio.to_thread.run_sync(own_cluster.failover, replica)
                with trio.fail_after(5):  # resumes on the promoted replica within 5 s
                    count = done
                    await _until(lambda: done >= count + 50)
                nursery.cancel_scope.cancel()
        assert all(exc.retryable for exc in refused), refused  # e.g. a redirect past its bound
        assert done > before
        value = int(await client.execute("GET", key))
        assert done <= value <= done + unknown + 1  # the cancelled one may have run
        assert client.owner_of(key_slot(key)) == ("127.0.0.1", replica.port)


def test_producers_choose_redis_cluster(shared_cluster: ClusterProcess) -> None:
    with Producer.from_url(shared_cluster.url, consumer_group="prod") as producer:
        handle = producer.dispatch("send_mail", {"to": "a"})
        assert isinstance(producer._conn.client, redis.RedisCluster)
        unique = producer.dispatch("send_mail", {"to": "b"}, unique_key="b", unique_for=60)
        assert unique.id
    stream = producer.stream
    owner = shared_cluster.master_of_slot(key_slot(stream))
    ids = [row[0].decode() for row in owner.command("XRANGE", stream, "-", "+")]
    assert handle.id in ids
    assert unique.id in ids

    async def dispatch_async() -> str:
        async with AsyncProducer.from_url(shared_cluster.url, consumer_group="prod") as producer:
            handle = await producer.dispatch("send_mail", {"to": "c"})
            assert isinstance(producer._conn.client, redis.asyncio.RedisCluster)
            return handle.id

    async_id = asyncio.run(dispatch_async())
    assert async_id in [row[0].decode() for row in owner.command("XRANGE", stream, "-", "+")]
    with pytest.raises(ClusterCommandError, match="database 0"):
        Producer.from_url(shared_cluster.url.replace("/0", "/2"), consumer_group="p", cluster=True)
    with Producer.from_url(shared_cluster.url.replace("/0", "/2"), consumer_group="p") as late:
        with pytest.raises(ClusterCommandError, match="names database 2"):
            late.dispatch("x")


async def test_backend_walks_every_master(shared_cluster: ClusterProcess) -> None:
    # The cluster key layout (the default on a cluster): a heartbeat is its group's, so
    # the heartbeats of twelve groups spread over the masters, and a count walks them all.
    hosts = [f"walk-host-{n}" for n in range(12)]
    beats = {h: _keys.replication(h, "cluster", f"walk-group-{n}") for n, h in enumerate(hosts)}
    async with RedisBackend.from_url(shared_cluster.url) as backend:
        client = backend.client
        await client.pipeline([("SET", key, "id", "PX", 60_000) for key in beats.values()])
        on = {shared_cluster.master_of_slot(key_slot(key)).port for key in beats.values()}
        assert len(on) == 3  # spread over the three masters
        assert backend.key_layout == "cluster"
        assert await backend.count_heartbeats() == len(hosts)
        assert [beat.host for beat in await backend.list_heartbeats()] == sorted(hosts)
        stream = backend.stream_keys("walkers").stream
        await client.execute("XGROUP", "CREATE", stream, "walkers", "$", "MKSTREAM")
        await backend.heartbeat("walker", "id", 60.0, group="walkers")
        assert "walkers" in await backend.list_groups()
        flushed = await admin.flush(backend, "walkers", confirm=True, replication=True)
        assert stream in flushed
        assert _keys.replication("walker", "cluster", "walkers") in flushed
        assert await backend.count_heartbeats() == len(hosts)  # other groups' stay


def _reshard(cluster: ClusterProcess, slot: int, source: ClusterNode, target: ClusterNode) -> int:
    """Move ``slot`` as ``redis-cli --cluster reshard`` does, a few keys at a time."""
    target.command("CLUSTER", "SETSLOT", slot, "IMPORTING", source.node_id)
    source.command("CLUSTER", "SETSLOT", slot, "MIGRATING", target.node_id)
    moved = 0
    while keys := source.command("CLUSTER", "GETKEYSINSLOT", slot, 5):
        source.command("MIGRATE", "127.0.0.1", target.port, "", 0, 5000, "KEYS", *keys)
        moved += len(keys)
        time.sleep(0.02)  # let the load meet the half-migrated slot
    for node in (target, source, *cluster.masters_at_start):
        node.command("CLUSTER", "SETSLOT", slot, "NODE", target.node_id)
    return moved


async def test_live_resharding_under_load(own_cluster: ClusterProcess) -> None:
    keys = [f"{{rs}}:{n}" for n in range(40)]
    slot = key_slot(keys[0])
    source = own_cluster.master_of_slot(slot)
    target = next(m for m in own_cluster.masters_at_start if m is not source)
    done = 0
    refused: list[BaseException] = []
    async with make_client(own_cluster) as client:
        await client.pipeline([("SET", key, 0) for key in keys])

        async def load(worker: int) -> None:
            nonlocal done
            n = worker
            while True:
                try:
                    await client.execute("INCR", keys[n % len(keys)])
                    done += 1
                except (ResponseError, RedisConnectionError) as exc:
                    refused.append(exc)
                n += 7

        with trio.fail_after(60):
            async with trio.open_nursery() as nursery:
                for worker in range(4):
                    nursery.start_soon(load, worker)
                moved = await trio.to_thread.run_sync(_reshard, own_cluster, slot, source, target)
                count = done
                await _until(lambda: done >= count + 100)  # still serving, on the new owner
                nursery.cancel_scope.cancel()
        assert moved == len(keys)
        assert refused == []
        assert client.statistics().redirects > 0
        assert client.owner_of(slot) == ("127.0.0.1", target.port)
        values = await client.pipeline([("GET", key) for key in keys])
        # every INCR that returned ran exactly once; the cancelled ones at most once
        assert done <= sum(int(v) for v in values) <= done + 4


async def test_a_blocked_read_follows_a_failover(own_cluster: ClusterProcess) -> None:
    stream = "{blocked}:s"
    master = own_cluster.master_of_slot(key_slot(stream))
    (replica,) = own_cluster.replicas_of[master.port]
    async with make_client(own_cluster) as client:
        await client.execute("XGROUP", "CREATE", stream, "g", "$", "MKSTREAM")
        read: list[object] = []
        async with client.dedicated() as reader:

            async def blocked_read() -> None:
                args = ("XREADGROUP", "GROUP", "g", "c", "BLOCK", 40_000, "STREAMS", stream, ">")
                read.append(await reader.execute(*args, reply_timeout=45))

            with trio.fail_after(45):  # the failover itself is slower on a busy machine
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(blocked_read)
                    await trio.sleep(0.3)
                    await trio.to_thread.run_sync(own_cluster.failover, replica)
                    await trio.sleep(0.5)  # the read is blocked again, on the new master
                    await client.execute("XADD", stream, "*", "f", "v")
        ((name, rows),) = read[0]  # type: ignore[misc]
        assert name == stream.encode()
        assert rows[0][1] == [b"f", b"v"]


async def test_sigkill_of_a_master_under_load(own_cluster: ClusterProcess) -> None:
    key = "{killed}:n"
    master = own_cluster.master_of_slot(key_slot(key))
    (replica,) = own_cluster.replicas_of[master.port]
    done = 0
    lost_links: list[RedisConnectionError] = []
    refused: list[ResponseError] = []
    async with make_client(own_cluster) as client:

        async def load() -> None:
            nonlocal done
            while True:
                try:
                    await client.execute("INCR", key)
                    done += 1
                except RedisConnectionError as exc:
                    lost_links.append(exc)
                except ResponseError as exc:
                    refused.append(exc)
                await trio.sleep(0.005)

        resume_within = own_cluster.node_timeout_ms / 1000 + 5
        with trio.fail_after(30):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(load)
                await _until(lambda: done >= 20)
                master.kill()
                killed_at = trio.current_time()
                # One INCR is in flight at a time, and its reply may already be on its
                # way when the kill lands: that one counts for the old master (a CI
                # rehearsal saw it and found the slot still mapped there). The one after
                # it was sent after the kill, so it ran on the promoted replica.
                count = done + 1
                await _until(lambda: done > count)
                resumed_after = trio.current_time() - killed_at
                nursery.cancel_scope.cancel()
        assert resumed_after < resume_within, resumed_after
        assert client.owner_of(key_slot(key)) == ("127.0.0.1", replica.port)
        # A call in flight when the master died fails (it may have run); the calls
        # after it wait for the promotion (connecting fails: nothing was sent).
        assert all(exc.retryable for exc in lost_links), lost_links
        assert all(exc.retryable for exc in refused), refused


async def test_pyredis_cluster_scan_visits_every_primary(shared_cluster: ClusterProcess) -> None:
    cluster = redis.RedisCluster.from_url(shared_cluster.url, protocol=2)
    async with PyRedisClient(cluster) as client:
        keys = [f"py-walk-{n}" for n in range(20)]
        await client.pipeline([("SET", key, 1) for key in keys])
        assert len(await client.masters()) == 3
        assert await scan(client, "py-walk-*") == {key.encode() for key in keys}
        await client.pipeline([("DEL", key) for key in keys])


def test_a_cluster_with_two_replicas_per_master() -> None:
    with running_cluster(_binary(), replicas=2) as cluster:
        assert len(cluster.nodes) == 9
        for master in cluster.masters_at_start:
            assert master.info("replication")["connected_slaves"] == "2"
            assert len(cluster.replicas_of[master.port]) == 2
        ports = {node.port for node in cluster.nodes} | {node.bus_port for node in cluster.nodes}
        assert len(ports) == 18  # every client and bus port its own


def test_first_calls_made_at_once_ask_once_and_share_one_cluster_client(
    shared_cluster: ClusterProcess, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An app's first requests, at once, on an AsyncProducer made with from_url: one of
    them asks whether the URL is a cluster and the others wait for its answer. Each
    used to ask and replace the client, leaking the cluster clients the calls before
    had made (unclosed sockets) or closing the one they were using."""
    asked: list[str] = []
    ask = producer_async.ask_is_cluster_async

    async def counted(url: str, options: dict[str, Any]) -> bool:
        asked.append(url)
        return await ask(url, options)

    monkeypatch.setattr(producer_async, "ask_is_cluster_async", counted)

    async def dispatch_at_once() -> tuple[list[str], str]:
        async with AsyncProducer.from_url(shared_cluster.url, consumer_group="prod") as producer:
            handles = await asyncio.gather(
                *(producer.dispatch("send_mail", {"to": n}) for n in range(32))
            )
            assert isinstance(producer._conn.client, redis.asyncio.RedisCluster)
            return [h.id for h in handles], producer.stream

    ids, stream = asyncio.run(dispatch_at_once())
    assert len(asked) == 1, f"32 first calls asked {len(asked)} times whether it is a cluster"
    owner = shared_cluster.master_of_slot(key_slot(stream))
    assert set(ids) <= {row[0].decode() for row in owner.command("XRANGE", stream, "-", "+")}
