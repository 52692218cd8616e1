"""Results (``keep_result``), ``handle.result`` and ``get_task``, on MemoryBackend under
trio's MockClock."""

from __future__ import annotations

import math
from typing import Any

import attrs
import pytest
import trio
import trio.testing
from _fleet import make_runner, serving, wait_until

from taskrunner import (
    InvalidTaskResult,
    Task,
    TaskFailed,
    TaskHandle,
    TaskInfo,
    TaskState,
    _wire,
)
from taskrunner._execution.outcomes import outcome, success_document
from taskrunner._wire import decode_message
from taskrunner.backends.memory import MemoryBackend


@attrs.frozen
class Size:
    w: int
    h: int


async def test_a_kept_result_is_what_the_action_returned(
    autojump_clock: trio.testing.MockClock,
) -> None:
    backend = MemoryBackend()
    runner = make_runner(backend)

    @runner.task(keep_result=60)
    async def double(payload: int) -> dict[str, int]:
        await trio.sleep(1)
        return {"twice": payload * 2}

    handle = await runner.dispatch("double", 21)
    assert isinstance(handle, TaskHandle)
    assert str(handle) == handle.id
    async with serving(runner):
        dispatched = trio.current_time()
        assert await handle.result(timeout=10) == {"twice": 42}
        assert trio.current_time() - dispatched == pytest.approx(1.0, abs=0.05)
    info = await runner.get_task(handle)
    assert info is not None
    assert (info.state, info.task_name, info.attempts, info.result, info.error) == (
        TaskState.SUCCEEDED,
        "double",
        1,
        {"twice": 42},
        None,
    )
    assert info.enqueued_at is not None
    assert info.started_at is not None
    assert info.finished_at is not None
    assert info.enqueued_at <= info.started_at < info.finished_at
    assert info.finished_at - info.started_at == pytest.approx(1.0, abs=0.05)


async def test_a_typed_result_is_structured_back(autojump_clock: trio.testing.MockClock) -> None:
    backend = MemoryBackend()
    runner = make_runner(backend)

    @runner.task(keep_result=60)
    async def measure(payload: None) -> Size:
        return Size(w=3, h=4)

    assert runner.tasks["measure"].result_type is Size
    handle = await runner.dispatch("measure")
    async with serving(runner):
        assert await handle.result(10) == Size(w=3, h=4)
        assert await handle.result(10, type=dict) == {"w": 3, "h": 4}
    info = await runner.get_task(handle.id)
    assert info is not None
    assert info.result == {"w": 3, "h": 4}, "get_task reports the JSON form"


async def test_a_final_failure_raises_task_failed_with_its_error(
    autojump_clock: trio.testing.MockClock,
) -> None:
    backend = MemoryBackend()
    runner = make_runner(backend, reclaim_delay=30)
    attempts: list[int] = []

    @runner.task(keep_result=60, max_retry=2)
    async def flaky(payload: None) -> None:
        attempts.append(1)
        raise ValueError(f"no luck on attempt {len(attempts)}")

    handle = await runner.dispatch("flaky")
    async with serving(runner):
        with pytest.raises(TaskFailed) as caught:
            await handle.result(timeout=120)
    assert len(attempts) == 2, "the retry ran before the result was final"
    error = caught.value
    assert (error.task_id, error.task_name, error.error_type, error.error) == (
        handle.id,
        "flaky",
        "ValueError",
        "no luck on attempt 2",
    )
    assert str(error) == f"task {handle.id} (flaky) failed: ValueError: no luck on attempt 2"
    info = await runner.get_task(handle.id)
    assert info is not None
    assert (info.state, info.attempts, str(info.error)) == (
        TaskState.FAILED,
        2,
        "ValueError: no luck on attempt 2",
    )
    (dead,) = await backend.dead_letters("g")
    # The retry went through the delayed set (a new entry carrying the task's id).
    assert decode_message(dead.payload).id == handle.id, "the failure path ran as always"
    assert dead.message_id != handle.id


async def test_a_value_that_cannot_be_kept_fails_the_run_with_invalid_task_result(
    autojump_clock: trio.testing.MockClock,
) -> None:
    backend = MemoryBackend()
    runner = make_runner(backend)

    @runner.task(keep_result=60, max_retry=3)
    async def opaque(payload: None) -> object:
        return object()

    @runner.task(keep_result=60)
    async def nan(payload: None) -> float:
        return math.nan

    handles = [await runner.dispatch("opaque"), await runner.dispatch("nan")]
    async with serving(runner):
        for handle, kind in zip(handles, ("object", "float"), strict=True):
            with pytest.raises(TaskFailed) as caught:
                await handle.result(10)
            assert caught.value.error_type == "InvalidTaskResult"
            assert caught.value.error.startswith(
                f"task {handle.task_name!r} returned a {kind} that cannot be kept as JSON: "
            )
        await wait_until(lambda: runner.statistics().acked == 2)
    assert runner.statistics().completed == 0
    assert runner.statistics().dead_lettered == 2, "not retried: it would return the same"


