"""The runner on the in-memory backend, driven by trio's MockClock."""

from __future__ import annotations

import random
from collections import Counter

import pytest
import trio
import trio.lowlevel
import trio.testing
from _fleet import make_runner, serving, wait_until

from taskrunner import AlreadyServing, Delivery, Task, TaskRunnerError
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


async def test_every_part_serves_with_the_configuration_given_to_configure(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """configure() replaces the configuration every part reads: the dispatcher, the
    worker's hooks and failure path, the acker and the stream sharing all follow."""
    backend = MemoryBackend()
    runner = make_runner(backend, consumer_group="before")
    errors: list[str] = []
    handled: list[str] = []

    async def on_error(error: TaskRunnerError, delivery: Delivery) -> None:
        errors.append(delivery.id)

    async def handler(delivery: Delivery, error: TaskRunnerError) -> None:
        handled.append(delivery.id)

    runner.configure(consumer_group="after", on_error=on_error, failed_task_handler=handler)

    @runner.task()
    async def fails(payload: None) -> None:
        raise RuntimeError("no")

    @runner.task()
    async def works(payload: None) -> None:
        pass

    failing = (await runner.dispatch("fails")).id
    await runner.dispatch_many("works", [None] * 3)
    assert await backend.length("after") == 4
    assert await backend.length("before") == 0
    async with serving(runner):
        await wait_until(lambda: runner.statistics().acked == 4)
    assert errors == [failing]
    assert handled == [failing]
    info = await backend.group_info("after")
    assert (info.pending, info.lag) == (0, 0)
    assert await backend.stream_groups("after") == ["after"]


async def test_a_delayed_task_dispatched_before_configure_still_fires_on_time(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """The scheduler is one part for the runner's whole life: configure() does not
    replace it, so the run-at times it keeps for a follower's own pass survive."""
    backend = MemoryBackend()
    leader = make_runner(backend)  # delayed_poll_interval 5 s
    follower = make_runner(backend)
    ran: list[float] = []
    for runner in (leader, follower):

        @runner.task(name="ping")
        async def ping(payload: None) -> None:
            ran.append(trio.current_time())

    async with serving(leader):
        await wait_until(lambda: leader.is_leader)
        await trio.sleep(1.3)  # the leader's scheduler is asleep until its next poll
        sent = trio.current_time()
        await follower.dispatch_delayed("ping", None, 0.2)
        follower.configure(num_workers=4)  # as `taskrunner worker --workers 4` does
        async with serving(follower):
            await wait_until(lambda: bool(ran))
    assert ran[0] - sent == pytest.approx(0.2, abs=0.05), "fired at the leader's poll"


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
