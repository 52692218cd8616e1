"""Worker-pool capacity and the in-flight refresh table."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from taskrunner._inflight import InFlight
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


async def test_wait_idle() -> None:
    pool = WorkerPool(2)
    await pool.reserve(2)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(pool.wait_idle)
        await trio.testing.wait_all_tasks_blocked()
        pool.release(2)
    assert pool.in_use == 0


def test_capacity_must_be_positive() -> None:
    with pytest.raises(ValueError, match="capacity must be >= 1, got 0"):
        WorkerPool(0)
    with pytest.raises(ValueError, match="got -1"):
        WorkerPool(3).resize(-1)


def test_inflight_due_refreshes_early_never_late() -> None:
    table = InFlight()
    table.add("1-1", "c1", reservation_timeout=10, now=0)
    table.add("1-2", "c2", reservation_timeout=4, now=0)
    assert table.due(now=2, slack=2) == {"c2": ["1-2"]}  # due at 4, within the slack
    assert table.due(now=2, slack=2) == {"c2": ["1-2"]}, "due() only reads"
    table.refreshed(["1-2"], at=2)
    assert table.due(now=3, slack=2) == {}  # next at 2 + 4
    assert table.due(now=8, slack=2) == {"c1": ["1-1"], "c2": ["1-2"]}
    table.remove("1-1")
    table.refreshed(["1-1"], at=8)  # no longer running: ignored
    assert "1-1" not in table
    assert len(table) == 1


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
