"""The life of one run on a real server: retries through the defer script, timeouts,
thread actions, the lifespan and middleware, a unique lock kept across a retry; three
runners sharing the retries."""

from __future__ import annotations

import itertools
import json
import threading
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
import trio

from taskrunner import (
    Backoff,
    Delivery,
    Retry,
    TaskAlreadyDispatched,
    TaskContext,
    TaskExecutionError,
    TaskMaxRetryExceeded,
    TaskRunner,
    TaskRunnerConfig,
    TaskTimeout,
)
from taskrunner.backends.redis import RedisBackend

FAST = {
    "reclaim_delay": 2.0,
    "block_duration": 0.1,
    "leader_lease_ttl": 1.0,
    "delayed_poll_interval": 0.5,
    "shutdown_grace": 5.0,
}
QUICK = Backoff(initial=0.1, factor=2.0, jitter=0)


@pytest.fixture
async def backend(redis_url: str) -> AsyncIterator[RedisBackend]:
    async with RedisBackend.from_url(redis_url, queue=f"q{uuid.uuid4().hex[:8]}") as b:
        yield b


def make(backend: RedisBackend, host: str, **config: Any) -> TaskRunner:
    return TaskRunner(
        TaskRunnerConfig(consumer_group="g", host=host, **{**FAST, **config}), backend
    )


async def wait_until(predicate: Callable[[], bool], limit: float = 30) -> None:
    with trio.fail_after(limit):
        while not predicate():  # noqa: ASYNC110
            await trio.sleep(0.01)


async def test_retries_go_through_the_delayed_set_and_count(backend: RedisBackend) -> None:
    handled: list[tuple[Delivery, Exception]] = []
    runner = make(backend, "h", failed_task_handler=lambda d, e: handled.append((d, e)))
    runs: list[tuple[float, int, str, str]] = []

    @runner.task(max_retry=3, retry=QUICK)
    async def flaky(payload: dict[str, int], ctx: TaskContext) -> None:
        runs.append((trio.current_time(), ctx.attempt, ctx.task_id, ctx.message_id))
        raise RuntimeError("boom")

    task_id = (await runner.dispatch("flaky", {"n": 1})).id
    async with trio.open_nursery() as nursery:
        await nursery.start(runner.serve)
        await wait_until(lambda: bool(handled))
        await wait_until(lambda: runner.statistics().ack_backlog == 0)
        nursery.cancel_scope.cancel()
    assert [attempt for _, attempt, _, _ in runs] == [1, 2, 3]
    assert {tid for _, _, tid, _ in runs} == {task_id}
    gaps = [b[0] - a[0] for a, b in itertools.pairwise(runs)]
    assert 0.1 <= gaps[0] < 0.1 + 1.0, gaps
    assert 0.2 <= gaps[1] < 0.2 + 1.0, gaps
    ((delivery, error),) = handled
    assert isinstance(error, TaskMaxRetryExceeded)
    assert delivery.attempt == 3
    assert delivery.delivery_count == 1
    assert await backend.length("g") == 0, "each deferred entry was deleted"
    assert (await backend.group_info("g")).pending == 0
    assert await backend.next_delayed_at("g") is None


async def test_the_retry_member_on_the_server(backend: RedisBackend) -> None:
    """What a retry looks like in Redis while it waits: Go's four fields and ours."""
    runner = make(backend, "h")

    @runner.task(max_retry=2, retry=Backoff(initial=60, jitter=0))
    async def later(payload: dict[str, int]) -> None:
        raise RuntimeError("wait a minute")

    message_id = (await runner.dispatch("later", {"n": 7})).id
    async with trio.open_nursery() as nursery:
        await nursery.start(runner.serve)

        await wait_until(lambda: runner.statistics().retried == 1)
        nursery.cancel_scope.cancel()
    raw = await backend.client.execute("ZRANGE", "taskrunner:g:delayed_tasks", 0, -1, "WITHSCORES")
    member, score = json.loads(raw[0]), float(raw[1])
    assert member["id"] == message_id
    assert (member["task"], member["payload"], member["attempts"]) == ("later", {"n": 7}, 1)
    assert member["time"] == int(score)
    assert isinstance(member["time"], int)
    assert member["dispatched_at"] == int(message_id.split("-")[0]) / 1000
    assert await backend.length("g") == 0
    assert (await backend.group_info("g")).pending == 0


