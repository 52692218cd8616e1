"""The gate when the backend fails: no run that never started is lost, none runs twice.

On a Redis Cluster whose group slot migrates, every flow-control script meets
``TRYAGAIN`` for as long as the migration lasts (a script naming a key that
the migrating slot does not hold, or keys split between the two masters, is
refused until the slot has moved). The gate's admission and its way back
(``defer``, ``park``) then fail for seconds. A run left pending meanwhile is
reclaimed after ``reclaim_delay``: a second delivery, which a ``max_retry=0``
task's delivery limit dead-letters without ever running it; that is how the
live-resharding proof lost rate-limited runs (tests/redis/test_cluster_fleet.py).

Here the backend is a :class:`MemoryBackend` whose flow-control calls fail
during an *outage* of :data:`OUTAGE` seconds of trio's MockClock, much longer
than ``reclaim_delay``, while its other calls (the refresh that keeps a message
from being reclaimed, acks, reads) go on, as a cluster's single-key commands do.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
import trio
import trio.testing
from _fleet import make_runner, serving, wait_until

from taskrunner import RateLimit, TaskRunner, TaskState, admin
from taskrunner.backends.memory import MemoryBackend
from taskrunner.errors import BackendError, TaskCancelled

OUTAGE = 12.0
"""Seconds the failing calls fail (from the first one), against a reclaim delay of 2 s."""
RECLAIM_DELAY = 2.0


class Migrating(MemoryBackend):
    """A MemoryBackend whose ``failing`` calls fail for :data:`OUTAGE` seconds from the
    first one; with ``applied``, a failing call takes effect before it raises (its reply
    was lost); without ``retryable``, with an error that repeating cannot fix."""

    def __init__(self, *failing: str, applied: bool = False, retryable: bool = True) -> None:
        super().__init__()
        self.failing = set(failing)
        self.applied = applied
        self.retryable = retryable
        self.until: float | None = None
        self.failures: Counter[str] = Counter()

    async def _maybe_fail(self, name: str, call: Any) -> Any:
        now = trio.current_time()
        if name in self.failing:
            if self.until is None:
                self.until = now + OUTAGE
            if now < self.until:
                self.failures[name] += 1
                if self.applied:
                    await call()
                if not self.retryable:
                    raise BackendError("WRONGTYPE Operation against a key", retryable=False)
                raise BackendError("TRYAGAIN Multiple keys request during rehashing of slot")
        return await call()

    async def admit(self, *args: Any, **kwargs: Any) -> Any:
        return await self._maybe_fail(
            "admit", lambda: super(Migrating, self).admit(*args, **kwargs)
        )

    async def defer(self, *args: Any, **kwargs: Any) -> Any:
        return await self._maybe_fail(
            "defer", lambda: super(Migrating, self).defer(*args, **kwargs)
        )

    async def park(self, *args: Any, **kwargs: Any) -> Any:
        return await self._maybe_fail("park", lambda: super(Migrating, self).park(*args, **kwargs))


async def check_nothing_left(backend: MemoryBackend) -> None:
    assert await admin.dead_letters(backend, "g") == [], "dead-lettered without running"
    assert (await backend.group_info("g")).pending == 0
    assert await backend.next_delayed_at("g") is None, "the delayed set is empty"


def limited_runner(backend: MemoryBackend, ran: Counter[int], per: float = 0.1) -> TaskRunner:
    runner = make_runner(backend, reclaim_delay=RECLAIM_DELAY)

    @runner.task(name="limited", rate_limit=RateLimit(1, per=per))  # max_retry=0: one attempt
    async def limited(payload: int) -> None:
        ran[payload] += 1

    return runner


@pytest.mark.parametrize(
    "failing",
    [("admit", "defer"), ("defer",)],
    ids=["admit-and-defer-fail", "refused-and-defer-fails"],
)
async def test_a_run_the_backend_could_not_admit_or_defer_runs_once(
    autojump_clock: trio.testing.MockClock, failing: tuple[str, ...]
) -> None:
    """Admission fails (or refuses, under a tight rate limit) and the deferral
    fails too, for far longer than ``reclaim_delay``: the gate keeps the message
    (refreshed, so no one reclaims it) and defers it once the backend takes it."""
    backend = Migrating(*failing)
    ran: Counter[int] = Counter()
    runner = limited_runner(backend, ran, per=0.1 if "admit" in failing else 5.0)
    await runner.dispatch_many("limited", range(6))
    async with serving(runner):
        with trio.fail_after(600):
            await wait_until(lambda: len(ran) == 6, limit=600)
        await trio.sleep(30.0)  # any second delivery would come by now
    assert backend.failures["defer"] > 0, "the deferral was never refused: the test tests nothing"
    assert backend.until is not None
    assert ran == Counter(range(6)), "every run exactly once"
    await check_nothing_left(backend)


async def test_a_deferral_whose_reply_was_lost_is_not_run_twice(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A deferral that took effect but raised (the reply lost): asked again, the
    backend answers that the entry is no longer pending, and the run happens once,
    from the delayed set."""
    backend = Migrating("admit", "defer", applied=True)
    ran: Counter[int] = Counter()
    runner = limited_runner(backend, ran)
    await runner.dispatch_many("limited", range(4))
    async with serving(runner):
        await wait_until(lambda: len(ran) == 4, limit=600)
        await trio.sleep(30.0)
    assert backend.failures["defer"] > 0
    assert ran == Counter(range(4))
    await check_nothing_left(backend)


