"""Timeouts and sync (thread) actions: the deadline, TaskTimeout, refresh stopping past
it, threads bounded by the pool or sync_threads (MemoryBackend, MockClock)."""

from __future__ import annotations

import threading
import time

import pytest
import trio
import trio.testing
from _fleet import make_runner, serving, wait_until

from taskrunner import (
    Delivery,
    TaskContext,
    TaskExecutionError,
    TaskMaxRetryExceeded,
    TaskRunnerError,
    TaskTimeout,
)
from taskrunner.backends.memory import MemoryBackend

THREAD_TIMEOUT = 300.0
"""The timeout of the thread tests (in MockClock seconds; see the first of them)."""
RELEASE_GUARD = 600.0
"""Real seconds a blocked thread waits for its test to let it go: a hang guard only (each
test lets it go in a ``finally``). The clock must cross THREAD_TIMEOUT first, in 0.01 s
polls, and at load 12 that took longer than the 30 s this was: the thread returned by
itself before its deadline, and the run completed instead of timing out."""


async def test_a_task_that_never_returns_ends_at_its_timeout(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """The regression: a hung task held its pool slot and was refreshed forever; now
    the attempt fails at its timeout, the slot frees, and the message moves on."""
    backend = MemoryBackend()
    errors: list[Exception] = []
    handled: list[Exception] = []
    runner = make_runner(
        backend,
        num_workers=1,
        on_error=lambda e, d: errors.append(e),
        failed_task_handler=lambda d, e: handled.append(e),
    )
    started: list[float] = []

    @runner.task(timeout=10.0, max_retry=2, reservation_timeout=3)
    async def hangs(payload: None) -> None:
        started.append(trio.current_time())
        await trio.sleep_forever()

    @runner.task()
    async def after(payload: None) -> None:
        pass

    await runner.dispatch("hangs")
    async with serving(runner):
        await wait_until(lambda: bool(handled))
        assert runner.statistics().running == 0, "the slot is free again"
        await runner.dispatch("after")
        await wait_until(lambda: runner.statistics().completed == 1)
    assert len(started) == 2
    timeouts = [e.error for e in errors if isinstance(e, TaskExecutionError)]
    assert [type(t) for t in timeouts] == [TaskTimeout, TaskTimeout]
    assert isinstance(timeouts[0], TaskRunnerError)
    assert str(timeouts[0]).endswith("ran past its timeout of 10s")
    (final,) = handled
    assert isinstance(final, TaskMaxRetryExceeded)
    assert isinstance(final.last_error, TaskTimeout)
    assert (await backend.group_info("g")).pending == 0


async def test_the_default_timeout_applies_to_tasks_without_one(
    autojump_clock: trio.testing.MockClock,
) -> None:
    seen: list[float | None] = []
    runner = make_runner(MemoryBackend(), default_timeout=5.0)

    @runner.task(max_retry=1)
    async def slow(payload: None, ctx: TaskContext) -> None:
        seen.append(None if ctx.deadline is None else ctx.deadline - trio.current_time())
        await trio.sleep(6)

    @runner.task(timeout=60.0)
    async def own(payload: None, ctx: TaskContext) -> None:
        seen.append(None if ctx.deadline is None else ctx.deadline - trio.current_time())
        await trio.sleep(6)

    await runner.dispatch("slow")
    async with serving(runner):
        await wait_until(lambda: runner.statistics().dead_lettered == 1)
        await runner.dispatch("own")
        await wait_until(lambda: runner.statistics().completed == 1)
    assert seen == [5.0, 60.0]


async def test_no_timeout_means_no_deadline(autojump_clock: trio.testing.MockClock) -> None:
    deadlines: list[float | None] = []
    runner = make_runner(MemoryBackend())

    @runner.task()
    async def plain(payload: None, ctx: TaskContext) -> None:
        deadlines.append(ctx.deadline)
        await trio.sleep(1000)

    await runner.dispatch("plain")
    async with serving(runner):
        # Polled every simulated second, not every 0.01 s: the run takes 1000 s, and
        # 100,000 polls were nearly all of this test's time; when it completed does
        # not matter here, only that it ran to the end without a deadline.
        await wait_until(lambda: runner.statistics().completed == 1, step=1.0)
    assert deadlines == [None]


async def test_a_sync_action_runs_in_a_thread_with_its_context(
    autojump_clock: trio.testing.MockClock,
) -> None:
    runner = make_runner(MemoryBackend())
    seen: list[tuple[bool, int, str]] = []

    @runner.task()
    def thumbnail(payload: dict[str, int], ctx: TaskContext) -> int:
        seen.append(
            (threading.current_thread() is threading.main_thread(), ctx.attempt, ctx.task_name)
        )
        return payload["w"] * 2

    await runner.dispatch("thumbnail", {"w": 3})
    async with serving(runner):
        await wait_until(lambda: runner.statistics().completed == 1)
    assert seen == [(False, 1, "thumbnail")]


@pytest.mark.parametrize(("sync_threads", "most"), [(None, 4), (2, 2)])
async def test_threads_are_bounded_by_the_pool_or_sync_threads(
    sync_threads: int | None, most: int, autojump_clock: trio.testing.MockClock
) -> None:
    runner = make_runner(MemoryBackend(), num_workers=4, sync_threads=sync_threads)
    changed = threading.Condition()
    running = peak = 0

    @runner.task()
    def work(payload: int) -> None:
        nonlocal running, peak
        with changed:
            running += 1
            peak = max(peak, running)
            changed.notify_all()
            # The first ``most`` threads overlap: none leaves before they are all in (a
            # 20 ms sleep did not ensure it on a loaded machine). Were fewer allowed, the
            # wait ends at its real-time guard and the peak falls short.
            changed.wait_for(lambda: peak >= most, timeout=10)
        time.sleep(0.02)  # real time: any thread past the bound would overlap too
        with changed:
            running -= 1

    await runner.dispatch_many("work", list(range(12)))
    async with serving(runner):
        await wait_until(lambda: runner.statistics().completed == 12)
    assert peak == most


async def test_a_thread_past_its_timeout_fails_the_attempt_and_keeps_its_slot(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """The attempt fails at the deadline (and is retried then); the thread's result is
    discarded; the slot frees when the thread returns; the message is not refreshed
    past the deadline."""
    backend = MemoryBackend()
    errors: list[tuple[Exception, Delivery]] = []
    runner = make_runner(
        backend, num_workers=1, reclaim_delay=60, on_error=lambda e, d: errors.append((e, d))
    )
    release = threading.Event()
    calls: list[int] = []

    # A long timeout: the second attempt's thread must return before the autojumping
    # clock passes its deadline, which it crosses in 0.01 s polls while the thread
    # runs in real time (with 10 s, a loaded machine lost that race in CI).
    @runner.task(timeout=THREAD_TIMEOUT, max_retry=2, retry=None, reservation_timeout=5)
    def blocks(payload: None, ctx: TaskContext) -> str:
        calls.append(ctx.attempt)
        if ctx.attempt == 1:
            release.wait(timeout=RELEASE_GUARD)  # real seconds: the test lets it go
        return "discarded"

    await runner.dispatch("blocks")
    async with serving(runner):
        try:
            await wait_until(lambda: bool(errors))
            failed_at = trio.current_time()
            ((error, _),) = errors
            assert isinstance(error, TaskExecutionError)
            assert isinstance(error.error, TaskTimeout)
            assert runner.statistics().running == 1, "the thread still holds its slot"
            await trio.sleep(40)  # no refresh past the deadline: the entry grows idle
            info = await backend.group_info("g")
            (consumer,) = [c for c in info.consumers if c.pending]
            assert consumer.idle >= 40, "refreshed past its timeout"
        finally:
            release.set()
        await wait_until(lambda: runner.statistics().running == 0)
        # Left pending (retry=None): reclaimed after reclaim_delay, attempt 2 runs.
        await wait_until(lambda: runner.statistics().completed == 1)
        assert trio.current_time() - failed_at >= 60 - 10, "reclaimed, not retried at once"
    assert calls == [1, 2]
    assert runner.statistics().failed == 1


async def test_a_timed_out_thread_is_retried_at_the_deadline_not_when_it_returns(
    autojump_clock: trio.testing.MockClock,
) -> None:
    runner = make_runner(MemoryBackend(), num_workers=2)
    release = threading.Event()
    attempts: list[tuple[int, float]] = []

    @runner.task(timeout=THREAD_TIMEOUT, max_retry=2)  # long: see the test above
    def blocks(payload: None, ctx: TaskContext) -> None:
        attempts.append((ctx.attempt, ctx.deadline or 0.0))
        if ctx.attempt == 1:
            release.wait(timeout=RELEASE_GUARD)

    await runner.dispatch("blocks")
    async with serving(runner):
        try:
            await wait_until(lambda: runner.statistics().completed == 1)
            assert runner.statistics().running == 1, "attempt 2 done, attempt 1's thread still runs"
        finally:
            release.set()
        await wait_until(lambda: runner.statistics().running == 0)
    assert [a for a, _ in attempts] == [1, 2]
    gap = attempts[1][1] - attempts[0][1]
    assert THREAD_TIMEOUT + 0.9 <= gap <= THREAD_TIMEOUT + 1.1 + 0.1, "deadline + backoff"


async def test_a_thread_past_its_timeout_keeps_its_concurrency_slot_until_it_returns(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Issue 24: the slot of a thread still running past its timeout is renewed (the
    thread runs, and counts against max_concurrency), although its message no longer is;
    without it, the lease ran out after one reservation timeout and a second run started
    beside the thread."""
    backend = MemoryBackend()
    runner = make_runner(backend, num_workers=2, reclaim_delay=600)
    release = threading.Event()
    running: list[str] = []
    most: list[int] = []

    @runner.task(timeout=THREAD_TIMEOUT, max_retry=0, max_concurrency=1, reservation_timeout=5)
    def limited(payload: str) -> None:
        running.append(payload)
        most.append(len(running))
        try:
            if payload == "first":
                release.wait(timeout=RELEASE_GUARD)  # real seconds: the test lets it go
        finally:
            running.remove(payload)

    await runner.dispatch("limited", "first")
    async with serving(runner):
        try:
            await wait_until(lambda: running == ["first"])
            await runner.dispatch("limited", "second")
            await wait_until(
                lambda: runner.statistics().dead_lettered == 1, limit=THREAD_TIMEOUT * 2
            )
            assert running == ["first"], "past its timeout, the thread still runs"
            await trio.sleep(60)  # a dozen reservation timeouts: the slot's lease is renewed
            assert most == [1], "a second run started beside the thread"
            assert runner.statistics().parked + runner.statistics().deferred >= 1
        finally:
            release.set()
        await wait_until(lambda: runner.statistics().completed == 1, limit=THREAD_TIMEOUT)
    assert most == [1, 1], "max_concurrency=1 held throughout"
