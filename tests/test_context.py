"""TaskContext, the lifespan and middleware (MemoryBackend, MockClock)."""

from __future__ import annotations

import logging
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import attrs
import pytest
import trio
import trio.testing
from _fleet import make_runner, serving, wait_until

from taskrunner import (
    Backoff,
    LifespanError,
    TaskContext,
    TaskExecutionError,
    TaskRunner,
)
from taskrunner.backends.memory import MemoryBackend

# TaskContext ---------------------------------------------------------------------------


async def test_the_context_of_a_plain_dispatch(autojump_clock: trio.testing.MockClock) -> None:
    backend = MemoryBackend()
    runner = make_runner(backend)
    seen: list[TaskContext] = []

    @runner.task(max_retry=3)
    async def look(payload: None, ctx: TaskContext) -> None:
        seen.append(ctx)

    await trio.sleep(12.5)
    message_id = (await runner.dispatch("look")).id
    async with serving(runner):
        await wait_until(lambda: bool(seen))
    (ctx,) = seen
    assert (ctx.message_id, ctx.task_id, ctx.task_name) == (message_id, message_id, "look")
    assert (ctx.attempt, ctx.max_attempts, ctx.deadline) == (1, 3, None)
    assert ctx.dispatched_at == backend.wall_origin + 12.5, "the stream id's time, in unix seconds"
    assert dict(ctx.state) == {}
    assert dict(ctx.trace) == {}
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        ctx.attempt = 2  # type: ignore[misc]


async def test_a_delayed_task_keeps_its_id_and_dispatch_time_across_retries(
    autojump_clock: trio.testing.MockClock,
) -> None:
    backend = MemoryBackend()
    runner = make_runner(backend)
    seen: list[TaskContext] = []

    @runner.task(max_retry=2, retry=Backoff(initial=5.0, jitter=0))
    async def later(payload: None, *, context: TaskContext) -> None:
        seen.append(context)
        if context.attempt == 1:
            raise RuntimeError("first")

    await trio.sleep(3.0)
    task_id = (await runner.dispatch_delayed("later", None, 10.0)).id
    async with serving(runner):
        await wait_until(lambda: runner.statistics().completed == 1)
    first, second = seen
    assert first.task_id == second.task_id == task_id, "the delayed task's id"
    assert first.message_id != second.message_id
    assert first.dispatched_at == second.dispatched_at == backend.wall_origin + 3.0, (
        "when dispatch_delayed was called, in unix seconds"
    )
    assert [c.attempt for c in seen] == [1, 2]


async def test_an_action_with_one_parameter_gets_no_context(
    autojump_clock: trio.testing.MockClock,
) -> None:
    runner = make_runner(MemoryBackend())
    calls: list[tuple[Any, ...]] = []

    @runner.task()
    async def plain(payload: int, *rest: Any) -> None:
        calls.append((payload, *rest))

    @runner.task()
    async def defaulted(payload: int, retries: int = 3) -> None:
        calls.append((payload, retries))

    await runner.dispatch("plain", 1)
    await runner.dispatch("defaulted", 2)
    async with serving(runner):
        await wait_until(lambda: len(calls) == 2)
    assert sorted(calls) == [(1,), (2, 3)]


# Lifespan --------------------------------------------------------------------------------


async def test_the_lifespan_is_entered_before_fetching_and_exited_after_the_drain(
    autojump_clock: trio.testing.MockClock,
) -> None:
    backend = MemoryBackend()
    runner = make_runner(backend, shutdown_grace=30)
    events: list[str] = []

    @runner.lifespan
    async def resources(got: TaskRunner) -> AsyncIterator[dict[str, Any]]:
        assert got is runner
        info = await backend.group_info("g")
        events.append(f"enter (consumers: {len(info.consumers)})")
        yield {"http": "client"}
        await trio.sleep(1)  # cleanup that awaits runs, though serve was cancelled
        events.append("exit")

    @runner.task()
    async def uses(payload: None, ctx: TaskContext) -> None:
        events.append(f"run with {ctx.state['http']}")
        await trio.sleep(5)
        events.append("run done")

    await runner.dispatch("uses")
    async with serving(runner):
        await wait_until(lambda: "run with client" in events)
    # serving() cancels serve mid-run: the run finishes in its grace, then the exit.
    assert events == ["enter (consumers: 0)", "run with client", "run done", "exit"]
    for _ in range(2):  # entered once per serve
        async with serving(runner):
            pass
    assert events.count("exit") == 3


async def test_an_asynccontextmanager_lifespan(autojump_clock: trio.testing.MockClock) -> None:
    runner = make_runner(MemoryBackend())
    states: list[Any] = []

    @asynccontextmanager
    async def pool(got: TaskRunner) -> AsyncIterator[None]:
        yield None

    runner.lifespan(pool)

    @runner.task()
    async def uses(payload: None, ctx: TaskContext) -> None:
        states.append(dict(ctx.state))

    await runner.dispatch("uses")
    async with serving(runner):
        await wait_until(lambda: bool(states))
    assert states == [{}]