@pytest.mark.parametrize("applied", [False, True], ids=["refused", "reply-lost"])
async def test_a_paused_task_whose_run_could_not_be_parked_runs_once_resumed(
    autojump_clock: trio.testing.MockClock, applied: bool
) -> None:
    """A paused task's run whose parking fails (or parks and raises) goes back through
    the delayed set, not pending; resumed during the outage, it runs once."""
    backend = Migrating("park", "defer", applied=applied)
    ran: Counter[int] = Counter()
    runner = make_runner(backend, reclaim_delay=RECLAIM_DELAY)

    @runner.task(name="job")
    async def job(payload: int) -> None:
        ran[payload] += 1

    await admin.pause(backend, "g", task="job")
    await runner.dispatch_many("job", range(3))
    async with serving(runner):
        await wait_until(lambda: backend.failures["park"] > 0)
        await trio.sleep(OUTAGE / 2)
        await admin.resume(backend, "g", task="job")  # while parking still fails
        await wait_until(lambda: len(ran) == 3, limit=600)
        await trio.sleep(30.0)
    assert ran == Counter(range(3))
    await check_nothing_left(backend)


async def test_a_stop_while_the_backend_refuses_leaves_the_run_pending(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Stopping the runner while the gate waits for the backend: the wait goes on for
    the shutdown's grace, then ends (the message stays pending, as any run stopped
    does); serve returns and nothing raises."""
    backend = Migrating("admit", "defer")
    ran: Counter[int] = Counter()
    runner = make_runner(backend, reclaim_delay=RECLAIM_DELAY, shutdown_grace=1.0)

    @runner.task(name="limited", rate_limit=RateLimit(1, per=0.1))
    async def limited(payload: int) -> None:
        ran[payload] += 1

    await runner.dispatch("limited", 1)
    served = trio.Event()

    async def serve() -> None:
        await runner.serve()
        served.set()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(serve)
        await wait_until(lambda: backend.failures["defer"] > 2)
        stopping = trio.current_time()
        runner.shutdown()
        with trio.fail_after(5.0):
            await served.wait()  # serve returns once drained, without raising
    assert trio.current_time() - stopping < OUTAGE / 2, "the grace bounds the wait"
    assert not ran
    assert (await backend.group_info("g")).pending == 1


async def test_a_deferral_the_store_refuses_for_good_is_not_tried_forever(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """An error that repeating cannot fix (``WRONGTYPE``): the deferral is not tried
    again and again (the worker slot would be held for ever); the message is left
    pending, logged, as before."""
    backend = Migrating("admit", "defer", retryable=False)
    ran: Counter[int] = Counter()
    runner = limited_runner(backend, ran)
    await runner.dispatch("limited", 1)
    async with serving(runner):
        await wait_until(lambda: backend.failures["defer"] == 1)
        await trio.sleep(1.5)  # less than the reclaim delay
        assert backend.failures["defer"] == 1
        assert runner.statistics().running == 0, "its worker slot is free"
    assert (await backend.group_info("g")).pending == 1


async def test_a_run_cancelled_while_the_gate_defers_it_never_runs(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A cancel that lands while the gate holds a refused run (its deferral failing):
    the cancel finds the message pending, so it records a stop request for that entry;
    the deferral then moves the run to the delayed set under a new entry. The stop
    must follow it: the run never starts and the task ends ``CANCELLED``."""
    backend = Migrating("defer")
    ran: Counter[int] = Counter()
    runner = make_runner(backend, reclaim_delay=RECLAIM_DELAY)
    release = trio.Event()

    @runner.task(name="one", max_concurrency=1, keep_result=3600)
    async def one(payload: int) -> None:
        ran[payload] += 1
        if payload == 1:
            await release.wait()

    holder = await runner.dispatch("one", 1)
    async with serving(runner):
        await wait_until(lambda: ran[1] == 1)
        refused = await runner.dispatch("one", 2)
        await wait_until(lambda: backend.failures["defer"] > 0)  # refused, deferral failing
        assert await runner.cancel(refused) is True
        await wait_until(lambda: backend.until is not None and trio.current_time() > backend.until)
        await trio.sleep(5.0)  # the deferral taken
        release.set()
        assert await holder.result(timeout=60) is None
        await trio.sleep(30.0)  # the deferred run would come by now
        with pytest.raises(TaskCancelled):
            await refused.result(timeout=1)
    assert ran == Counter({1: 1}), "the cancelled run never started"
    info = await runner.get_task(refused.id)
    assert info is not None
    assert info.state is TaskState.CANCELLED
    await check_nothing_left(backend)


async def test_a_parked_run_is_found_and_cancelled_by_its_task_id(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A paused task's parked run is looked up (scheduled) and cancelled by its id: it
    never runs after the resume, and is recorded cancelled."""
    backend = MemoryBackend()
    ran: list[int] = []
    runner = make_runner(backend, reclaim_delay=RECLAIM_DELAY)

    @runner.task(name="job", keep_result=3600)
    async def job(payload: int) -> None:
        ran.append(payload)

    await admin.pause(backend, "g", task="job")
    parked = await runner.dispatch("job", 1)
    kept = await runner.dispatch("job", 2)
    async with serving(runner):
        await wait_until(lambda: runner.statistics().parked == 2)
        info = await runner.get_task(parked.id)
        assert info is not None
        assert info.state is TaskState.SCHEDULED
        assert await runner.cancel(parked) is True
        await admin.resume(backend, "g", task="job")
        assert await kept.result(timeout=60) is None
        await trio.sleep(30.0)
        with pytest.raises(TaskCancelled):
            await parked.result(timeout=1)
    assert ran == [2]
    await check_nothing_left(backend)
