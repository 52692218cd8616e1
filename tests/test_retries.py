"""Retries through the delayed set: backoff, Retry(delay), permanent errors, attempts
bounded across re-queues and crash reclaims, unique locks kept (MemoryBackend, MockClock;
three runners for the fleet)."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
import trio
import trio.testing
from _fleet import Partition, make_runner, serving, start_each, wait_until

from taskrunner import (
    Backoff,
    Delivery,
    Retry,
    TaskAlreadyDispatched,
    TaskContext,
    TaskExecutionError,
    TaskMaxRetryExceeded,
)
from taskrunner.backends.memory import MemoryBackend
from taskrunner.errors import BackendError

STEADY = Backoff(initial=1.0, factor=2.0, maximum=300.0, jitter=0)


async def test_a_failed_attempt_comes_back_after_its_backoff(
    autojump_clock: trio.testing.MockClock,
) -> None:
    backend = MemoryBackend()
    handled: list[tuple[Delivery, Exception]] = []
    errors: list[Exception] = []

    runner = make_runner(
        backend,
        reclaim_delay=300,
        failed_task_handler=lambda d, e: handled.append((d, e)),
        on_error=lambda e, d: errors.append(e),
    )
    runs: list[tuple[float, int, str, str]] = []

    @runner.task(max_retry=4, retry=STEADY)
    async def flaky(payload: None, ctx: TaskContext) -> None:
        runs.append((trio.current_time(), ctx.attempt, ctx.message_id, ctx.task_id))
        raise RuntimeError("boom")

    task_id = (await runner.dispatch("flaky")).id
    async with serving(runner):
        await wait_until(lambda: bool(handled))
        await wait_until(lambda: runner.statistics().ack_backlog == 0)

    times = [t for t, *_ in runs]
    gaps = [round(b - a, 1) for a, b in itertools.pairwise(times)]
    assert gaps == [1.0, 2.0, 4.0], "1, 2, 4 s apart: not reclaim_delay (300 s)"
    assert [attempt for _, attempt, _, _ in runs] == [1, 2, 3, 4]
    assert len({message_id for _, _, message_id, _ in runs}) == 4, "each retry is a new entry"
    assert {tid for *_, tid in runs} == {task_id}, "the task id stays"
    ((delivery, error),) = handled
    assert isinstance(error, TaskMaxRetryExceeded)
    assert (error.attempts, delivery.attempt, delivery.delivery_count) == (4, 4, 1)
    assert [e.attempt for e in errors if isinstance(e, TaskExecutionError)] == [1, 2, 3, 4]
    assert (await backend.group_info("g")).pending == 0
    assert await backend.next_delayed_at("g") is None
    assert await backend.length("g") == 0, "every entry was deleted on ack (or defer)"
    stats = runner.statistics()
    assert (stats.failed, stats.retried, stats.handled) == (4, 3, 1)


async def test_the_default_policy_retries_after_about_a_second(
    autojump_clock: trio.testing.MockClock,
) -> None:
    runner = make_runner(MemoryBackend())
    runs: list[float] = []

    @runner.task(max_retry=2)
    async def once_more(payload: None) -> None:
        runs.append(trio.current_time())
        if len(runs) == 1:
            raise RuntimeError("first")

    await runner.dispatch("once_more")
    async with serving(runner):
        await wait_until(lambda: runner.statistics().completed == 1)
    assert 0.9 <= runs[1] - runs[0] <= 1.1 + 0.05, runs


async def test_retry_none_leaves_the_attempt_to_reclaim(
    autojump_clock: trio.testing.MockClock,
) -> None:
    backend = MemoryBackend()
    runner = make_runner(backend, reclaim_delay=20)
    runs: list[float] = []

    @runner.task(max_retry=2, retry=None, reservation_timeout=5)
    async def legacy(payload: None) -> None:
        runs.append(trio.current_time())
        if len(runs) == 1:
            raise RuntimeError("first")

    await runner.dispatch("legacy")
    async with serving(runner):
        await wait_until(lambda: runner.statistics().completed == 1)
    assert 20 <= runs[1] - runs[0] <= 31, "after reclaim_delay (and one reclaim interval)"
    assert await backend.next_delayed_at("g") is None, "nothing went through the delayed set"


async def test_retry_raised_by_the_action_chooses_the_delay_and_counts(
    autojump_clock: trio.testing.MockClock,
) -> None:
    errors: list[Exception] = []
    handled: list[Exception] = []
    runner = make_runner(
        MemoryBackend(),
        on_error=lambda e, d: errors.append(e),
        failed_task_handler=lambda d, e: handled.append(e),
    )
    runs: list[float] = []

    @runner.task(max_retry=3, retry=None)  # Retry needs no policy
    async def poll(payload: None) -> None:
        runs.append(trio.current_time())
        raise Retry(delay=30.0)

    await runner.dispatch("poll")
    async with serving(runner):
        await wait_until(lambda: bool(handled))
    assert [round(b - a) for a, b in itertools.pairwise(runs)] == [30, 30]
    (final,) = handled
    assert isinstance(final, TaskMaxRetryExceeded), "it counts as an attempt"
    assert isinstance(final.last_error, Retry)
    assert not any(isinstance(e, TaskExecutionError) for e in errors), "a request, not a failure"
    assert runner.statistics().failed == 0


async def test_a_permanent_error_takes_the_failure_path_at_once(
    autojump_clock: trio.testing.MockClock,
) -> None:
    backend = MemoryBackend()
    runner = make_runner(backend)
    runs = 0

    @runner.task(max_retry=5, permanent=ValueError)
    async def validate(payload: int) -> None:
        nonlocal runs
        runs += 1
        raise ValueError(f"bad input {payload}")

    await runner.dispatch("validate", 7)
    async with serving(runner):
        await wait_until(lambda: runner.statistics().dead_lettered == 1)
    assert runs == 1
    (dead,) = await backend.dead_letters("g")
    assert dead.error.startswith("TaskExecutionError: task 'validate'")
    assert "ValueError: bad input 7" in dead.error


async def test_a_crash_after_a_retry_counts_the_attempts_before_it(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Attempt 1 fails and is re-queued; attempt 2's worker dies; the reclaim is
    attempt 3 of 2 in all: the failure path, without running."""
    backend = MemoryBackend()
    link = Partition(backend)
    handled: list[tuple[Delivery, Exception]] = []
    crashing = make_runner(link, reclaim_delay=30)
    survivor = make_runner(
        backend, reclaim_delay=30, failed_task_handler=lambda d, e: handled.append((d, e))
    )
    attempts: list[tuple[str, int]] = []
    started = trio.Event()

    for runner in (crashing, survivor):

        @runner.task(name="job", max_retry=2, retry=STEADY, reservation_timeout=5)
        async def job(payload: None, ctx: TaskContext, runner: Any = runner) -> None:
            attempts.append((runner.config.host, ctx.attempt))
            if ctx.attempt == 1:
                raise RuntimeError("first")
            started.set()
            await trio.sleep_forever()

    await crashing.dispatch("job")
    async with trio.open_nursery() as nursery:
        (crash_scope,) = start_each(nursery, [crashing])
        await started.wait()
        link.cut = True  # the worker's process dies: nothing more reaches the store
        crash_scope.cancel()
        await nursery.start(survivor.serve)
        await wait_until(lambda: bool(handled))
        nursery.cancel_scope.cancel()
    assert attempts == [(crashing.config.host, 1), (crashing.config.host, 2)]
    ((delivery, error),) = handled
    assert isinstance(error, TaskMaxRetryExceeded)
    assert error.last_error is None, "the attempt past the last did not run"
    assert (delivery.delivery_count, delivery.attempt) == (2, 3)


