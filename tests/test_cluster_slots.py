"""The cluster client's pure decisions: slots, command keys, topology parsing, redirects."""

from __future__ import annotations

from typing import Any

import pytest

from taskrunner.backends.redis._cluster_slots import (
    HASH_SLOTS,
    command_keys,
    command_slot,
    hash_tag,
    key_slot,
)
from taskrunner.backends.redis._cluster_topology import (
    ClusterMap,
    Redirect,
    RedirectKind,
    Shard,
    parse_redirect,
    parse_shards,
    parse_slots,
    redirect_delay,
)
from taskrunner.backends.redis._detect import is_cluster_info
from taskrunner.backends.redis._errors import (
    ClusterCommandError,
    CrossSlotError,
    ResponseError,
    error_from_reply,
)


@pytest.mark.parametrize(
    ("key", "slot"),
    [
        (b"123456789", 12739),  # the CRC16/XMODEM check value, as in the cluster spec
        ("123456789", 12739),
        (b"foo", 12182),
        (b"{user1000}.following", 3443),
        (b"{user1000}.followers", 3443),
        (b"user1000", 3443),
        (b"", 0),
        (12345, key_slot(b"12345")),
    ],
)
def test_key_slot(key: Any, slot: int) -> None:
    assert key_slot(key) == slot


@pytest.mark.parametrize(
    ("key", "hashed"),
    [
        (b"{shop}:tasks", b"shop"),
        (b"taskrunner:{shop}:leader", b"shop"),
        (b"{}", b"{}"),  # empty tag: the whole key
        (b"{}x", b"{}x"),
        (b"{", b"{"),
        (b"x}", b"x}"),
        (b"foo{}{bar}", b"foo{}{bar}"),  # the first { meets } at once: no tag
        (b"foo{{bar}}zap", b"{bar"),  # from the first { to the first } after it
        (b"foo{bar}{zap}", b"bar"),
        (b"a{b}c{d}", b"b"),
        (b"}{x}", b"x"),
    ],
)
def test_hash_tag(key: bytes, hashed: bytes) -> None:
    assert hash_tag(key) == hashed
    assert key_slot(key) == key_slot(hashed)


@pytest.mark.parametrize(
    ("command", "keys"),
    [
        (("GET", "a"), ["a"]),
        (("get", "a"), ["a"]),
        ((b"HSET", b"h", b"f", b"v"), [b"h"]),
        (("PING",), []),
        (("CLUSTER", "SHARDS"), []),
        (("SCRIPT", "LOAD", "return 1"), []),
        (("INFO", "cluster"), []),
        (("DEL", "a", "b", "c"), ["a", "b", "c"]),
        (("EXISTS", "a"), ["a"]),
        (("MGET", "a", "b"), ["a", "b"]),
        (("MSET", "a", 1, "b", 2), ["a", "b"]),
        (("EVALSHA", "sha", 2, "k1", "k2", "arg"), ["k1", "k2"]),
        (("EVAL", "src", 0, "arg"), []),
        (("XINFO", "GROUPS", "s"), ["s"]),
        (("XGROUP", "CREATE", "s", "g", "$", "MKSTREAM"), ["s"]),
        (("XREADGROUP", "GROUP", "g", "c", "COUNT", 1, "STREAMS", "s1", "s2", ">", ">"),
         ["s1", "s2"]),
        (("XREADGROUP", "GROUP", "g", "c", "BLOCK", 10, "streams", "s", ">"), ["s"]),
        (("XREAD", "COUNT", 1, "STREAMS", "s", "0"), ["s"]),
        (("BLPOP", "l1", "l2", 0), ["l1", "l2"]),
        (("XADD", "s", "*", "f", "v"), ["s"]),
        (("ZADD", "z", 1, "m"), ["z"]),
    ],
)  # fmt: skip
def test_command_keys(command: tuple[Any, ...], keys: list[Any]) -> None:
    assert list(command_keys(command)) == keys


