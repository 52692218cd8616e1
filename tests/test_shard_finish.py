"""The finish path of a sharded group's entry (issue 27): an entry read in a shard (its
``group`` is the shard's tag) is acked there, its unique lock released there, its kept
result written there, its dead letter added there; the leader moves every shard's
delayed tasks and cleans every shard's consumers (MemoryBackend, MockClock)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from typing import Any

import attrs
import trio
import trio.testing
from _fleet import make_runner

from taskrunner import TaskRunner, TaskState, _shards
from taskrunner._serve import cleanup
from taskrunner._task import Delivery
from taskrunner._wire import decode_message
from taskrunner.backends import QueueEntry
from taskrunner.backends.memory import MemoryBackend
from taskrunner.errors import InvalidTaskPayload

SHARDS = 4


def sharded_runner(backend: MemoryBackend) -> TaskRunner:
    runner = make_runner(backend, consumer_group="shop", shards=SHARDS)

    @runner.task(name="once", unique=True, unique_key=lambda p: p["order"], unique_for=600.0)
    async def once(payload: dict[str, Any]) -> None:
        raise AssertionError("not run here")

    @runner.task(name="kept", keep_result=60.0)
    async def kept(payload: None) -> None:
        raise AssertionError("not run here")

    return runner


async def read_in_shard(backend: MemoryBackend, task_id: str) -> QueueEntry:
    """The entry of ``task_id``, read in its shard, as the shard's fetcher hands it on."""
    parsed = _shards.parse_task_id(task_id, SHARDS)
    assert parsed is not None
    tag = _shards.shard_tag("shop", parsed[0], SHARDS)
    (entry,) = await backend.read(tag, "shop_h_1", 10, 0.0)
    assert entry.id == parsed[1]
    return attrs.evolve(entry, group=tag)


@asynccontextmanager
async def acking(runner: TaskRunner) -> AsyncIterator[None]:
    """Run the runner's acker for the block; its final flush sends what is left."""
    async with trio.open_nursery() as nursery:
        await nursery.start(runner._parts.acker.run)
        yield
        nursery.cancel_scope.cancel()


async def test_a_done_entry_is_acked_in_its_shard_and_its_lock_released_there() -> None:
    backend = MemoryBackend()
    runner = sharded_runner(backend)
    handle = await runner.dispatch("once", {"order": "o1"})
    entry = await read_in_shard(backend, handle.id)
    assert entry.group is not None
    message = decode_message(entry.payload)
    async with acking(runner):
        runner._parts.worker.outcomes.done(entry.id, message, entry.queue, group=entry.group)
    assert (await backend.group_info(entry.group)).pending == 0
    again = await runner.dispatch("once", {"order": "o1"})  # the lock is gone: no refusal
    assert again.id != handle.id


async def test_a_kept_result_is_written_in_its_shard() -> None:
    backend = MemoryBackend()
    runner = sharded_runner(backend)
    handle = await runner.dispatch("kept")
    entry = await read_in_shard(backend, handle.id)
    message = decode_message(entry.payload)
    task = runner.tasks["kept"]
    async with acking(runner):
        runner._parts.worker.outcomes.succeeded(entry, task, message, 60.0, 0.0, None)
    info = await runner.get_task(handle.id)
    assert info is not None
    assert info.state == TaskState.SUCCEEDED
    assert entry.group is not None
    assert (await backend.group_info(entry.group)).pending == 0


async def test_a_failed_entry_is_dead_lettered_and_acked_in_its_shard() -> None:
    backend = MemoryBackend()
    runner = sharded_runner(backend)
    handle = await runner.dispatch("kept")
    entry = await read_in_shard(backend, handle.id)
    assert entry.group is not None
    delivery = Delivery(
        id=entry.id,
        consumer="shop_h_1",
        delivery_count=1,
        raw=entry.payload,
        message=decode_message(entry.payload),
        queue=entry.queue,
        group=entry.group,
    )
    async with acking(runner):
        await runner._parts.worker.outcomes.fail(delivery, InvalidTaskPayload("bad"))
    assert [d.message_id for d in await backend.dead_letters(entry.group)] == [entry.id]
    assert await backend.dead_letters("shop") == []
    assert (await backend.group_info(entry.group)).pending == 0


async def test_the_leader_moves_every_shards_delayed_tasks_and_the_groups_own(
    autojump_clock: trio.testing.MockClock,
) -> None:
    backend = MemoryBackend()
    runner = sharded_runner(backend)
    for _ in range(2 * SHARDS):  # round-robin: two in every shard
        await runner.dispatch_delayed("kept", None, 30.0)
    tags = [_shards.shard_tag("shop", i, SHARDS) for i in range(SHARDS)]
    scheduler = runner._parts.scheduler
    assert await scheduler.run_pass() == (0, 0)  # none due yet
    await trio.sleep(31)
    assert await scheduler.run_pass() == (2 * SHARDS, 0)
    assert [await backend.length(tag) for tag in tags] == [2] * SHARDS


async def test_the_leader_cleans_every_shards_idle_consumers(
    autojump_clock: trio.testing.MockClock,
) -> None:
    backend = MemoryBackend()
    tags = _shards.served_groups("shop", SHARDS)
    for group in tags:
        assert await backend.read(group, "gone_1", 1, 0.0) == []  # a consumer, then gone
    assert all([(await backend.group_info(group)).consumers for group in tags])
    await trio.sleep(cleanup.CONSUMER_MAX_IDLE + 1)
    async with trio.open_nursery() as nursery:
        await nursery.start(partial(cleanup.run, backend, "shop", shards=SHARDS))
        await trio.sleep(1)
        nursery.cancel_scope.cancel()
    for group in tags:
        assert not (await backend.group_info(group)).consumers


async def test_a_shard_entrys_last_event_goes_to_the_groups_stream_after_its_ack() -> None:
    # The acker's reports ride a flush's first call; in a shard that call runs in the
    # shard's slot, so its events go to the runner's group right after the ack lands
    # (the progress stays with the ack, in the shard).
    backend = MemoryBackend()
    runner = make_runner(backend, consumer_group="shop", shards=SHARDS, events=True)

    @runner.task(name="plain")
    async def plain(payload: None) -> None:
        raise AssertionError("not run here")

    handle = await runner.dispatch("plain")
    entry = await read_in_shard(backend, handle.id)
    assert entry.group is not None
    message = decode_message(entry.payload)
    # under the sharded id, as ctx.task_id gives it
    runner._parts.worker.outcomes.finishing.reports.report(handle.id, 1.0, "done")
    async with acking(runner):
        runner._parts.worker.outcomes.done(
            entry.id, message, entry.queue, entry.delivery_count, group=entry.group
        )
    assert (await backend.group_info(entry.group)).pending == 0
    events = await backend.read_events("shop", "0-0", count=100, block=0)
    # the dispatch's event too: written apart, to the group's stream, by the dispatcher
    mine = [(e.kind, e.task_id) for e in events if e.message_id == entry.id]
    assert mine == [("dispatched", handle.id), ("succeeded", handle.id)]
    assert await backend.read_events(entry.group, "0-0", count=100, block=0) == []
    assert await backend.read_progress(entry.group, entry.id) is not None  # the shard's own id
    assert await backend.read_progress(entry.group, handle.id) is None
