"""Five simulated days (:data:`DAYS`) of a fleet running workflows, with crashes: three
runners on one MemoryBackend under trio's MockClock, a workflow schedule every 20
minutes (a chord: four parts, then a sink) and a dispatcher starting a chain every ~7
minutes, while a random runner is crashed (its link cut: calls refused, replies in
flight lost, its running steps cancelled) every one to five hours and replaced by a
fresh one.

Every tick must start exactly one workflow, every workflow must end ``SUCCEEDED``, and
every sink must run exactly once with each of its parents' results: a step reclaimed
from a crashed runner runs again but counts once, and a dependent is queued once.

Cost. Simulated time is free, but each wake-up of a runner's loops costs real time, so
the loops idle in this scenario run less often, as in tests/test_periodic_fleet.py:
the pause poll, the stop-request poll and the timing flush every 30 s instead of every
second, the task catalog's publish every 30 s (each document counting for 90 s; no
producer here reads the catalog, and a step carries its keep_result), and the delayed
set's poll every 30 s instead of 5 s (nothing here is delayed). Two loops that do matter
run at a slower pace that keeps what they do: the leader's lease is 15 s instead of 5 s
(a crashed leader is replaced within about 25 s rather than 8 s: the schedule's ticks
fire later, never twice nor lost) and an idle fetcher's blocking read lasts 30 s (an
entry added wakes it at once, as on Redis; a reclaim it owes waits for the read's end,
so a crashed runner's steps are reclaimed up to 30 s later). Reclaiming (30 s), the
in-flight refreshes, the leader's audit and the periodic service keep their production
timing. One simulated day cost 31 s of CPU before; five days now cost 72 s to 85 s
(on a loaded machine: 0.46x to 0.55x per day).
"""

from __future__ import annotations

import functools
import itertools
import logging
import random
from collections import Counter

import pytest
import trio
import trio.testing
from test_workflows import WorkflowLink

from taskrunner import TaskContext, TaskRunner, TaskRunnerConfig, WorkflowState, chain, chord, group
from taskrunner._schedules.workflows import scheduled_workflow_id
from taskrunner._serve import bulk_writer, canceller, catalog, gate
from taskrunner.backends.memory import MemoryBackend

pytestmark = [pytest.mark.mockclock, pytest.mark.slow]
log = logging.getLogger(__name__)

DAYS = 5
EVERY = 20 * 60.0
"""The workflow schedule's interval."""
PARTS = 4
IDLE_POLL = 30.0
LEASE_TTL = 15.0
BLOCK = 30.0


@pytest.fixture(autouse=True)
def idle_services_poll_slowly(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gate, "PAUSE_POLL", IDLE_POLL)
    monkeypatch.setattr(canceller, "POLL_INTERVAL", IDLE_POLL)
    monkeypatch.setattr(catalog, "PUBLISH_INTERVAL", IDLE_POLL)
    monkeypatch.setattr(catalog, "CATALOG_TTL", 3 * IDLE_POLL)
    monkeypatch.setattr(bulk_writer, "run", functools.partial(bulk_writer.run, interval=IDLE_POLL))


