"""Flow control on a real server: three runners, real time, short timings.

The Lua scripts (admit, renew_slots, park, resume_task, read_queues, defer,
move_delayed) run as the fleet uses them; the MockClock versions of these
scenarios, with tighter bounds, are in tests/test_flow_fleet.py, and the
throughput a rate limit reaches is measured by benchmarks/rate_limit.py.
"""

from __future__ import annotations

import bisect
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import trio

from taskrunner import RateLimit, TaskRunner, TaskRunnerConfig, _keys, admin
from taskrunner.backends import Paused
from taskrunner.backends.redis import RedisBackend

FAST = {
    "reclaim_delay": 2.0,
    "block_duration": 0.1,
    "leader_lease_ttl": 1.0,
    "delayed_poll_interval": 0.2,
    "shutdown_grace": 5.0,
}


@asynccontextmanager
async def fleet(
    url: str, group: str, define: Callable[[TaskRunner], None], **config: Any
) -> AsyncIterator[list[TaskRunner]]:
    """Three runners of ``group``, each on its own connection, serving for the block."""
    backends = [RedisBackend.from_url(url) for _ in range(3)]
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


def most_in_any_window(starts: list[float], per: float) -> int:
    ordered = sorted(starts)
    return max((bisect.bisect_left(ordered, t + per) - i for i, t in enumerate(ordered)), default=0)


async def test_concurrency_limit_across_the_fleet(redis_url: str) -> None:
    group = f"g{uuid.uuid4().hex[:8]}"
    now = most = done = 0

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

    async with fleet(redis_url, group, define, num_workers=4) as runners:
        await runners[0].dispatch_many("charge", range(40))
        await wait_until(lambda: done == 40)
        deferred = sum(r.statistics().deferred for r in runners)
    assert most == 3, f"at most 3 at once, measured {most}"
    assert deferred > 0, "runs waited for a slot"


async def test_rate_limit_per_key_across_the_fleet(redis_url: str) -> None:
    """The limit holds in the server's time, where it is promised (the log's scores are
    the server's TIME at admission). Starts seen in the client's clock are late by
    however long each run took from admission to its action, which varies under load:
    11 of them once fell in 0.99 s of the client's clock. So each run reads its key's
    log, where its own admission is scored, and the windows are measured on those."""
    group = f"g{uuid.uuid4().hex[:8]}"
    admitted: dict[str, dict[bytes, float]] = {"a": {}, "b": {}}

    def define(runner: TaskRunner) -> None:
        backend = runner.backend
        assert isinstance(backend, RedisBackend)

        @runner.task(
            name="email", rate_limit=RateLimit(10, per=1.0), rate_limit_key=lambda p: p["to"]
        )
        async def email(payload: dict[str, Any]) -> None:
            # The log keeps a start for one window after it; this run's is in it.
            log = _keys.rate(group, "email", payload["to"], backend.key_layout)
            reply = await backend.client.execute("ZRANGE", log, 0, -1, "WITHSCORES")
            holders, scores = reply[0::2], reply[1::2]
            admitted[payload["to"]].update(
                (bytes(h), float(ms) / 1000) for h, ms in zip(holders, scores, strict=True)
            )
            runs[payload["to"]] += 1

    runs = Counter[str]()
    async with fleet(redis_url, group, define, num_workers=8) as runners:
        await runners[0].dispatch_many(
            "email", [{"to": k, "n": i} for i in range(25) for k in "ab"]
        )
        await wait_until(lambda: runs.total() == 50)
        dead = sum(r.statistics().dead_lettered for r in runners)
    assert runs == {"a": 25, "b": 25}
    for key, logged in admitted.items():
        assert len(logged) == 25, f"{key}: {len(logged)} admissions logged for 25 runs"
        seen = list(logged.values())
        assert most_in_any_window(seen, 1.0) <= 10, key
        span = max(seen) - min(seen)
        # 25 starts, 10 in any second: the 21st is at least 2 s after the first.
        assert 2.0 <= span <= 4.0, f"{key}: 25 starts at 10/s took {span:.2f}s"
    assert dead == 0


async def test_priority_queues_pause_and_resume(redis_url: str) -> None:
    group = f"g{uuid.uuid4().hex[:8]}"
    ran: list[str] = []

    def define(runner: TaskRunner) -> None:
        @runner.task(name="job")
        async def job(payload: str) -> None:
            ran.append(payload)

        @runner.task(name="mail", queue="low")
        async def mail(payload: str) -> None:
            ran.append(payload)

    async with fleet(redis_url, group, define, queues=("high", "low")) as runners:
        backend = runners[0].backend
        assert await admin.pause(backend, group, queue="high") is True
        assert await admin.pause(backend, group, task="mail") is True
        # Every runner has read it (its gate reads the paused set every second, which a
        # loaded machine can stretch past the 1.2 s this slept), and reads that were
        # already blocking on the unpaused queues have run out (block_duration 0.1 s).
        both = Paused(queues=frozenset({"high"}), tasks=frozenset({"mail"}))
        await wait_until(lambda: all(r._parts.gate.paused == both for r in runners))
        await trio.sleep(0.5)
        await runners[0].dispatch_many("job", ["high"] * 5, queue="high")
        await runners[0].dispatch_many("job", ["low"] * 5, queue="low")
        await runners[0].dispatch_many("mail", ["mail"] * 5)
        await wait_until(lambda: len(ran) == 5)
        await trio.sleep(1.0)
        assert Counter(ran) == {"low": 5}, "a paused queue is not read, a paused task waits"
        assert await backend.length(group, queue="high") == 5
        assert await admin.paused(backend, group) == Paused(
            queues=frozenset({"high"}), tasks=frozenset({"mail"})
        )
        resumed = trio.current_time()
        await admin.resume(backend, group, queue="high")
        await admin.resume(backend, group, task="mail")
        await wait_until(lambda: len(ran) == 15)
        assert trio.current_time() - resumed < 3.0
        parked = sum(r.statistics().parked for r in runners)
    assert Counter(ran) == {"low": 5, "high": 5, "mail": 5}
    assert parked == 5
