"""Cancelling tasks: queued, scheduled, running anywhere in a fleet, read in the same
instant, reclaimed after a crash; on MemoryBackend under MockClock and on a real server.

One fixture, ``env``, gives the backend and the clock, as tests/test_fleet.py does:
``memory`` is one shared MemoryBackend on trio's MockClock; ``redis`` a real server,
each runner on a connection of its own, in real time with short timings.
"""

from __future__ import annotations

import json
import random
import threading
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Callable
from typing import Any

import attrs
import pytest
import trio
import trio.testing
from _fleet import Partition, make_runner, serving, start_each

from taskrunner import TaskAlreadyDispatched, TaskCancelled, TaskHandle, TaskRunner, TaskState
from taskrunner.backends import Backend, QueueEntry
from taskrunner.backends.memory import MemoryBackend
from taskrunner.backends.redis import RedisBackend


@attrs.define(kw_only=True)
class Env:
    kind: str
    store: Backend
    new_backend: Callable[[], Backend]
    group: str
    config: dict[str, Any]
    slack: float
    """Real-time scheduling noise allowed in a bound (0 on the mock clock)."""

    def runner(self, backend: Backend | None = None, **config: Any) -> TaskRunner:
        return make_runner(
            backend or self.new_backend(), consumer_group=self.group, **{**self.config, **config}
        )

    async def wait_until(self, predicate: Callable[[], bool], limit: float = 60.0) -> None:
        with trio.fail_after(limit):
            while not predicate():  # noqa: ASYNC110
                await trio.sleep(0.005)


@pytest.fixture(params=[pytest.param("memory", marks=pytest.mark.mockclock), "redis"])
def env_kind(request: pytest.FixtureRequest) -> str:
    kind: str = request.param
    return kind


@pytest.fixture
def env_clock(env_kind: str) -> trio.testing.MockClock | None:
    """The mock clock for ``memory`` (pytest-trio runs the test on it); none for redis."""
    return trio.testing.MockClock(autojump_threshold=0) if env_kind == "memory" else None


@pytest.fixture
async def env(env_kind: str, request: pytest.FixtureRequest) -> AsyncIterator[Env]:
    if env_kind == "memory":
        store = MemoryBackend()
        yield Env(
            kind="memory",
            store=store,
            new_backend=lambda: store,
            group="g",
            config={"reclaim_delay": 30.0},
            slack=0.0,
        )
        return
    url: str = request.getfixturevalue("redis_url")
    queue = f"q{uuid.uuid4().hex[:8]}"
    opened: list[RedisBackend] = []

    def connect() -> Backend:
        opened.append(RedisBackend.from_url(url, queue=queue))
        return opened[-1]

    try:
        yield Env(
            kind="redis",
            store=connect(),
            new_backend=connect,
            group=f"g{uuid.uuid4().hex[:6]}",
            config={
                "reclaim_delay": 3.0,
                "block_duration": 0.1,
                "leader_lease_ttl": 1.0,
                "delayed_poll_interval": 0.2,
                "shutdown_grace": 1.0,
            },
            slack=0.5,
        )
    finally:
        with trio.move_on_after(5, shield=True):
            for backend in opened:
                await backend.aclose()