class Fleet:
    """The runners, what their sinks saw, and the crashes."""

    def __init__(self, store: MemoryBackend, rng: random.Random) -> None:
        self.store = store
        self.rng = rng
        self.sinks: Counter[str] = Counter()
        self.inputs: dict[str, list[int]] = {}
        self.hosts = itertools.count(1)
        self.crashes = 0

    def runner(self, link: WorkflowLink) -> TaskRunner:
        config = TaskRunnerConfig(
            consumer_group="g",
            host=f"host{next(self.hosts)}",
            shutdown_grace=0.0,  # a crash cancels running steps at once
            block_duration=BLOCK,
            leader_lease_ttl=LEASE_TTL,
            delayed_poll_interval=IDLE_POLL,
            reclaim_delay=30.0,
        )
        runner = TaskRunner(config, link)
        rng = self.rng

        @runner.task("part", max_retry=10)
        async def part(payload: dict[str, int]) -> int:
            await trio.sleep(rng.uniform(0, 90))
            return payload["i"]

        @runner.task("sink", max_retry=10)
        async def sink(payload: list[int], ctx: TaskContext) -> int:
            assert ctx.workflow_id is not None
            await trio.sleep(rng.uniform(0, 20))
            self.sinks[ctx.workflow_id] += 1
            self.inputs[ctx.workflow_id] = payload
            return sum(payload)

        @runner.task("first", max_retry=10)
        async def first(payload: int) -> list[int]:
            await trio.sleep(rng.uniform(0, 30))
            return [payload]

        runner.add_schedule(
            "chords",
            every=EVERY,
            catch_up="all",
            workflow=chord(
                group(runner.step("part", {"i": i}) for i in range(PARTS)), runner.step("sink")
            ),
        )
        return runner

    async def serve(
        self, nursery: trio.Nursery
    ) -> tuple[TaskRunner, WorkflowLink, trio.CancelScope]:
        link = WorkflowLink(self.store)
        runner = self.runner(link)
        scope = trio.CancelScope()

        async def run() -> None:
            with scope:
                await runner.serve()

        nursery.start_soon(run)
        return runner, link, scope


async def test_days_of_workflows_with_crashes(autojump_clock: trio.testing.MockClock) -> None:
    rng = random.Random(28)
    store = MemoryBackend()
    fleet = Fleet(store, rng)
    chains: list[str] = []
    end = trio.current_time() + DAYS * 86400
    async with trio.open_nursery() as outer:
        members = [await fleet.serve(outer) for _ in range(3)]
        start = trio.current_time()

        async def dispatch_chains() -> None:
            while trio.current_time() < end - 3600:
                await trio.sleep(rng.uniform(60, 13 * 60))
                for runner, link, _ in members:
                    if not link.cut:
                        wf = await runner.dispatch_workflow(
                            chain(runner.step("first", 7), runner.step("sink"))
                        )
                        chains.append(wf.id)
                        break

        outer.start_soon(dispatch_chains)
        while trio.current_time() < end - 3600:
            await trio.sleep(rng.uniform(3600, 5 * 3600))
            victim = rng.randrange(len(members))
            _, link, scope = members[victim]
            link.cut = True  # a crash: calls refused, replies in flight lost
            scope.cancel()
            fleet.crashes += 1
            members[victim] = await fleet.serve(outer)
        await trio.sleep(max(0.0, end - trio.current_time()))  # the last hour: it drains
        outer.cancel_scope.cancel()
    ticks = _ticks(start, end - 3600)  # in memory, ticks are on trio's clock
    expected = {scheduled_workflow_id("chords", t) for t in ticks}
    started = {w for w in fleet.sinks if w.startswith("chords@")}
    log.info(
        "%d days, %d crashes, %d scheduled chords, %d chains",
        DAYS,
        fleet.crashes,
        len(expected),
        len(chains),
    )
    assert fleet.crashes >= 4 * DAYS
    assert expected <= started, f"ticks without their workflow: {sorted(expected - started)}"
    assert all(fleet.sinks[w] == 1 for w in [*started, *chains]), "a sink ran twice"
    assert all(fleet.inputs[w] == list(range(PARTS)) for w in started)
    assert all(fleet.inputs[w] == [[7]] or fleet.inputs[w] == [7] for w in chains)
    # A record lives for its workflow's keep (a day) once it ends: the first days' are
    # gone. Each end is counted by outcome in the step that ends it, once.
    ends = await store.workflow_ends("g")
    assert ends == {"succeeded": len(started) + len(chains), "failed": 0, "cancelled": 0}, ends
    states = Counter()
    for workflow_id in [*started, *chains]:
        record = await store.read_workflow("g", workflow_id)
        if record is not None:
            states[record.state] += 1
    assert set(states) == {WorkflowState.SUCCEEDED}, states  # those of the last day


def _ticks(first: float, last: float) -> list[float]:
    tick = (first // EVERY + 1) * EVERY
    found = []
    while tick <= last:
        found.append(tick)
        tick += EVERY
    return found
