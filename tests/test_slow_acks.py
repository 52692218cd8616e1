"""A finished run whose ack is slow is never reclaimed: no run twice, none dead-lettered.

On a Redis Cluster whose group slot migrates, an ack batch that records an outcome
(``finish``: a task that keeps results) meets ``TRYAGAIN`` for as long as the
migration lasts; a failover, a partition or a slow server delays plain acks too.
Until the ack lands the entry is pending, and once its idle time passes
``reclaim_delay`` another instance claims it: a ``max_retry=0`` task's second
delivery is dead-lettered (it ran already), and a task with retries left runs
twice. So the worker keeps a finished run's message refreshed until its ack lands.

Here two runners share one :class:`MemoryBackend`, each through its own link; the
acks of the first one fail (or hang) for :data:`OUTAGE` seconds of trio's MockClock,
far longer than ``reclaim_delay``, while the second one works and would reclaim.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Awaitable, Callable
from typing import TypeVar

import pytest
import trio
import trio.testing
from _fleet import make_runner, serving, wait_until

from taskrunner import TaskRunner, TaskRunnerConfig, admin
from taskrunner._config import ConfigHolder
from taskrunner._execution.inflight import InFlight
from taskrunner._serve.acker import FINAL_FLUSH_TIMEOUT, Acker
from taskrunner.backends.memory import MemoryBackend
from taskrunner.errors import BackendError
from taskrunner.testing import PartitionedBackend

T = TypeVar("T")

OUTAGE = 12.0
"""Seconds the slow instance's acks fail or hang (from the first one)."""
RECLAIM_DELAY = 2.0
TASKS = 8


class SlowAcks(PartitionedBackend):
    """A link whose acks (``ack`` and ``finish``) fail, or with ``hang`` wait, for
    :data:`OUTAGE` seconds from the first one; every other call goes through."""

    def __init__(self, backend: MemoryBackend, *, hang: bool) -> None:
        super().__init__(backend)
        self.hang = hang
        self.until: float | None = None
        self.slowed = 0

    async def _through(self, name: str, call: Callable[[], Awaitable[T]]) -> T:
        if name in ("ack", "finish"):
            now = trio.current_time()
            if self.until is None:
                self.until = now + OUTAGE
            if now < self.until:
                self.slowed += 1
                if not self.hang:
                    await trio.lowlevel.checkpoint()
                    raise BackendError("TRYAGAIN Multiple keys request during rehashing of slot")
                await trio.sleep(self.until - now)
        return await super()._through(name, call)


def runner_on(link: PartitionedBackend, ran: Counter[tuple[str, int]]) -> TaskRunner:
    runner = make_runner(link, reclaim_delay=RECLAIM_DELAY)

    @runner.task(name="once")  # max_retry=0: a second delivery is dead-lettered
    async def once(payload: int) -> None:
        ran["once", payload] += 1

    @runner.task(name="kept", keep_result=60.0, max_retry=3)  # acked through finish
    async def kept(payload: int) -> int:
        ran["kept", payload] += 1
        return payload

    @runner.task(name="retried", max_retry=3)  # a second delivery runs it again
    async def retried(payload: int) -> None:
        ran["retried", payload] += 1

    return runner


@pytest.mark.parametrize("hang", [False, True], ids=["acks-fail", "acks-hang"])
async def test_a_run_whose_ack_is_slow_is_not_reclaimed(
    autojump_clock: trio.testing.MockClock, hang: bool
) -> None:
    backend = MemoryBackend()
    slow = SlowAcks(backend, hang=hang)
    ran: Counter[tuple[str, int]] = Counter()
    first, second = runner_on(slow, ran), runner_on(PartitionedBackend(backend), ran)
    for name in ("once", "kept", "retried"):
        await first.dispatch_many(name, range(TASKS))
    async with serving(first):
        # The slow instance takes every message and runs it; its acks wait.
        await wait_until(lambda: len(ran) == 3 * TASKS, limit=60)
        assert slow.until is not None
        assert trio.current_time() < slow.until, "ran while the acks still wait"
        async with serving(second):  # would reclaim what the first has not acked
            await trio.sleep(OUTAGE + 30.0)
    assert slow.slowed > 0, "no ack was slowed: the test tests nothing"
    expected = Counter({(name, i): 1 for name in ("once", "kept", "retried") for i in range(TASKS)})
    assert ran == expected, "every task ran exactly once"
    assert await admin.dead_letters(backend, "g") == [], "dead-lettered after running"
    assert (await backend.group_info("g")).pending == 0, "every run acked"