async def test_a_queued_task_cancelled_never_runs(
    env: Env, env_clock: trio.testing.MockClock | None
) -> None:
    runner = env.runner()
    ran: list[str] = []

    @runner.task(keep_result=60, unique=True, unique_for=600)
    async def once(payload: str) -> None:
        ran.append(payload)

    @runner.task()
    async def other(payload: str) -> None:
        ran.append(payload)

    handle = await runner.dispatch("once", "cancelled")
    with pytest.raises(TaskAlreadyDispatched):
        await runner.dispatch("once", "duplicate")
    info = await runner.get_task(handle.id)
    assert info is not None
    assert info.state is TaskState.QUEUED
    assert await runner.cancel(handle) is True
    assert await runner.cancel(handle) is False, "cancelled already"
    again = await runner.dispatch("once", "again")  # the unique lock was released
    await runner.dispatch("other", "marker")
    with pytest.raises(TaskCancelled) as caught:
        await handle.result(timeout=1)
    assert (caught.value.task_id, caught.value.task_name) == (handle.id, "once")
    info = await runner.get_task(handle.id)
    assert info is not None
    assert (info.state, info.task_name) == (TaskState.CANCELLED, "once")
    async with serving(runner):
        await env.wait_until(lambda: len(ran) == 2)
        await trio.sleep(0.5)
    assert sorted(ran) == ["again", "marker"], "the cancelled task never ran"
    assert (await runner.get_task(again.id)).state is TaskState.SUCCEEDED  # type: ignore[union-attr]


async def test_a_scheduled_task_cancelled_never_runs(
    env: Env, env_clock: trio.testing.MockClock | None
) -> None:
    runner = env.runner()
    ran: list[int] = []

    @runner.task(keep_result=60)
    async def later(payload: int) -> None:
        ran.append(payload)

    cancelled = await runner.dispatch_delayed("later", 1, delay=1.0)
    kept = await runner.dispatch_delayed("later", 2, delay=1.0)
    info = await runner.get_task(cancelled.id)
    assert info is not None
    assert info.state is TaskState.SCHEDULED
    async with serving(runner):
        assert await cancelled.cancel() is True
        assert await kept.result(timeout=10) is None
        await trio.sleep(1.0)
    assert ran == [2]
    with pytest.raises(TaskCancelled):
        await cancelled.result(timeout=1)
    assert await runner.cancel(kept.id) is False, "a finished task cannot be cancelled"
    assert await runner.cancel(str(uuid.uuid4())) is False, "nor an unknown one"


async def test_a_running_task_is_cancelled_on_another_runner_of_a_fleet(
    env: Env, env_clock: trio.testing.MockClock | None
) -> None:
    fleet = [env.runner(num_workers=2) for _ in range(3)]
    outsider = env.runner()  # dispatches and cancels; does not serve
    started: dict[str, tuple[int, float]] = {}
    stopped: dict[str, float] = {}
    finished: list[str] = []
    for index, runner in enumerate([*fleet, outsider]):

        @runner.task(name="long", keep_result=60, unique=True, unique_for=600, timeout=3600)
        async def long(payload: str, index: int = index) -> None:
            started[payload] = (index, trio.current_time())
            try:
                await trio.sleep(30)
            except trio.Cancelled:
                stopped[payload] = trio.current_time()
                raise
            finished.append(payload)

    handle = await outsider.dispatch("long", "target")
    async with serving(*fleet):
        await env.wait_until(lambda: "target" in started)
        info = await outsider.get_task(handle.id)
        assert info is not None
        assert info.state is TaskState.RUNNING
        asked_at = trio.current_time()
        assert await outsider.cancel(handle.id) is True
        with pytest.raises(TaskCancelled):
            await handle.result(timeout=10)
        index, _ = started["target"]
        took = stopped["target"] - asked_at
        assert took <= 1.0 + env.slack, f"the run was stopped {took:.2f} s after the cancel"
        assert fleet[index].statistics().cancelled == 1
        assert sum(r.statistics().cancelled for r in fleet) == 1
        again = await dispatch_when_unlocked(outsider, "long", "next")  # the lock is released
        await env.wait_until(lambda: "next" in started)
        assert await outsider.cancel(again) is True
        await env.wait_until(lambda: "next" in stopped)
        await trio.sleep(env.config["reclaim_delay"] + 1)  # not retried after a reclaim
    assert finished == []
    assert list(started) == ["target", "next"], "each ran once, never retried"
    info = await outsider.get_task(handle.id)
    assert info is not None
    assert info.state is TaskState.CANCELLED
    assert info.attempts == 1
    assert await env.store.cancel_requested(env.group, [info.id]) == []