def test_invalid_task_result_is_one_line_naming_the_task_and_the_type() -> None:
    task = Task(name="resize", action=_noop, reservation_timeout=1.0, keep_result=5)
    with pytest.raises(InvalidTaskResult) as caught:
        success_document(task, {1, 2}, attempts=1, enqueued_at=0.0, started_at=0.0, finished_at=0.0)
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith("task 'resize' returned a set that cannot be kept as JSON: ")
    assert (caught.value.task_name, caught.value.value_type) == ("resize", "set")


async def _noop(payload: Any) -> None:
    pass


async def test_expired_results_give_none(autojump_clock: trio.testing.MockClock) -> None:
    backend = MemoryBackend()
    runner = make_runner(backend)

    @runner.task(keep_result=5)
    async def quick(payload: None) -> int:
        return 7

    handle = await runner.dispatch("quick")
    async with serving(runner):
        assert await handle.result(10) == 7
        done_at = trio.current_time()
        await trio.sleep(4.9 - (trio.current_time() - done_at))
        info = await runner.get_task(handle.id)
        assert info is not None
        assert info.state is TaskState.SUCCEEDED
        await trio.sleep(0.2)
        assert await runner.get_task(handle.id) is None, "expired after keep_result"
        with pytest.raises(trio.TooSlowError):
            await handle.result(timeout=1)


async def test_a_task_that_keeps_nothing_leaves_nothing(
    autojump_clock: trio.testing.MockClock,
) -> None:
    backend = MemoryBackend()
    runner = make_runner(backend)
    acked: list[list[str]] = []
    finished: list[Any] = []
    ack, finish = backend.ack, backend.finish

    async def spy_ack(group: str, ids: Any, *, queue: str | None = None) -> int:
        acked.append(list(ids))
        return await ack(group, ids, queue=queue)

    async def spy_finish(group: str, ids: Any, outcomes: Any, *, queue: str | None = None) -> int:
        finished.append(outcomes)
        return await finish(group, ids, outcomes, queue=queue)

    backend.ack = spy_ack  # type: ignore[method-assign]
    backend.finish = spy_finish  # type: ignore[method-assign]

    @runner.task()
    async def plain(payload: None) -> int:
        return 1

    handle = await runner.dispatch("plain")
    async with serving(runner):
        await wait_until(lambda: runner.statistics().acked == 1)
    assert acked == [[handle.id]], "a plain ack, as before"
    assert finished == [], "nothing recorded beside it"
    assert await runner.get_task(handle.id) is None
    assert backend.result_keys("g") == []
    assert backend.notify_keys("g") == []
    with pytest.raises(ValueError, match=r"Task\.keep_result is None for task 'plain'"):
        await handle.result(timeout=1)


def test_outcome_is_none_for_a_plain_run() -> None:
    message = _wire.TaskMessage(task_name="t")
    assert outcome("1-0", message, None) is None
    moved = outcome(
        "1-0", _wire.TaskMessage(task_name="t", extras=_wire.MessageExtras(id="abc")), None
    )
    assert moved is not None
    assert (moved.task_id, moved.indexed, moved.document) == ("abc", True, None)


async def test_a_waiter_times_out_with_too_slow_error_and_leaves_nothing(
    autojump_clock: trio.testing.MockClock,
) -> None:
    backend = MemoryBackend()
    runner = make_runner(backend)

    @runner.task(keep_result=60)
    async def slow(payload: None) -> int:
        await trio.sleep(100)
        return 1

    handle = await runner.dispatch("slow")
    with pytest.raises(trio.TooSlowError):
        await handle.result(timeout=3)
    assert backend.result_keys("g") == []
    assert backend.notify_keys("g") == []
    info = await runner.get_task(handle.id)
    assert info is not None
    assert info.state is TaskState.QUEUED


async def test_get_task_follows_a_task_through_its_states(
    autojump_clock: trio.testing.MockClock,
) -> None:
    backend = MemoryBackend()
    runner = make_runner(backend)
    release = trio.Event()

    @runner.task(keep_result=60)
    async def job(payload: dict[str, int]) -> str:
        await release.wait()
        return "done"

    delayed = await runner.dispatch_delayed("job", {"n": 1}, delay=30)
    info = await runner.get_task(delayed.id)
    assert info == TaskInfo(
        id=delayed.id,
        state=TaskState.SCHEDULED,
        task_name="job",
        attempts=0,
        run_at=pytest.approx(backend.wall_origin + trio.current_time() + 30),
        payload={"n": 1},
    )
    queued = await runner.dispatch("job", {"n": 2})
    info = await runner.get_task(queued.id)
    assert info is not None
    assert (info.state, info.entry_id, info.payload, info.attempts) == (
        TaskState.QUEUED,
        queued.id,
        {"n": 2},
        0,
    )
    assert await runner.get_task("1-999") is None
    assert await runner.get_task("no-such-task") is None
    async with serving(runner):
        await wait_until(lambda: runner.statistics().running == 1)
        info = await runner.get_task(queued.id)
        assert info is not None
        assert (info.state, info.attempts, info.consumer) == (
            TaskState.RUNNING,
            1,
            runner.config.consumer_name(1),
        )
        await trio.sleep(31)  # the delayed one is due, moved and running
        info = await runner.get_task(delayed.id)
        assert info is not None
        assert info.state is TaskState.RUNNING, "found by its id once moved"
        assert info.entry_id != delayed.id, "in a stream entry of its own"
        release.set()
        assert await delayed.result(10) == "done"
        assert await queued.result(10) == "done"
    for handle in (delayed, queued):
        info = await runner.get_task(handle.id)
        assert info is not None
        assert info.state is TaskState.SUCCEEDED
    assert backend._entry_index.get("g") == {}, "the moved task's index entry ended"