async def test_a_lifespan_may_run_a_nursery_of_its_own(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    # Its nursery is opened while entering and closed while exiting: the shielded exit
    # must not open a cancel scope between the two (trio: "cancel scope stack corrupted").
    runner = make_runner(MemoryBackend())
    ticks: list[float] = []

    @runner.lifespan
    async def background(got: TaskRunner) -> AsyncIterator[None]:
        async def sample() -> None:
            while True:
                ticks.append(trio.current_time())
                await trio.sleep(1)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(sample)
            yield
            nursery.cancel_scope.cancel()

    async with serving(runner):
        await wait_until(lambda: len(ticks) >= 3)
    count = len(ticks)
    await trio.sleep(5)
    assert len(ticks) == count, "the lifespan's task stopped with serve"
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == []


async def test_a_lifespan_whose_exit_hangs_is_left_after_the_grace(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    runner = make_runner(MemoryBackend(), shutdown_grace=3)

    @runner.lifespan
    async def stuck(got: TaskRunner) -> AsyncIterator[None]:
        yield
        await trio.sleep_forever()

    started = trio.current_time()
    with trio.move_on_after(1):
        await runner.serve()
    assert trio.current_time() - started == pytest.approx(4)  # cancelled at 1, left at 1 + 3
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == [
        "lifespan test_a_lifespan_whose_exit_hangs_is_left_after_the_grace.<locals>.stuck"
        " did not exit within 3s; left as it was"
    ]


async def test_a_lifespan_that_fails_to_start_fails_serve_and_nothing_is_fetched(
    autojump_clock: trio.testing.MockClock,
) -> None:
    backend = MemoryBackend()
    runner = make_runner(backend)

    @runner.lifespan
    async def broken(got: TaskRunner) -> AsyncIterator[None]:
        raise ConnectionError("database down")
        yield

    @runner.task()
    async def never(payload: None) -> None:
        raise AssertionError("ran")

    await runner.dispatch("never")
    with pytest.raises(LifespanError) as info:
        await runner.serve()
    assert str(info.value) == (
        "lifespan test_a_lifespan_that_fails_to_start_fails_serve_and_nothing_is_fetched"
        ".<locals>.broken failed to start: ConnectionError: database down"
    )
    assert isinstance(info.value.__cause__, ConnectionError)
    assert await backend.stream_groups("g") == [], "nothing read"
    assert await backend.length("g") == 1
    assert backend.keys() == [], "no heartbeat, no lease"


async def test_a_lifespan_must_yield_a_mapping(autojump_clock: trio.testing.MockClock) -> None:
    runner = make_runner(MemoryBackend())
    exited = False

    @runner.lifespan
    async def wrong(got: TaskRunner) -> AsyncIterator[int]:
        nonlocal exited
        yield 42
        exited = True

    with pytest.raises(LifespanError, match="it yielded 42, not a mapping or None"):
        await runner.serve()
    assert exited, "what was entered is exited"


def test_a_lifespan_must_be_a_generator_or_a_context_manager() -> None:
    runner = make_runner(MemoryBackend())

    async def not_one(got: TaskRunner) -> None: ...

    with pytest.raises(TypeError, match="lifespan must be an async generator function"):
        runner.lifespan(not_one)


# Middleware ------------------------------------------------------------------------------


async def test_middlewares_run_in_order_around_the_action_and_see_its_result(
    autojump_clock: trio.testing.MockClock,
) -> None:
    runner = make_runner(MemoryBackend())
    events: list[str] = []

    @runner.middleware
    async def outer(ctx: TaskContext, call_next: Any) -> Any:
        events.append(f"outer in {ctx.task_name} {ctx.attempt}")
        result = await call_next()
        events.append(f"outer out {result}")
        return result

    async def inner(ctx: TaskContext, call_next: Any) -> Any:
        events.append("inner in")
        result = await call_next()
        events.append(f"inner out {result}")
        return result + 1

    assert runner.middleware(inner) is inner

    @runner.task()
    async def answer(payload: int) -> int:
        events.append("action")
        return payload

    @runner.task()
    def in_a_thread(payload: int) -> int:
        events.append(f"thread {threading.current_thread() is threading.main_thread()}")
        return payload

    await runner.dispatch("answer", 41)
    async with serving(runner):
        await wait_until(lambda: len(events) == 5)
        await runner.dispatch("in_a_thread", 1)
        await wait_until(lambda: len(events) == 10)
    assert events == [
        "outer in answer 1",
        "inner in",
        "action",
        "inner out 41",
        "outer out 42",
        "outer in in_a_thread 1",
        "inner in",
        "thread False",
        "inner out 1",
        "outer out 2",
    ]


async def test_a_middleware_that_raises_fails_the_attempt(
    autojump_clock: trio.testing.MockClock,
) -> None:
    errors: list[Exception] = []
    runner = make_runner(MemoryBackend(), on_error=lambda e, d: errors.append(e))
    runs = 0

    @runner.middleware
    async def gate(ctx: TaskContext, call_next: Any) -> Any:
        if ctx.attempt == 1:
            raise PermissionError("not yet")
        return await call_next()

    @runner.task(max_retry=2, retry=Backoff(initial=1, jitter=0))
    async def guarded(payload: None) -> None:
        nonlocal runs
        runs += 1

    await runner.dispatch("guarded")
    async with serving(runner):
        await wait_until(lambda: runner.statistics().completed == 1)
    (error,) = errors
    assert isinstance(error, TaskExecutionError)
    assert isinstance(error.error, PermissionError)
    assert runs == 1


def test_a_middleware_must_be_async() -> None:
    runner = make_runner(MemoryBackend())
    with pytest.raises(TypeError, match="middleware must be an async function"):
        runner.middleware(lambda ctx, call_next: call_next())  # type: ignore[arg-type,return-value]