async def test_a_running_task_without_a_timeout_is_stopped_and_frees_its_slot(
    env: Env, env_clock: trio.testing.MockClock | None
) -> None:
    """A 20-minute export with no timeout, on a pool of one: the cancel stops it within
    about a second, and the task queued behind it runs then, not 20 minutes later."""
    runner = env.runner(num_workers=1)
    started: dict[str, float] = {}
    stopped: dict[str, float] = {}
    finished: list[str] = []

    @runner.task(name="export", keep_result=60)  # no timeout, and no default_timeout
    async def export(payload: str) -> str:
        started[payload] = trio.current_time()
        try:
            await trio.sleep(1200)
        except trio.Cancelled:
            stopped[payload] = trio.current_time()
            raise
        finished.append(payload)
        return "exported"

    assert runner.config.default_timeout is None
    handle = await runner.dispatch("export", "big")
    async with serving(runner):
        await env.wait_until(lambda: "big" in started)
        queued = await runner.dispatch("export", "small")
        await trio.sleep(2)
        assert "small" not in started, "the pool of one is busy"
        asked_at = trio.current_time()
        assert await handle.cancel() is True
        with pytest.raises(TaskCancelled):
            await handle.result(timeout=10)
        took = stopped["big"] - asked_at
        assert took <= 1.0 + env.slack, f"the run was stopped {took:.2f} s after the cancel"
        await env.wait_until(lambda: "small" in started, limit=10)
        assert started["small"] - asked_at <= 1.0 + 2 * env.slack, "its slot freed at the stop"
        assert await queued.cancel() is True  # and so is the next one, stopped in turn
        await env.wait_until(lambda: "small" in stopped, limit=10)
        await trio.sleep(env.config["reclaim_delay"] + 1)  # not retried after a reclaim
    assert finished == []
    assert list(started) == ["big", "small"], "each ran once"
    assert runner.statistics().cancelled == 2
    assert runner.statistics().completed == 0
    info = await runner.get_task(handle.id)
    assert info is not None
    assert info.state is TaskState.CANCELLED


async def test_a_thread_cancelled_is_recorded_cancelled_and_keeps_its_slot_until_it_returns(
    env: Env, env_clock: trio.testing.MockClock | None
) -> None:
    """A thread cannot be interrupted: its run is recorded cancelled at the stop, its
    result discarded when it returns, and its pool slot held until then."""
    runner = env.runner(num_workers=1)
    release = threading.Event()
    returned = threading.Event()
    ran: list[str] = []

    # No timeout. The result is kept for longer than the MockClock can jump while the
    # threads run in real time (``behind.result`` below waits up to 600 of its seconds).
    @runner.task(name="blocking", keep_result=3600)
    def blocking(payload: str) -> str:
        ran.append(payload)
        if payload == "first":
            release.wait(timeout=30)  # real seconds: the test lets it go
            returned.set()
        return f"result of {payload}"

    handle = await runner.dispatch("blocking", "first")
    async with serving(runner):
        await env.wait_until(lambda: ran == ["first"])
        behind = await runner.dispatch("blocking", "second")
        assert await handle.cancel() is True
        with pytest.raises(TaskCancelled):
            await handle.result(timeout=10)
        assert not returned.is_set(), "recorded cancelled while the thread still runs"
        assert runner.statistics().running == 1, "the thread holds its slot"
        await trio.sleep(3)
        assert ran == ["first"], "the next task waits for the thread's slot"
        release.set()
        # Long, in MockClock seconds: the clock jumps while the threads run in real time.
        assert await behind.result(timeout=600) == "result of second"
    assert ran == ["first", "second"]
    with pytest.raises(TaskCancelled):
        await handle.result(timeout=1)  # the thread's return was discarded
    assert runner.statistics().cancelled == 1
    assert runner.statistics().completed == 1