async def test_a_unique_task_keeps_its_lock_across_the_retry(
    autojump_clock: trio.testing.MockClock,
) -> None:
    backend = MemoryBackend()
    runner = make_runner(backend)
    runs = 0

    @runner.task(max_retry=2, retry=Backoff(initial=10, jitter=0), unique=True, unique_for=60)
    async def sync_account(payload: int) -> None:
        nonlocal runs
        runs += 1
        if runs == 1:
            raise RuntimeError("first")

    await runner.dispatch("sync_account", 1)
    async with serving(runner):
        await wait_until(lambda: runner.statistics().retried == 1)
        with pytest.raises(TaskAlreadyDispatched):
            await runner.dispatch("sync_account", 1)  # the retry still holds it
        await wait_until(lambda: runner.statistics().completed == 1)
        await wait_until(lambda: backend.keys() == [k for k in backend.keys() if "unique" not in k])
        await runner.dispatch("sync_account", 1)  # released at the final outcome
    assert runs >= 2


class DeferLostReply(MemoryBackend):
    """``defer`` is applied, but its reply is lost (a connection that broke)."""

    async def defer(
        self,
        group: str,
        entry_id: str,
        member: bytes,
        run_at: float,
        *,
        task_id: str | None = None,
    ) -> bool:
        await super().defer(group, entry_id, member, run_at, task_id=task_id)
        raise BackendError("connection lost after the script ran")


