"""The crew's watchdog (taskrunner._serve.watchdog): each run cancelled at its deadline."""

from __future__ import annotations

import math

import trio
import trio.testing
from _fleet import make_runner, serving, wait_until

from taskrunner._serve.watchdog import Watchdog
from taskrunner.backends.memory import MemoryBackend


class FakeSlot:
    """A slot as the watchdog sees it: a deadline, and when it was expired."""

    def __init__(self) -> None:
        self.deadline = math.inf
        self.expired_at: float | None = None

    def time(self, watchdog: Watchdog, deadline: float) -> None:
        self.deadline = deadline
        watchdog.nudge(deadline)

    def expire(self) -> None:
        self.deadline = math.inf
        self.expired_at = trio.current_time()


async def test_each_slot_is_expired_at_its_deadline_even_one_set_after_a_later_one(
    autojump_clock: trio.testing.MockClock,
) -> None:
    late, early, done = FakeSlot(), FakeSlot(), FakeSlot()
    watchdog = Watchdog([late, early, done])
    with trio.fail_after(100):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(watchdog.run)
            await trio.sleep(1)
            late.time(watchdog, 31.0)
            await trio.sleep(1)
            early.time(watchdog, 7.0)  # sooner than the watchdog meant to look: it is woken
            done.time(watchdog, 5.0)
            await trio.sleep(1)
            done.deadline = math.inf  # its run returned in time: never expired
            await trio.sleep(40)
            watchdog.close()
    assert (late.expired_at, early.expired_at, done.expired_at) == (31.0, 7.0, None)


async def test_a_later_deadline_does_not_wake_it(autojump_clock: trio.testing.MockClock) -> None:
    first, second = FakeSlot(), FakeSlot()
    watchdog = Watchdog([first, second])
    async with trio.open_nursery() as nursery:
        nursery.start_soon(watchdog.run)
        await trio.sleep(1)
        first.time(watchdog, 10.0)
        await trio.sleep(1)
        assert watchdog.wake_at == 10.0
        second.time(watchdog, 12.0)
        assert watchdog.wake_at == 10.0, "a run with a later deadline leaves it asleep"
        await trio.sleep(20)
        assert (first.expired_at, second.expired_at) == (10.0, 12.0)
        assert watchdog.wake_at == math.inf, "nothing left to time"
        watchdog.close()


async def test_close_ends_it_at_once(autojump_clock: trio.testing.MockClock) -> None:
    watchdog = Watchdog([])
    with trio.fail_after(1):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(watchdog.run)
            await trio.sleep(0.5)
            watchdog.close()
    assert trio.current_time() == 0.5


async def test_a_run_with_a_shorter_timeout_is_cut_at_its_own_deadline(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Through the crew: a run with a 5 s timeout starting while one with 100 s runs is
    cancelled at 5 s (the watchdog, asleep until 100 s, is woken for it), and a run
    that returns in time is not cut at all."""
    failed: list[tuple[str, float]] = []
    runner = make_runner(
        MemoryBackend(),
        num_workers=3,
        on_error=lambda e, d: failed.append((d.task_name or "", trio.current_time())),
    )
    finished: list[float] = []

    @runner.task(timeout=100.0, max_retry=0)
    async def slow(payload: None) -> None:
        await trio.sleep_forever()

    @runner.task(timeout=5.0, max_retry=0)
    async def quick(payload: None) -> None:
        await trio.sleep_forever()

    @runner.task(timeout=5.0)
    async def in_time(payload: None) -> None:
        await trio.sleep(4.5)
        finished.append(trio.current_time())

    async with serving(runner):
        await runner.dispatch("slow")
        await trio.sleep(1)
        start = trio.current_time()
        await runner.dispatch("quick")
        await runner.dispatch("in_time")
        await wait_until(lambda: len(failed) == 2)
    (quick_at,) = [at for name, at in failed if name == "quick"]
    (slow_at,) = [at for name, at in failed if name == "slow"]
    assert start + 5 <= quick_at < start + 5.5
    assert 100 <= slow_at < 101.5
    assert len(finished) == 1
    assert runner.statistics().completed == 1