async def test_a_queued_task_whose_message_does_not_say_it_keeps_results_is_recorded(
    env: Env, env_clock: trio.testing.MockClock | None
) -> None:
    """Issue 24: a producer that is not strict writes no ``keep_result`` (it does not
    know it); cancelled while queued, its task is recorded ``CANCELLED`` all the same,
    for as long as the catalog says its task keeps results."""
    runner = env.runner(num_workers=1)
    started: list[str] = []

    @runner.task(name="busy")
    async def busy(payload: None) -> None:
        started.append("busy")
        await trio.sleep(3600)

    @runner.task(name="remind", keep_result=60)
    async def remind(payload: int) -> None:
        started.append(f"remind {payload}")

    async with serving(runner):
        blocker = await runner.dispatch("busy")
        await env.wait_until(lambda: started == ["busy"])  # the pool of one is taken
        raw = json.dumps({"task_name": "remind", "payload": 9}).encode()
        (entry_id,) = await env.store.add(env.group, [raw])  # as a plain producer writes it
        assert await runner.cancel(entry_id) is True
        info = await runner.get_task(entry_id)
        assert info is not None
        assert info.state is TaskState.CANCELLED, "recorded from the catalog's keep_result"
        assert await env.store.wait_result(env.group, entry_id, 1.0) is not None, "a waiter wakes"
        assert await runner.cancel(blocker.id) is True
        await trio.sleep(2)
    assert started == ["busy"], "the cancelled task never ran"


async def test_a_task_cancelled_the_instant_a_fetcher_read_it_is_stopped(
    env: Env, env_clock: trio.testing.MockClock | None
) -> None:
    """The cancel comes right after the read that delivered the entry, before the
    worker starts it: it is running (pending) to the store, so its run is stopped."""
    link = Partition(env.new_backend())
    runner = env.runner(link)
    canceller = env.runner()
    progress: list[str] = []

    @runner.task(keep_result=60, timeout=3600)  # a timeout: its run can be interrupted
    async def job(payload: None) -> None:
        progress.append("started")
        await trio.sleep(10)
        progress.append("finished")

    canceller.register(runner.tasks["job"])
    handle = await canceller.dispatch("job")
    read = link.backend.read
    cancels: list[bool] = []

    async def read_then_cancel(
        group: str, consumer: str, count: int, block: float, *, queue: str | None = None
    ) -> list[QueueEntry]:
        entries = await read(group, consumer, count, block, queue=queue)
        if entries and not cancels:
            cancels.append(await canceller.cancel(handle.id))
        return entries

    link.backend = _Reading(link.backend, read_then_cancel)
    async with serving(runner):
        with pytest.raises(TaskCancelled):
            await handle.result(timeout=10)
        await trio.sleep(env.config["reclaim_delay"] + 1)
    assert cancels == [True]
    assert progress == ["started"], "it was delivered, so it started, and was stopped"
    assert runner.statistics().cancelled == 1
    assert runner.statistics().acked == 1, "acked as cancelled, never left for reclaim"


async def test_a_task_cancelled_the_instant_before_a_read_is_never_delivered(
    env: Env, env_clock: trio.testing.MockClock | None
) -> None:
    link = Partition(env.new_backend())
    runner = env.runner(link)
    ran: list[None] = []

    @runner.task(keep_result=60)
    async def job(payload: None) -> None:
        ran.append(payload)

    handle = await runner.dispatch("job")
    read = link.backend.read
    delivered: list[list[str]] = []

    async def cancel_then_read(
        group: str, consumer: str, count: int, block: float, *, queue: str | None = None
    ) -> list[QueueEntry]:
        if not delivered:
            assert (await link.backend.cancel(group, handle.id)).state is TaskState.QUEUED
        entries = await read(group, consumer, count, block, queue=queue)
        delivered.append([e.id for e in entries])
        return entries

    link.backend = _Reading(link.backend, cancel_then_read)
    async with serving(runner):
        with pytest.raises(TaskCancelled):
            await handle.result(timeout=10)
        await trio.sleep(1)
    assert ran == []
    assert all(handle.id not in ids for ids in delivered)
    assert runner.statistics().fetched == 0


