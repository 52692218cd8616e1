"""The worker: outcomes, the failure path, typed payloads, hooks and observers
(MemoryBackend, MockClock)."""

from __future__ import annotations

import dataclasses
import itertools

import attrs
import pytest
import trio
import trio.lowlevel
import trio.testing
from _fleet import make_runner, serving, wait_until

from taskrunner import (
    Delivery,
    InvalidTaskPayload,
    Task,
    TaskExecutionError,
    TaskMaxRetryExceeded,
    TaskMessage,
)
from taskrunner._wire import encode_message
from taskrunner.backends.memory import MemoryBackend


async def test_failing_task_is_retried_then_handed_to_the_handler(
    autojump_clock: trio.testing.MockClock,
) -> None:
    backend = MemoryBackend()
    handled: list[tuple[Delivery, Exception]] = []
    errors: list[tuple[Exception, Delivery]] = []

    async def handler(delivery: Delivery, error: Exception) -> None:
        handled.append((delivery, error))

    def on_error(error: Exception, delivery: Delivery) -> None:
        errors.append((error, delivery))

    runner = make_runner(backend, reclaim_delay=20, failed_task_handler=handler, on_error=on_error)
    attempts: list[float] = []

    @runner.task(max_retry=3, reservation_timeout=5, retry=None)  # retried by reclaim
    async def flaky(payload: None) -> None:
        attempts.append(trio.current_time())
        raise RuntimeError("boom")

    await runner.dispatch("flaky")
    async with serving(runner):
        await wait_until(lambda: bool(handled))
        await wait_until(lambda: runner.statistics().acked == 1)
        await trio.sleep(100)  # and it never comes back

    assert len(attempts) == 3
    gaps = [b - a for a, b in itertools.pairwise(attempts)]
    assert all(20 <= gap <= 20 + 10 + 1 for gap in gaps), gaps  # reclaim_delay + interval
    ((delivery, error),) = handled
    assert isinstance(error, TaskMaxRetryExceeded)
    assert error.attempts == 3
    assert isinstance(error.last_error, RuntimeError)
    assert delivery.delivery_count == 3
    assert delivery.message is not None
    assert delivery.message.task_name == "flaky"
    assert [e.attempt for e, _ in errors if isinstance(e, TaskExecutionError)] == [1, 2, 3]
    assert (await backend.group_info("g")).pending == 0
    assert await backend.dead_letters("g") == []
    stats = runner.statistics()
    assert (stats.failed, stats.retried, stats.handled, stats.completed) == (3, 2, 1, 0)


async def test_handler_that_raises_leaves_the_message_pending(
    autojump_clock: trio.testing.MockClock,
) -> None:
    backend = MemoryBackend()
    calls = 0

    def handler(delivery: Delivery, error: Exception) -> None:
        nonlocal calls
        calls += 1
        raise ValueError("handler is down")

    runner = make_runner(backend, reclaim_delay=100, failed_task_handler=handler)

    @runner.task(reservation_timeout=5)
    async def broken(payload: None) -> None:
        raise RuntimeError("nope")

    @runner.task()
    async def fine(payload: None) -> None:
        pass

    await runner.dispatch("broken")
    async with serving(runner):
        await wait_until(lambda: calls == 1)
        await trio.sleep(1)
        info = await backend.group_info("g")
        assert info.pending == 1, "a message whose handler raised must stay pending"
        assert await backend.dead_letters("g") == []
        # The runner is still alive and serving other work.
        await runner.dispatch("fine")
        await wait_until(lambda: runner.statistics().completed == 1)
        # After reclaim_delay the failure path is tried again.
        await wait_until(lambda: calls == 2)
    assert runner.statistics().acked == 1  # only "fine"


async def test_dead_letter_without_a_handler(autojump_clock: trio.testing.MockClock) -> None:
    backend = MemoryBackend()
    runner = make_runner(backend)

    @runner.task(max_retry=1)
    async def once(payload: dict[str, int]) -> None:
        raise KeyError("missing")

    message_id = (await runner.dispatch("once", {"n": 1})).id
    async with serving(runner):
        await wait_until(lambda: runner.statistics().acked == 1)

    (dead,) = await backend.dead_letters("g")
    assert dead.message_id == message_id
    assert dead.group == "g"
    assert dead.error.startswith("TaskMaxRetryExceeded")
    assert dead.payload is not None
    assert b'"n":1' in dead.payload
    assert await backend.length("g") == 0
    assert runner.statistics().dead_lettered == 1


