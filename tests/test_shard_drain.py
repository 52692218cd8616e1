"""Draining a sharded group with a small pool (issue 27), on one MemoryBackend and
trio's MockClock: the shards with work are never kept waiting by an idle shard's
blocking read. A single-worker runner of 16 shards drains one shard's backlog about as
fast as a runner of one shard, its idle shards each costing about one read per
``block_duration`` meanwhile; and a drain of an uneven backlog over 16 shards never
pauses for a ``block_duration`` before its last task."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
import trio
import trio.testing
from _fleet import make_runner, serving, wait_until

from taskrunner import TaskRunner
from taskrunner.backends import QueueEntry
from taskrunner.backends.memory import MemoryBackend

RUN = 0.01
"""How long each task runs (simulated seconds)."""
BLOCK = 1.0
"""The runners' ``block_duration``."""


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


async def drain(
    backend: MemoryBackend, runner: TaskRunner, keys: list[int], *, limit: float
) -> list[float]:
    """Dispatch one task per key (its ``shard_key``), serve until every one started,
    and return each start's time from the start of serving."""
    starts: list[float] = []

    @runner.task(name="t", shard_key=lambda key: key)
    async def t(payload: Any) -> None:
        starts.append(trio.current_time())
        await trio.sleep(RUN)

    await runner.dispatch_many("t", keys)
    begun = trio.current_time()
    async with serving(runner):
        await wait_until(lambda: len(starts) == len(keys), limit=limit, step=RUN / 4)
    return [at - begun for at in starts]


@pytest.mark.parametrize("shards", [1, 16])
async def test_one_worker_drains_one_shards_backlog_at_the_unsharded_rate(
    autojump_clock: trio.testing.MockClock, shards: int
) -> None:
    backend = CountingReads()
    runner = make_runner(backend, shards=shards, num_workers=1, block_duration=BLOCK)
    tasks = 1000  # 10 simulated seconds of work at one worker
    starts = await drain(backend, runner, [7] * tasks, limit=100)
    rate = tasks / (starts[-1] + RUN)  # tasks per simulated second
    assert rate >= 0.9 / RUN, rate  # shards=1 runs at 1 / RUN; 16 shards did 16 a second
    busiest = max(backend.reads, key=backend.reads.__getitem__)
    idle = {group: n for group, n in backend.reads.items() if group != busiest}
    assert len(idle) == (shards if shards > 1 else 0)  # every other shard, and the group
    seconds = starts[-1] / BLOCK
    for group, reads in idle.items():  # about one read per block_duration: no busy loop
        assert reads <= seconds + 3, (group, reads, seconds)


@pytest.mark.parametrize("workers", [4, 20, 32])
async def test_an_uneven_drain_never_pauses_for_a_block_duration(
    autojump_clock: trio.testing.MockClock, workers: int
) -> None:
    backend = MemoryBackend()
    runner = make_runner(
        backend, shards=16, num_workers=workers, batch_size=32, block_duration=BLOCK
    )
    keys = [key % 3 for key in range(3000)]  # three keys: at most three shards with work
    starts = await drain(backend, runner, keys, limit=600)
    gaps = [after - before for before, after in itertools.pairwise(starts)]
    # Tasks run for RUN and a slot frees every RUN / workers: the next start follows.
    # (Only a first read, made before every shard's loop asked, may hold slots for one
    # block_duration: the start of the drain is bounded, not its tail.)
    assert max(gaps) <= 0.1 * BLOCK, sorted(gaps)[-5:]
    ideal = len(keys) * RUN / workers
    assert starts[-1] <= ideal * 1.5 + BLOCK, (starts[-1], ideal)


async def test_a_shard_emptied_by_a_full_batch_does_not_block_holding_it(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # Nine tasks in each shard: a shard's first read (one slot) and its second (a
    # batch of eight) both come back full, so its third asks for a batch again and
    # finds the shard empty. Blocking there held the batch for a block_duration
    # (four such reads held the whole pool) while the hot shard waited: the tail of
    # a drain stalled for one to two block_durations.
    backend = MemoryBackend()
    runner = make_runner(backend, shards=16, num_workers=32, batch_size=8, block_duration=BLOCK)
    starts: list[float] = []

    async def record(payload: Any) -> None:
        starts.append(trio.current_time())
        await trio.sleep(RUN)

    runner.task(name="spread")(record)
    runner.task(name="hot", shard_key=lambda payload: "hot")(record)
    await runner.dispatch_many("spread", [None] * (16 * 9))
    await runner.dispatch_many("hot", [None] * 400)
    async with serving(runner):
        await wait_until(lambda: len(starts) == 16 * 9 + 400, limit=60, step=RUN / 4)
    gaps = [after - before for before, after in itertools.pairwise(starts)]
    assert max(gaps) <= 0.1 * BLOCK, sorted(gaps)[-5:]


async def test_a_task_for_a_resting_shard_starts_within_a_block_duration(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # One worker kept busy by one shard's backlog: the other shards rest, and one of
    # them, dispatched to meanwhile, is read at its next turn (its rest ends within a
    # block_duration), not after the backlog.
    backend = MemoryBackend()
    runner = make_runner(backend, shards=16, num_workers=1, block_duration=BLOCK)
    started: dict[str, list[float]] = {"hot": [], "cold": []}

    @runner.task(name="t", shard_key=lambda payload: payload)
    async def t(payload: str) -> None:
        started[payload].append(trio.current_time())
        await trio.sleep(RUN)

    hot = await runner.dispatch_many("t", ["hot"] * 2000)  # 20 s of work at one worker
    async with serving(runner):
        await trio.sleep(5)
        dispatched = trio.current_time()
        cold = await runner.dispatch("t", "cold")
        await wait_until(lambda: bool(started["cold"]), limit=60, step=RUN / 4)
    assert cold.id.split(".")[0] != hot[0].id.split(".")[0]  # two shards
    assert started["cold"][0] - dispatched <= BLOCK + 0.1, started["cold"][0] - dispatched
    assert len(started["hot"]) < 1000  # the backlog was not drained first
