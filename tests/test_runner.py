"""The runner on the in-memory backend, driven by trio's MockClock."""

from __future__ import annotations

import dataclasses
import itertools
import random
from collections import Counter
from collections.abc import Sequence

import attrs
import pytest
import trio
import trio.lowlevel
import trio.testing
from _fleet import make_runner, serving, wait_until

from taskrunner import (
    AlreadyServing,
    Delivery,
    InvalidTaskPayload,
    Task,
    TaskExecutionError,
    TaskMaxRetryExceeded,
    TaskMessage,
    TaskNotFound,
    TaskRunnerError,
)
from taskrunner._wire import encode_message
from taskrunner.backends import QueueEntry
from taskrunner.backends.memory import MemoryBackend


async def test_thousand_tasks_three_runners_each_processed_exactly_once(
    autojump_clock: trio.testing.MockClock,
) -> None:
    backend = MemoryBackend()
    runners = [make_runner(backend, num_workers=8, batch_size=5) for _ in range(3)]
    seen: Counter[int] = Counter()
    by_runner: Counter[int] = Counter()
    for index, runner in enumerate(runners):

        async def work(payload: dict[str, int], index: int = index) -> None:
            await trio.sleep(random.random() / 100)
            seen[payload["i"]] += 1
            by_runner[index] += 1

        runner.register(Task(name="work", action=work))

    await runners[0].dispatch_many("work", [{"i": i} for i in range(1000)])
    async with serving(*runners):
        await wait_until(lambda: sum(r.statistics().acked for r in runners) == 1000)

    assert sorted(seen) == list(range(1000))
    assert set(seen.values()) == {1}, "some task ran more than once"
    assert all(by_runner[i] > 0 for i in range(3)), f"work was not shared: {by_runner}"
    assert await backend.length("g") == 0
    info = await backend.group_info("g")
    assert info.pending == 0
    assert info.lag == 0


async def test_concurrency_never_exceeds_capacity_and_resize_under_load(
    autojump_clock: trio.testing.MockClock,
) -> None:
    backend = MemoryBackend()
    runner = make_runner(backend, num_workers=4, batch_size=10)
    running = 0
    observed: list[tuple[float, int]] = []  # (start time, running including this one)

    @runner.task()
    async def work(payload: int) -> None:
        nonlocal running
        running += 1
        observed.append((trio.current_time(), running))
        await trio.sleep(1)
        running -= 1

    await runner.dispatch_many("work", range(200))
    async with serving(runner):
        await trio.sleep(10.5)
        assert max(n for _, n in observed) == 4
        runner.resize(2)
        shrunk_at = trio.current_time()
        await trio.sleep(10)
        after_shrink = [n for t, n in observed if t > shrunk_at]
        assert after_shrink, "nothing started after the shrink"
        assert max(after_shrink) <= 2
        runner.resize(8)
        grown_at = trio.current_time()
        await trio.sleep(5)
        assert max(n for t, n in observed if t >= grown_at) == 8
        assert runner.statistics().capacity == 8
        await wait_until(lambda: runner.statistics().acked == 200)
    assert max(n for _, n in observed) == 8


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

    @runner.task(max_retry=3, reservation_timeout=5)
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

    message_id = await runner.dispatch("once", {"n": 1})
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