async def test_a_lost_defer_reply_neither_loses_nor_duplicates(
    autojump_clock: trio.testing.MockClock,
) -> None:
    backend = DeferLostReply()
    runner = make_runner(backend, reclaim_delay=30)
    runs: list[int] = []

    @runner.task(max_retry=3, retry=STEADY, reservation_timeout=5)
    async def once_more(payload: None, ctx: TaskContext) -> None:
        runs.append(ctx.attempt)
        if ctx.attempt == 1:
            raise RuntimeError("first")

    await runner.dispatch("once_more")
    async with serving(runner):
        await wait_until(lambda: runner.statistics().completed == 1)
        await trio.sleep(100)  # past reclaim_delay: nothing else comes back
    assert runs == [1, 2]
    assert (await backend.group_info("g")).pending == 0


async def test_three_runners_retry_every_task_exactly_as_often_as_it_fails(
    autojump_clock: trio.testing.MockClock,
) -> None:
    backend = MemoryBackend()
    runners = [make_runner(backend, num_workers=4) for _ in range(3)]
    runs: dict[int, list[int]] = {}

    for runner in runners:

        @runner.task(name="work", max_retry=3, retry=Backoff(initial=0.5, jitter=0.5))
        async def work(payload: int, ctx: TaskContext) -> None:
            runs.setdefault(payload, []).append(ctx.attempt)
            await trio.sleep(0.1)
            if ctx.attempt <= payload % 3:  # fails 0, 1 or 2 times
                raise RuntimeError(f"attempt {ctx.attempt}")

    await runners[0].dispatch_many("work", list(range(60)))
    async with serving(*runners):
        await wait_until(lambda: sum(r.statistics().completed for r in runners) == 60)
        await wait_until(lambda: sum(r.statistics().ack_backlog for r in runners) == 0)
    assert runs == {n: list(range(1, n % 3 + 2)) for n in range(60)}
    assert (await backend.group_info("g")).pending == 0
    assert await backend.next_delayed_at("g") is None
    assert await backend.dead_letters("g") == []
    assert sum(r.statistics().retried for r in runners) == 60  # 0 + 1 + 2 per three


async def test_a_dead_letter_names_the_task_id_after_retries_through_the_delayed_set(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Issue 24: each retry is a new stream entry, so the dead letter's ``message_id`` is
    the last entry's; its ``task_id`` is the task's first id, what ``dispatch`` returned."""
    backend = MemoryBackend()
    runner = make_runner(backend)
    entries: list[str] = []

    @runner.task(max_retry=3, retry=STEADY)
    async def always_fails(payload: None, ctx: TaskContext) -> None:
        entries.append(ctx.message_id)
        raise ValueError("no luck")

    handle = await runner.dispatch("always_fails")
    async with serving(runner):
        await wait_until(lambda: runner.statistics().dead_lettered == 1)
    assert len(entries) == 3
    assert entries[0] == handle.id
    (dead,) = await backend.dead_letters("g")
    assert dead.message_id == entries[-1] != handle.id, "the last entry's id"
    assert dead.task_id == handle.id, "the task's first id"
