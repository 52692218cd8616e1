"""Dispatching to a sharded group (issue 27) on the in-memory backend: each dispatch lands in
the shard its key (or unique key, or the round-robin) picks, its id names that shard, and
lookup, cancel and ``result()`` go straight to it; ``shards=1`` is what it always was."""

from __future__ import annotations

import collections
import re
from typing import Any

import pytest

from taskrunner import TaskRunner, TaskRunnerConfig, TaskState, _keys, _shards, _wire
from taskrunner._shards import ShardCountError
from taskrunner.backends import Outcome
from taskrunner.backends.memory import MemoryBackend
from taskrunner.errors import TaskAlreadyDispatched

SHARDS = 16


def make_runner(backend: MemoryBackend, shards: int = SHARDS) -> TaskRunner:
    runner = TaskRunner(TaskRunnerConfig(consumer_group="shop", shards=shards), backend)

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


def shard_group(index: int) -> str:
    return _shards.shard_tag("shop", index, SHARDS)


async def lengths(backend: MemoryBackend) -> list[int]:
    return [await backend.length(shard_group(i)) for i in range(SHARDS)]


async def test_one_shard_keeps_todays_ids_and_keys() -> None:
    backend = MemoryBackend()
    runner = make_runner(backend, shards=1)
    handle = await runner.dispatch("charge", {"customer": 7})
    assert re.fullmatch(r"\d+-\d+", handle.id)  # the stream id, as before
    assert await backend.length("shop") == 1
    assert backend.stream_keys("shop").stream == "taskrunner:shop:tasks"  # the go layout
    assert sum(await lengths(backend)) == 0


async def test_a_keyed_dispatch_lands_in_its_keys_shard_and_its_id_names_it() -> None:
    backend = MemoryBackend()
    runner = make_runner(backend)
    handle = await runner.dispatch("charge", {"customer": 7})
    shard = _shards.parse_task_id(handle.id, SHARDS)
    assert shard is not None
    expected = _shards.shard_tag("shop", shard[0], SHARDS)
    assert shard[0] == runner._tracker.router.pick("7", None)
    counts = await lengths(backend)
    assert counts[shard[0]] == 1
    assert sum(counts) == 1
    assert await backend.length("shop") == 0  # nothing in the group's own stream
    assert backend.stream_keys(expected).stream == f"taskrunner:{{{expected}}}:tasks"


async def test_tasks_with_one_key_keep_their_order_in_one_shard() -> None:
    backend = MemoryBackend()
    runner = make_runner(backend)
    handles = []
    for n in range(30):
        handles.append(await runner.dispatch("charge", {"customer": "c1", "n": n}))
        await runner.dispatch("charge", {"customer": f"other-{n}", "n": n})
    shards = {_shards.parse_task_id(h.id, SHARDS)[0] for h in handles}  # type: ignore[index]
    assert len(shards) == 1
    (shard,) = shards
    entries = await backend.read(shard_group(shard), "c", 1000, 0)
    payloads = [_wire.decode_message(e.payload).payload for e in entries]
    order = [p["n"] for p in payloads if p["customer"] == "c1"]
    assert order == list(range(30))


async def test_unkeyed_dispatches_spread_round_robin() -> None:
    backend = MemoryBackend()
    runner = make_runner(backend)
    for n in range(2 * SHARDS):
        await runner.dispatch("plain", {"n": n})
    assert await lengths(backend) == [2] * SHARDS


async def test_keyed_dispatches_spread_over_the_shards() -> None:
    backend = MemoryBackend()
    runner = make_runner(backend)
    handles = await runner.dispatch_many("charge", [{"customer": n} for n in range(800)])
    counts = collections.Counter(_shards.parse_task_id(h.id, SHARDS)[0] for h in handles)  # type: ignore[index]
    assert len(counts) == SHARDS
    assert all(25 <= n <= 75 for n in counts.values()), counts
    assert await lengths(backend) == [counts[i] for i in range(SHARDS)]
    # dispatch_many returns the handles in the payloads' order, each naming its shard.
    again = await runner.dispatch_many("charge", [{"customer": 3}, {"customer": 4}])
    firsts = [h for h, p in zip(handles, range(800), strict=True) if p in (3, 4)]
    assert [h.id.split(".")[0] for h in again] == [h.id.split(".")[0] for h in firsts]


async def test_a_unique_key_is_unique_across_shards() -> None:
    backend = MemoryBackend()
    runner = make_runner(backend)
    first = await runner.dispatch("once", {"order": "o-1"})
    with pytest.raises(TaskAlreadyDispatched):
        await runner.dispatch("once", {"order": "o-1"})
    index = _shards.parse_task_id(first.id, SHARDS)[0]  # type: ignore[index]
    # A delayed run takes its lock when it is moved, in the same shard: it meets this one.
    later = await runner.dispatch_delayed("once", {"order": "o-1"}, 30.0)
    assert _shards.parse_task_id(later.id, SHARDS)[0] == index  # type: ignore[index]
    lock = _keys.unique_prefix(shard_group(index), "cluster") + "once:o-1"
    assert not await backend.acquire_lock(lock, "someone else", 60.0)  # the shard holds it
    others = {
        _shards.parse_task_id((await runner.dispatch("once", {"order": f"o-{n}"})).id, SHARDS)[0]  # type: ignore[index]
        for n in range(2, 40)
    }
    assert len(others) > 8  # unique keys spread too


