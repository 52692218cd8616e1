"""Fetching a sharded group (issue 27): a fetcher per shard, the shards taking turns at
the pool round-robin, an idle shard costing one blocking read per ``block_duration``
(MockClock, MemoryBackend), and each entry acked in the shard it was read in."""

from __future__ import annotations

from typing import Any

import attrs
import pytest
import trio
import trio.testing
from _fleet import make_runner

from taskrunner import TaskRunner, _shards
from taskrunner._config import ConfigHolder
from taskrunner._flow.shard_turns import contended, next_turn, read_block, shard_slots
from taskrunner._flow.slots import SlotRequest
from taskrunner._serve import fetcher
from taskrunner._serve.acker import Acker
from taskrunner._serve.fetcher import FetcherContext, FetcherCounters
from taskrunner._serve.pool import WorkerPool
from taskrunner._serve.shard_fetch import Turns, shard_contexts, tag_entries
from taskrunner.backends import QueueEntry
from taskrunner.backends.memory import MemoryBackend

SHARDS = 4


@pytest.mark.parametrize(
    ("waiting", "last", "count", "expected"),
    [
        (set(), 3, 4, None),  # nobody waits
        ({0, 1, 2, 3}, 3, 4, 0),  # before anyone reserved: shard 0 first
        ({0, 1, 2, 3}, 0, 4, 1),  # the one after the last
        ({0, 2}, 0, 4, 2),  # skipping shards that do not wait
        ({0, 2}, 2, 4, 0),  # wrapping around
        ({3, 1}, 1, 4, 3),  # not the order of arrival, nor the lowest number
        ({1}, 1, 4, 1),  # alone: again
        ({5, 9}, 9, 16, 5),
    ],
)
def test_next_turn_is_the_first_waiting_shard_after_the_last(
    waiting: set[int], last: int, count: int, expected: int | None
) -> None:
    assert next_turn(waiting, last, count) == expected


@pytest.mark.parametrize(
    ("ask", "idle", "expected"),
    [
        (SlotRequest(most=8, at_least=2), False, SlotRequest(most=8, at_least=2)),
        (SlotRequest(most=8, at_least=2), True, SlotRequest(most=1, at_least=1)),
        (SlotRequest(most=1, at_least=1), True, SlotRequest(most=1, at_least=1)),
    ],
)
def test_an_idle_shard_reserves_one_slot(
    ask: SlotRequest, idle: bool, expected: SlotRequest
) -> None:
    assert shard_slots(ask, idle=idle) == expected


@pytest.mark.parametrize(
    ("held", "free", "wanting", "expected"),
    [
        (1, 5, False, 2.0),  # one slot, nobody could use it: block
        (1, 0, False, 0.0),  # the pool's last slot: probe (someone may come for it)
        (1, 5, True, 0.0),  # a shard with work waits: probe
        (8, 5, False, 0.0),  # a batch never blocks: it may have emptied its shard
        (8, 0, True, 0.0),
        (1, -2, False, 0.0),  # the pool shrank below what it holds
    ],
)
def test_a_read_blocks_only_holding_one_slot_nobody_could_use(
    held: int, free: int, wanting: bool, expected: float
) -> None:
    assert read_block(held=held, free=free, wanting=wanting, block=2.0) == expected
    assert contended(free=free, wanting=wanting) is (free < 1 or wanting)


async def test_a_resting_shard_comes_back_at_its_deadline_or_when_a_slot_is_spare(
    autojump_clock: trio.testing.MockClock,
) -> None:
    turns = Turns(4)
    back: list[float] = []

    async def rest() -> None:
        await turns.rest(trio.current_time() + 10)
        back.append(trio.current_time())

    async with trio.open_nursery() as nursery:
        nursery.start_soon(rest)
        await trio.sleep(1)
        await turns.take(0)
        turns.give(0)  # no slot spare: it rests on
        await trio.sleep(1)
        assert back == []
        await turns.take(0)
        turns.give(0, spare=True)  # a slot spare and nobody waiting: back
        await trio.testing.wait_all_tasks_blocked()
        assert back == [2.0]
        nursery.start_soon(rest)
        await trio.sleep(20)
    assert back == [2.0, 12.0]


