"""Results, lookup and cancellation across the run's life: retries through the delayed
set, runs with and without a cancel scope, thread actions. MemoryBackend, MockClock."""

from __future__ import annotations

import threading
import time

import pytest
import trio
import trio.testing
from _fleet import make_runner, serving, wait_until

from taskrunner import Backoff, TaskCancelled, TaskFailed, TaskState
from taskrunner.backends.memory import MemoryBackend


async def test_a_task_waiting_for_its_retry_is_scheduled_under_its_id(
    autojump_clock: trio.testing.MockClock,
) -> None:
    backend = MemoryBackend()
    runner = make_runner(backend, reclaim_delay=30)
    attempts: list[float] = []

    @runner.task(keep_result=600, max_retry=3, retry=Backoff(initial=10, factor=1, jitter=0))
    async def flaky(payload: None) -> str:
        attempts.append(trio.current_time())
        if len(attempts) < 3:
            raise RuntimeError(f"attempt {len(attempts)} failed")
        return "third time lucky"

    handle = await runner.dispatch("flaky")
    async with serving(runner):
        await wait_until(lambda: len(attempts) == 1)
        await trio.sleep(1)  # the retry is in the delayed set now
        info = await runner.get_task(handle.id)
        assert info is not None
        assert info.state is TaskState.SCHEDULED, "found through the delayed id index"
        assert info.attempts == 1, "the attempt that failed"
        assert info.run_at == pytest.approx(backend.wall_origin + attempts[0] + 10, abs=0.5)
        assert await handle.result(timeout=60) == "third time lucky"
    info = await runner.get_task(handle.id)
    assert info is not None
    assert (info.state, info.attempts) == (TaskState.SUCCEEDED, 3), "attempts across entries"
    assert info.enqueued_at is not None
    assert info.enqueued_at <= backend.wall_origin + attempts[0], "the first dispatch's time"
    assert backend._entry_index.get("g", {}) == {}, "the final ack ends the mapping"
    assert backend._delayed_index.get("g", {}) == {}


async def test_a_task_cancelled_while_waiting_for_its_retry_never_runs_again(
    autojump_clock: trio.testing.MockClock,
) -> None:
    backend = MemoryBackend()
    runner = make_runner(backend, reclaim_delay=30)
    attempts: list[int] = []

    @runner.task(
        keep_result=600,
        max_retry=5,
        unique=True,
        unique_for=600,
        retry=Backoff(initial=60, factor=1, jitter=0),
    )
    async def sync_account(payload: int) -> None:
        attempts.append(payload)
        raise RuntimeError("remote is down")

    handle = await runner.dispatch("sync_account", 1)
    async with serving(runner):
        await wait_until(lambda: len(attempts) == 1)
        await trio.sleep(1)
        assert backend.keys() != [], "the retry keeps its unique lock"
        assert await handle.cancel() is True
        with pytest.raises(TaskCancelled):
            await handle.result(timeout=5)
        await trio.sleep(300)  # well past the retry's run-at time
    assert attempts == [1], "removed from the delayed set: no second attempt"
    assert [k for k in backend.keys() if k.startswith("taskrunner:unique:")] == []
    assert await handle.cancel() is False


async def test_a_failure_after_retries_records_the_last_error_and_attempt(
    autojump_clock: trio.testing.MockClock,
) -> None:
    runner = make_runner(MemoryBackend(), reclaim_delay=30)

    @runner.task(keep_result=600, max_retry=2, retry=Backoff(initial=1, factor=1, jitter=0))
    async def charge(payload: None) -> None:
        raise ValueError("declined")

    handle = await runner.dispatch("charge")
    async with serving(runner):
        with pytest.raises(TaskFailed, match="declined"):
            await handle.result(timeout=60)
    info = await runner.get_task(handle.id)
    assert info is not None
    assert (info.state, info.attempts) == (TaskState.FAILED, 2)


async def test_a_run_without_a_timeout_is_interrupted_and_acked_as_cancelled(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Issue 24: a run without a timeout is stopped too (its worker's scope), not left
    to run to its end."""
    backend = MemoryBackend()
    runner = make_runner(backend, reclaim_delay=30)
    ends: list[str] = []

    @runner.task(max_retry=3)  # no timeout, no keep_result
    async def plain(payload: None) -> None:
        try:
            await trio.sleep(5)
        except trio.Cancelled:
            ends.append("cancelled")
            raise
        ends.append("returned")

    handle = await runner.dispatch("plain")
    async with serving(runner):
        await wait_until(lambda: runner.statistics().running == 1)
        asked = trio.current_time()
        assert await runner.cancel(handle.id) is True
        await wait_until(lambda: runner.statistics().cancelled == 1)
        took = trio.current_time() - asked
        await trio.sleep(120)  # past any reclaim: never run again
    assert ends == ["cancelled"], "interrupted, not run to its end"
    assert took <= 1.01
    stats = runner.statistics()
    assert (stats.completed, stats.cancelled, stats.retried) == (0, 1, 0)
    assert await runner.get_task(handle.id) is None, "acked, and it keeps no result"


async def test_a_run_with_a_timeout_is_interrupted_by_a_cancel(
    autojump_clock: trio.testing.MockClock,
) -> None:
    runner = make_runner(MemoryBackend(), reclaim_delay=30)
    ends: list[str] = []

    @runner.task(timeout=3600)  # its scope is cancelled by the cancel, not its deadline
    async def long(payload: None) -> None:
        try:
            await trio.sleep(600)
        except trio.Cancelled:
            ends.append(f"cancelled at {trio.current_time():.0f}")
            raise

    handle = await runner.dispatch("long")
    async with serving(runner):
        await wait_until(lambda: runner.statistics().running == 1)
        asked = trio.current_time()
        assert await runner.cancel(handle.id) is True
        await wait_until(lambda: runner.statistics().cancelled == 1)
        took = trio.current_time() - asked
    assert len(ends) == 1
    assert took <= 1.01
    stats = runner.statistics()
    assert (stats.failed, stats.retried) == (0, 0), "not a timeout"


def test_a_thread_action_cancelled_is_discarded_when_it_returns() -> None:
    # Real threads: the mock clock would jump while the thread works.
    async def main() -> None:
        runner = make_runner(MemoryBackend(), reclaim_delay=30)
        release = threading.Event()
        started = threading.Event()

        @runner.task(keep_result=60)
        def blocking(payload: None) -> str:
            started.set()
            release.wait(10)
            time.sleep(0.01)
            return "done"

        handle = await runner.dispatch("blocking")
        async with serving(runner):
            await trio.to_thread.run_sync(started.wait, 10)
            assert await runner.cancel(handle.id) is True
            # The canceller asks within a second; the thread cannot be interrupted.
            await trio.sleep(1.5)
            release.set()
            with pytest.raises(TaskCancelled):
                await handle.result(timeout=10)
        assert runner.statistics().completed == 0

    trio.run(main)
