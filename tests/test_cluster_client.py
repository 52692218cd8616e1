"""ClusterRedisClient on an in-memory fake cluster (tests/_fake_cluster.py): routing,
redirects, per-node pipelines, cancellation, and never resending what may have run."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import trio
import trio.testing
from _fake_cluster import FakeCluster, logged

from taskrunner.backends.redis._cluster_client import ClusterRedisClient
from taskrunner.backends.redis._cluster_slots import key_slot
from taskrunner.backends.redis._config import ConnectionConfig
from taskrunner.backends.redis._errors import (
    ClusterCommandError,
    CrossSlotError,
    RedisConnectionError,
    ResponseError,
)
from taskrunner.backends.redis._scripts import Script
from taskrunner.backends.redis._state import scan

# Keys whose hash tags land on each of the fake's three masters (slots 0-5460,
# 5461-10921, 10922-16383).
A, B, C = "{a}", "{b}", "{c}"  # a: 15495, b: 3300, c: 7365


@pytest.fixture
async def cluster() -> AsyncIterator[FakeCluster]:
    async with trio.open_nursery() as nursery:
        yield FakeCluster.start(nursery)
        nursery.cancel_scope.cancel()


def make_client(cluster: FakeCluster, **options: object) -> ClusterRedisClient:
    config = ConnectionConfig(host="fake-host", port=7001)
    return ClusterRedisClient(config, opener=cluster.open, **options)  # type: ignore[arg-type]


def test_key_placement() -> None:
    assert key_slot(A) == 15495
    assert key_slot(B) == 3300
    assert key_slot(C) == 7365


async def test_routes_each_key_to_its_master(cluster: FakeCluster) -> None:
    async with make_client(cluster) as client:
        for key in (A, B, C):
            assert await client.execute("SET", key, key) == b"OK"
        for key in (A, B, C):
            assert await client.execute("GET", key) == key.encode()
            assert cluster.node_of(key).data == {key.encode(): key.encode()}
            assert [c[0] for c in logged(cluster.node_of(key))] == [b"SET", b"GET"]
        assert client.statistics().redirects == 0


async def test_cross_slot_refused_before_sending(cluster: FakeCluster) -> None:
    async with make_client(cluster) as client:
        await client.execute("PING")
        with pytest.raises(CrossSlotError, match="EVALSHA") as caught:
            await client.execute("EVALSHA", "0" * 40, 2, A, B)
        assert caught.value.slots == (key_slot(B), key_slot(A))
        with pytest.raises(CrossSlotError):  # in a pipeline: none of it is sent
            await client.pipeline([("SET", C, 1), ("DEL", A, B)])
        with pytest.raises(ClusterCommandError, match="SELECT"):
            await client.execute("SELECT", 1)
        with pytest.raises(ClusterCommandError, match="SCAN"):
            await client.execute("SCAN", 0)
        for node in cluster.nodes.values():
            assert logged(node) == []


async def test_database_other_than_zero_is_refused(cluster: FakeCluster) -> None:
    with pytest.raises(ClusterCommandError, match="database 0, the URL names database 3"):
        ClusterRedisClient(ConnectionConfig(host="fake-host", port=7001, db=3))


async def test_moved_updates_the_map_and_retries(cluster: FakeCluster) -> None:
    async with make_client(cluster) as client:
        await client.execute("SET", A, "before")
        old, new = cluster.node_of(A), cluster.nodes[("fake-host", 7001)]
        new.data[A.encode()] = old.data.pop(A.encode())
        cluster.move_slot(key_slot(A), new.address)
        assert await client.execute("GET", A) == b"before"
        assert client.owner_of(key_slot(A)) == new.address
        assert client.statistics().redirects == 1
        old.log.clear()
        assert await client.execute("GET", A) == b"before"
        assert logged(old) == []  # the second call went straight to the new owner


async def test_ask_sends_asking_then_the_command_and_keeps_the_map(
    cluster: FakeCluster,
) -> None:
    async with make_client(cluster) as client:
        source = cluster.node_of(A)
        target = cluster.nodes[("fake-host", 7001)]
        slot = key_slot(A)
        source.migrating[slot] = target.address
        target.importing.add(slot)
        target.data[A.encode()] = b"moved already"
        assert await client.execute("GET", A) == b"moved already"
        assert client.owner_of(slot) == source.address  # ASK leaves the map alone
        assert [c[0] for c in logged(target)] == [b"ASKING", b"GET"]
        # a key still on the source is served there, without a redirect
        source.data[b"{a}:x"] = b"here"
        assert await client.execute("GET", "{a}:x") == b"here"


async def test_pipeline_split_over_three_nodes_keeps_each_nodes_order(
    cluster: FakeCluster,
) -> None:
    async with make_client(cluster) as client:
        commands = [("RPUSH", f"{key}:l", n) for n in range(4) for key in (A, B, C)]
        replies = await client.pipeline(commands)
        assert replies == [n + 1 for n in range(4) for _ in range(3)]
        for key in (A, B, C):
            node = cluster.node_of(key)
            assert node.data[f"{key}:l".encode()] == [b"0", b"1", b"2", b"3"]
            assert [c[2] for c in logged(node)] == [b"0", b"1", b"2", b"3"]
            assert node.connections == 1  # one write per node, one connection each


async def test_pipeline_redirects_are_followed_in_place(cluster: FakeCluster) -> None:
    async with make_client(cluster) as client:
        await client.execute("PING")
        moved_to = cluster.nodes[("fake-host", 7001)]
        cluster.move_slot(key_slot(A), moved_to.address)
        replies = await client.pipeline(
            [("SET", A, 1), ("SET", B, 2), ("GET", A), ("GET", "nope")], raise_on_error=False
        )
        assert replies == [b"OK", b"OK", b"1", None]
        assert moved_to.data[A.encode()] == b"1"


async def test_tryagain_waits_and_resends(cluster: FakeCluster, autojump_clock: object) -> None:
    async with make_client(cluster) as client:
        node = cluster.node_of(A)
        node.errors = ["TRYAGAIN Multiple keys request during rehashing of slot"] * 2
        start = trio.current_time()
        assert await client.execute("INCR", A) == 1
        assert trio.current_time() - start == pytest.approx(0.05 + 0.1)
        assert [c[0] for c in logged(node)] == [b"INCR"] * 3
        assert node.data[A.encode()] == b"1"


async def test_clusterdown_refreshes_and_resends(
    cluster: FakeCluster, autojump_clock: object
) -> None:
    async with make_client(cluster) as client:
        await client.execute("PING")
        refreshes = client.statistics().refreshes
        cluster.node_of(A).errors = ["CLUSTERDOWN The cluster is down"]
        assert await client.execute("INCR", A) == 1
        assert client.statistics().refreshes > refreshes


async def test_redirects_are_bounded(cluster: FakeCluster, autojump_clock: object) -> None:
    async with make_client(cluster) as client:
        cluster.node_of(A).errors = ["TRYAGAIN busy"] * 100
        with pytest.raises(ResponseError, match="TRYAGAIN"):
            await client.execute("INCR", A)
        assert len(logged(cluster.node_of(A))) == 9  # the first send and 8 resends


async def test_cancelled_in_the_middle_of_a_redirect(
    cluster: FakeCluster, autojump_clock: object
) -> None:
    async with make_client(cluster) as client:
        await client.execute("SET", A, "x")
        source, target = cluster.node_of(A), cluster.nodes[("fake-host", 7001)]
        target.data[A.encode()] = b"on target"
        cluster.move_slot(key_slot(A), target.address)
        release = target.hold[b"GET"] = trio.Event()
        with trio.move_on_after(1) as scope:
            await client.execute("GET", A)  # MOVED by source, then parked on target
        assert scope.cancelled_caught
        assert [c[0] for c in logged(source)] == [b"SET", b"GET"]
        assert [c[0] for c in logged(target)] == [b"GET"]
        assert client.owner_of(key_slot(A)) == target.address
        del target.hold[b"GET"]
        release.set()
        # the abandoned reply is discarded, never given to the next caller
        target.data[b"{a}:y"] = b"mine"
        assert await client.execute("GET", "{a}:y") == b"mine"
        assert await client.execute("GET", A) == b"on target"


async def test_a_script_is_not_resent_after_a_lost_connection(cluster: FakeCluster) -> None:
    script = Script("return 1")
    async with make_client(cluster) as client:
        node = cluster.node_of(A)
        node.scripts[script.sha] = script.source
        node.drop.add(b"EVALSHA")
        with pytest.raises(RedisConnectionError):
            await script(client, [f"{A}:1", f"{A}:2"])
        assert [c[0] for c in logged(node)] == [b"EVALSHA"]  # once; no EVAL either
        assert node.data == {}
        assert await script(client, [f"{A}:1"]) == [1]  # reconnects for the next call


async def test_noscript_is_handled_on_the_node_that_lacks_it(cluster: FakeCluster) -> None:
    script = Script("return 2")
    async with make_client(cluster) as client:
        assert await script(client, [A]) == [1]
        assert await script(client, [A]) == [2]
        assert [c[0] for c in logged(cluster.node_of(A))] == [b"EVALSHA", b"EVAL", b"EVALSHA"]
        assert await script(client, [B]) == [1]
        assert [c[0] for c in logged(cluster.node_of(B))] == [b"EVALSHA", b"EVAL"]


async def test_script_load_reaches_every_master(cluster: FakeCluster) -> None:
    script = Script("return 3")
    async with make_client(cluster) as client:
        await script.load(client)
        for node in cluster.nodes.values():
            assert script.sha in node.scripts


async def test_a_lost_node_is_replaced_after_a_refresh(
    cluster: FakeCluster, autojump_clock: object
) -> None:
    async with make_client(cluster) as client:
        await client.execute("SET", B, 1)
        dead = cluster.node_of(B)
        promoted = cluster.add_node(7004)
        promoted.data = dict(dead.data)
        dead.down = True  # no new connection; the open one is cut once INCR arrived
        dead.drop.add(b"INCR")
        cluster.move_slot(key_slot(B), promoted.address)
        # sent, then the connection broke: the outcome is unknown, so it is raised
        with pytest.raises(RedisConnectionError):
            await client.execute("INCR", B)
        assert [c[0] for c in logged(dead)] == [b"SET", b"INCR"]
        assert logged(promoted) == []
        # connecting to the dead node fails (nothing sent): refreshed, sent to the new one
        assert await client.execute("INCR", B) == 2
        assert client.owner_of(key_slot(B)) == promoted.address
        assert [c[0] for c in logged(promoted)] == [b"INCR"]


async def test_dedicated_follows_moved(cluster: FakeCluster) -> None:
    async with make_client(cluster) as client:
        target = cluster.nodes[("fake-host", 7002)]
        cluster.move_slot(key_slot(B), target.address)
        async with client.dedicated() as reader:
            args = ("XREADGROUP", "GROUP", "g", "c", "BLOCK", 10, "STREAMS", f"{B}:s", ">")
            assert await reader.execute(*args, reply_timeout=5) is None
            assert await reader.execute(*args, reply_timeout=5) is None
        assert [c[0] for c in logged(target)] == [b"XREADGROUP", b"XREADGROUP"]
        assert client.owner_of(key_slot(B)) == target.address


async def test_dedicated_is_for_one_task(cluster: FakeCluster) -> None:
    async with make_client(cluster) as client:
        reader = client.dedicated()
        cluster.node_of(A).hold[b"GET"] = trio.Event()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(reader.execute, "GET", A)
            await trio.testing.wait_all_tasks_blocked()
            with pytest.raises(trio.BusyResourceError):
                await reader.execute("GET", A)
            nursery.cancel_scope.cancel()
        await reader.aclose()
        with pytest.raises(trio.ClosedResourceError):
            await reader.execute("GET", A)


async def test_scan_visits_every_master(cluster: FakeCluster) -> None:
    async with make_client(cluster) as client:
        await client.pipeline([("SET", key, 1) for key in (A, B, C)])
        assert len(await client.masters()) == 3
        assert await scan(client, "*") == {A.encode(), B.encode(), C.encode()}


async def test_closed_client_refuses_calls(cluster: FakeCluster) -> None:
    client = make_client(cluster)
    assert await client.execute("PING") == b"PONG"  # works without async with, too
    await client.aclose()
    with pytest.raises(trio.ClosedResourceError):
        await client.execute("PING")


async def test_refreshed_periodically(cluster: FakeCluster, autojump_clock: object) -> None:
    async with make_client(cluster, refresh_interval=10.0) as client:
        await client.execute("PING")
        asked = cluster.shards_asked
        await trio.sleep(5)
        await client.execute("PING")
        await trio.sleep(0.1)
        assert cluster.shards_asked == asked  # not yet
        await trio.sleep(6)
        await client.execute("PING")  # stale: a refresh starts in the background
        await trio.sleep(0.1)
        assert cluster.shards_asked == asked + 1
        assert client.statistics().refreshes == 2


async def test_a_map_with_unserved_slots_keeps_their_old_owners(cluster: FakeCluster) -> None:
    async with make_client(cluster) as client:
        await client.execute("SET", B, 1)
        failed = cluster.node_of(B).address
        cluster.hidden.add(failed)  # its master failed, its replica not promoted yet
        await client.refresh()
        assert client.owner_of(key_slot(B)) == failed
        assert client.owner_of(key_slot(A)) == cluster.node_of(A).address
        assert len(await client.masters()) == 3


async def test_a_hung_node_does_not_hold_up_a_refresh(
    cluster: FakeCluster, autojump_clock: object
) -> None:
    async with make_client(cluster) as client:
        await client.execute("PING")
        seed = cluster.nodes[("fake-host", 7001)]
        seed.hold[b"CLUSTER"] = trio.Event()  # answers nothing, connection open
        refreshes = client.statistics().refreshes
        start = trio.current_time()
        await client.refresh()
        assert client.statistics().refreshes == refreshes + 1  # another node answered
        assert trio.current_time() - start == pytest.approx(5.0)  # connect_timeout


async def test_wait_goes_with_the_write_before_it(cluster: FakeCluster) -> None:
    async with make_client(cluster) as client:
        replies = await client.pipeline([("RPUSH", f"{B}:l", 1), ("WAIT", 1, 100)])
        assert replies == [1, 1]
        assert [c[0] for c in logged(cluster.node_of(B))] == [b"RPUSH", b"WAIT"]
        # the write is MOVED: the WAIT is sent again with it, to the new node
        source, target = cluster.node_of(B), cluster.nodes[("fake-host", 7002)]
        cluster.move_slot(key_slot(B), target.address)
        replies = await client.pipeline([("RPUSH", f"{B}:m", 1), ("WAIT", 1, 100)])
        assert replies == [1, 1]
        # the source answered MOVED to the write and 1 to its WAIT: both sent again
        assert [c[0] for c in logged(source)] == [b"RPUSH", b"WAIT"] * 2
        assert [c[0] for c in logged(target)] == [b"RPUSH", b"WAIT"]
        assert logged(cluster.node_of(A)) == []


async def test_closed_while_waiting_to_resend(cluster: FakeCluster, autojump_clock: object) -> None:
    client = make_client(cluster)
    await client.execute("PING")
    cluster.node_of(A).errors = ["TRYAGAIN busy"] * 3
    cluster.node_of(B).errors = ["TRYAGAIN busy"] * 3  # two nodes to resend to

    async def close_soon() -> None:
        await trio.sleep(0.01)  # inside the first TRYAGAIN wait
        await client.aclose()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(close_soon)
        with pytest.raises(trio.ClosedResourceError):
            await client.pipeline([("INCR", A), ("INCR", B)])


async def test_closing_inside_async_with_cancels_nothing_of_the_callers(
    cluster: FakeCluster, autojump_clock: object
) -> None:
    async with make_client(cluster, refresh_interval=1.0) as client:
        for _ in range(3):  # background refreshes come and go
            await client.execute("PING")
            await trio.sleep(2)
        cluster.nodes[("fake-host", 7001)].hold[b"CLUSTER"] = trio.Event()
        await client.execute("PING")  # stale: a refresh starts, and hangs
        await client.aclose()
        await trio.sleep(1)  # the caller's code goes on after aclose
        survived = True
    assert survived
