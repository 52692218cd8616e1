"""Flow control in a fleet: three runners on one MemoryBackend, on trio's MockClock.

Concurrency limits (measured inside the actions, across a crash), rate limits (every
window, per key, and the rate reached), strict and weighted priorities, pause and
resume, no head-of-line blocking, waits that are not attempts, and the tuner's view.
The same scenarios run on a real server in tests/redis/test_redis_flow.py.
"""

from __future__ import annotations

import bisect
import random
from collections import Counter
from typing import Any

import trio
import trio.testing
from _fleet import Partition, make_runner, serving, start_each, wait_until

from taskrunner import RateLimit, TaskContext, TaskRunner, admin
from taskrunner._serve import aggregator
from taskrunner.backends import Paused
from taskrunner.backends.memory import MemoryBackend


class Gauge:
    """How many runs are inside an action now, and the most ever."""

    def __init__(self) -> None:
        self.now = 0
        self.most = 0
        self.starts: list[float] = []
        self.done = 0

    async def run(self, seconds: float) -> None:
        self.now += 1
        self.most = max(self.most, self.now)
        self.starts.append(trio.current_time())
        try:
            await trio.sleep(seconds)
        finally:
            self.now -= 1
        self.done += 1


def most_in_any_window(starts: list[float], per: float) -> int:
    """The most starts in any half-open window ``[t, t + per)``."""
    ordered = sorted(starts)
    return max((bisect.bisect_left(ordered, t + per) - i for i, t in enumerate(ordered)), default=0)


async def test_concurrency_never_exceeds_the_limit_across_a_crash(
    autojump_clock: trio.testing.MockClock,
) -> None:
    backend = MemoryBackend()
    links = [Partition(backend) for _ in range(3)]
    runners = [make_runner(link, num_workers=4, reclaim_delay=30) for link in links]
    gauge = Gauge()
    rng = random.Random(3)
    ran_on_the_crashed: set[str] = set()  # the task ids runner 0 ran to the end
    for index, runner in enumerate(runners):

        def register(runner: TaskRunner, crashes: bool) -> None:
            @runner.task(name="charge", max_concurrency=5, reservation_timeout=10)
            async def charge(payload: int, ctx: TaskContext) -> None:
                await gauge.run(rng.uniform(0.5, 2.0))
                if crashes:
                    ran_on_the_crashed.add(ctx.task_id)

        register(runner, crashes=index == 0)

    await runners[0].dispatch_many("charge", range(150))
    back_to_five: list[float] = []
    async with trio.open_nursery() as nursery:
        scopes = start_each(nursery, runners)
        await wait_until(lambda: gauge.done >= 40)
        await wait_until(lambda: runners[0].statistics().running >= 1)
        crashed_at = trio.current_time()
        links[0].cut = True  # its slots stay taken until their leases expire
        scopes[0].cancel()
        await wait_until(lambda: gauge.now < 5)
        await wait_until(lambda: gauge.now == 5)
        back_to_five.append(trio.current_time() - crashed_at)
        await wait_until(lambda: gauge.done >= 150, limit=3600)
        nursery.cancel_scope.cancel()
    assert gauge.most == 5, f"at most 5 at once, measured {gauge.most}"
    assert gauge.done >= 150
    # The crashed runner's slots freed within the task's reservation (10 s; a run
    # refused a slot tries again within 0.75 s).
    assert back_to_five[0] <= 10 + 0.75 + 0.1, back_to_five
    deferred = sum(r.statistics().deferred for r in runners)
    assert deferred > 0, "runs waited for a slot"
    # Waiting is not failing: nothing is dead-lettered but a run the crashed runner had
    # finished and whose ack the crash lost (one attempt: redelivered, not run again).
    dead = await backend.dead_letters("g", 1000)
    assert all("without an outcome" in letter.error for letter in dead), dead
    lost_acks = {letter.task_id or letter.message_id for letter in dead}
    assert lost_acks <= ran_on_the_crashed, "waiting is not failing"


