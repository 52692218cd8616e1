"""Serving a sharded group (issue 27) on one MemoryBackend, on trio's MockClock, with 4 and
16 shards: lookup, cancel and results by the sharded id (from outside and from inside a
task, a retried one's too), unique tasks, delayed tasks, periodic schedules, limits held
across shards and runners (``max_concurrency``, ``RateLimit``), pause and resume, the
dispatched events in the group's stream, per-key order on a single-worker fleet.
The same scenarios run on real servers in tests/redis/test_shard_serve_redis.py."""

from __future__ import annotations

import math
from typing import Any

import pytest
import trio
import trio.testing
from _fleet import make_runner, serving, wait_until

from taskrunner import RateLimit, TaskContext, TaskRunner, TaskState, _shards, admin
from taskrunner.backends.memory import MemoryBackend
from taskrunner.errors import TaskAlreadyDispatched

pytestmark = pytest.mark.parametrize("shards", [1, 4, 16])

GROUP = "shop"


def sharded(backend: MemoryBackend, shards: int, **config: Any) -> TaskRunner:
    return make_runner(backend, consumer_group=GROUP, shards=shards, **config)


def shard_of(task_id: str, shards: int) -> int:
    found = _shards.parse_task_id(task_id, shards)
    assert found is not None, task_id
    return found[0]


async def test_lookup_and_results_by_the_sharded_id_inside_and_out(
    autojump_clock: trio.testing.MockClock, shards: int
) -> None:
    backend = MemoryBackend()
    runner = sharded(backend, shards)
    seen: dict[str, object] = {}

    @runner.task(name="charge", keep_result=600.0)
    async def charge(payload: int, ctx: TaskContext) -> int:
        info = await runner.get_task(ctx.task_id)  # from inside: its own shard
        assert info is not None
        seen[ctx.task_id] = info.state
        await ctx.progress(0.5, "half")
        await trio.sleep(2)
        return payload * 2

    async with serving(runner):
        handles = [await runner.dispatch("charge", n) for n in range(2 * shards)]
        assert len({shard_of(h.id, shards) for h in handles}) == shards  # every shard used
        with trio.fail_after(60):
            results = [await h.result(timeout=60) for h in handles]
    assert results == [2 * n for n in range(2 * shards)]
    assert seen == {h.id: TaskState.RUNNING for h in handles}
    for handle in handles:
        info = await runner.get_task(handle.id)
        assert info is not None
        assert info.state is TaskState.SUCCEEDED
        assert info.progress is not None
        assert (info.progress.fraction, info.progress.note) == (0.5, "half")


async def test_a_retried_task_keeps_its_sharded_id(
    autojump_clock: trio.testing.MockClock, shards: int
) -> None:
    backend = MemoryBackend()
    runner = sharded(backend, shards)
    ids: list[str] = []

    @runner.task(name="flaky", max_retry=2, keep_result=600.0)
    async def flaky(payload: None, ctx: TaskContext) -> int:
        ids.append(ctx.task_id)
        if ctx.attempt == 1:
            raise RuntimeError("once")
        info = await runner.get_task(ctx.task_id)
        assert info is not None
        assert info.state is TaskState.RUNNING
        return ctx.attempt

    async with serving(runner):
        handle = await runner.dispatch("flaky")
        with trio.fail_after(60):
            assert await handle.result(timeout=60) == 2
    assert ids == [handle.id, handle.id]


async def test_cancel_by_the_sharded_id_queued_and_running(
    autojump_clock: trio.testing.MockClock, shards: int
) -> None:
    backend = MemoryBackend()
    runner = sharded(backend, shards, num_workers=1)
    started: list[str] = []
    finished: list[str] = []

    @runner.task(name="slow", keep_result=600.0, shard_key=lambda p: "one")
    async def slow(payload: int, ctx: TaskContext) -> None:
        started.append(ctx.task_id)
        await trio.sleep(100)
        finished.append(ctx.task_id)

    async with serving(runner):
        running = await runner.dispatch("slow", 1)
        queued = await runner.dispatch("slow", 2)
        await wait_until(lambda: started == [running.id])
        assert await runner.cancel(queued.id)  # waiting behind the running one
        assert await runner.cancel(running.id)
        info = await runner.get_task(running.id)
        with trio.fail_after(60):
            while info is None or info.state is not TaskState.CANCELLED:
                await trio.sleep(0.1)
                info = await runner.get_task(running.id)
        await trio.sleep(200)
    assert started == [running.id]
    assert finished == []
    info = await runner.get_task(queued.id)
    assert info is not None
    assert info.state is TaskState.CANCELLED


