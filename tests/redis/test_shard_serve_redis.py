"""Serving a sharded group (issue 27) on a real standalone server, ``shards=16``: three
runners, real time, short timings. Lookup, cancel and results by the sharded id (inside
and out, a retried task's too), unique, delayed, periodic, limits held across shards
(``max_concurrency``, ``RateLimit``), pause and resume (parked in the shards), per-key
order on one worker, the dispatched events in the group's stream, and a mix of plain,
delayed, unique and result-keeping tasks with none lost and none run twice. The
MockClock versions, with 4 and 16 shards, are in tests/test_shard_serve.py; the
3-master cluster's are in tests/redis/test_cluster_fleet.py (``shards16``)."""

from __future__ import annotations

import bisect
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import pytest
import trio

from taskrunner import (
    RateLimit,
    TaskContext,
    TaskRunner,
    TaskRunnerConfig,
    TaskState,
    _keys,
    _shards,
    admin,
)
from taskrunner.backends import Paused
from taskrunner.backends.redis import RedisBackend
from taskrunner.errors import TaskAlreadyDispatched

SHARDS = 16
FAST = {
    "reclaim_delay": 2.0,
    "block_duration": 0.1,
    "leader_lease_ttl": 1.0,
    "delayed_poll_interval": 0.2,
    "shutdown_grace": 5.0,
    "shards": SHARDS,
}


@asynccontextmanager
async def fleet(
    url: str, group: str, define: Callable[[TaskRunner], None], count: int = 3, **config: Any
) -> AsyncIterator[list[TaskRunner]]:
    """``count`` runners of sharded ``group``, each on its own connection, serving."""
    backends = [RedisBackend.from_url(url) for _ in range(count)]
    runners = [
        TaskRunner(
            TaskRunnerConfig(consumer_group=group, host=f"h{i}", **{**FAST, **config}), backend
        )
        for i, backend in enumerate(backends)
    ]
    for runner in runners:
        define(runner)
    try:
        async with trio.open_nursery() as nursery:
            for runner in runners:
                await nursery.start(runner.serve)
            yield runners
            nursery.cancel_scope.cancel()
    finally:
        for backend in backends:
            await backend.aclose()


async def wait_until(predicate: Callable[[], bool], limit: float = 30) -> None:
    with trio.fail_after(limit):
        while not predicate():  # noqa: ASYNC110
            await trio.sleep(0.01)


def new_group() -> str:
    return f"g{uuid.uuid4().hex[:8]}"


def shard_of(task_id: str) -> int:
    found = _shards.parse_task_id(task_id, SHARDS)
    assert found is not None, task_id
    return found[0]


async def test_lookup_progress_and_results_by_the_sharded_id(redis_url: str) -> None:
    seen: dict[str, TaskState] = {}

    def define(runner: TaskRunner) -> None:
        @runner.task(name="charge", keep_result=60.0)
        async def charge(payload: int, ctx: TaskContext) -> int:
            info = await runner.get_task(ctx.task_id)
            assert info is not None
            seen[ctx.task_id] = info.state
            await ctx.progress(0.5, "half")
            return payload * 2

    async with fleet(redis_url, new_group(), define) as runners:
        # One producer's round-robin covers every shard in SHARDS dispatches (three
        # producers each start at a random shard, so theirs together need not).
        handles = [await runners[0].dispatch("charge", n) for n in range(2 * SHARDS)]
        assert len({shard_of(h.id) for h in handles}) == SHARDS
        with trio.fail_after(30):
            assert [await h.result(timeout=30) for h in handles] == [2 * n for n in range(32)]
        for handle in handles:
            info = await runners[1].get_task(handle.id)
            assert info is not None
            assert info.state is TaskState.SUCCEEDED
            assert info.progress is not None
            assert info.progress.note == "half"
    assert seen == {h.id: TaskState.RUNNING for h in handles}


async def test_a_retried_task_keeps_its_sharded_id(redis_url: str) -> None:
    ids: list[str] = []

    def define(runner: TaskRunner) -> None:
        @runner.task(name="flaky", max_retry=2, keep_result=60.0)
        async def flaky(payload: None, ctx: TaskContext) -> int:
            ids.append(ctx.task_id)
            if ctx.attempt == 1:
                raise RuntimeError("once")
            return ctx.attempt

    async with fleet(redis_url, new_group(), define) as runners:
        handle = await runners[0].dispatch("flaky")
        with trio.fail_after(30):
            assert await handle.result(timeout=30) == 2
    assert ids == [handle.id, handle.id]


