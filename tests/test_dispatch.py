"""Dispatching: what is refused before anything is queued, the delayed forms, and a
unique task's lock when the add fails (MemoryBackend, MockClock)."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
import trio
import trio.lowlevel
import trio.testing
from _fleet import make_runner, serving, wait_until

from taskrunner import (
    InvalidTaskPayload,
    Task,
    TaskNotFound,
    TaskRunnerError,
)
from taskrunner.backends.memory import MemoryBackend


async def test_dispatch_errors_queue_nothing(autojump_clock: trio.testing.MockClock) -> None:
    backend = MemoryBackend()
    runner = make_runner(backend)

    @runner.task()
    async def work(payload: object) -> None:
        pass

    with pytest.raises(TaskNotFound, match="'missing'") as info:
        await runner.dispatch("missing", {})
    assert info.value.task_name == "missing"
    with pytest.raises(InvalidTaskPayload, match="not JSON-serialisable"):
        await runner.dispatch("work", {"when": object()})
    with pytest.raises(InvalidTaskPayload, match="not JSON-serialisable"):
        await runner.dispatch("work", float("nan"))
    with pytest.raises(InvalidTaskPayload, match="over the"):
        await runner.dispatch("work", "x" * (9 * 1024 * 1024))
    with pytest.raises(InvalidTaskPayload):
        await runner.dispatch_many("work", [1, 2, {3}])
    assert await backend.length("g") == 0
    assert issubclass(InvalidTaskPayload, TaskRunnerError)


async def test_a_unique_lock_is_given_back_when_the_add_fails(
    autojump_clock: trio.testing.MockClock,
) -> None:
    from _fleet import Partition

    from taskrunner import BackendError, TaskAlreadyDispatched

    backend = MemoryBackend()

    class FailingAdd(Partition):
        async def add(
            self, group: str, payloads: Sequence[bytes], *, queue: str | None = None
        ) -> list[str]:
            raise BackendError("add failed", maybe_applied=False)  # e.g. an error reply

    runner = make_runner(FailingAdd(backend))

    @runner.task(unique=True, unique_for=60)
    async def job(payload: None) -> None:
        pass

    with pytest.raises(BackendError, match="add failed"):
        await runner.dispatch("job")
    assert backend.keys() == [], "the lock must not outlive a dispatch that queued nothing"
    good = make_runner(backend)
    good.register(Task(name="job", action=job, unique=True, unique_for=60))
    await good.dispatch("job")
    with pytest.raises(TaskAlreadyDispatched):
        await good.dispatch("job")


async def test_a_unique_lock_is_kept_when_the_add_may_have_happened(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A lost reply, or a cancel while waiting for it: the message may be queued, so
    the lock stays (it expires after unique_for, or the worker releases it)."""
    from taskrunner import BackendError, TaskAlreadyDispatched

    class SlowReply(MemoryBackend):
        lose_reply = False

        async def add(
            self, group: str, payloads: Sequence[bytes], *, queue: str | None = None
        ) -> list[str]:
            ids = await super().add(group, payloads, queue=queue)  # applied...
            await trio.sleep(1)  # ...and the reply is on its way
            if self.lose_reply:
                raise BackendError("connection lost while waiting for the reply")
            return ids

    backend = SlowReply()
    runner = make_runner(backend)

    @runner.task(unique=True, unique_for=60, unique_key=str)
    async def job(payload: int) -> None:
        pass

    with trio.move_on_after(0.5):
        await runner.dispatch("job", 1)
    backend.lose_reply = True
    with pytest.raises(BackendError, match="connection lost"):
        await runner.dispatch("job", 2)
    assert await backend.length("g") == 2
    for n in (1, 2):
        with pytest.raises(TaskAlreadyDispatched):
            await runner.dispatch("job", n)
    async with serving(runner):  # the queued messages run and release their locks
        await wait_until(lambda: runner.statistics().acked == 2)
        await trio.sleep(0.1)
    assert backend.keys() == []


async def test_schedule_for_and_dispatch_delayed_forms_and_errors(
    autojump_clock: trio.testing.MockClock,
) -> None:
    import math
    import time
    from datetime import UTC, datetime, timedelta

    from taskrunner import InvalidTaskPayload, TaskNotFound

    backend = MemoryBackend()
    runner = make_runner(backend)
    ran: dict[str, float] = {}

    @runner.task()
    async def mark(payload: str) -> None:
        ran[payload] = trio.current_time()

    start = trio.current_time()
    await runner.schedule_for("mark", "aware", datetime.now(UTC) + timedelta(seconds=30))
    await runner.schedule_for("mark", "unix", time.time() + 20)
    await runner.dispatch_delayed("mark", "timedelta", timedelta(seconds=10))
    await runner.dispatch_delayed("mark", "zero", 0)
    for bad in (-1, math.inf, math.nan, True, "5"):
        with pytest.raises(ValueError, match=r"delay must be"):
            await runner.dispatch_delayed("mark", "x", bad)  # type: ignore[arg-type]
    for when in (datetime.now() + timedelta(seconds=5), math.nan, True):
        with pytest.raises(ValueError, match=r"when must be"):
            await runner.schedule_for("mark", "x", when)  # type: ignore[arg-type]
    with pytest.raises(TaskNotFound):
        await runner.dispatch_delayed("nope", None, 1)
    with pytest.raises(InvalidTaskPayload):
        await runner.dispatch_delayed("mark", {1, 2}, 1)
    assert len(await backend.due_delayed("g", math.inf, 100)) == 4

    async with serving(runner):
        await wait_until(lambda: len(ran) == 4)
    offsets = {k: v - start for k, v in ran.items()}
    assert offsets["zero"] == pytest.approx(0, abs=0.1)
    assert offsets["timedelta"] == pytest.approx(10, abs=0.1)
    # Wall-clock times map onto the backend's clock (trio's here): real time passes
    # while the test runs, so allow a second.
    assert offsets["unix"] == pytest.approx(20, abs=1)
    assert offsets["aware"] == pytest.approx(30, abs=1)