async def test_unique_tasks_hold_across_shards_while_they_run(
    autojump_clock: trio.testing.MockClock, shards: int
) -> None:
    backend = MemoryBackend()
    runners = [sharded(backend, shards) for _ in range(2)]
    runs: list[str] = []
    for runner in runners:

        @runner.task(name="once", unique=True, unique_key=lambda p: p, unique_for=600.0)
        async def once(payload: str) -> None:
            runs.append(payload)
            await trio.sleep(5)

    async with serving(*runners):
        for key in ("a", "b", "c", "d"):
            await runners[0].dispatch("once", key)
        for key in ("a", "b", "c", "d"):
            with pytest.raises(TaskAlreadyDispatched):
                await runners[1].dispatch("once", key)  # the other runner meets the lock
        await wait_until(lambda: len(runs) == 4)
        await trio.sleep(10)  # the locks are released with the acks
        await runners[1].dispatch("once", "a")
        await wait_until(lambda: len(runs) == 5)
    assert sorted(runs) == ["a", "a", "b", "c", "d"]


async def test_delayed_tasks_run_on_time_in_their_shards(
    autojump_clock: trio.testing.MockClock, shards: int
) -> None:
    backend = MemoryBackend()
    runners = [sharded(backend, shards) for _ in range(2)]  # one of them leads
    ran: dict[str, float] = {}
    for runner in runners:

        @runner.task(name="later", keep_result=600.0)
        async def later(payload: int, ctx: TaskContext) -> int:
            assert ctx.task_id not in ran, "ran twice"
            ran[ctx.task_id] = trio.current_time()
            return payload

    async with serving(*runners):
        start = trio.current_time()
        handles = [
            await runners[n % 2].dispatch_delayed("later", n, delay=10 + n) for n in range(40)
        ]
        with trio.fail_after(600):
            assert [await h.result(timeout=600) for h in handles] == list(range(40))
    assert set(ran) == {h.id for h in handles}
    for n, handle in enumerate(handles):  # never early; late by a poll at most, as unsharded
        assert 10 + n <= ran[handle.id] - start <= 10 + n + 5 + 1, (n, ran[handle.id] - start)


async def test_periodic_ticks_run_once_each_on_a_sharded_fleet(
    autojump_clock: trio.testing.MockClock, shards: int
) -> None:
    backend = MemoryBackend()
    runners = [sharded(backend, shards) for _ in range(3)]
    ticks: list[float] = []
    for runner in runners:

        @runner.task(name="report")
        async def report(payload: None, ctx: TaskContext) -> None:
            assert ctx.tick is not None
            ticks.append(ctx.tick)

        runner.add_schedule("every-minute", task="report", every=60)

    async with serving(*runners):
        await trio.sleep(60 * 20 + 30)
    assert len(ticks) >= 19
    assert len(set(ticks)) == len(ticks), "a tick ran twice"


async def test_max_concurrency_holds_across_shards_and_runners(
    autojump_clock: trio.testing.MockClock, shards: int
) -> None:
    backend = MemoryBackend()
    runners = [sharded(backend, shards, num_workers=8) for _ in range(3)]
    now = most = done = 0
    for runner in runners:

        @runner.task(name="charge", max_concurrency=3, reservation_timeout=10)
        async def charge(payload: int) -> None:
            nonlocal now, most, done
            now += 1
            most = max(most, now)
            try:
                await trio.sleep(1 + payload % 3)
            finally:
                now -= 1
            done += 1

    async with serving(*runners):
        await runners[0].dispatch_many("charge", range(60))
        await wait_until(lambda: done == 60)
    assert most == 3


async def test_a_rate_limit_holds_across_shards(
    autojump_clock: trio.testing.MockClock, shards: int
) -> None:
    backend = MemoryBackend()
    runners = [sharded(backend, shards, num_workers=8) for _ in range(2)]
    starts: list[float] = []
    for runner in runners:

        @runner.task(name="call", rate_limit=RateLimit(5, per=1.0))
        async def call(payload: int) -> None:
            starts.append(trio.current_time())

    async with serving(*runners):
        await runners[0].dispatch_many("call", range(50))
        await wait_until(lambda: len(starts) == 50)
    starts.sort()
    most = max(sum(1 for t in starts[i:] if t < start + 1.0) for i, start in enumerate(starts))
    assert most <= 5
    assert starts[-1] - starts[0] >= 50 / 5 - 1 - 1e-9  # paced, not refused


