"""Unique tasks: the lock across a retry, after a worker died, and a key function
that does not return a string (MemoryBackend, MockClock)."""

from __future__ import annotations

import pytest
import trio
import trio.testing
from _fleet import make_runner, serving, wait_until

from taskrunner.backends.memory import MemoryBackend


async def test_unique_lock_kept_across_a_retry_and_released_on_final_failure(
    autojump_clock: trio.testing.MockClock,
) -> None:
    from taskrunner import TaskAlreadyDispatched

    backend = MemoryBackend()
    runner = make_runner(backend, reclaim_delay=20)
    attempts = 0

    @runner.task(max_retry=2, reservation_timeout=5, unique=True, unique_for=300)
    async def once(payload: None) -> None:
        nonlocal attempts
        attempts += 1
        raise RuntimeError("fails")

    await runner.dispatch("once")
    async with serving(runner):
        await wait_until(lambda: attempts == 1)
        with pytest.raises(TaskAlreadyDispatched):
            await runner.dispatch("once")  # held across the retry
        await wait_until(lambda: runner.statistics().acked == 1)  # dead-lettered after 2
        await trio.sleep(0.1)
        assert attempts == 2
        await runner.dispatch("once")  # released by the final failure
    assert len(await backend.dead_letters("g")) == 1


async def test_unique_lock_expires_if_its_worker_dies(
    autojump_clock: trio.testing.MockClock,
) -> None:
    from taskrunner import TaskAlreadyDispatched

    backend = MemoryBackend()
    runner = make_runner(backend, shutdown_grace=0)

    @runner.task(unique=True, unique_for=60)
    async def hang(payload: None) -> None:
        await trio.sleep_forever()

    await runner.dispatch("hang")
    async with serving(runner):
        await wait_until(lambda: runner.statistics().running == 1)
    dispatched_at = trio.current_time()
    with pytest.raises(TaskAlreadyDispatched):
        await runner.dispatch("hang")
    await trio.sleep(60 - (trio.current_time() - dispatched_at) + 0.01)
    await runner.dispatch("hang")  # the dead worker's lock expired


async def test_a_unique_key_that_is_not_a_string_is_refused_at_dispatch(
    autojump_clock: trio.testing.MockClock,
) -> None:
    from taskrunner import InvalidTaskPayload

    backend = MemoryBackend()
    runner = make_runner(backend)

    @runner.task(unique=True, unique_for=60, unique_key=lambda p: p["id"])
    async def job(payload: dict[str, int]) -> None:
        pass

    with pytest.raises(InvalidTaskPayload, match="unique_key must return a str or None, got 7"):
        await runner.dispatch("job", {"id": 7})
    with pytest.raises(InvalidTaskPayload, match="unique_key raised KeyError"):
        await runner.dispatch_delayed("job", {}, 1)
    assert backend.keys() == []
    assert await backend.length("g") == 0
    assert await backend.next_delayed_at("g") is None


async def test_unique_task_refuses_duplicates_until_it_finishes(
    autojump_clock: trio.testing.MockClock,
) -> None:
    from taskrunner import TaskAlreadyDispatched

    backend = MemoryBackend()
    runner = make_runner(backend)
    release = trio.Event()
    runs: list[str] = []

    @runner.task(unique=True, unique_for=600, unique_key=lambda p: p["user"])
    async def report(payload: dict[str, str]) -> None:
        await release.wait()
        runs.append(payload["user"])

    await runner.dispatch("report", {"user": "ann"})
    await runner.dispatch("report", {"user": "bob"})  # another key: its own lock
    with pytest.raises(TaskAlreadyDispatched) as info:
        await runner.dispatch("report", {"user": "ann"})
    assert info.value.lock_key == "taskrunner:unique:report:ann"
    async with serving(runner):
        await trio.sleep(1)
        release.set()
        await wait_until(lambda: runner.statistics().acked == 2)
        await trio.sleep(0.1)
        await runner.dispatch("report", {"user": "ann"})  # released after the ack
        await wait_until(lambda: runner.statistics().acked == 3)
    assert sorted(runs) == ["ann", "ann", "bob"]
    with pytest.raises(ValueError, match="unique"):
        await runner.dispatch_many("report", [{"user": "x"}])


async def test_unique_locks_are_all_released_across_a_graceful_shutdown(
    autojump_clock: trio.testing.MockClock,
) -> None:
    class SlowRelease(MemoryBackend):
        async def release_lock(self, key: str, token: str) -> bool:
            await trio.sleep(0.05)  # a round trip
            return await super().release_lock(key, token)

    backend = SlowRelease()
    runner = make_runner(backend)

    @runner.task(unique=True, unique_for=3600, unique_key=str)
    async def job(payload: int) -> None:
        await trio.sleep(1.06 if payload == 4 else 1.0)

    for n in range(5):
        await runner.dispatch("job", n)
    async with trio.open_nursery() as nursery:
        await nursery.start(runner.serve)
        await trio.sleep(0.5)
        runner.shutdown()
    assert runner.statistics().acked == 5
    assert backend.keys() == [], "a unique lock outlived a graceful shutdown"
