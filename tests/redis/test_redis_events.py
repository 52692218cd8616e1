"""Progress and the event stream on a real server: events cost no round trip (counted
by a client that counts), progress is coalesced (counted writes), every kind of event,
readers that stop give their connection back."""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import AsyncIterator, Sequence
from typing import Any

import pytest
import trio

from taskrunner import Retry, TaskContext, TaskEvent, TaskRunner, TaskRunnerConfig, TaskState
from taskrunner.backends import EventBatch, Outcome, ProgressUpdate
from taskrunner.backends.redis import RedisBackend
from taskrunner.backends.redis._client import NativeRedisClient
from taskrunner.backends.redis._connection import CommandArg, Reply
from taskrunner.backends.redis._events import ADD_EVENTS
from taskrunner.backends.redis._state import ADD_DELAYED
from taskrunner.backends.redis._tracking import FINISH

FAST = {
    "reclaim_delay": 2.0,
    "block_duration": 0.1,
    "leader_lease_ttl": 1.0,
    "delayed_poll_interval": 0.2,
    "shutdown_grace": 2.0,
}


class CountingClient(NativeRedisClient):
    """A native client that counts its round trips (a pipeline is one)."""

    round_trips = 0

    async def execute(self, *args: CommandArg) -> Reply:
        self.round_trips += 1
        return await super().execute(*args)

    async def pipeline(
        self, commands: Sequence[Sequence[CommandArg]], *, raise_on_error: bool = True
    ) -> list[Reply]:
        self.round_trips += 1
        return await super().pipeline(commands, raise_on_error=raise_on_error)


class CountingBackend(RedisBackend):
    """Counts ``write_events`` calls."""

    writes = 0

    async def write_events(
        self,
        group: str,
        events: EventBatch | None,
        progress: Sequence[ProgressUpdate] = (),
    ) -> None:
        self.writes += 1
        await super().write_events(group, events, progress)


@pytest.fixture
async def counted(redis_url: str) -> AsyncIterator[tuple[CountingBackend, CountingClient]]:
    client = CountingClient.from_url(redis_url)
    backend = CountingBackend(client, queue=f"q{uuid.uuid4().hex[:8]}")
    try:
        yield backend, client
    finally:
        with trio.move_on_after(5, shield=True):
            await backend.aclose()


def event(kind: str, task_id: str = "") -> TaskEvent:
    return TaskEvent(kind=kind, task_id=task_id, task_name="n", queue="tasks", attempt=1, at=1.0)


async def test_calls_that_carry_events_take_no_more_round_trips(
    counted: tuple[CountingBackend, CountingClient],
) -> None:
    backend, client = counted
    group = f"g{uuid.uuid4().hex[:6]}"
    for script in (FINISH, ADD_EVENTS, ADD_DELAYED):  # a script runs as EVAL once, then by SHA
        await script.load(client)
    (plain,) = await backend.add(group, [b"x"])
    await backend.read(group, "c", 10, 0)

    async def trips(call: Any) -> int:
        before = client.round_trips
        await call
        return client.round_trips - before

    one = EventBatch(events=(event("dispatched"),))
    assert await trips(backend.add(group, [b"a"], events=one)) == 1
    assert await trips(backend.add(group, [b"b"])) == 1
    ids = [plain, *(await backend.add(group, [b"c", b"d"]))]
    await backend.read(group, "c", 10, 0)
    assert await trips(backend.ack(group, [ids[0]], events=EventBatch(events=(event("s"),)))) == 1
    assert await trips(backend.ack(group, [ids[1]])) == 1
    done = [Outcome(entry_id=ids[2], task_id=ids[2])]
    assert await trips(backend.finish(group, [ids[2]], done, events=one)) == 1
    at = backend.now() + 60
    assert await trips(backend.add_delayed(group, b"m", at, task_id="m", events=one)) == 1
    kinds = [e.kind for e in await backend.read_events(group, "0-0", count=100, block=0)]
    assert kinds == ["dispatched", "s", "dispatched", "dispatched"]


