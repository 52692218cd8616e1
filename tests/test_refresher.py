"""The refresher: which running messages are due (InFlight), a long run is never
reclaimed, and a failed refresh is retried (MemoryBackend, MockClock)."""

from __future__ import annotations

from collections.abc import Sequence

import trio
import trio.lowlevel
import trio.testing
from _fleet import make_runner, serving, wait_until

from taskrunner import (
    Task,
)
from taskrunner._execution.inflight import InFlight
from taskrunner.backends import SlotHold
from taskrunner.backends.memory import MemoryBackend


async def test_long_task_that_refreshes_is_never_reclaimed(
    autojump_clock: trio.testing.MockClock,
) -> None:
    backend = MemoryBackend()
    runners = [make_runner(backend, reclaim_delay=30) for _ in range(2)]
    starts: list[int] = []
    for index, runner in enumerate(runners):

        async def slow(payload: None, index: int = index) -> None:
            starts.append(index)
            await trio.sleep(300)  # ten times reclaim_delay

        runner.register(Task(name="slow", action=slow, reservation_timeout=10))

    await runners[0].dispatch("slow")
    async with serving(*runners):
        await wait_until(lambda: sum(r.statistics().acked for r in runners) == 1)
        await trio.sleep(100)
    assert len(starts) == 1
    assert sum(r.statistics().reclaimed for r in runners) == 0