async def test_cancel_a_running_and_a_queued_task_by_the_sharded_id(redis_url: str) -> None:
    started: list[str] = []

    def define(runner: TaskRunner) -> None:
        @runner.task(name="slow", keep_result=60.0, shard_key=lambda p: "one")
        async def slow(payload: int, ctx: TaskContext) -> None:
            started.append(ctx.task_id)
            await trio.sleep(30)

    async with fleet(redis_url, new_group(), define, count=1, num_workers=1) as runners:
        runner = runners[0]
        running = await runner.dispatch("slow", 1)
        queued = await runner.dispatch("slow", 2)
        await wait_until(lambda: started == [running.id])
        assert await runner.cancel(queued.id)
        assert await runner.cancel(running.id)
        with trio.fail_after(15):
            while True:
                info = await runner.get_task(running.id)
                if info is not None and info.state is TaskState.CANCELLED:
                    break
                await trio.sleep(0.05)
        await trio.sleep(0.5)
        info = await runner.get_task(queued.id)
    assert started == [running.id]
    assert info is not None
    assert info.state is TaskState.CANCELLED


async def test_unique_delayed_and_periodic(redis_url: str) -> None:
    runs: list[str] = []
    later: dict[str, float] = {}
    ticks: list[float] = []

    def define(runner: TaskRunner) -> None:
        @runner.task(name="once", unique=True, unique_key=lambda p: p, unique_for=60.0)
        async def once(payload: str) -> None:
            runs.append(payload)
            await trio.sleep(0.5)

        @runner.task(name="later")
        async def later_task(payload: float, ctx: TaskContext) -> None:
            assert ctx.task_id not in later, "ran twice"
            later[ctx.task_id] = trio.current_time() - payload

        @runner.task(name="beat")
        async def beat(payload: None, ctx: TaskContext) -> None:
            assert ctx.tick is not None
            ticks.append(ctx.tick)

        runner.add_schedule("beat", task="beat", every=1.0)

    async with fleet(redis_url, new_group(), define) as runners:
        for key in "abcd":
            await runners[0].dispatch("once", key)
        for key in "abcd":
            with pytest.raises(TaskAlreadyDispatched):
                await runners[1].dispatch("once", key)
        handles = [
            await runners[n % 3].dispatch_delayed("later", trio.current_time() + 0.5, 0.5)
            for n in range(30)
        ]
        await wait_until(lambda: len(runs) == 4 and len(later) == 30)
        await trio.sleep(1.0)  # the locks go with the acks
        await runners[2].dispatch("once", "a")
        await wait_until(lambda: len(runs) == 5)
        await wait_until(lambda: len(ticks) >= 3)
    assert sorted(runs) == ["a", "a", "b", "c", "d"]
    assert set(later) == {h.id for h in handles}
    assert all(-0.05 <= late < 2.0 for late in later.values()), later
    assert len(set(ticks)) == len(ticks), "a tick ran twice"


def most_in_any_window(starts: list[float], per: float) -> int:
    ordered = sorted(starts)
    return max((bisect.bisect_left(ordered, t + per) - i for i, t in enumerate(ordered)), default=0)


async def test_limits_hold_across_shards(redis_url: str) -> None:
    """The rate limit is measured in the server's time, where it is kept: each run reads
    the limit's log, where its admission is scored (the server's TIME), as
    tests/redis/test_redis_flow.py's fleet test does; on the client's clock the time
    from admission to the action varies under load."""
    now = most = done = 0
    admitted: dict[bytes, float] = {}

    def define(runner: TaskRunner) -> None:
        @runner.task(name="charge", max_concurrency=3)
        async def charge(payload: int) -> None:
            nonlocal now, most, done
            now += 1
            most = max(most, now)
            try:
                await trio.sleep(0.05)
            finally:
                now -= 1
            done += 1

        backend = runner.backend
        assert isinstance(backend, RedisBackend)

        @runner.task(name="email", rate_limit=RateLimit(10, per=1.0))
        async def email(payload: int) -> None:
            nonlocal emails
            # The log keeps a start for one window after it; this run's is in it.
            log = _keys.rate(runner.config.consumer_group, "email", "", backend.key_layout)
            reply = await backend.client.execute("ZRANGE", log, 0, -1, "WITHSCORES")
            holders, scores = reply[0::2], reply[1::2]
            admitted.update(
                (bytes(h), float(ms) / 1000) for h, ms in zip(holders, scores, strict=True)
            )
            emails += 1

    emails = 0
    async with fleet(redis_url, new_group(), define, num_workers=8) as runners:
        await runners[0].dispatch_many("charge", range(48))
        await runners[1].dispatch_many("email", range(25))
        await wait_until(lambda: done == 48 and emails == 25)
    assert most == 3, f"at most 3 at once across 16 shards, measured {most}"
    assert len(admitted) == 25, f"{len(admitted)} admissions logged for 25 runs"
    starts = list(admitted.values())
    assert most_in_any_window(starts, 1.0) <= 10
    # 25 starts, 10 in any second: the 21st is at least 2 s after the first.
    assert 2.0 <= max(starts) - min(starts) <= 4.0