async def test_message_of_a_crashed_holder_is_reclaimed_after_reclaim_delay(
    autojump_clock: trio.testing.MockClock,
) -> None:
    backend = MemoryBackend()
    first = make_runner(backend, reclaim_delay=30, shutdown_grace=0)
    second = make_runner(backend, reclaim_delay=30)
    runs: list[tuple[str, int, float]] = []

    async def hang(payload: None) -> None:
        runs.append(("first", 0, trio.current_time()))
        await trio.sleep_forever()

    async def finish(payload: None) -> None:
        runs.append(("second", 0, trio.current_time()))

    first.register(Task(name="job", action=hang, max_retry=2, reservation_timeout=5))
    second.register(Task(name="job", action=finish, max_retry=2, reservation_timeout=5))

    await first.dispatch("job")
    async with trio.open_nursery() as crash:
        await crash.start(first.serve)
        await wait_until(lambda: len(runs) == 1)
        await trio.sleep(10)  # refreshed meanwhile: still held by first
        crash.cancel_scope.cancel()  # the "crash": grace 0, nothing acked
    crashed_at = trio.current_time()
    assert first.statistics().acked == 0
    assert (await backend.group_info("g")).pending == 1

    async with serving(second):
        await wait_until(lambda: len(runs) == 2)
        await wait_until(lambda: second.statistics().acked == 1)
    reclaimed_at = runs[1][2]
    assert reclaimed_at - crashed_at >= 30 - 1e-9
    assert reclaimed_at - crashed_at <= 30 + 15 + 1  # + reclaim interval + block
    assert second.statistics().reclaimed == 1


async def test_long_task_that_refreshes_is_never_reclaimed(
    autojump_clock: trio.testing.MockClock,
) -> None:
    backend = MemoryBackend()
    runners = [make_runner(backend, reclaim_delay=30) for _ in range(2)]
    starts: list[int] = []
    for index, runner in enumerate(runners):

        async def slow(payload: None, index: int = index) -> None:
            starts.append(index)
            await trio.sleep(300)  # ten times reclaim_delay

        runner.register(Task(name="slow", action=slow, reservation_timeout=10))

    await runners[0].dispatch("slow")
    async with serving(*runners):
        await wait_until(lambda: sum(r.statistics().acked for r in runners) == 1)
        await trio.sleep(100)
    assert len(starts) == 1
    assert sum(r.statistics().reclaimed for r in runners) == 0


async def test_graceful_shutdown_finishes_running_tasks_and_acks_them(
    autojump_clock: trio.testing.MockClock,
) -> None:
    backend = MemoryBackend()
    runner = make_runner(backend, num_workers=4, shutdown_grace=10)
    finished = 0

    @runner.task()
    async def work(payload: None) -> None:
        nonlocal finished
        await trio.sleep(5)
        finished += 1

    await runner.dispatch_many("work", [None] * 10)
    async with trio.open_nursery() as nursery:
        await nursery.start(runner.serve)
        await trio.sleep(1)
        assert runner.statistics().running == 4
        cancelled_at = trio.current_time()
        nursery.cancel_scope.cancel()
    assert trio.current_time() - cancelled_at == pytest.approx(4)
    assert finished == 4
    stats = runner.statistics()
    assert stats.acked == 4
    assert stats.serving is False
    assert await backend.length("g") == 6  # the rest was never fetched
    assert (await backend.group_info("g")).pending == 0


async def test_shutdown_grace_runs_out_unfinished_tasks_stay_pending(
    autojump_clock: trio.testing.MockClock,
) -> None:
    backend = MemoryBackend()
    runner = make_runner(backend, num_workers=3, shutdown_grace=2)
    cancelled = 0

    @runner.task()
    async def work(payload: None) -> None:
        nonlocal cancelled
        try:
            await trio.sleep(60)
        except trio.Cancelled:
            cancelled += 1
            raise

    await runner.dispatch_many("work", [None] * 3)
    async with trio.open_nursery() as nursery:
        await nursery.start(runner.serve)
        await trio.sleep(1)
        stopped_at = trio.current_time()
        runner.shutdown()
    assert trio.current_time() - stopped_at == pytest.approx(2)
    assert cancelled == 3
    assert runner.statistics().acked == 0
    assert (await backend.group_info("g")).pending == 3


async def test_serve_can_run_again_after_it_stopped(autojump_clock: trio.testing.MockClock) -> None:
    backend = MemoryBackend()
    runner = make_runner(backend)
    done: list[int] = []

    @runner.task()
    async def work(payload: int) -> None:
        done.append(payload)

    for value in (1, 2):
        await runner.dispatch("work", value)
        async with serving(runner):
            await wait_until(lambda value=value: value in done)
    assert done == [1, 2]