async def test_a_result_is_waited_for_by_a_runner_that_did_not_run_it(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Three runners share one backend; a fourth, which does not serve, waits."""
    backend = MemoryBackend()
    runners = [make_runner(backend, num_workers=4) for _ in range(4)]
    ran_on: list[int] = []
    for index, runner in enumerate(runners):

        @runner.task(name="work", keep_result=60)
        async def work(payload: int, index: int = index) -> int:
            ran_on.append(index)
            await trio.sleep(0.5)
            return payload + 1

    handles = await runners[3].dispatch_many("work", range(30))
    async with serving(*runners[:3]):
        values = [await h.result(timeout=30) for h in handles]
    assert values == list(range(1, 31))
    assert set(ran_on) == {0, 1, 2}, "every serving runner took some, the waiter none"


# Result waiters: a finish writes a task's notice only while someone waits for it ------


async def test_a_result_nobody_waits_for_is_kept_without_a_notice(
    autojump_clock: trio.testing.MockClock,
) -> None:
    backend = MemoryBackend()
    runner = make_runner(backend)

    @runner.task(keep_result=60)
    async def double(payload: int) -> int:
        return payload * 2

    handle = await runner.dispatch("double", 21)
    async with serving(runner):
        await wait_until(lambda: runner.statistics().acked == 1)
    assert backend.result_keys("g") == [f"taskrunner:g:result:{handle.id}"]
    assert backend.notify_keys("g") == [], "nobody waited: the document alone"
    # A waiter that comes after the finish reads the result itself.
    assert await handle.result(timeout=5) == 42
    assert backend.notify_keys("g") == []


async def test_a_waiter_registered_before_the_finish_gets_the_notice(
    autojump_clock: trio.testing.MockClock,
) -> None:
    backend = MemoryBackend()
    runner = make_runner(backend)

    @runner.task(keep_result=60)
    async def slow(payload: int) -> int:
        await trio.sleep(5)
        return payload

    handle = await runner.dispatch("slow", 7)
    async with serving(runner):
        assert await handle.result(timeout=10) == 7
    assert backend.notify_keys("g") == [f"taskrunner:g:notify:{handle.id}"]


async def test_a_registration_that_ran_out_pushes_no_notice(
    autojump_clock: trio.testing.MockClock,
) -> None:
    backend = MemoryBackend()
    runner = make_runner(backend)

    @runner.task(keep_result=60)
    async def slow(payload: int) -> int:
        await trio.sleep(100)
        return payload

    handle = await runner.dispatch("slow", 7)
    async with serving(runner):
        with pytest.raises(trio.TooSlowError):
            await handle.result(timeout=1)  # registered until 1 s + the margin
        await wait_until(lambda: runner.statistics().acked == 1, limit=200)
    assert backend.notify_keys("g") == [], "its waiter gave up long before"
    assert await handle.result(timeout=0) == 7


async def test_a_result_kept_for_less_than_the_wait_still_reaches_its_waiter(
    autojump_clock: trio.testing.MockClock,
) -> None:
    backend = MemoryBackend()
    runner = make_runner(backend)

    @runner.task(keep_result=0.5)
    async def slow(payload: int) -> int:
        await trio.sleep(5)
        return payload

    handle = await runner.dispatch("slow", 7)
    got: list[int] = []
    async with serving(runner) as nursery:

        async def wait_and_keep() -> None:
            got.append(await handle.result(timeout=10))

        nursery.start_soon(wait_and_keep)
        await wait_until(lambda: bool(got), limit=20)
    assert got == [7]


async def test_results_nobody_looks_up_are_swept_as_they_expire(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """In memory nothing expires a key by itself: expired results are swept when
    their count doubles, so a runner keeping results nobody reads stays bounded."""
    backend = MemoryBackend()
    runner = make_runner(backend)

    @runner.task(keep_result=1)
    async def kept(payload: int) -> int:
        return payload

    async with serving(runner):
        for wave in range(3):
            await runner.dispatch_many("kept", range(5000))
            await wait_until(lambda w=wave: runner.statistics().acked == 5000 * (w + 1))
            await trio.sleep(2)  # this wave's results expire
    stored = len(backend._results)  # expired ones included: what the process holds
    assert stored < 11_000, f"{stored} results held for 5,000 live at most"
    assert backend.result_keys("g") == []  # and every one of them is expired