async def test_pause_parks_in_the_shards_and_resume_brings_every_run_back(
    autojump_clock: trio.testing.MockClock, shards: int
) -> None:
    backend = MemoryBackend()
    runners = [sharded(backend, shards) for _ in range(2)]
    ran: list[int] = []
    for runner in runners:

        @runner.task(name="charge")
        async def charge(payload: int) -> None:
            ran.append(payload)

    async with serving(*runners):
        await runners[0].dispatch("charge", -1)  # records the shard count first
        await wait_until(lambda: ran == [-1])
        assert await admin.pause(backend, GROUP, task="charge")
        await trio.sleep(3)  # every runner has seen it
        await runners[0].dispatch_many("charge", range(3 * shards))
        await trio.sleep(30)
        assert ran == [-1], "a paused task ran"
        parked = sum(runner.statistics().parked for runner in runners)
        assert parked == 3 * shards
        assert await admin.resume(backend, GROUP, task="charge")
        await wait_until(lambda: len(ran) == 1 + 3 * shards, limit=60)
    assert sorted(ran) == [-1, *range(3 * shards)]
    for index in range(shards):  # nothing is left parked in any shard
        tag = _shards.shard_tag(GROUP, index, shards)
        assert (await backend.paused(tag)).tasks == frozenset()
        assert await backend.next_delayed_at(tag) is None


async def test_dispatched_events_land_in_the_groups_stream_with_sharded_ids(
    autojump_clock: trio.testing.MockClock, shards: int
) -> None:
    backend = MemoryBackend()
    runner = sharded(backend, shards, events=True)

    @runner.task(name="charge")
    async def charge(payload: int) -> None:
        pass

    async with serving(runner):
        one = await runner.dispatch("charge", 1)
        many = await runner.dispatch_many("charge", [2, 3])
        later = await runner.dispatch_delayed("charge", 4, delay=5)
        ids = {one.id, *(h.id for h in many), later.id}
        await trio.sleep(30)
    events = await backend.read_events(GROUP, "0-0", count=1000, block=0)
    by_kind: dict[str, set[str]] = {}
    for event in events:
        by_kind.setdefault(event.kind, set()).add(event.task_id)
    assert by_kind["dispatched"] == ids
    assert by_kind["started"] == ids
    assert by_kind["succeeded"] == ids
    for index in range(shards):  # no shard has an events stream of its own
        tag = _shards.shard_tag(GROUP, index, shards)
        assert await backend.read_events(tag, "0-0", count=10, block=0) == []


async def test_one_keys_tasks_start_in_dispatch_order_on_one_worker(
    autojump_clock: trio.testing.MockClock, shards: int
) -> None:
    backend = MemoryBackend()
    runner = sharded(backend, shards, num_workers=1)
    started: list[tuple[str, int]] = []

    @runner.task(name="step", shard_key=lambda p: p[0])
    async def step(payload: list[Any]) -> None:
        started.append((payload[0], payload[1]))
        await trio.sleep(0.01)

    keys = [f"customer-{k}" for k in range(8)]
    async with serving(runner):
        for n in range(20):
            for key in keys:
                await runner.dispatch("step", [key, n])
        await wait_until(lambda: len(started) == 20 * len(keys))
    for key in keys:
        assert [n for k, n in started if k == key] == list(range(20))


async def test_nothing_is_lost_or_run_twice_across_a_fleet(
    autojump_clock: trio.testing.MockClock, shards: int
) -> None:
    backend = MemoryBackend()
    runners = [sharded(backend, shards, num_workers=4) for _ in range(3)]
    runs: dict[str, int] = {}
    for runner in runners:

        @runner.task(name="work", keep_result=600.0)
        async def work(payload: int, ctx: TaskContext) -> int:
            runs[ctx.task_id] = runs.get(ctx.task_id, 0) + 1
            await trio.sleep(payload % 5 / 10)
            return payload

    async with serving(*runners):
        handles = await runners[0].dispatch_many("work", range(300))
        handles += [await runners[1].dispatch_delayed("work", n, delay=n % 7) for n in range(50)]
        with trio.fail_after(math.inf):
            await wait_until(lambda: len(runs) == 350)
            await trio.sleep(10)
    assert set(runs) == {h.id for h in handles}
    assert set(runs.values()) == {1}
