"""The two key layouts (issue 25, section 2): pure decisions, table-tested."""

from __future__ import annotations

import binascii

import pytest

from taskrunner import TaskRunner, TaskRunnerConfig, _keys
from taskrunner._keys import KeyLayoutError, resolve_layout
from taskrunner.backends.memory import MemoryBackend


def slot(key: str) -> int:
    return binascii.crc_hqx(_keys.hash_tag(key).encode(), 0) % 16384


@pytest.mark.parametrize(
    ("requested", "cluster", "layout"),
    [
        (None, False, "go"),
        (None, True, "cluster"),
        ("go", False, "go"),
        ("cluster", False, "cluster"),
        ("cluster", True, "cluster"),
    ],
)
def test_resolve_layout(requested: object, cluster: bool, layout: str) -> None:
    assert resolve_layout(requested, cluster=cluster) == layout


def test_the_go_layout_on_a_cluster_is_refused_saying_why() -> None:
    with pytest.raises(KeyLayoutError, match=r"cannot run on a Redis Cluster.*different slots"):
        resolve_layout("go", cluster=True)
    with pytest.raises(KeyLayoutError, match="key_layout must be 'go', 'cluster' or None"):
        resolve_layout("sharded", cluster=False)


@pytest.mark.parametrize(
    ("key", "tag"),
    [
        ("taskrunner:{shop}:tasks", "shop"),
        ("ring:taskrunner:{shop}:metrics:tasks", "shop"),
        ("taskrunner:shop:tasks", "taskrunner:shop:tasks"),
        ("a{}b{c}", "a{}b{c}"),  # an empty first tag: the whole key
        ("a{b}{c}", "b"),
    ],
)
def test_hash_tag(key: str, tag: str) -> None:
    assert _keys.hash_tag(key) == tag


GO_KEYS = {
    "stream": "taskrunner:shop:tasks",
    "dead": "taskrunner:shop:tasks:dead",
    "ring": "ring:taskrunner:shop:metrics:tasks",
    "delayed": "taskrunner:shop:delayed_tasks",
    "leader": "taskrunner:leader:KBBNCRTGOUMKDJIBOZCJI24GKCVPZJCM",
    "heartbeat": "taskrunner:replication:web-1",
    "unique": "taskrunner:unique:",
    "result": "taskrunner:shop:result:1-0",
    "rate": "taskrunner:shop:rate:t:k",
}


def _keys_of(layout: _keys.KeyLayout) -> dict[str, str]:
    stream = _keys.stream_keys(None, "shop", "tasks", layout)
    return {
        "stream": stream.stream,
        "dead": stream.dead_letter,
        "ring": stream.claim_delay_ring,
        "delayed": _keys.delayed_tasks("shop", layout),
        "leader": _keys.leader("shop", layout),
        "heartbeat": _keys.replication("web-1", layout, "shop"),
        "unique": _keys.unique_prefix("shop", layout),
        "result": _keys.result("shop", "1-0", layout),
        "rate": _keys.rate("shop", "t", "k", layout),
    }


def test_the_go_layout_is_unchanged() -> None:
    assert _keys_of("go") == GO_KEYS
    assert _keys.leader("shop") == _keys.leader("shop", "go")  # "go" when not given


def test_every_cluster_key_of_a_group_shares_its_slot() -> None:
    keys = _keys_of("cluster")
    assert keys["leader"] == "taskrunner:{shop}:leader"
    assert keys["unique"] == "taskrunner:{shop}:unique:"
    assert keys["heartbeat"] == "taskrunner:{shop}:replication:web-1"
    assert {slot(k) for k in keys.values()} == {slot("{shop}")}
    assert len({slot(k) for k in GO_KEYS.values()}) > 1  # why the go layout cannot


def test_a_group_with_a_brace_is_refused() -> None:
    with pytest.raises(ValueError, match=r"consumer_group must not contain '\{' or '\}'.*'a\{b'"):
        TaskRunnerConfig(consumer_group="a{b")
    with pytest.raises(ValueError, match="consumer_group must not contain"):
        _keys.delayed_tasks("a}b", "cluster")


def test_an_explicit_prefix_needs_the_groups_tag_in_the_cluster_layout() -> None:
    with pytest.raises(ValueError, match="prefix 'shop' puts the stream outside the hash slot"):
        _keys.stream_keys("shop", "billing", "orders", "cluster")
    keys = _keys.stream_keys("shop:{billing}", "billing", "orders", "cluster")
    assert keys.stream == "shop:{billing}:orders"
    assert _keys.stream_keys("shop", "billing", "orders", "go").stream == "shop:orders"


@pytest.mark.parametrize("queue", ["leader", "replication:x", "unique:x", "delayed_tasks"])
def test_a_queue_named_like_a_group_key_is_refused_in_the_cluster_layout(queue: str) -> None:
    with pytest.raises(ValueError, match="would collide with the key"):
        _keys.stream_keys(None, "shop", queue, "cluster")


def test_heartbeat_host() -> None:
    assert _keys.heartbeat_host("taskrunner:replication:h", "go") == "h"
    assert _keys.heartbeat_host("taskrunner:{g}:replication:h", "cluster") == "h"
    assert _keys.heartbeat_host("taskrunner:{g}:replication:h", "cluster", "g") == "h"
    assert _keys.heartbeat_host("taskrunner:{g}:replication:h", "cluster", "x") is None
    assert _keys.heartbeat_host("taskrunner:{g}:unique:h", "cluster") is None
    with pytest.raises(ValueError, match="needs its group"):
        _keys.replication("h", "cluster")


async def test_the_runner_gives_its_backend_the_layout() -> None:
    backend = MemoryBackend()
    assert backend.key_layout == "go"
    TaskRunner(TaskRunnerConfig(consumer_group="shop", key_layout="cluster"), backend)
    assert backend.key_layout == "cluster"
    assert backend.stream_keys("shop").stream == "taskrunner:{shop}:tasks"
    with pytest.raises(KeyLayoutError, match="differs from the backend's key_layout 'cluster'"):
        TaskRunner(TaskRunnerConfig(consumer_group="shop", key_layout="go"), backend)


async def test_a_cluster_backend_chooses_the_cluster_layout_and_refuses_go() -> None:
    backend = MemoryBackend()
    backend.cluster = True  # what a cluster-aware client sets at connect
    assert backend.key_layout == "cluster"
    with pytest.raises(KeyLayoutError, match="cannot run on a Redis Cluster"):
        TaskRunner(TaskRunnerConfig(consumer_group="shop", key_layout="go"), backend)
    told = MemoryBackend(key_layout="go")
    told.cluster = True
    with pytest.raises(KeyLayoutError, match="cannot run on a Redis Cluster"):
        told.stream_keys("shop")


@pytest.mark.parametrize("layout", ["go", "cluster"])
def test_a_queue_named_like_the_result_waiters_is_refused(layout: _keys.KeyLayout) -> None:
    with pytest.raises(ValueError, match=r"would collide with the key .*:result_waiters"):
        _keys.stream_keys(None, "shop", "result_waiters", layout)
    assert _keys.result_waiters("shop", layout) == (
        "taskrunner:shop:result_waiters" if layout == "go" else "taskrunner:{shop}:result_waiters"
    )