async def test_second_concurrent_serve_is_refused(autojump_clock: trio.testing.MockClock) -> None:
    runner = make_runner(MemoryBackend())
    async with serving(runner):
        with pytest.raises(AlreadyServing, match="already serving"):
            await runner.serve()


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


async def test_configure_overrides_before_serving_and_refuses_while_serving(
    autojump_clock: trio.testing.MockClock,
) -> None:
    backend = MemoryBackend()
    runner = make_runner(backend, num_workers=2)
    runner.configure(num_workers=6, num_fetchers=2)
    assert runner.config.num_fetchers == 2
    assert runner.capacity == 6
    with pytest.raises(ValueError, match="num_workers must be > 0 and finite, got 0"):
        runner.configure(num_workers=0)
    assert runner.capacity == 6

    @runner.task()
    async def work(payload: None) -> None:
        await trio.sleep(1)

    await runner.dispatch_many("work", [None] * 12)
    async with serving(runner):
        await wait_until(lambda: runner.statistics().acked == 12)
        with pytest.raises(AlreadyServing):
            runner.configure(num_workers=3)
        consumers = {c.name for c in (await backend.group_info("g")).consumers}
    assert consumers == {runner.config.consumer_name(1), runner.config.consumer_name(2)}


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


async def test_a_unique_lock_is_given_back_when_the_add_fails(
    autojump_clock: trio.testing.MockClock,
) -> None:
    from _fleet import Partition

    from taskrunner import BackendError, TaskAlreadyDispatched

    backend = MemoryBackend()

    class FailingAdd(Partition):
        async def add(self, group: str, payloads: list[bytes]) -> list[str]:
            raise BackendError("add failed", maybe_applied=False)  # e.g. an error reply

    runner = make_runner(FailingAdd(backend))  # type: ignore[arg-type]

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


async def test_serve_cancelled_while_starting_returns(
    autojump_clock: trio.testing.MockClock,
) -> None:
    runner = make_runner(MemoryBackend())
    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(runner.serve)
            await trio.lowlevel.checkpoint()  # serve has begun starting its services
            nursery.cancel_scope.cancel()
    assert runner.statistics().serving is False


async def test_shutdown_before_serve_started_is_not_lost(
    autojump_clock: trio.testing.MockClock,
) -> None:
    runner = make_runner(MemoryBackend())
    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(runner.serve)
            runner.shutdown()
    assert runner.statistics().serving is False
    # ...and a later serve is not stopped by that old request.
    async with serving(runner):
        await trio.sleep(5)
        assert runner.statistics().serving is True