async def test_lookup_cancel_and_result_go_straight_to_the_shard() -> None:
    backend = MemoryBackend()
    runner = make_runner(backend)
    queued = await runner.dispatch("charge", {"customer": 7})
    delayed = await runner.dispatch_delayed("charge", {"customer": 8}, 30.0)
    info = await runner.get_task(queued.id)
    assert info is not None
    assert info.id == queued.id
    assert info.state is TaskState.QUEUED
    scheduled = await runner.get_task(delayed.id)
    assert scheduled is not None
    assert scheduled.state is TaskState.SCHEDULED
    assert await runner.cancel(delayed)
    assert await runner.get_task(delayed.id) is None or (
        (await runner.get_task(delayed.id)).state is TaskState.CANCELLED  # type: ignore[union-attr]
    )
    # A result kept in the shard is what the handle waits for.
    index, inner = _shards.parse_task_id(queued.id, SHARDS)  # type: ignore[misc]
    (entry,) = await backend.read(shard_group(index), "c", 10, 0)
    doc = _wire.encode_result(
        _wire.succeeded("charge", 42, attempts=1, enqueued_at=None, started_at=None, finished_at=1)
    )
    outcome = Outcome(entry_id=entry.id, task_id=inner, document=doc, keep=60.0, notify=60.0)
    await backend.finish(shard_group(index), [entry.id], [outcome])
    assert await queued.result(timeout=1.0) == 42


@pytest.mark.parametrize("task_id", ["1700000000000-0", "16.1700000000000-0", "x.y"])
async def test_an_id_of_no_shard_is_not_found(task_id: str) -> None:
    runner = make_runner(MemoryBackend())
    assert await runner.get_task(task_id) is None
    assert not await runner.cancel(task_id)


async def test_a_workflow_on_a_sharded_group_is_refused_clearly() -> None:
    runner = make_runner(MemoryBackend())
    with pytest.raises(ValueError, match=r"^shards=16: a sharded group cannot run workflows"):
        await runner.dispatch_workflow(runner.step("plain", {}))
    assert await runner.backend.length("shop") == 0


# The recorded shard count -------------------------------------------------------------


async def test_the_first_sharded_dispatch_records_the_count() -> None:
    backend = MemoryBackend()
    runner = make_runner(backend)
    assert await backend.read_shard_count("shop") is None
    await runner.dispatch("plain", {})
    assert await backend.read_shard_count("shop") == SHARDS


async def test_a_live_group_refuses_another_shard_count() -> None:
    backend = MemoryBackend()
    await make_runner(backend).dispatch("charge", {"customer": 1})
    with pytest.raises(ShardCountError, match=r"^shards=8 differs from the 16 shard\(s\)"):
        await make_runner(backend, shards=8).dispatch("charge", {"customer": 1})
    unsharded = make_runner(backend, shards=1)
    with pytest.raises(ShardCountError, match=r"^shards=1 differs from the 16 shard\(s\)"):
        await unsharded.dispatch("charge", {"customer": 1})
    with pytest.raises(ShardCountError, match="still holds 1 message"):
        await unsharded.serve()
    assert await backend.read_shard_count("shop") == SHARDS
    assert await backend.length("shop") == 0  # nothing was dispatched in the old layout


async def test_a_delayed_task_keeps_the_group_live() -> None:
    backend = MemoryBackend()
    await make_runner(backend).dispatch_delayed("charge", {"customer": 1}, 60.0)
    with pytest.raises(ShardCountError, match="still holds 1 message"):
        await make_runner(backend, shards=4).dispatch("plain", {})


async def test_an_empty_group_changes_its_shard_count() -> None:
    backend = MemoryBackend()
    first = make_runner(backend)
    handle = await first.dispatch("charge", {"customer": 1})
    index, _ = _shards.parse_task_id(handle.id, SHARDS)  # type: ignore[misc]
    (entry,) = await backend.read(shard_group(index), "c", 10, 0)
    await backend.ack(shard_group(index), [entry.id])  # the group is empty now
    await make_runner(backend, shards=4).dispatch("plain", {})
    assert await backend.read_shard_count("shop") == 4


async def test_a_group_of_before_becomes_sharded_only_when_empty() -> None:
    backend = MemoryBackend(key_layout="cluster")
    await make_runner(backend, shards=1).dispatch("plain", {})  # unsharded, recorded as none
    assert await backend.read_shard_count("shop") is None
    with pytest.raises(ShardCountError, match=r"^shards=16 differs from the 1 shard\(s\)"):
        await make_runner(backend).dispatch("plain", {})


# The operator's tools ---------------------------------------------------------------


async def test_admin_finds_lists_cancels_and_flushes_a_sharded_group() -> None:
    from taskrunner import admin

    backend = MemoryBackend()
    runner = make_runner(backend)
    queued = await runner.dispatch("charge", {"customer": 7})
    delayed = await runner.dispatch_delayed("charge", {"customer": 8}, 60.0)
    assert (await admin.shards_of(backend, "shop")).count == SHARDS
    info = await admin.get_task(backend, "shop", queued.id)
    assert info is not None
    assert (info.id, info.state) == (queued.id, TaskState.QUEUED)
    assert await admin.cancel(backend, "shop", delayed.id)
    assert await admin.get_task(backend, "shop", "16.1-0") is None
    names = [key.name for key in await admin.list_keys(backend, "shop")]
    index = _shards.parse_task_id(queued.id, SHARDS)[0]  # type: ignore[index]
    assert backend.stream_keys(shard_group(index)).stream in names
    await admin.flush(backend, "shop", confirm=True)
    assert sum(await lengths(backend)) == 0
    assert await backend.read_shard_count("shop") is None
    assert await admin.list_keys(backend, "shop") == []
    await make_runner(backend, shards=4).dispatch("plain", {})  # empty: any count now