async def test_a_task_reporting_1000_times_costs_about_one_write_a_second(
    counted: tuple[CountingBackend, CountingClient],
) -> None:
    backend, _ = counted
    runner = TaskRunner(TaskRunnerConfig(consumer_group="g", **FAST), backend)

    @runner.task(keep_result=60)
    async def crunch(steps: int, ctx: TaskContext) -> None:
        for i in range(steps):
            await ctx.progress((i + 1) / steps, f"{i + 1}/{steps}")
            if i % 100 == 99:
                await trio.sleep(0.25)  # 1,000 reports over about 2.5 s

    handle = await runner.dispatch("crunch", 1000)
    async with trio.open_nursery() as nursery:
        await nursery.start(runner.serve)
        await handle.result(timeout=30)
        at_result = await runner.get_task(handle)
        await trio.sleep(1.5)
        nursery.cancel_scope.cancel()
    assert 1 <= backend.writes <= 6, f"{backend.writes} writes for 1,000 reports"
    assert at_result is not None
    assert at_result.progress is not None
    assert at_result.progress.fraction == 1.0, "the last report went with the ack"
    info = await runner.get_task(handle)
    assert info is not None
    assert info.state is TaskState.SUCCEEDED
    assert info.progress is not None
    assert (info.progress.fraction, info.progress.note) == (1.0, "1000/1000")
    ttl = await backend.client.execute("PTTL", f"taskrunner:g:progress:{handle.id}")
    assert 23 * 3600 * 1000 < int(ttl) <= 24 * 3600 * 1000, "it expires, a day on"


async def test_every_kind_of_event_on_a_real_server(
    counted: tuple[CountingBackend, CountingClient],
) -> None:
    backend, _ = counted
    group = f"g{uuid.uuid4().hex[:6]}"
    runner = TaskRunner(TaskRunnerConfig(consumer_group=group, events=True, **FAST), backend)
    tries: Counter[str] = Counter()

    @runner.task(max_retry=2, keep_result=60)
    async def job(name: str) -> None:
        tries[name] += 1
        if name == "retry" and tries[name] == 1:
            raise Retry(delay=0.2)
        if name == "fail":
            raise ValueError("nope")
        if name == "slow":
            await trio.sleep(30)

    handles = {name: await runner.dispatch("job", name) for name in ("ok", "retry", "fail")}
    handles["later"] = await runner.dispatch_delayed("job", "later", delay=0.3)
    handles["dropped"] = await runner.dispatch("job", "dropped")
    assert await runner.cancel(handles["dropped"])
    got: list[TaskEvent] = []
    async with trio.open_nursery() as nursery:
        await nursery.start(runner.serve)
        handles["slow"] = await runner.dispatch("job", "slow")
        with trio.fail_after(30):
            while tries["later"] < 1 or tries["fail"] < 2 or tries["slow"] < 1:  # noqa: ASYNC110
                await trio.sleep(0.05)
        await runner.cancel(handles["slow"])
        with trio.fail_after(30):
            async for seen in runner.events(after="0"):
                got.append(seen)
                if (seen.task_id, seen.kind) == (handles["slow"].id, "cancelled"):
                    break
        nursery.cancel_scope.cancel()
    by_task: dict[str, list[str]] = {}
    for seen in got:
        by_task.setdefault(seen.task_id, []).append(seen.kind)
    assert by_task[handles["ok"].id] == ["dispatched", "started", "succeeded"]
    assert by_task[handles["retry"].id] == [
        "dispatched", "started", "retried", "started", "succeeded",
    ]  # fmt: skip
    assert by_task[handles["fail"].id] == ["dispatched", "started", "retried", "started", "failed"]
    assert by_task[handles["later"].id] == ["dispatched", "started", "succeeded"]
    assert by_task[handles["dropped"].id] == ["dispatched", "cancelled"]
    assert by_task[handles["slow"].id] == ["dispatched", "started", "cancelled"]
    assert all(seen.task_name == "job" and seen.queue == backend.queue for seen in got)


async def test_a_reader_that_stops_gives_its_connection_back(
    counted: tuple[CountingBackend, CountingClient],
) -> None:
    backend, client = counted
    group = f"g{uuid.uuid4().hex[:6]}"
    runner = TaskRunner(TaskRunnerConfig(consumer_group=group, events=True, **FAST), backend)

    @runner.task()
    async def job(payload: None) -> None:
        pass

    for _ in range(3):
        with trio.move_on_after(0.3):  # cancelled while blocked in XREAD
            async for _seen in runner.events():
                pass
    handle = await runner.dispatch("job")
    async for seen in runner.events(after="0"):  # broken out of
        assert (seen.task_id, seen.kind) == (handle.id, "dispatched")
        break
    assert client.statistics().dedicated_connections <= 4, "the waiters' pool, no more"