async def test_a_failed_refresh_is_retried_on_the_next_tick(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """One transient refresh failure must not let another runner reclaim a running
    message (it used to wait a whole reservation timeout before trying again)."""
    from taskrunner import BackendError
    from taskrunner.testing import PartitionedBackend

    backend = MemoryBackend()

    class FlakyRefresh(PartitionedBackend):
        failures = 0

        async def refresh(self, group: str, consumer: str, ids: list[str]) -> list[str]:
            if trio.current_time() >= 24 and FlakyRefresh.failures == 0:
                FlakyRefresh.failures += 1
                raise BackendError("transient")
            return await backend.refresh(group, consumer, ids)

    first = make_runner(FlakyRefresh(backend), reclaim_delay=30)  # type: ignore[arg-type]
    second = make_runner(backend, reclaim_delay=30)
    runs: list[str] = []
    for name, runner in (("first", first), ("second", second)):

        async def long(payload: None, name: str = name) -> None:
            runs.append(name)
            await trio.sleep(100)

        async def quick(payload: None) -> None:
            pass

        runner.register(Task(name="long", action=long, reservation_timeout=25, max_retry=2))
        runner.register(Task(name="quick", action=quick, reservation_timeout=2))  # 1 s ticks

    await first.dispatch("long")
    async with serving(first):
        await wait_until(lambda: runs == ["first"])
        async with serving(second):
            await wait_until(lambda: first.statistics().acked == 1, limit=200)
    assert FlakyRefresh.failures == 1
    assert runs == ["first"], "the running message was reclaimed and ran twice"
    assert await backend.dead_letters("g") == []
    assert second.statistics().reclaimed == 0


async def test_memory_flush_keeps_a_stream_another_group_reads(
    autojump_clock: trio.testing.MockClock,
) -> None:
    from taskrunner import admin

    backend = MemoryBackend(prefix="shared", delete_on_ack=False)
    await backend.add("A", [b"a", b"b"])
    await backend.read("A", "ca", 10, 0)
    await backend.read("B", "cb", 1, 0)
    await admin.flush(backend, "A", confirm=True)
    assert await backend.length("B") == 2
    info = await backend.group_info("B")
    assert (info.pending, info.lag) == (1, 1)
    await admin.flush(backend, "B", confirm=True)
    assert await backend.length("B") == 0


async def test_configure_reclaim_delay_keeps_reservation_timeouts_below_it() -> None:
    runner = make_runner(MemoryBackend(), reclaim_delay=300)

    async def work(payload: None) -> None:
        pass

    runner.register(Task(name="defaulted", action=work))
    runner.register(Task(name="explicit", action=work, reservation_timeout=20))
    runner.configure(reclaim_delay=30)
    assert runner.tasks["defaulted"].reservation == 10.0
    with pytest.raises(ValueError, match=r"reservation_timeout \(20s\) must be below"):
        runner.configure(reclaim_delay=15)
    assert runner.config.reclaim_delay == 30.0, "a refused configure changes nothing"
    assert runner.tasks["defaulted"].reservation == 10.0


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


async def test_a_unique_lock_is_kept_when_the_add_may_have_happened(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A lost reply, or a cancel while waiting for it: the message may be queued, so
    the lock stays (it expires after unique_for, or the worker releases it)."""
    from taskrunner import BackendError, TaskAlreadyDispatched

    class SlowReply(MemoryBackend):
        lose_reply = False

        async def add(self, group: str, payloads: Sequence[bytes]) -> list[str]:
            ids = await super().add(group, payloads)  # applied...
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


async def test_a_busy_queue_is_read_in_batches_not_one_message_per_freed_slot(
    autojump_clock: trio.testing.MockClock,
) -> None:
    class CountingReads(MemoryBackend):
        reads = 0

        async def read(
            self, group: str, consumer: str, count: int, block: float
        ) -> list[QueueEntry]:
            CountingReads.reads += 1
            return await super().read(group, consumer, count, block)

    backend = CountingReads()
    runner = make_runner(backend, num_workers=32, batch_size=32)
    rng = random.Random(5)

    @runner.task()
    async def work(payload: None) -> None:
        await trio.sleep(rng.uniform(0.01, 0.02))

    await runner.dispatch_many("work", [None] * 2000)
    async with serving(runner):
        await wait_until(lambda: runner.statistics().acked == 2000)
    assert CountingReads.reads < 2000 / 4, f"{CountingReads.reads} reads for 2000 messages"


async def test_a_hard_stop_right_after_a_graceful_one(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Two signals in a row (the CLI's second Ctrl-C): serve returns cleanly, the
    running task is cancelled and stays pending."""
    backend = MemoryBackend()
    runner = make_runner(backend, shutdown_grace=10)

    @runner.task()
    async def slow(payload: None) -> None:
        await trio.sleep(30)

    await runner.dispatch("slow")
    async with trio.open_nursery() as nursery:
        await nursery.start(runner.serve)
        await wait_until(lambda: runner.statistics().running == 1)
        stopped = trio.current_time()
        runner.shutdown()
        runner.shutdown(grace=0)
    assert trio.current_time() - stopped < 1
    assert runner.statistics().acked == 0
    assert (await backend.group_info("g")).pending == 1