async def test_turns_pass_round_robin_not_in_order_of_arrival() -> None:
    turns = Turns(4)
    await turns.take(0)
    granted: list[int] = []

    async def wait_turn(shard: int) -> None:
        await turns.take(shard)
        granted.append(shard)

    async with trio.open_nursery() as nursery:
        for shard in (3, 0, 2, 1):  # arrive in this order while shard 0 holds the turn
            nursery.start_soon(wait_turn, shard)
            await trio.testing.wait_all_tasks_blocked()
        turns.give(0)
        for _ in range(4):
            await trio.testing.wait_all_tasks_blocked()
            turns.give(granted[-1])
    assert granted == [1, 2, 3, 0]


async def test_a_cancelled_waiter_does_not_keep_the_turn() -> None:
    turns = Turns(4)
    await turns.take(0)
    got: list[int] = []

    async def wait_turn(shard: int) -> None:
        await turns.take(shard)
        got.append(shard)

    one = trio.CancelScope()

    async def cancellable() -> None:
        with one:
            await turns.take(1)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(wait_turn, 2)
        nursery.start_soon(cancellable)
        await trio.testing.wait_all_tasks_blocked()
        one.cancel()
        await trio.testing.wait_all_tasks_blocked()
        turns.give(0)  # shard 1 left: the turn goes to 2
    assert got == [2]


class CountingReads(MemoryBackend):
    """Counts the reads of each group (each shard is one)."""

    def __init__(self) -> None:
        super().__init__()
        self.reads: dict[str, int] = {}

    async def read(
        self, group: str, consumer: str, count: int, block: float, *, queue: str | None = None
    ) -> list[QueueEntry]:
        self.reads[group] = self.reads.get(group, 0) + 1
        return await super().read(group, consumer, count, block, queue=queue)


def tags(group: str = "g") -> list[str]:
    return [_shards.shard_tag(group, i, SHARDS) for i in range(SHARDS)]


def fetching(runner: TaskRunner, backend: MemoryBackend, pool: WorkerPool) -> FetcherContext:
    """The context the runner's fetchers would get (its gate is never run: nothing paused)."""
    config = runner.config
    return FetcherContext(
        config=config,
        backend=backend,
        pool=pool,
        execute=runner._parts.worker.execute,
        counters=FetcherCounters(),
        gate=runner._parts.gate,
        queues=(backend.stream_keys(config.consumer_group).queue,),
    )


async def run_shard_fetchers(
    nursery: trio.Nursery, context: FetcherContext, started: list[tuple[str | None, str]]
) -> None:
    """Start one fetcher per shard, recording (shard, id) of each entry it starts."""

    def record(entry: QueueEntry, consumer: str) -> None:
        started.append((entry.group, entry.id))

    for part in shard_contexts(context):
        assert part.group is not None
        await nursery.start(fetcher.run, part, tag_entries(record, part.group), 1)


async def test_an_empty_shard_costs_one_read_per_block_duration(
    autojump_clock: trio.testing.MockClock,
) -> None:
    backend = CountingReads()
    runner = make_runner(backend, shards=SHARDS, block_duration=2.0)
    started: list[tuple[str | None, str]] = []
    async with trio.open_nursery() as nursery:
        await run_shard_fetchers(nursery, fetching(runner, backend, WorkerPool(8)), started)
        await trio.sleep(60)
        nursery.cancel_scope.cancel()
    assert started == []
    # every shard read, each on its own, and the group's own stream (periodic ticks)
    assert sorted(backend.reads) == sorted([*tags(), "g"])
    for tag in [*tags(), "g"]:
        assert 25 <= backend.reads[tag] <= 31, backend.reads  # 60 s / 2 s, no busy loop