async def test_a_failed_refresh_is_retried_on_the_next_tick(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """One transient refresh failure must not let another runner reclaim a running
    message (it used to wait a whole reservation timeout before trying again)."""
    from taskrunner import BackendError
    from taskrunner.testing import PartitionedBackend

    backend = MemoryBackend()

    class FlakyRefresh(PartitionedBackend):
        failures = 0

        async def refresh(
            self, group: str, consumer: str, ids: Sequence[str], *, queue: str | None = None
        ) -> list[str]:
            if trio.current_time() >= 24 and FlakyRefresh.failures == 0:
                FlakyRefresh.failures += 1
                raise BackendError("transient")
            return await backend.refresh(group, consumer, ids, queue=queue)

    first = make_runner(FlakyRefresh(backend), reclaim_delay=30)
    second = make_runner(backend, reclaim_delay=30)
    runs: list[str] = []
    for name, runner in (("first", first), ("second", second)):

        async def long(payload: None, name: str = name) -> None:
            runs.append(name)
            await trio.sleep(100)

        async def quick(payload: None) -> None:
            pass

        runner.register(Task(name="long", action=long, reservation_timeout=25, max_retry=2))
        runner.register(Task(name="quick", action=quick, reservation_timeout=2))  # 1 s ticks

    await first.dispatch("long")
    async with serving(first):
        await wait_until(lambda: runs == ["first"])
        async with serving(second):
            await wait_until(lambda: first.statistics().acked == 1, limit=200)
    assert FlakyRefresh.failures == 1
    assert runs == ["first"], "the running message was reclaimed and ran twice"
    assert await backend.dead_letters("g") == []
    assert second.statistics().reclaimed == 0


def test_inflight_due_refreshes_early_never_late() -> None:
    table = InFlight()
    table.add("1-1", "c1", reservation_timeout=10, now=0)
    table.add("1-2", "c2", reservation_timeout=4, now=0)
    assert table.due(now=2, slack=2) == {("c2", None): ["1-2"]}  # due at 4, within the slack
    assert table.due(now=2, slack=2) == {("c2", None): ["1-2"]}, "due() only reads"
    table.refreshed(["1-2"], at=2)
    assert table.due(now=3, slack=2) == {}  # next at 2 + 4
    assert table.due(now=8, slack=2) == {("c1", None): ["1-1"], ("c2", None): ["1-2"]}
    table.remove("1-1")
    table.refreshed(["1-1"], at=8)  # no longer running: ignored
    assert "1-1" not in table
    assert len(table) == 1


def test_inflight_lingering_runs_renew_their_slot_but_not_their_message() -> None:
    """Issue 24: past its deadline, or settled (a thread whose outcome is decided), a run
    is no longer refreshed, but the concurrency slot it holds is still renewed."""
    hold = SlotHold(task="t", holder="h", lease=10.0)
    table = InFlight()
    table.add("1-1", "c1", reservation_timeout=10, now=0, deadline=20, hold=hold)
    table.add("1-2", "c1", reservation_timeout=10, now=0, hold=hold)
    table.add("1-3", "c1", reservation_timeout=10, now=0)  # no slot: nothing to renew
    assert table.due(now=4, slack=1) == {("c1", None): ["1-1", "1-2"]}
    assert table.lingering(now=4, slack=1) == {}
    table.settle("1-2")
    table.settle("1-3")
    assert table.due(now=4, slack=1) == {("c1", None): ["1-1"]}, "a settled run's message"
    assert table.lingering(now=4, slack=1) == {None: ["1-2"]}
    assert table.due(now=25, slack=1) == {}, "past its deadline"
    assert table.lingering(now=25, slack=1) == {None: ["1-1", "1-2"]}
    table.refreshed(["1-1", "1-2"], at=25)
    assert table.lingering(now=26, slack=1) == {}, "renewed: due again one period later"
    assert table.lingering(now=29, slack=1) == {None: ["1-1", "1-2"]}
    assert table.running() == ["1-1"], "a settled run is not stopped any more"
    assert table.stop("1-2") is True  # tracked, so known; nothing to cancel


def test_inflight_a_message_the_gate_tracked_keeps_its_sooner_refresh_once_running() -> None:
    """The gate tracks a message from its first call (a slow admission, seconds of
    TRYAGAIN); the run that replaces it once admitted keeps the refresh already due
    sooner, so the time since the message's last refresh still counts."""
    table = InFlight()
    table.add("1-1", "c1", reservation_timeout=10, now=0)  # the gate's
    table.refreshed(["1-1"], at=9)  # next at 19
    table.add("1-1", "c1", reservation_timeout=10, now=15)  # admitted at 15: not at 25
    assert table.due(now=18, slack=1) == {("c1", None): ["1-1"]}
    table.add("1-2", "c1", reservation_timeout=10, now=0)
    hold = SlotHold(task="t", holder="h", lease=10.0)
    table.add("1-2", "c1", reservation_timeout=10, now=1, hold=hold)  # its own comes sooner
    assert table.due(now=5, slack=1) == {("c1", None): ["1-2"]}, "due at 1 + 10 / 2"
    assert table.holds(["1-2"]) == [hold]


def test_inflight_a_run_is_refreshed_from_its_end_until_its_ack_lands() -> None:
    """A finished run's message is refreshed until its ack lands (an ack slower than
    reclaim_delay must not let it be reclaimed and run twice); a run whose outcome
    queued no ack goes at once; a thread's entry stays until the thread returned."""
    hold = SlotHold(task="t", holder="h", lease=10.0)
    table = InFlight()
    table.add("1-1", "c1", reservation_timeout=10, now=0, deadline=5, hold=hold)
    table.add("1-2", "c1", reservation_timeout=10, now=0)
    table.add("1-3", "c1", reservation_timeout=10, now=0, deadline=5)  # a thread
    assert table.end("1-1") is False, "not asked to stop"
    table.acking("1-1", None)
    assert table.end("1-2") is False
    assert table.running() == ["1-3"], "an ended run is not stopped any more"
    assert table.stop("1-1") is False
    assert len(table) == 1, "only the thread is being worked on"
    assert table.due(now=9, slack=1) == {("c1", None): ["1-1", "1-2"]}, "no deadline once ended"
    assert table.holds(["1-1"]) == [], "its concurrency slot is given back"
    assert table.lingering(now=9, slack=1) == {}
    table.release("1-2")  # no ack queued (left pending): gone, to be reclaimed
    assert "1-2" not in table
    table.release("1-1")  # its ack is queued: kept until it lands
    assert table.due(now=19, slack=1) == {("c1", None): ["1-1"]}
    table.settle("1-3")
    table.acking("1-3", None)
    assert table.due(now=19, slack=1) == {("c1", None): ["1-1", "1-3"]}, "settled, acking"
    table.acked([(None, "1-1"), (None, "1-3"), (None, "9-9")])
    assert "1-1" not in table
    assert "1-3" in table, "the thread still runs: its entry stays"
    assert table.due(now=19, slack=1) == {}, "acked: no longer refreshed"
    table.release("1-3")
    assert len(table) == 0
    assert "1-3" not in table


def test_inflight_acked_ids_of_one_queue_drop_its_finished_runs_only() -> None:
    """The acker's one-stream flush: the landed acks of ``queue``'s ids drop the runs
    the worker is done with; a thread still running stays (no longer refreshed), and
    the same id of another queue is another run, left alone."""
    table = InFlight()
    table.add("1-1", "c1", reservation_timeout=10, now=0)
    table.add("1-2", "c1", reservation_timeout=10, now=0)  # a thread
    table.add("1-1", "c1", reservation_timeout=10, now=0, queue="q")
    table.end("1-1")
    table.acking("1-1", None)
    table.settle("1-2")
    table.acking("1-2", None)
    table.end("1-1", queue="q")
    table.acked_ids(None, ["1-1", "1-2", "9-9"])
    assert table.due(now=19, slack=1) == {("c1", "q"): ["1-1"]}, "the thread: not refreshed"
    assert "1-2" in table, "the thread still runs: its entry stays"
    table.release("1-2")
    table.acked_ids("q", ["1-1"])
    assert len(table) == 0
    assert "1-1" not in table