async def test_a_stop_while_acks_fail_ends_in_bounded_time_leaving_them_pending(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Stopping the runner while its acks fail: the refresher no longer holds up the
    shutdown, the final flush gives up after its timeout, serve returns without
    raising, and the finished messages stay pending (reclaimed later, as before)."""
    backend = MemoryBackend()
    slow = SlowAcks(backend, hang=False)
    slow.until = 1e9  # the acks fail for ever
    ran: Counter[tuple[str, int]] = Counter()
    runner = runner_on(slow, ran)
    await runner.dispatch_many("once", range(3))
    served = trio.Event()

    async def serve() -> None:
        await runner.serve()
        served.set()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(serve)
        await wait_until(lambda: len(ran) == 3)
        await trio.sleep(3 * RECLAIM_DELAY)  # refreshed meanwhile, never reclaimed
        stopping = trio.current_time()
        runner.shutdown()
        with trio.fail_after(FINAL_FLUSH_TIMEOUT + 5.0):
            await served.wait()
    assert trio.current_time() - stopping <= FINAL_FLUSH_TIMEOUT + 1.0
    assert ran == Counter({("once", i): 1 for i in range(3)})
    assert (await backend.group_info("g")).pending == 3
    assert await admin.dead_letters(backend, "g") == []


async def test_a_run_cut_off_by_the_grace_is_reclaimed_when_the_runner_serves_again(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A run cut off by the shutdown's grace has no outcome, so no ack: it is no longer
    kept from reclaim, and the same runner, serving again, reclaims it after
    ``reclaim_delay`` and runs it again, as before."""
    backend = MemoryBackend()
    starts: list[float] = []
    runner = make_runner(backend, reclaim_delay=RECLAIM_DELAY, shutdown_grace=0.5)

    @runner.task(name="job", max_retry=3)
    async def job(payload: int) -> None:
        starts.append(trio.current_time())
        if len(starts) == 1:
            await trio.sleep(100.0)

    await runner.dispatch("job", 1)
    async with serving(runner):
        await wait_until(lambda: len(starts) == 1)
    assert (await backend.group_info("g")).pending == 1
    async with serving(runner):
        await wait_until(lambda: runner.statistics().acked == 1, limit=10 * RECLAIM_DELAY)
    assert len(starts) == 2
    assert (await backend.group_info("g")).pending == 0


async def test_an_ack_the_final_flush_gave_up_is_no_longer_kept_from_reclaim(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """The acker's final flush fails: the entries it leaves un-acked leave the in-flight
    table too (a later serve must not refresh them for ever); so does one acked."""
    backend = MemoryBackend()
    slow = SlowAcks(backend, hang=False)
    slow.until = 1e9
    ids = await backend.add("g", [b"a"])
    assert len(await backend.read("g", "c1", 1, 0)) == 1
    table = InFlight()
    table.add(ids[0], "c1", reservation_timeout=1.0, now=0.0)
    table.end(ids[0])
    acker = Acker(slow, ConfigHolder(TaskRunnerConfig(consumer_group="g")), table)
    acker.ack(ids[0])
    async with trio.open_nursery() as nursery:
        await nursery.start(acker.run)
        await trio.sleep(1.0)
        assert ids[0] in table, "kept while its ack is retried"
        nursery.cancel_scope.cancel()
    assert ids[0] not in table
    assert (await backend.group_info("g")).pending == 1


async def test_an_acked_run_leaves_the_in_flight_table(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A batch of one queue with no lock (the acker's one-call path) that lands drops its
    entries from the in-flight table: nothing finished is refreshed for ever."""
    backend = MemoryBackend()
    ids = await backend.add("g", [b"a", b"b"])
    assert len(await backend.read("g", "c1", 2, 0)) == 2
    table = InFlight()
    for entry_id in ids:
        table.add(entry_id, "c1", reservation_timeout=1.0, now=0.0)
        table.end(entry_id)
    acker = Acker(backend, ConfigHolder(TaskRunnerConfig(consumer_group="g")), table)
    for entry_id in ids:
        acker.ack(entry_id)
    async with trio.open_nursery() as nursery:
        await nursery.start(acker.run)
        await wait_until(lambda: acker.acked == 2)
        nursery.cancel_scope.cancel()
    assert (await backend.group_info("g")).pending == 0
    assert [entry_id for entry_id in ids if entry_id in table] == []
