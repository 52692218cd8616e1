"""The fetcher: reclaiming a crashed holder's messages, and reading a busy queue in
batches (MemoryBackend, MockClock)."""

from __future__ import annotations

import random

import trio
import trio.lowlevel
import trio.testing
from _fleet import make_runner, serving, wait_until

from taskrunner import (
    Task,
)
from taskrunner.backends import QueueEntry
from taskrunner.backends.memory import MemoryBackend


async def test_message_of_a_crashed_holder_is_reclaimed_after_reclaim_delay(
    autojump_clock: trio.testing.MockClock,
) -> None:
    backend = MemoryBackend()
    first = make_runner(backend, reclaim_delay=30, shutdown_grace=0)
    second = make_runner(backend, reclaim_delay=30)
    runs: list[tuple[str, int, float]] = []

    async def hang(payload: None) -> None:
        runs.append(("first", 0, trio.current_time()))
        await trio.sleep_forever()

    async def finish(payload: None) -> None:
        runs.append(("second", 0, trio.current_time()))

    first.register(Task(name="job", action=hang, max_retry=2, reservation_timeout=5))
    second.register(Task(name="job", action=finish, max_retry=2, reservation_timeout=5))

    await first.dispatch("job")
    async with trio.open_nursery() as crash:
        await crash.start(first.serve)
        await wait_until(lambda: len(runs) == 1)
        await trio.sleep(10)  # refreshed meanwhile: still held by first
        crash.cancel_scope.cancel()  # the "crash": grace 0, nothing acked
    crashed_at = trio.current_time()
    assert first.statistics().acked == 0
    assert (await backend.group_info("g")).pending == 1

    async with serving(second):
        await wait_until(lambda: len(runs) == 2)
        await wait_until(lambda: second.statistics().acked == 1)
    reclaimed_at = runs[1][2]
    assert reclaimed_at - crashed_at >= 30 - 1e-9
    assert reclaimed_at - crashed_at <= 30 + 15 + 1  # + reclaim interval + block
    assert second.statistics().reclaimed == 1


async def test_a_busy_queue_is_read_in_batches_not_one_message_per_freed_slot(
    autojump_clock: trio.testing.MockClock,
) -> None:
    class CountingReads(MemoryBackend):
        reads = 0

        async def read(
            self, group: str, consumer: str, count: int, block: float, *, queue: str | None = None
        ) -> list[QueueEntry]:
            CountingReads.reads += 1
            return await super().read(group, consumer, count, block, queue=queue)

    backend = CountingReads()
    runner = make_runner(backend, num_workers=32, batch_size=32)
    rng = random.Random(5)

    @runner.task()
    async def work(payload: None) -> None:
        await trio.sleep(rng.uniform(0.01, 0.02))

    await runner.dispatch_many("work", [None] * 2000)
    async with serving(runner):
        await wait_until(lambda: runner.statistics().acked == 2000)
    assert CountingReads.reads < 2000 / 4, f"{CountingReads.reads} reads for 2000 messages"