@pytest.mark.parametrize(
    ("command", "reason"),
    [
        (("SELECT", 1), "database 0"),
        (("SCAN", 0), "every master"),
        (("MULTI",), "transaction"),
        (("EVALSHA", "sha", 3, "k1"), "numkeys 3"),
        (("EVALSHA", "sha", "x"), "numkeys"),
        (("XREADGROUP", "GROUP", "g", "c", "s", ">"), "STREAMS"),
        (("XREAD", "STREAMS", "a", "b", ">"), "as many ids"),
        ((), "empty"),
    ],
)
def test_refused_commands(command: tuple[Any, ...], reason: str) -> None:
    with pytest.raises(ClusterCommandError, match=reason) as caught:
        command_keys(command)
    assert caught.value.maybe_applied is False
    assert caught.value.retryable is False


def test_command_slot() -> None:
    assert command_slot(("PING",)) is None
    assert command_slot(("GET", "123456789")) == 12739
    assert command_slot(("EVALSHA", "sha", 2, "{t}:a", "{t}:b", "x")) == key_slot("t")
    assert command_slot(("DEL", "{t}:a", "{t}:b")) == key_slot("t")


def test_cross_slot_is_refused_naming_command_and_slots() -> None:
    with pytest.raises(CrossSlotError) as caught:
        command_slot(("EVALSHA", "sha", 2, "a", "123456789", "arg"))
    error = caught.value
    assert error.command == "EVALSHA"
    assert error.slots == tuple(sorted({key_slot("a"), 12739}))
    assert "EVALSHA" in str(error)
    assert "12739" in str(error)
    assert error.code == "CROSSSLOT"
    assert error.maybe_applied is False
    # the server's own reply maps to the same class
    assert isinstance(error_from_reply("CROSSSLOT Keys in request don't hash"), CrossSlotError)


def _flat(**fields: Any) -> list[Any]:
    return [x for name, value in fields.items() for x in (name.replace("_", "-").encode(), value)]


def _node(port: int, role: str, ip: bytes = b"127.0.0.1", health: bytes = b"online") -> list[Any]:
    return _flat(
        id=b"x" * 40, port=port, ip=ip, endpoint=ip, role=role.encode(),
        replication_offset=0, health=health,
    )  # fmt: skip


def test_parse_shards() -> None:
    reply = [
        _flat(slots=[0, 5460], nodes=[_node(7001, "master"), _node(7004, "replica")]),
        _flat(slots=[5461, 10922], nodes=[_node(7005, "replica"), _node(7002, "master")]),
        _flat(slots=[10923, 16000, 16001, 16383], nodes=[_node(7003, "master")]),
    ]
    cluster_map = parse_shards(reply, ("127.0.0.1", 7001))
    assert cluster_map.masters == (("127.0.0.1", 7001), ("127.0.0.1", 7002), ("127.0.0.1", 7003))
    assert cluster_map.shards[0].replicas == (("127.0.0.1", 7004),)
    assert cluster_map.owners[0] == ("127.0.0.1", 7001)
    assert cluster_map.owners[5461] == ("127.0.0.1", 7002)
    assert cluster_map.owners[16383] == ("127.0.0.1", 7003)
    assert cluster_map.missing_slots() == []


def test_parse_shards_node_without_address_is_the_asked_one() -> None:
    reply = [_flat(slots=[0, 16383], nodes=[_node(7001, "master", ip=b"")])]
    assert parse_shards(reply, ("10.0.0.9", 7001)).masters == (("10.0.0.9", 7001),)


def test_parse_shards_skips_failed_nodes_and_masterless_shards() -> None:
    reply = [
        _flat(slots=[0, 99], nodes=[_node(7001, "master", health=b"fail"), _node(7004, "replica")]),
        _flat(slots=[100, 16383], nodes=[_node(7002, "master")]),
    ]
    cluster_map = parse_shards(reply, ("127.0.0.1", 7002))
    assert cluster_map.masters == (("127.0.0.1", 7002),)
    assert cluster_map.missing_slots() == [(0, 99)]


def test_parse_shards_refuses_other_shapes() -> None:
    with pytest.raises(ValueError, match="CLUSTER SHARDS"):
        parse_shards([[b"slots"]], ("h", 1))


