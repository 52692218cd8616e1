"""The inspection protocol's pure layout decisions (tables), and what a backend without
the protocol can and cannot do. The protocol itself is held by the contract suite
(taskrunner/testing/_inspection_checks.py)."""

from __future__ import annotations

import pytest
import trio
import trio.testing
from _fleet import make_runner, serving, wait_until

from taskrunner import _keys, admin
from taskrunner._dispatch.guards import INSPECTION_METHODS
from taskrunner.backends import Inspection, KeyCounts, KeyInfo, KeyKind
from taskrunner.backends._layout import group_keys, group_named_by, keys_to_flush, kind_of
from taskrunner.backends.memory import MemoryBackend
from taskrunner.backends.redis import RedisBackend
from taskrunner.cli.worker import check_backend


@pytest.mark.parametrize(
    ("name", "group"),
    [
        ("taskrunner:shop:tasks", "shop"),  # the default stream of the queue "tasks"
        ("taskrunner:shop:metrics", "shop"),
        ("taskrunner:shop:delayed_tasks", "shop"),
        ("taskrunner:shop:worker_tuning_capacity", "shop"),
        ("taskrunner:shop:desired_instances", "shop"),
        ("taskrunner:a:b:metrics", "a:b"),  # a group name may hold colons
        ("taskrunner:shop:events", "shop"),
        ("taskrunner:shop:workflow_ends", "shop"),
        ("taskrunner:shop:paused", "shop"),
        ("taskrunner:shop:progress:1700000000000-0", "shop"),
        ("taskrunner:shop:workflow:0f3a", "shop"),
        ("taskrunner:a:b:workflow:0f3a", "a:b"),
        ("taskrunner:shop:progress:", None),  # no task id
        ("taskrunner:{shop}:shards", "shop"),
        ("taskrunner:unique:progress:x", None),
        ("taskrunner:shop:other", None),  # another queue's stream
        ("taskrunner:shop:tasks:dead", None),
        ("ring:taskrunner:shop:metrics:tasks", None),
        ("taskrunner:tasks", None),  # a shared prefix's stream names no group
        ("taskrunner:unique:send:metrics", None),  # a lock that ends like a group key
        ("taskrunner:replication:host:metrics", None),
        ("taskrunner:leader:AAAA:metrics", None),
        ("taskrunner::metrics", None),
        ("other:shop:metrics", None),
    ],
)
def test_group_named_by(name: str, group: str | None) -> None:
    layout = "cluster" if "{" in name else "go"
    assert group_named_by(name, "tasks", layout) == group


def test_group_named_by_uses_the_queue_it_is_given() -> None:
    assert group_named_by("taskrunner:shop:orders", "orders") == "shop"
    assert group_named_by("taskrunner:shop:tasks", "orders") is None


FIXED = group_keys(_keys.stream_keys(None, "shop", "tasks"), "shop")


@pytest.mark.parametrize(
    ("name", "kind"),
    [
        ("taskrunner:shop:tasks", KeyKind.STREAM),
        ("taskrunner:shop:tasks:dead", KeyKind.DEAD_LETTER),
        ("ring:taskrunner:shop:metrics:tasks", KeyKind.CLAIM_DELAY_RING),
        ("taskrunner:shop:delayed_tasks", KeyKind.DELAYED_TASKS),
        (_keys.leader("shop"), KeyKind.LEADER),
        ("taskrunner:shop:worker_tuning_capacity", KeyKind.TUNING),
        ("taskrunner:shop:desired_instances", KeyKind.DESIRED_INSTANCES),
        ("taskrunner:mail:desired_instances", None),  # another group's
        ("taskrunner:shop:metrics", KeyKind.METRICS),
        ("taskrunner:replication:vm-1", KeyKind.HEARTBEAT),
        ("taskrunner:unique:send:A-17", KeyKind.UNIQUE_LOCK),
        ("taskrunner:mail:metrics", None),  # another group's
        (_keys.leader("mail"), None),
        ("taskrunner:shop:events", KeyKind.EVENTS),
        ("taskrunner:mail:events", None),
        ("taskrunner:{shop}:shards", None),  # the go layout has no shard count
    ],
)
def test_kind_of(name: str, kind: KeyKind | None) -> None:
    assert kind_of(name, FIXED) is kind


CLUSTER = group_keys(_keys.stream_keys(None, "shop", "tasks", "cluster"), "shop", "cluster")


@pytest.mark.parametrize(
    ("name", "layout", "kind"),
    [
        ("taskrunner:shop:progress:1700000000000-0", "go", KeyKind.PROGRESS),
        ("taskrunner:shop:workflow:0f3a", "go", KeyKind.WORKFLOW),
        ("taskrunner:shop:result:0f3a", "go", KeyKind.RESULT),  # a workflow's own result
        ("taskrunner:mail:progress:1-0", "go", None),
        ("taskrunner:mail:workflow:0f3a", "go", None),
        ("taskrunner:{shop}:events", "cluster", KeyKind.EVENTS),
        ("taskrunner:{shop}:shards", "cluster", KeyKind.SHARD_COUNT),
        ("taskrunner:shop:workflow_ends", "go", KeyKind.WORKFLOW_ENDS),
        ("taskrunner:{shop}:workflow_ends", "cluster", KeyKind.WORKFLOW_ENDS),
        ("taskrunner:{shop}:progress:1-0", "cluster", KeyKind.PROGRESS),
        ("taskrunner:{shop}:workflow:0f3a", "cluster", KeyKind.WORKFLOW),
        ("taskrunner:{mail}:shards", "cluster", None),
    ],
)
def test_kind_of_a_groups_own_keys(
    name: str, layout: _keys.KeyLayout, kind: KeyKind | None
) -> None:
    fixed = CLUSTER if layout == "cluster" else FIXED
    assert kind_of(name, fixed, layout, "shop") is kind