async def test_a_rate_limit_holds_in_every_window_and_flows_at_the_rate(
    autojump_clock: trio.testing.MockClock,
) -> None:
    backend = MemoryBackend()
    runners = [make_runner(backend, num_workers=8) for _ in range(3)]
    gauge = Gauge()
    for runner in runners:

        @runner.task(name="call", rate_limit=RateLimit(10, per=1.0))
        async def call(payload: int) -> None:
            await gauge.run(0.05)

    await runners[0].dispatch_many("call", range(300))
    async with serving(*runners):
        await wait_until(lambda: gauge.done == 300)
    assert most_in_any_window(gauge.starts, 1.0) <= 10
    span = max(gauge.starts) - min(gauge.starts)
    rate = (len(gauge.starts) - 10) / span  # the first window's burst of 10 is free
    assert rate >= 0.9 * 10, f"{rate:.2f} starts/s of the 10 allowed"
    assert rate <= 10.0 + 1e-9
    assert sum(r.statistics().dead_lettered for r in runners) == 0


async def test_a_rate_limit_per_key(autojump_clock: trio.testing.MockClock) -> None:
    backend = MemoryBackend()
    runners = [make_runner(backend, num_workers=8) for _ in range(3)]
    starts: dict[str, list[float]] = {"a.example": [], "b.example": []}
    for runner in runners:

        @runner.task(
            name="email",
            rate_limit=RateLimit(5, per=1.0),
            rate_limit_key=lambda p: p["domain"],
        )
        async def email(payload: dict[str, Any]) -> None:
            starts[payload["domain"]].append(trio.current_time())

    payloads = [{"domain": d, "n": i} for i in range(100) for d in starts]
    await runners[0].dispatch_many("email", payloads)
    async with serving(*runners):
        await wait_until(lambda: sum(len(s) for s in starts.values()) == 200)
    for domain, seen in starts.items():
        assert most_in_any_window(seen, 1.0) <= 5, domain
        rate = (len(seen) - 5) / (max(seen) - min(seen))
        assert rate >= 0.9 * 5, f"{domain}: {rate:.2f} starts/s of the 5 allowed"
    # the two keys ran side by side, not one after the other
    assert abs(min(starts["a.example"]) - min(starts["b.example"])) < 1.0


async def test_strict_priority_reads_a_lower_queue_only_when_the_higher_are_empty(
    autojump_clock: trio.testing.MockClock,
) -> None:
    backend = MemoryBackend()
    queues = ("critical", "default", "low")
    runners = [make_runner(backend, num_workers=2, queues=queues) for _ in range(3)]
    started: list[tuple[float, str]] = []
    for runner in runners:

        @runner.task(name="job")
        async def job(payload: str) -> None:
            started.append((trio.current_time(), payload))
            await trio.sleep(0.5)

    producer = runners[0]
    await producer.dispatch_many("job", ["low"] * 30, queue="low")
    await producer.dispatch_many("job", ["default"] * 30, queue="default")
    await producer.dispatch_many("job", ["critical"] * 20, queue="critical")

    async def keep_critical_busy() -> None:
        # 15/s for 10 s: more than the fleet's 12/s, so critical is never empty
        for _ in range(150):
            await producer.dispatch("job", "critical", queue="critical")
            await trio.sleep(1 / 15)

    async with serving(*runners) as nursery:
        nursery.start_soon(keep_critical_busy)
        await wait_until(lambda: len(started) == 230, limit=3600)
    by_queue = {q: [t for t, p in started if p == q] for q in queues}
    assert max(by_queue["critical"]) <= min(by_queue["default"])
    assert max(by_queue["default"]) <= min(by_queue["low"])
    assert min(by_queue["default"]) >= 10, "nothing lower while critical has work"


