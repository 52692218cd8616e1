"""Worker-pool capacity: reserving, releasing, resizing."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from taskrunner._serve.pool import WorkerPool


async def test_reserve_takes_what_is_free_up_to_the_ask() -> None:
    pool = WorkerPool(5)
    assert await pool.reserve(3) == 3
    assert await pool.reserve(10) == 2
    assert pool.in_use == 5
    pool.release(4)
    assert await pool.reserve(10) == 4


async def test_reserve_waits_for_a_free_slot(autojump_clock: trio.testing.MockClock) -> None:
    pool = WorkerPool(1)
    await pool.reserve(1)
    got: list[tuple[float, int]] = []

    async def waiter() -> None:
        reserved = await pool.reserve(4)
        got.append((trio.current_time(), reserved))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(waiter)
        await trio.sleep(2)
        assert got == []
        pool.release()
    assert got == [(2.0, 1)]


async def test_shrinking_refuses_new_slots_until_below_the_new_capacity() -> None:
    pool = WorkerPool(4)
    assert await pool.reserve(4) == 4
    pool.resize(2)
    pool.release(2)  # 2 in use, capacity 2: still full
    with trio.move_on_after(0.01) as scope:
        await pool.reserve(1)
    assert scope.cancelled_caught
    pool.release()
    assert await pool.reserve(5) == 1


async def test_growing_wakes_waiters_at_once() -> None:
    pool = WorkerPool(1)
    await pool.reserve(1)
    got: list[int] = []
    async with trio.open_nursery() as nursery:
        nursery.start_soon(lambda: _reserve_into(pool, got))
        await trio.testing.wait_all_tasks_blocked()
        pool.resize(4)
    assert got == [3]


async def _reserve_into(pool: WorkerPool, got: list[int]) -> None:
    got.append(await pool.reserve(8))


def test_capacity_must_be_positive() -> None:
    with pytest.raises(ValueError, match="capacity must be >= 1, got 0"):
        WorkerPool(0)
    with pytest.raises(ValueError, match="got -1"):
        WorkerPool(3).resize(-1)


async def test_reserve_lingers_for_a_batch_then_takes_what_is_free(
    autojump_clock: trio.testing.MockClock,
) -> None:
    pool = WorkerPool(8)
    assert await pool.reserve(8) == 8
    got: list[tuple[float, int]] = []

    async def fetcher() -> None:
        reserved = await pool.reserve(8, at_least=4, linger=0.005)
        got.append((trio.current_time(), reserved))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(fetcher)
        await trio.sleep(1)
        pool.release()  # one frees: the fetcher lingers for more
        await trio.sleep(0.001)
        pool.release(2)
        await trio.sleep(0.001)
        assert got == []
        pool.release()  # four free now
    assert got == [(pytest.approx(1.002), 4)]

    async with trio.open_nursery() as nursery:
        nursery.start_soon(fetcher)
        await trio.sleep(1)
        pool.release()  # only one frees: taken once the linger runs out
    assert got[-1] == (pytest.approx(2.007), 1)


async def test_a_lingering_fetcher_is_woken_only_when_its_batch_is_free(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # Each wake-up is a scheduling step: one per freed slot was one per task.
    pool = WorkerPool(8)
    assert await pool.reserve(8) == 8
    steps = 0

    class Steps(trio.abc.Instrument):
        def before_task_step(self, task: trio.lowlevel.Task) -> None:
            nonlocal steps
            if task.name.endswith("fetcher"):
                steps += 1

    async def fetcher() -> None:
        await pool.reserve(8, at_least=4, linger=0.005)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(fetcher)
        await trio.sleep(1)
        pool.release()  # the first slot frees: the fetcher starts lingering
        await trio.testing.wait_all_tasks_blocked()
        trio.lowlevel.add_instrument(instrument := Steps())
        for _ in range(2):
            pool.release()
            await trio.testing.wait_all_tasks_blocked()
        assert steps == 0, "woken before four slots were free"
        pool.release()
    trio.lowlevel.remove_instrument(instrument)
    assert steps == 1