async def test_a_cancelled_task_whose_runner_died_is_dropped_when_reclaimed(
    env: Env, env_clock: trio.testing.MockClock | None
) -> None:
    first, second = Partition(env.new_backend()), Partition(env.new_backend())
    dying, survivor = env.runner(first), env.runner(second)
    runs: Counter[str] = Counter()
    for runner in (dying, survivor):

        @runner.task(name="job", keep_result=60)
        async def job(payload: None, runner: TaskRunner = runner) -> None:
            runs[runner.config.host] += 1
            await trio.sleep(3600)

    handle = await survivor.dispatch("job")
    async with trio.open_nursery() as nursery:
        (scope,) = start_each(nursery, [dying])
        await env.wait_until(lambda: sum(runs.values()) == 1)
        first.cut = True  # the worker dies with its entry pending
        scope.cancel()
        assert await survivor.cancel(handle.id) is True, "pending: asked to stop"
        info = await survivor.get_task(handle.id)
        assert info is not None
        assert (info.state, info.cancelling) == (TaskState.RUNNING, True)
        await nursery.start(survivor.serve)
        with pytest.raises(TaskCancelled):
            await handle.result(timeout=env.config["reclaim_delay"] * 4 + 10)
        nursery.cancel_scope.cancel()
    assert runs == Counter({dying.config.host: 1}), "the reclaimed entry never ran again"
    assert survivor.statistics().cancelled == 1
    assert survivor.statistics().reclaimed == 1


async def test_cancel_races_with_reads_on_every_task(
    env: Env, env_clock: trio.testing.MockClock | None
) -> None:
    """Many tasks, each cancelled at a random instant while a fleet reads and runs them:
    none cancelled while queued or scheduled ever starts, and none runs twice."""
    rng = random.Random(14)
    fleet = [env.runner(num_workers=4, batch_size=2) for _ in range(3)]
    started: Counter[int] = Counter()
    for runner in fleet:

        @runner.task(name="job")
        async def job(payload: int) -> None:
            started[payload] += 1
            await trio.sleep(0.05)

    n = 60
    handles = []
    for i in range(n):
        if i % 4 == 0:
            handles.append(await fleet[0].dispatch_delayed("job", i, delay=rng.random() * 0.5))
        else:
            handles.append(await fleet[0].dispatch("job", i))
    states: dict[int, TaskState | None] = {}

    async def cancel_later(i: int) -> None:
        await trio.sleep(rng.random() * 0.6)
        states[i] = (await env.store.cancel(env.group, handles[i].id)).state

    async with serving(*fleet):
        async with trio.open_nursery() as cancels:
            for i in range(n):
                cancels.start_soon(cancel_later, i)
        await trio.sleep(2.0)
    assert max(started.values(), default=0) <= 1, f"a task ran twice: {started}"
    removed = [i for i, s in states.items() if s in (TaskState.QUEUED, TaskState.SCHEDULED)]
    assert removed, "some tasks were cancelled before they were read"
    assert all(started[i] == 0 for i in removed), "a task removed before its read ran"
    for i, state in states.items():
        if state is None:  # nothing to cancel: it had finished
            assert started[i] == 1


async def dispatch_when_unlocked(runner: TaskRunner, name: str, payload: Any) -> TaskHandle:
    """Dispatch a unique task once its lock is free (released just after an ack)."""
    with trio.fail_after(2):
        while True:
            try:
                return await runner.dispatch(name, payload)
            except TaskAlreadyDispatched:
                await trio.sleep(0.01)


class _Reading:
    """A backend whose ``read`` is replaced; everything else goes to the original."""

    def __init__(self, backend: Backend, read: Any) -> None:
        self._backend = backend
        self.read = read

    def __getattr__(self, name: str) -> Any:
        return getattr(self._backend, name)
