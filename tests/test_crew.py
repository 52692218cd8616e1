"""The crew's idle workers: woken to run what the fetchers hand over, reused, and
gone cleanly on close or cancellation (they park as bare trio tasks)."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from taskrunner._serve.crew import Crew, Slot
from taskrunner._serve.pool import WorkerPool
from taskrunner.backends import QueueEntry


def _entry(n: int) -> QueueEntry:
    return QueueEntry(id=f"1-{n}", payload=None, delivery_count=1)


async def test_idle_workers_are_woken_reused_and_leave_on_close() -> None:
    ran: list[tuple[str, str]] = []

    async def execute(entry: QueueEntry, consumer: str, slot: Slot) -> None:
        await trio.lowlevel.checkpoint()
        ran.append((entry.id, consumer))

    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            crew = Crew(execute, nursery, WorkerPool(4))
            for n in range(3):
                crew.start(_entry(n), "c1")
            await trio.testing.wait_all_tasks_blocked()
            assert crew.alive == 3  # all idle now, parked
            for n in range(3, 6):
                crew.start(_entry(n), "c2")
            await trio.testing.wait_all_tasks_blocked()
            assert crew.alive == 3  # the idle ones ran them: none started
            crew.close()
    assert crew.alive == 0
    assert sorted(ran) == [(f"1-{n}", "c1" if n < 3 else "c2") for n in range(6)]


async def test_workers_cancelled_while_idle_leave_nothing_to_wake() -> None:
    async def execute(entry: QueueEntry, consumer: str, slot: Slot) -> None:
        await trio.lowlevel.checkpoint()

    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            crew = Crew(execute, nursery, WorkerPool(4))
            for n in range(2):
                crew.start(_entry(n), "c")
            await trio.testing.wait_all_tasks_blocked()
            nursery.cancel_scope.cancel()
    assert crew.alive == 0
    # Nothing parked is left behind: a start now finds no idle worker to wake (a worker
    # that is gone would be rescheduled), so it spawns one, which the closed nursery
    # refuses.
    with pytest.raises(RuntimeError, match="closed"):
        crew.start(_entry(9), "c")
