"""MemoryBackend reports unix seconds (issue 24, section 3): its clock stays trio's,
and every time it reports to a user is that clock plus its ``wall_origin``."""

from __future__ import annotations

import time
from datetime import UTC, datetime

import trio
import trio.testing
from _fleet import make_runner, serving, wait_until

from taskrunner import TaskContext, TaskState, admin
from taskrunner.backends.memory import MemoryBackend

# A few seconds: real time passes while the test runs, trio's clock only jumps.
_NEAR = 5.0


def test_wall_origin_is_fixed_at_first_use_outside_trio() -> None:
    backend = MemoryBackend()  # outside trio.run: no trio clock to read yet

    async def main() -> tuple[float, float, float, float]:
        before, first_use = time.time(), trio.current_time()
        origin = backend.wall_origin
        await trio.sleep(0.01)
        return before, first_use, origin, backend.wall_origin

    before, first_use, origin, again = trio.run(main)
    assert again == origin, "fixed from its first use"
    assert abs(backend.unix_time(first_use) - before) < _NEAR, "its first use's unix time"


async def test_unix_time_is_trio_clock_plus_the_origin(
    autojump_clock: trio.testing.MockClock,
) -> None:
    before = time.time()
    backend = MemoryBackend()
    assert abs(backend.unix_time(backend.now()) - before) < _NEAR
    await trio.sleep(3600)
    assert backend.now() == trio.current_time(), "the backend's clock stays trio's"
    assert backend.unix_time(12.5) == backend.wall_origin + 12.5


async def test_ctx_dispatched_at_is_unix_seconds(autojump_clock: trio.testing.MockClock) -> None:
    backend = MemoryBackend()
    runner = make_runner(backend)
    seen: list[tuple[TaskContext, float]] = []

    @runner.task()
    async def look(payload: None, ctx: TaskContext) -> None:
        seen.append((ctx, time.time()))

    dispatched = trio.current_time()
    await runner.dispatch("look")
    async with serving(runner):
        await wait_until(lambda: bool(seen))
    ((ctx, ran_at),) = seen
    assert 0 <= ran_at - ctx.dispatched_at < _NEAR, "time.time() - dispatched_at: how long ago"
    assert ctx.dispatched_at - backend.wall_origin == dispatched, "trio's time at dispatch"


async def test_task_info_times_are_unix_seconds(autojump_clock: trio.testing.MockClock) -> None:
    backend = MemoryBackend()
    runner = make_runner(backend)

    @runner.task(keep_result=600)
    async def job(payload: None) -> int:
        await trio.sleep(1)
        return 1

    dispatched = trio.current_time()
    queued = await runner.dispatch("job")
    info = await runner.get_task(queued.id)
    assert info is not None
    assert info.enqueued_at is not None
    assert abs(time.time() - info.enqueued_at) < _NEAR
    assert info.enqueued_at - backend.wall_origin == dispatched
    later = await runner.dispatch_delayed("job", None, delay=30)
    info = await runner.get_task(later.id)
    assert info is not None
    assert info.run_at is not None
    assert info.run_at - backend.wall_origin == dispatched + 30
    async with serving(runner):
        assert await queued.result(timeout=10) == 1
    info = await admin.get_task(backend, "g", queued.id)
    assert info is not None
    assert info.state is TaskState.SUCCEEDED
    assert info.started_at is not None
    assert info.finished_at is not None
    assert abs(time.time() - info.finished_at) < _NEAR
    assert info.enqueued_at is not None
    assert info.enqueued_at - backend.wall_origin == dispatched


async def test_a_dead_letters_time_is_unix_seconds(
    autojump_clock: trio.testing.MockClock,
) -> None:
    backend = MemoryBackend()
    runner = make_runner(backend)

    @runner.task(max_retry=1)
    async def broken(payload: None) -> None:
        raise RuntimeError("no")

    await runner.dispatch("broken")
    async with serving(runner):
        await wait_until(lambda: runner.statistics().dead_lettered == 1)
        died = trio.current_time()
    (letter,) = await admin.dead_letters(backend, "g")
    assert abs(time.time() - letter.dead_at) < _NEAR
    assert letter.dead_at - backend.wall_origin <= died
    assert await admin.dead_letter(backend, "g", letter.id) == letter


async def test_a_schedules_last_fire_time_is_unix_seconds(
    autojump_clock: trio.testing.MockClock,
) -> None:
    start = datetime(2025, 6, 2, 8, 0, 0, tzinfo=UTC).timestamp()
    autojump_clock.jump(start - trio.current_time())
    backend = MemoryBackend()
    runner = make_runner(backend)

    @runner.periodic(every=60.0, name="beat")
    async def beat(payload: None) -> None: ...

    async with serving(runner):
        await trio.sleep(61)
    (row,) = await admin.schedules(backend, "g")
    assert row.last_fired_at is not None
    assert abs(time.time() + 61 - row.last_fired_at) < _NEAR, "unix seconds, 61 s of trio's later"
    assert row.last_fired == start + 60, "a tick stays on the timetable's clock"