async def test_weighted_shares_follow_the_weights_while_every_queue_is_busy(
    autojump_clock: trio.testing.MockClock,
) -> None:
    backend = MemoryBackend()
    weights = {"critical": 6, "default": 3, "low": 1}
    runners = [make_runner(backend, num_workers=4, queues=weights) for _ in range(3)]
    started: list[str] = []
    rng = random.Random(11)
    for runner in runners:

        @runner.task(name="job")
        async def job(payload: str) -> None:
            started.append(payload)
            await trio.sleep(rng.uniform(0.05, 0.15))

    for queue in weights:
        await runners[0].dispatch_many("job", [queue] * 2000, queue=queue)
    async with serving(*runners):
        await wait_until(lambda: len(started) >= 2000)  # every queue still has work
    shares = Counter(started[:2000])
    total = sum(weights.values())
    for queue, weight in weights.items():
        share, expected = shares[queue] / 2000, weight / total
        assert abs(share - expected) <= 0.1 * expected, (queue, share, expected)


async def test_pause_and_resume_a_queue_and_a_task(autojump_clock: trio.testing.MockClock) -> None:
    backend = MemoryBackend()
    runners = [make_runner(backend, queues=("a", "b")) for _ in range(3)]
    runs: Counter[str] = Counter()
    for runner in runners:

        @runner.task(name="work", queue="a")
        async def work(payload: None) -> None:
            runs["work"] += 1

        @runner.task(name="mail", queue="b")
        async def mail(payload: None) -> None:
            runs["mail"] += 1

        @runner.task(name="other", queue="b")
        async def other(payload: None) -> None:
            runs["other"] += 1

    producer = runners[0]
    async with serving(*runners):
        assert await admin.pause(backend, "g", queue="a") is True
        assert await admin.pause(backend, "g", task="mail") is True
        await trio.sleep(1.1)  # every runner has read it
        await producer.dispatch_many("work", [None] * 20)
        await producer.dispatch_many("mail", [None] * 20)
        await producer.dispatch_many("other", [None] * 20)
        await trio.sleep(30)
        assert runs == {"other": 20}, "paused work does not run; other work does"
        assert await backend.length("g", queue="a") == 20, "a paused queue is not read"
        assert sum(r.statistics().parked for r in runners) == 20
        assert await admin.paused(backend, "g") == Paused(
            queues=frozenset({"a"}), tasks=frozenset({"mail"})
        )
        resumed_at = trio.current_time()
        assert await admin.resume(backend, "g", queue="a") is True
        assert await admin.resume(backend, "g", task="mail") is True
        await wait_until(lambda: runs == {"work": 20, "mail": 20, "other": 20})
        assert trio.current_time() - resumed_at <= 1.5, "resumed within about a second"
        await trio.sleep(5)
    assert runs == {"work": 20, "mail": 20, "other": 20}, "nothing ran twice"
    stats = [r.statistics() for r in runners]
    assert sum(s.failed + s.dead_lettered + s.retried for s in stats) == 0


async def test_a_limited_task_never_blocks_the_others(
    autojump_clock: trio.testing.MockClock,
) -> None:
    backend = MemoryBackend()
    runners = [make_runner(backend, num_workers=4) for _ in range(3)]
    slow, fast = Gauge(), Gauge()
    for runner in runners:

        @runner.task(name="slow", max_concurrency=1)
        async def slow_task(payload: None) -> None:
            await slow.run(2.0)

        @runner.task(name="fast")
        async def fast_task(payload: None) -> None:
            await fast.run(0.1)

    await runners[0].dispatch_many("slow", [None] * 30)  # first in the stream
    await runners[0].dispatch_many("fast", [None] * 300)
    async with serving(*runners):
        await wait_until(lambda: fast.done == 300)
        fast_done_at = trio.current_time()
        await wait_until(lambda: slow.done == 30, limit=3600)
    assert fast_done_at < 5, f"the fast tasks waited behind the slow ones: {fast_done_at}"
    assert slow.most == 1
    assert max(slow.starts) >= 2.0 * 29, "the slow ones ran one at a time"