async def test_bad_entries_go_to_the_failure_path_and_the_fetcher_keeps_going(
    autojump_clock: trio.testing.MockClock,
) -> None:
    backend = MemoryBackend()
    runner = make_runner(backend, batch_size=1)
    done: list[int] = []

    @runner.task()
    async def good(payload: int) -> None:
        done.append(payload)

    await backend.add("g", [b"not json", b"[1, 2]", b'{"payload": 1}'])
    backend.add_raw("g", {"other": b"x"})
    await backend.add("g", [encode_message(TaskMessage(task_name="unknown_task"))])
    await runner.dispatch("good", 7)
    async with serving(runner):
        await wait_until(lambda: done == [7] and runner.statistics().acked == 6)

    errors = [d.error for d in await backend.dead_letters("g")]
    assert len(errors) == 5
    assert sum(e.startswith("InvalidTaskPayload") for e in errors) == 4
    assert any("no 'payload' field" in e for e in errors)
    assert any(e.startswith("TaskNotFound") and "unknown_task" in e for e in errors)
    assert await backend.length("g") == 0


@attrs.frozen
class Email:
    to: str
    retries: int = 0


@dataclasses.dataclass(frozen=True)
class Resize:
    width: int
    height: int


async def test_typed_payloads_round_trip(autojump_clock: trio.testing.MockClock) -> None:
    backend = MemoryBackend()
    runner = make_runner(backend)
    got: list[object] = []

    async def send(payload: Email) -> None:
        got.append(payload)

    async def resize(payload: Resize) -> None:
        got.append(payload)

    runner.register(Task(name="send", action=send))
    runner.register(Task(name="resize", action=resize))
    await runner.dispatch("send", Email(to="a@example.com", retries=2))
    await runner.dispatch("send", {"to": "b@example.com"})  # a dict that fits is fine
    await runner.dispatch("resize", Resize(width=3, height=4))
    async with serving(runner):
        await wait_until(lambda: len(got) == 3)
    # Tasks run concurrently, so compare regardless of order.
    assert sorted(got, key=repr) == sorted(
        [Email("a@example.com", 2), Email("b@example.com", 0), Resize(3, 4)], key=repr
    )

    with pytest.raises(InvalidTaskPayload, match="does not fit Email"):
        await runner.dispatch("send", {"nope": 1})
    assert await backend.length("g") == 0


async def test_hooks_may_be_async_and_a_raising_hook_does_not_kill_the_runner(
    autojump_clock: trio.testing.MockClock,
) -> None:
    backend = MemoryBackend()
    seen: list[str] = []

    async def on_error(error: Exception, delivery: Delivery) -> None:
        seen.append(type(error).__name__)
        raise RuntimeError("hook bug")

    runner = make_runner(backend, on_error=on_error)
    done: list[int] = []

    @runner.task()
    async def work(payload: int) -> None:
        if payload == 0:
            raise ValueError("first fails")
        done.append(payload)

    await runner.dispatch_many("work", [0, 1, 2])
    async with serving(runner):
        await wait_until(lambda: sorted(done) == [1, 2] and runner.statistics().acked == 3)
    assert seen == ["TaskExecutionError"]


async def test_observers_see_every_run_and_a_raising_one_is_removed(
    autojump_clock: trio.testing.MockClock,
) -> None:
    runner = make_runner(MemoryBackend())
    seen: list[tuple[str, float, bool]] = []
    calls = 0

    def broken(name: str, seconds: float, ok: bool) -> None:
        nonlocal calls
        calls += 1
        raise RuntimeError("observer bug")

    runner.add_observer(lambda name, seconds, ok: seen.append((name, seconds, ok)))
    runner.add_observer(broken)

    @runner.task()
    async def work(payload: int) -> None:
        await trio.sleep(payload)
        if payload == 2:
            raise ValueError("fails")

    await runner.dispatch_many("work", [1, 2, 3])
    async with serving(runner):
        await wait_until(lambda: len(seen) == 3)
    assert sorted(seen) == [("work", 1.0, True), ("work", 2.0, False), ("work", 3.0, True)]
    assert calls == 1