def test_group_keys_are_in_kind_order() -> None:
    for fixed in (FIXED, CLUSTER):
        assert list(fixed.values()) == [k for k in KeyKind if k in fixed.values()]


def _key(name: str, kind: KeyKind) -> KeyInfo:
    return KeyInfo(name=name, kind=kind, type="string", size=1, ttl=None)


LISTING = [
    _key("s", KeyKind.STREAM),
    _key("d", KeyKind.DEAD_LETTER),
    _key("r", KeyKind.CLAIM_DELAY_RING),
    _key("z", KeyKind.DELAYED_TASKS),
    _key("m", KeyKind.METRICS),
    _key("h", KeyKind.HEARTBEAT),
    _key("u", KeyKind.UNIQUE_LOCK),
]


@pytest.mark.parametrize(
    ("stream_shared", "heartbeats", "deleted"),
    [
        (False, True, ["s", "d", "r", "z", "m", "h", "u"]),
        (False, False, ["s", "d", "r", "z", "m", "u"]),
        (True, True, ["z", "m", "h", "u"]),
        (True, False, ["z", "m", "u"]),
    ],
)
def test_keys_to_flush(stream_shared: bool, heartbeats: bool, deleted: list[str]) -> None:
    assert keys_to_flush(LISTING, stream_shared=stream_shared, heartbeats=heartbeats) == deleted


def test_key_counts() -> None:
    counts = KeyCounts.of(k.kind for k in [*LISTING, _key("h2", KeyKind.HEARTBEAT)])
    assert counts == KeyCounts(
        stream=1,
        dead_letter=1,
        claim_delay_ring=1,
        delayed_tasks=1,
        metrics=1,
        heartbeat=2,
        unique_lock=1,
    )
    assert counts[KeyKind.HEARTBEAT] == 2
    assert counts[KeyKind.LEADER] == 0
    assert counts.total == 8
    assert KeyCounts.of([]).total == 0


def test_every_kind_has_a_purpose_and_a_count() -> None:
    for kind in KeyKind:
        assert _key("k", kind).purpose
        assert KeyCounts.of([kind])[kind] == 1


def test_both_backends_implement_inspection() -> None:
    assert isinstance(MemoryBackend(), Inspection)
    assert isinstance(RedisBackend.from_url("redis://127.0.0.1:1/0"), Inspection)


class ServeOnly(MemoryBackend):
    """A backend of one's own without the inspection protocol."""

    ping = list_groups = list_keys = count_keys = count_messages = None  # type: ignore[assignment]
    list_queues = list_heartbeats = read_lease = flush_group = None  # type: ignore[assignment]


def test_serve_only_lacks_every_inspection_method() -> None:
    assert sorted(n for n in vars(ServeOnly) if not n.startswith("_")) == INSPECTION_METHODS


async def test_a_backend_without_inspection_serves_tasks(
    autojump_clock: trio.testing.MockClock,
) -> None:
    backend = ServeOnly()
    runner = make_runner(backend)
    ran: list[int] = []

    @runner.task(name="t")
    async def t(payload: int) -> None:
        ran.append(payload)

    await check_backend(runner)  # the worker's start-up check falls back to a read
    async with serving(runner):
        await runner.dispatch("t", 1)
        await wait_until(lambda: ran == [1])


async def test_admin_names_the_missing_protocol(autojump_clock: trio.testing.MockClock) -> None:
    missing = ", ".join(INSPECTION_METHODS)
    message = (
        "taskrunner.admin.{} needs a backend implementing taskrunner.backends.Inspection; "
        "ServeOnly MemoryBackend(prefix=None, queue='tasks') has no " + missing
    )
    with pytest.raises(TypeError) as listing:
        await admin.list_keys(ServeOnly(), "g")
    assert str(listing.value) == message.format("list_keys")
    with pytest.raises(TypeError) as flushing:
        await admin.flush(ServeOnly(), "g", confirm=True)
    assert str(flushing.value) == message.format("flush")
    assert "\n" not in message


async def test_memory_sizes_strings_in_bytes(autojump_clock: trio.testing.MockClock) -> None:
    """As Redis's ``STRLEN`` does: a lock holding a two-byte character is 2 long."""
    backend = MemoryBackend()
    await backend.acquire_lock("taskrunner:unique:t:é", "é", 5.0)
    (lock,) = await backend.list_keys("g")
    assert (lock.name, lock.kind, lock.size) == ("taskrunner:unique:t:é", KeyKind.UNIQUE_LOCK, 2)