async def test_a_unique_task_keeps_its_lock_across_a_retry(backend: RedisBackend) -> None:
    runner = make(backend, "h")
    runs = 0

    @runner.task(max_retry=2, retry=Backoff(initial=1.0, jitter=0), unique=True, unique_for=30)
    async def sync_account(payload: int) -> None:
        nonlocal runs
        runs += 1
        if runs == 1:
            raise RuntimeError("first")

    await runner.dispatch("sync_account", 5)
    async with trio.open_nursery() as nursery:
        await nursery.start(runner.serve)
        await wait_until(lambda: runner.statistics().retried == 1)
        with pytest.raises(TaskAlreadyDispatched):
            await runner.dispatch("sync_account", 5)
        await wait_until(lambda: runner.statistics().completed == 1)
        await wait_until(lambda: runner.statistics().ack_backlog == 0)
        await trio.sleep(0.1)  # the release follows the ack
        await runner.dispatch("sync_account", 5)  # released at the final outcome
        await wait_until(lambda: runner.statistics().completed == 2)
        nursery.cancel_scope.cancel()
    assert runs == 3, "failed, retried, dispatched again"


async def test_a_hung_task_and_a_hung_thread_end_at_their_timeout(backend: RedisBackend) -> None:
    errors: list[Exception] = []
    runner = make(backend, "h", on_error=lambda e, d: errors.append(e))
    release = threading.Event()

    @runner.task(timeout=0.3, max_retry=1)
    async def hangs(payload: None) -> None:
        await trio.sleep_forever()

    @runner.task(timeout=0.3, max_retry=1)
    def blocks(payload: None) -> None:
        release.wait(timeout=20)

    await runner.dispatch("hangs")
    await runner.dispatch("blocks")
    async with trio.open_nursery() as nursery:
        await nursery.start(runner.serve)
        await wait_until(lambda: runner.statistics().dead_lettered == 2)
        assert runner.statistics().running == 1, "the thread holds its slot"
        release.set()
        await wait_until(lambda: runner.statistics().running == 0)
        nursery.cancel_scope.cancel()
    timeouts = [e.error for e in errors if isinstance(e, TaskExecutionError)]
    assert [type(t) for t in timeouts] == [TaskTimeout, TaskTimeout]
    assert (
        sorted(d.error.split(":")[0] for d in await backend.dead_letters("g"))
        == ["TaskMaxRetryExceeded"] * 2
    )


async def test_lifespan_middleware_and_a_thread_action(backend: RedisBackend) -> None:
    runner = make(backend, "h")
    events: list[str] = []

    @runner.lifespan
    async def resources(got: TaskRunner) -> AsyncIterator[dict[str, str]]:
        events.append("enter")
        yield {"greeting": "hello"}
        events.append("exit")

    @runner.middleware
    async def note(ctx: TaskContext, call_next: Any) -> Any:
        result = await call_next()
        events.append(f"{ctx.task_name} -> {result}")
        return result

    @runner.task()
    def greet(payload: str, ctx: TaskContext) -> str:
        return f"{ctx.state['greeting']}, {payload}"

    await runner.dispatch("greet", "Ada")
    async with trio.open_nursery() as nursery:
        await nursery.start(runner.serve)
        await wait_until(lambda: runner.statistics().completed == 1)
        nursery.cancel_scope.cancel()
    assert events == ["enter", "greet -> hello, Ada", "exit"]


async def test_three_runners_share_the_retries(redis_url: str) -> None:
    queue = f"q{uuid.uuid4().hex[:8]}"
    backends = [RedisBackend.from_url(redis_url, queue=queue) for _ in range(3)]
    runners = [make(b, f"h{i}", num_workers=8) for i, b in enumerate(backends)]
    runs: Counter[tuple[int, int]] = Counter()
    for runner in runners:

        @runner.task(name="work", max_retry=3, retry=QUICK)
        async def work(payload: int, ctx: TaskContext) -> None:
            runs[payload, ctx.attempt] += 1
            if ctx.attempt == 1 and payload % 2:
                raise RuntimeError("odd payloads fail once")
            if ctx.attempt < 3 and payload % 5 == 0:
                raise Retry(delay=0.05)

    await runners[0].dispatch_many("work", list(range(100)))
    async with trio.open_nursery() as nursery:
        for runner in runners:
            await nursery.start(runner.serve)
        await wait_until(lambda: sum(r.statistics().completed for r in runners) == 100)
        await wait_until(lambda: sum(r.statistics().ack_backlog for r in runners) == 0)
        nursery.cancel_scope.cancel()
    expected: Counter[tuple[int, int]] = Counter()
    for n in range(100):
        last = 3 if n % 5 == 0 else (2 if n % 2 else 1)
        expected.update((n, attempt) for attempt in range(1, last + 1))
    assert runs == expected, "every attempt ran exactly once"
    assert await backends[0].length("g") == 0
    assert await backends[0].next_delayed_at("g") is None
    assert await backends[0].dead_letters("g") == []
    for b in backends:
        await b.aclose()