async def test_waiting_for_a_slot_is_not_an_attempt(autojump_clock: trio.testing.MockClock) -> None:
    backend = MemoryBackend()
    runners = [make_runner(backend, reclaim_delay=30) for _ in range(3)]
    attempts: Counter[int] = Counter()
    for runner in runners:

        @runner.task(name="once", max_concurrency=1, max_retry=2, reservation_timeout=5)
        async def once(payload: int) -> None:
            attempts[payload] += 1
            await trio.sleep(1)
            if payload == 0 and attempts[0] == 1:
                raise RuntimeError("first attempt fails")

    await runners[0].dispatch_many("once", range(10))
    async with serving(*runners):
        await wait_until(lambda: sum(r.statistics().completed for r in runners) == 10, limit=3600)
    stats = [r.statistics() for r in runners]
    assert sum(s.deferred for s in stats) > 10, "they waited, many times"
    assert sum(s.dead_lettered for s in stats) == 0, "waits did not use up the attempts"
    assert attempts == {0: 2, **{i: 1 for i in range(1, 10)}}


async def test_a_rate_limited_deferral_keeps_its_attempt_count(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """An entry on its last attempt (redelivered after a crash) that must wait for its
    rate limit comes back on its last attempt, not with a fresh count."""
    backend = MemoryBackend()
    runner = make_runner(backend, reclaim_delay=30)
    ran: list[int] = []

    @runner.task(name="call", max_retry=2, rate_limit=RateLimit(1, per=60.0))
    async def call(payload: int) -> None:
        ran.append(payload)
        raise RuntimeError("always")

    await runner.dispatch("call", 1)
    await runner.dispatch("call", 2)
    async with serving(runner):
        await wait_until(lambda: runner.statistics().dead_lettered == 2, limit=3600)
        await trio.sleep(300)
    # Each ran twice: its second delivery (the reclaim after its failure) waited for
    # the limit, and came back as attempt 2 of 2, not 1 of 2.
    assert Counter(ran) == {1: 2, 2: 2}, ran
    assert runner.statistics().deferred >= 2


async def test_the_tuner_leaves_out_work_waiting_on_a_pause_or_a_limit(
    autojump_clock: trio.testing.MockClock,
) -> None:
    backend = MemoryBackend()
    runner = make_runner(backend, queues=("a", "b"))

    @runner.task(name="quick", queue="a")
    async def quick(payload: None) -> None:
        await trio.sleep(0.01)

    @runner.task(name="limited", queue="b", max_concurrency=1)
    async def limited(payload: None) -> None:
        await trio.sleep(60)

    async with serving(runner):
        await runner.dispatch("quick")  # one timed run
        await wait_until(lambda: runner.statistics().completed == 1)
        await admin.pause(backend, "g", queue="a")
        await trio.sleep(1.1)
        await runner.dispatch_many("quick", [None] * 500)
        await runner.dispatch_many("limited", [None] * 50)
        await wait_until(lambda: runner.statistics().deferred >= 49)
        await trio.sleep(2)  # the timings flushed
        waiting = await runner.get_timing_statistics()
        # What the pool would be sized for if the paused queue counted:
        ignoring_pause = await aggregator.timing_statistics(
            backend, "g", runner.task_names, runner.capacity, 1, queues=("a", "b")
        )
    assert ignoring_pause.predicted_wait_time >= 10.0 * 500 / 32  # avg 10 ms, 32 workers
    # The limited ones wait in the delayed set: only those between two waits (moved
    # back, not read yet) are ever in a stream.
    assert waiting.predicted_wait_time < 0.02 * ignoring_pause.predicted_wait_time, waiting


async def test_a_runner_of_one_queue_reads_as_before(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """The default config reads the backend's one queue with plain reads, no read_many."""

    class Reads(MemoryBackend):
        plain = many = 0

        async def read(self, *args: Any, **kwargs: Any) -> Any:
            Reads.plain += 1
            return await super().read(*args, **kwargs)

        async def read_many(self, *args: Any, **kwargs: Any) -> Any:
            Reads.many += 1
            return await super().read_many(*args, **kwargs)

    backend = Reads()
    runner: TaskRunner = make_runner(backend)
    done: list[int] = []

    @runner.task()
    async def job(payload: int) -> None:
        done.append(payload)

    await runner.dispatch_many("job", range(10))
    assert runner.queues == ("tasks",)
    async with serving(runner):
        await wait_until(lambda: len(done) == 10)
    assert (Reads.plain > 0, Reads.many) == (True, 0)
    assert backend.stream_keys("g").stream == "taskrunner:g:tasks"


async def test_a_task_with_no_limits_takes_no_gate_round_trip(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Unlimited tasks, nothing paused: no admit, park, defer or slot call at all."""
    calls: Counter[str] = Counter()

    class Counting(MemoryBackend):
        async def admit(self, *args: Any, **kwargs: Any) -> Any:
            calls["admit"] += 1
            return await super().admit(*args, **kwargs)

        async def park(self, *args: Any, **kwargs: Any) -> Any:
            calls["park"] += 1
            return await super().park(*args, **kwargs)

        async def defer(self, *args: Any, **kwargs: Any) -> Any:
            calls["defer"] += 1
            return await super().defer(*args, **kwargs)

        async def release_slots(self, *args: Any, **kwargs: Any) -> Any:
            calls["release_slots"] += 1
            return await super().release_slots(*args, **kwargs)

    backend = Counting()
    runner = make_runner(backend)
    done: list[int] = []

    @runner.task()
    async def job(payload: int) -> None:
        done.append(payload)

    @runner.task(max_concurrency=1)
    async def limited(payload: int) -> None:
        done.append(payload)

    await runner.dispatch_many("job", range(50))
    async with serving(runner):
        await wait_until(lambda: len(done) == 50)
        assert calls == {}, calls
        await runner.dispatch("limited", 50)  # the counting works
        await wait_until(lambda: len(done) == 51)
    assert calls["admit"] == 1, calls
    assert calls["release_slots"] == 1, calls


async def test_a_retry_goes_back_to_its_own_queue(autojump_clock: trio.testing.MockClock) -> None:
    """Execution's retry through the delayed set, on a queue that is not the default."""
    backend = MemoryBackend()
    runner = make_runner(backend, queues=("high", "low"))
    attempts: list[int] = []

    @runner.task(name="flaky", queue="low", max_retry=3)
    async def flaky(payload: None) -> None:
        attempts.append(len(attempts) + 1)
        if len(attempts) < 3:
            raise RuntimeError("not yet")

    await runner.dispatch("flaky")
    async with serving(runner):
        await wait_until(lambda: runner.statistics().completed == 1, limit=600)
    assert attempts == [1, 2, 3]
    assert await backend.length("g") == 0, "nothing went to the default queue"


async def test_a_run_the_backend_could_not_admit_waits_and_runs(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """An ``admit`` that fails (a cluster's ``TRYAGAIN`` while the group's slot
    migrates) sends the run back through the delayed set: left pending, its
    reclaim would count as a second delivery and dead-letter a run of a
    ``max_retry=0`` task that never started."""
    from taskrunner.errors import BackendError

    failures = [3]

    class Refusing(MemoryBackend):
        async def admit(self, *args: Any, **kwargs: Any) -> Any:
            if failures[0]:
                failures[0] -= 1
                raise BackendError("TRYAGAIN Multiple keys request during rehashing of slot")
            return await super().admit(*args, **kwargs)

    backend = Refusing()
    runner = make_runner(backend, reclaim_delay=1.0)
    done: list[int] = []

    @runner.task(rate_limit=RateLimit(10, per=1.0))
    async def limited(payload: int) -> None:
        done.append(payload)

    await runner.dispatch("limited", 1)
    async with serving(runner):
        await wait_until(lambda: done == [1])
        await trio.sleep(5.0)
    assert failures == [0]
    assert done == [1]
    assert await admin.dead_letters(backend, "g") == []