async def test_pause_parks_in_the_shards_and_resume_brings_them_back(redis_url: str) -> None:
    group = new_group()
    ran: list[int] = []

    def define(runner: TaskRunner) -> None:
        @runner.task(name="mail")
        async def mail(payload: int) -> None:
            ran.append(payload)

    async with fleet(redis_url, group, define) as runners:
        backend = runners[0].backend
        await runners[0].dispatch("mail", -1)  # records the shard count
        await wait_until(lambda: ran == [-1])
        assert await admin.pause(backend, group, task="mail")
        # Every runner has read it: each gate reads the paused set every second, which a
        # loaded machine can stretch past the 1.2 s this slept.
        paused = Paused(tasks=frozenset({"mail"}))
        await wait_until(lambda: all(r._parts.gate.paused == paused for r in runners))
        await runners[0].dispatch_many("mail", range(48))
        await wait_until(lambda: sum(r.statistics().parked for r in runners) == 48)
        assert ran == [-1]
        assert await admin.resume(backend, group, task="mail")
        await wait_until(lambda: len(ran) == 49)
    assert sorted(ran) == [-1, *range(48)]


async def test_one_keys_tasks_start_in_dispatch_order_on_one_worker(redis_url: str) -> None:
    started: list[tuple[str, int]] = []

    def define(runner: TaskRunner) -> None:
        @runner.task(name="step", shard_key=lambda p: p[0])
        async def step(payload: list[Any]) -> None:
            started.append((payload[0], payload[1]))

    keys = [f"customer-{k}" for k in range(8)]
    async with fleet(redis_url, new_group(), define, count=1, num_workers=1) as runners:
        for n in range(10):
            for key in keys:
                await runners[0].dispatch("step", [key, n])
        # One pool slot among 17 read loops (16 shards and the group's own stream): a
        # read holding the pool's last slot never blocks, and idle shards rest without
        # it (docs/sharding.md), so the shards with work take turns at the one worker.
        await wait_until(lambda: len(started) == 10 * len(keys), limit=30)
    for key in keys:
        assert [n for k, n in started if k == key] == list(range(10))


async def test_dispatched_events_land_in_the_groups_stream(redis_url: str) -> None:
    group = new_group()
    done: list[str] = []

    def define(runner: TaskRunner) -> None:
        @runner.task(name="charge")
        async def charge(payload: int, ctx: TaskContext) -> None:
            done.append(ctx.task_id)

    async with fleet(redis_url, group, define, count=1, events=True) as runners:
        runner = runners[0]
        ids = {(await runner.dispatch("charge", 1)).id}
        ids |= {h.id for h in await runner.dispatch_many("charge", [2, 3, 4])}
        ids.add((await runner.dispatch_delayed("charge", 5, 0.2)).id)
        await wait_until(lambda: len(done) == 5)
        await trio.sleep(1.5)  # the last events go with the acks
        events = await runner.backend.read_events(group, "0-0", count=1000, block=0)
    kinds: dict[str, set[str]] = {}
    for event in events:
        kinds.setdefault(event.kind, set()).add(event.task_id)
    assert kinds["dispatched"] == ids
    assert kinds["started"] == ids
    assert kinds["succeeded"] == ids


async def test_a_mix_with_none_lost_and_none_run_twice(redis_url: str) -> None:
    runs: Counter[str] = Counter()

    def define(runner: TaskRunner) -> None:
        @runner.task(name="plain")
        async def plain(payload: int, ctx: TaskContext) -> None:
            runs[ctx.task_id] += 1

        @runner.task(name="kept", keep_result=60.0)
        async def kept(payload: int, ctx: TaskContext) -> int:
            runs[ctx.task_id] += 1
            return payload

        @runner.task(name="once", unique=True, unique_key=lambda p: str(p), unique_for=60.0)
        async def once(payload: int, ctx: TaskContext) -> None:
            runs[ctx.task_id] += 1

    async with fleet(redis_url, new_group(), define, num_workers=8) as runners:
        ids = [h.id for h in await runners[0].dispatch_many("plain", range(400))]
        kept = [await runners[1].dispatch("kept", n) for n in range(100)]
        ids += [h.id for h in kept]
        ids += [(await runners[2].dispatch("once", n)).id for n in range(100)]
        ids += [(await runners[n % 3].dispatch_delayed("plain", n, 0.3)).id for n in range(100)]
        await wait_until(lambda: len(runs) == 700, limit=60)
        with trio.fail_after(30):
            assert [await h.result(timeout=30) for h in kept] == list(range(100))
        await trio.sleep(1.0)
    assert set(runs) == set(ids)
    assert set(runs.values()) == {1}, "a task ran twice"