def test_parse_slots() -> None:
    reply = [
        [0, 5460, [b"127.0.0.1", 7001, b"id1"], [b"127.0.0.1", 7004, b"id4"]],
        [5461, 16383, [b"", 7002, b"id2"]],
    ]
    cluster_map = parse_slots(reply, ("10.1.1.1", 7002))
    assert cluster_map.masters == (("127.0.0.1", 7001), ("10.1.1.1", 7002))
    assert cluster_map.owners[5460] == ("127.0.0.1", 7001)
    assert cluster_map.owners[5461] == ("10.1.1.1", 7002)
    assert cluster_map.shards[0].replicas == (("127.0.0.1", 7004),)
    with pytest.raises(ValueError, match="CLUSTER SLOTS"):
        parse_slots([[0]], ("h", 1))


def test_missing_slots_and_moved() -> None:
    a, b = ("h", 1), ("h", 2)
    cluster_map = ClusterMap.of([Shard(master=a, ranges=((0, 9), (20, 16382)))])
    assert cluster_map.missing_slots() == [(10, 19), (16383, 16383)]
    moved = cluster_map.moved(5, b)
    assert moved.owners[5] == b
    assert cluster_map.owners[5] == a  # the old map is unchanged
    assert moved.masters == (a, b)
    assert len(moved.owners) == HASH_SLOTS


def test_a_map_over_an_old_one_keeps_the_old_owners_of_unserved_slots() -> None:
    a, b, c = ("h", 1), ("h", 2), ("h", 3)
    old = ClusterMap.of(
        [Shard(master=a, ranges=((0, 99),)), Shard(master=b, ranges=((100, 16383),))]
    )
    fresh = ClusterMap.of([Shard(master=c, ranges=((100, 16383),))])
    merged = fresh.over(old)
    assert merged.owners[0] == a
    assert merged.owners[100] == c
    assert merged.masters == (c, a)
    assert merged.missing_slots() == []


@pytest.mark.parametrize(
    ("message", "redirect"),
    [
        ("MOVED 3999 127.0.0.1:6381",
         Redirect(kind=RedirectKind.MOVED, slot=3999, address=("127.0.0.1", 6381))),
        ("ASK 3999 10.0.0.2:7000",
         Redirect(kind=RedirectKind.ASK, slot=3999, address=("10.0.0.2", 7000))),
        ("MOVED 1 :7002", Redirect(kind=RedirectKind.MOVED, slot=1, address=("replier", 7002))),
        ("MOVED 1 ::1:7002", Redirect(kind=RedirectKind.MOVED, slot=1, address=("::1", 7002))),
        ("TRYAGAIN Multiple keys request during rehashing of slot",
         Redirect(kind=RedirectKind.TRYAGAIN)),
        ("CLUSTERDOWN The cluster is down", Redirect(kind=RedirectKind.CLUSTERDOWN)),
        ("UNBLOCKED force unblock from blocking operation, instance state changed "
         "(master -> replica?)", Redirect(kind=RedirectKind.UNBLOCKED)),
        ("UNBLOCKED client unblocked via CLIENT UNBLOCK", None),
        ("ERR unknown command", None),
        ("MOVED nonsense", None),
        ("WRONGTYPE Operation against a key", None),
    ],
)  # fmt: skip
def test_parse_redirect(message: str, redirect: Redirect | None) -> None:
    assert parse_redirect(ResponseError(message), ("replier", 7001)) == redirect


def test_redirect_delay() -> None:
    assert redirect_delay(RedirectKind.MOVED, 3) == 0.0
    assert redirect_delay(RedirectKind.ASK, 1) == 0.0
    assert redirect_delay(RedirectKind.TRYAGAIN, 1) == 0.05
    assert redirect_delay(RedirectKind.TRYAGAIN, 2) == 0.1
    assert redirect_delay(RedirectKind.CLUSTERDOWN, 1) == 0.25
    assert redirect_delay(RedirectKind.CLUSTERDOWN, 10) == 1.0
    assert redirect_delay(RedirectKind.UNBLOCKED, 1) == 0.05


@pytest.mark.parametrize(
    ("reply", "cluster"),
    [
        (b"# Cluster\r\ncluster_enabled:1\r\n", True),
        (b"# Cluster\r\ncluster_enabled:0\r\n", False),
        ("# Cluster\ncluster_enabled:1", True),
        (b"", False),
        (b"# Server\r\nredis_version:7.0.15\r\n", False),
    ],
)
def test_is_cluster_info(reply: bytes | str, cluster: bool) -> None:
    assert is_cluster_info(reply) is cluster
