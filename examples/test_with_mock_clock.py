"""Testing your tasks: MemoryBackend plus trio's MockClock (pytest-trio's ``autojump_clock``).

Run it with ``python -m pytest examples/test_with_mock_clock.py``. Needs
``pytest`` and ``pytest-trio`` (``pip install -e '.[test]'``).

With ``autojump_clock`` trio's clock jumps ahead whenever every task is
waiting, so the runner's real timings (a minute's retry backoff, blocking
reads, refresh ticks) pass in an instant and in the same order every run. The
in-memory backend takes every time from trio's clock, so stream ids, idle
times and TTLs follow the mock clock too; the times it reports to you
(``ctx.dispatched_at``, ``get_task``'s times) are unix seconds all the same:
trio's clock plus ``backend.wall_origin``.
"""

import time

import pytest
import trio
from trio.testing import MockClock

from taskrunner import Backoff, InvalidTaskPayload, TaskContext, TaskRunner, TaskRunnerConfig
from taskrunner.backends.memory import MemoryBackend

# Not needed with `trio_mode = true` in your pytest configuration.
pytestmark = pytest.mark.trio


async def send_welcome(payload: dict[str, str]) -> str:
    """The action under test: plain async code, testable without a runner."""
    if "@" not in payload["email"]:
        raise ValueError(f"not an email address: {payload['email']!r}")
    return f"welcome, {payload['email']}"


async def test_the_action_alone() -> None:
    assert await send_welcome({"email": "ada@example.com"}) == "welcome, ada@example.com"
    with pytest.raises(ValueError, match="not an email"):
        await send_welcome({"email": "ada"})


async def test_retried_after_its_backoff(autojump_clock: MockClock) -> None:
    backend = MemoryBackend()
    runner = TaskRunner(TaskRunnerConfig(consumer_group="test"), backend)
    runs: list[float] = []
    succeeded = trio.Event()

    @runner.task(name="flaky", max_retry=2, retry=Backoff(initial=60.0, jitter=0))
    async def flaky(payload: None) -> None:
        runs.append(trio.current_time())
        if len(runs) == 1:
            raise ConnectionError("first attempt fails")
        succeeded.set()

    async with trio.open_nursery() as nursery:
        await nursery.start(runner.serve)
        await runner.dispatch("flaky")
        with trio.fail_after(1000):  # a hang guard on trio's (mock) clock
            await succeeded.wait()
        runner.shutdown()

    assert runs[1] - runs[0] >= 60  # a virtual minute, no real waiting
    stats = runner.statistics()
    assert (stats.completed, stats.failed, stats.acked) == (1, 1, 1)
    assert (await backend.group_info("test")).pending == 0


async def test_reported_times_are_unix_seconds(autojump_clock: MockClock) -> None:
    backend = MemoryBackend()
    runner = TaskRunner(TaskRunnerConfig(consumer_group="test"), backend)
    waited: list[float] = []

    @runner.task(name="timed")
    async def timed(payload: None, ctx: TaskContext) -> None:
        waited.append(time.time() - ctx.dispatched_at)  # how long it was queued

    async with trio.open_nursery() as nursery:
        await nursery.start(runner.serve)
        await runner.dispatch("timed")
        await trio.sleep(1)
        runner.shutdown()

    assert 0 <= waited[0] < 5  # real seconds, as on Redis


async def test_last_failure_is_dead_lettered(autojump_clock: MockClock) -> None:
    backend = MemoryBackend()
    runner = TaskRunner(TaskRunnerConfig(consumer_group="test"), backend)
    runner.task(name="send_welcome")(send_welcome)  # max_retry=1: one attempt

    async with trio.open_nursery() as nursery:
        await nursery.start(runner.serve)
        await runner.dispatch("send_welcome", {"email": "not-an-address"})
        await trio.sleep(1)  # virtual: lets the fetcher and the worker run
        runner.shutdown()

    (letter,) = await backend.dead_letters("test")
    assert "not an email address" in letter.error
    assert runner.statistics().dead_lettered == 1


async def test_bad_payload_is_refused_at_dispatch() -> None:
    runner = TaskRunner(TaskRunnerConfig(consumer_group="test"), MemoryBackend())
    runner.task(name="send_welcome")(send_welcome)
    with pytest.raises(InvalidTaskPayload):
        await runner.dispatch("send_welcome", {"email": object()})  # not JSON
    assert await runner.backend.length("test") == 0


async def test_a_fleet_shares_one_backend(autojump_clock: MockClock) -> None:
    backend = MemoryBackend()
    runners = [
        TaskRunner(TaskRunnerConfig(consumer_group="test", host=f"host-{i}"), backend)
        for i in range(3)
    ]
    done: list[int] = []
    all_done = trio.Event()

    async def work(payload: int) -> None:
        await trio.sleep(1)
        done.append(payload)
        if len(done) == 90:
            all_done.set()

    for runner in runners:
        runner.task(name="work")(work)
    async with trio.open_nursery() as nursery:
        for runner in runners:
            await nursery.start(runner.serve)
        await runners[0].dispatch_many("work", range(90))
        with trio.fail_after(100):
            await all_done.wait()
        for runner in runners:
            runner.shutdown()

    assert sorted(done) == list(range(90))
    assert sum(r.statistics().completed for r in runners) == 90