async def test_each_shard_is_read_and_its_entries_carry_its_tag(
    autojump_clock: trio.testing.MockClock,
) -> None:
    backend = CountingReads()
    runner = make_runner(backend, shards=SHARDS, block_duration=2.0)
    runner.task(name="t")(noop)
    handles = [await runner.dispatch("t") for _ in range(4 * SHARDS)]  # round-robin: 4 each
    started: list[tuple[str | None, str]] = []
    async with trio.open_nursery() as nursery:
        await run_shard_fetchers(nursery, fetching(runner, backend, WorkerPool(64)), started)
        await trio.sleep(5)
        nursery.cancel_scope.cancel()
    expected = set()
    for handle in handles:
        parsed = _shards.parse_task_id(handle.id, SHARDS)
        assert parsed is not None
        expected.add((tags()[parsed[0]], parsed[1]))
    assert sorted(started, key=str) == sorted(expected, key=str)  # each once, in its shard


async def test_pool_capacity_is_shared_round_robin_across_busy_shards(
    autojump_clock: trio.testing.MockClock,
) -> None:
    backend = CountingReads()
    runner = make_runner(backend, shards=SHARDS, batch_size=1, block_duration=2.0)
    runner.task(name="t")(noop)
    await runner.dispatch_many("t", [None] * (10 * SHARDS))  # 10 in every shard
    pool = WorkerPool(1)
    started: list[tuple[str | None, str]] = []
    async with trio.open_nursery() as nursery:
        await run_shard_fetchers(nursery, fetching(runner, backend, pool), started)
        for _ in range(4 * SHARDS):  # one run at a time: free its slot, let the next in
            await trio.testing.wait_all_tasks_blocked()
            pool.release()
        await trio.testing.wait_all_tasks_blocked()
        nursery.cancel_scope.cancel()
    shards = [group for group, _ in started]
    for at in range(0, 4 * SHARDS, SHARDS):  # every round of SHARDS starts has each shard once
        assert sorted(shards[at : at + SHARDS], key=str) == sorted(tags()), shards


async def test_an_entry_is_acked_in_the_shard_it_was_read_in() -> None:
    backend = MemoryBackend()
    runner = make_runner(backend, shards=SHARDS)
    runner.task(name="t")(noop)
    await runner.dispatch_many("t", [None] * SHARDS)  # one in each shard
    shard = tags()[2]
    (entry,) = await backend.read(shard, "c", 10, 0.0)
    assert (await backend.group_info(shard)).pending == 1
    acker = Acker(backend, ConfigHolder(runner.config))
    acker.ack(entry.id, queue=entry.queue, group=shard)
    async with trio.open_nursery() as nursery:
        await nursery.start(acker.run)
        nursery.cancel_scope.cancel()  # the final flush sends it
    assert (await backend.group_info(shard)).pending == 0
    assert acker.acked == 1


def test_a_tagged_entry_keeps_every_field_but_its_group() -> None:
    entry = QueueEntry(
        id="1-0",
        payload=b"{}",
        delivery_count=3,
        queue="q",
        group=None,
        inputs=(b"header", b"result"),
    )
    names = {field.name for field in attrs.fields(QueueEntry)}
    assert names == {"id", "payload", "delivery_count", "queue", "group", "inputs"}, (
        "a new field: copy it in shard_fetch.tag_entries"
    )
    started: list[QueueEntry] = []
    tag_entries(lambda tagged, consumer: started.append(tagged), "g:1:5")(entry, "c")
    assert started == [attrs.evolve(entry, group="g:1:5")]


async def noop(payload: Any) -> None:
    """A task never run here."""


def test_served_groups_are_every_shard_then_the_group_and_just_the_group_unsharded() -> None:
    assert _shards.served_groups("g", 1) == ("g",)
    assert _shards.served_groups("g", SHARDS) == (*tags(), "g")
