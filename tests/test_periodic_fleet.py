"""Periodic schedules in a fleet: three runners on one MemoryBackend, on trio's MockClock,
over simulated days across a DST transition, while the leader is crashed, handed over,
partitioned, stalled (its fire lands after another leader took over) and crashed right
after a fire whose reply it never got, at random instants and exactly at tick boundaries.

Every tick must be fired exactly once (counted where the store adds the entry), never
before it is due, and no later than a handover allows. Each simulation logs its
numbers (simulated days, fires, duplicates, latest fire, refused stale fires).

Cost. Simulated time is free, but each wake-up of a runner's loops costs real time,
and much of the wall time went to three once-a-second loops in each runner that play
no part in this scenario: the gate's read of the paused set (nothing is ever paused
here), the canceller's look at stop requests (nothing is ever cancelled) and the
timing flush (no test reads the metrics). They run every 30 s instead
(``idle_services_poll_slowly``), which takes 40 % or more off the run. So does the
task catalog's publish (every 10 s in production, each one decoding every runner's
document; no producer here reads the catalog): every 30 s, each document counting
for 90 s, the same three intervals as in production. Everything the
assertions are about keeps its production timing: the lease, the follower's knocks,
the periodic service, fetching, reclaiming and the in-flight records. (A crashed
runner with timing samples still unwritten spends up to the final flush's 5 s
retrying on its cut link before its ``serve`` returns, which is more likely with a
30 s flush; the next chaos event, and so its replacement, comes 20 s or more later
either way, and the runner is out of ``healthy()`` from the crash on.)"""

from __future__ import annotations

import functools
import itertools
import logging
import math
import random
from collections import Counter
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any, TypeVar
from zoneinfo import ZoneInfo

import attrs
import pytest
import trio
import trio.testing

from taskrunner import TaskContext, TaskRunner, TaskRunnerConfig
from taskrunner._serve import bulk_writer, canceller, catalog, gate
from taskrunner._wire import decode_message
from taskrunner.backends import FireStatus
from taskrunner.backends.memory import MemoryBackend
from taskrunner.errors import BackendError
from taskrunner.testing import PartitionedBackend

pytestmark = [pytest.mark.mockclock, pytest.mark.slow]
log = logging.getLogger(__name__)

T = TypeVar("T")
BERLIN = ZoneInfo("Europe/Berlin")
TTL = 5.0
"""The leader lease (the default)."""
LATENESS_BOUND = TTL + 0.55 * TTL + 0.5
"""A crashed leader's lease runs out at most TTL after its last renew, and a follower
knocks every TTL/2 (+10 %): the next leader fires within this of the tick."""
SCHEDULES: dict[str, dict[str, Any]] = {
    "every30": {"every": 30},
    "berlin5": {"cron": "*/5 * * * *", "timezone": "Europe/Berlin"},
    "nightly": {"cron": "30 2 * * *", "timezone": "Europe/Berlin"},
    # in_flight_ttl (8 h) outlasts a live run crashed again and again: at most 5
    # deliveries (max_retry) of 70 min, each reclaimed within 7.5 min of its crash. A
    # shorter one lapses under such a run and the next tick fires beside it. A longer
    # one blocks the schedule for longer when no outcome is ever recorded: a run whose
    # last delivery dies (its entry then fails undecoded, the poison-entry bound) or
    # whose runner dies between its ack and the outcome. Both are the safety net
    # working as documented.
    "hourly-exclusive": {"cron": "0 * * * *", "overlap": False, "in_flight_ttl": 8 * 3600},
}
EXCLUSIVE_RUN = 70 * 60.0
"""The exclusive schedule's runs outlast its interval: every other tick is skipped."""
NIGHTLY = {
    "spring": ["2025-03-29 02:30+01:00", "2025-03-30 03:00+02:00", "2025-03-31 02:30+02:00"],
    "fall": ["2025-10-25 02:30+02:00", "2025-10-26 02:30+02:00", "2025-10-27 02:30+01:00"],
}
"""The nightly 02:30 Berlin run across each transition: the non-existent 02:30 runs at
03:00 CEST; the repeated 02:30 runs once, at the first (CEST)."""
STARTS = {
    "spring": datetime(2025, 3, 29, 0, 0, tzinfo=BERLIN).timestamp(),
    "fall": datetime(2025, 10, 25, 0, 0, tzinfo=BERLIN).timestamp(),
}


IDLE_POLL = 30.0
"""The interval here of the loops idle in this scenario (1 s in production): see Cost."""


@pytest.fixture
def idle_services_poll_slowly(monkeypatch: pytest.MonkeyPatch) -> None:
    """The pause poll, the stop-request poll, the timing flush and the catalog's publish
    every :data:`IDLE_POLL`."""
    monkeypatch.setattr(gate, "PAUSE_POLL", IDLE_POLL)
    monkeypatch.setattr(canceller, "POLL_INTERVAL", IDLE_POLL)
    monkeypatch.setattr(catalog, "PUBLISH_INTERVAL", IDLE_POLL)
    monkeypatch.setattr(catalog, "CATALOG_TTL", 3 * IDLE_POLL)
    # The runner starts bulk_writer.run without an interval (the 1 s default).
    monkeypatch.setattr(bulk_writer, "run", functools.partial(bulk_writer.run, interval=IDLE_POLL))


def local(tick: float) -> str:
    return datetime.fromtimestamp(tick, BERLIN).isoformat(sep=" ", timespec="minutes")


class ChaosLink(PartitionedBackend):
    """A runner's link to the store, which the simulation can also stall (every call
    waits; a fire already sent lands when the stall ends, late) or arm to crash the
    runner right after its next fire is applied (the reply is lost)."""

    def __init__(self, backend: MemoryBackend) -> None:
        super().__init__(backend)
        self.stall_until = -math.inf
        self.crash_after_fire: Callable[[], None] | None = None

    async def _through(self, name: str, call: Callable[[], Awaitable[T]]) -> T:
        # (A stall over is forgotten, so that the millions of calls outside one skip the
        # clock read.)
        if self.stall_until != -math.inf and trio.current_time() >= self.stall_until:
            self.stall_until = -math.inf
        if self.stall_until != -math.inf:
            if name == "fire_ticks":
                with trio.CancelScope(shield=True):  # on the wire: it will arrive
                    await trio.sleep_until(self.stall_until)
                    return await call()
            await trio.sleep_until(self.stall_until)
        result = await super()._through(name, call)
        if name == "fire_ticks" and self.crash_after_fire is not None:
            crash, self.crash_after_fire = self.crash_after_fire, None
            self.cut = True
            crash()
            raise BackendError("partitioned: no reply to fire_ticks")
        return result


@attrs.define
class Member:
    runner: TaskRunner
    link: ChaosLink
    scope: trio.CancelScope
    healthy: bool = True


@attrs.define
class Observed:
    """What the store saw and what ran."""

    fires: list[tuple[str, float, float]] = attrs.Factory(list)
    """(schedule, tick, when it was added to the stream)."""
    refused: Counter[str] = attrs.Factory(Counter)
    """Fire statuses other than FIRED, as the store answered them."""
    running_exclusive: int = 0
    most_exclusive: int = 0
    events: Counter[str] = attrs.Factory(Counter)
    timeline: list[tuple[float, str, str]] = attrs.Factory(list)
    """(when, what, which host): the chaos events and the exclusive runs."""


def observe(backend: MemoryBackend) -> Observed:
    seen = Observed()
    add_raw, fire_ticks = backend.add_raw, backend.fire_ticks

    def recording_add(group: str, fields: dict[str, bytes], *, queue: str | None = None) -> str:
        payload = fields.get("payload")
        if payload is not None and b'"schedule"' in payload:
            message = decode_message(payload)
            assert message.schedule is not None
            assert message.tick is not None
            seen.fires.append((message.schedule, message.tick, trio.current_time()))
        return add_raw(group, fields, queue=queue)

    async def recording_fire(group: str, owner: str, fires: Any) -> Any:
        results = await fire_ticks(group, owner, fires)
        seen.refused.update(r.status.value for r in results if r.status is not FireStatus.FIRED)
        return results

    backend.add_raw = recording_add  # type: ignore[method-assign]
    backend.fire_ticks = recording_fire  # type: ignore[method-assign]
    return seen


class Fleet:
    """Three runners at most, started, crashed and restarted on one backend."""

    def __init__(self, backend: MemoryBackend, nursery: trio.Nursery, seen: Observed) -> None:
        self.backend = backend
        self.nursery = nursery
        self.seen = seen
        self.members: list[Member] = []
        self._hosts = itertools.count(1)

    def runner(self, link: ChaosLink) -> TaskRunner:
        config = TaskRunnerConfig(
            consumer_group="g",
            host=f"host{next(self._hosts)}",
            leader_lease_ttl=TTL,
            shutdown_grace=0.0,  # a crash cancels running tasks at once
            block_duration=5.0,
        )
        runner = TaskRunner(config, link)
        seen = self.seen

        @runner.task(max_retry=5)
        async def tick(payload: None, ctx: TaskContext) -> None:
            if ctx.tick is None:
                raise AssertionError("a scheduled run must know its tick")

        @runner.task(max_retry=5)
        async def long_tick(payload: None, ctx: TaskContext) -> None:
            tick = ctx.tick
            seen.timeline.append((trio.current_time(), f"run start {tick}", config.host))
            seen.running_exclusive += 1
            seen.most_exclusive = max(seen.most_exclusive, seen.running_exclusive)
            try:
                await trio.sleep(EXCLUSIVE_RUN)
            finally:
                seen.running_exclusive -= 1
                seen.timeline.append((trio.current_time(), f"run end {tick}", config.host))

        for name, options in SCHEDULES.items():
            task = "long_tick" if name == "hourly-exclusive" else "tick"
            runner.add_schedule(name, task=task, **options)
        return runner

    async def start(self) -> Member:
        link = ChaosLink(self.backend)
        runner = self.runner(link)
        scope = trio.CancelScope()
        member = Member(runner=runner, link=link, scope=scope)

        async def serve(*, task_status: trio.TaskStatus[None]) -> None:
            with scope:
                await runner.serve(task_status=task_status)
            member.healthy = False
            if member in self.members:
                self.members.remove(member)

        self.members.append(member)
        await self.nursery.start(serve)
        return member

    def healthy(self) -> list[Member]:
        return [m for m in self.members if m.healthy]

    def leader(self) -> Member | None:
        return next((m for m in self.healthy() if m.runner.is_leader), None)

    def crash(self, member: Member) -> None:
        member.healthy = False
        member.link.cut = True
        member.scope.cancel()


async def chaos(fleet: Fleet, rng: random.Random, until: float) -> None:
    """Random events until ``until`` (trio's clock), at least 20 s apart so that one
    handover is over before the next begins, and never leaving the fleet without a
    healthy member."""
    every30 = SCHEDULES["every30"]["every"]
    while trio.current_time() < until:
        await trio.sleep(20 + rng.expovariate(1 / 600))
        if rng.random() < 0.5:  # at a tick boundary: exactly on it, or a hair either side
            boundary = (math.floor(trio.current_time() / every30) + 1) * every30
            await trio.sleep_until(boundary + rng.choice([0.0, -0.001, 0.001, -0.05]))
        while len(fleet.members) < 3:
            await fleet.start()
        healthy = fleet.healthy()
        if len(healthy) < 2:
            continue
        leader = fleet.leader()
        target = leader if leader is not None and rng.random() < 0.8 else rng.choice(healthy)
        kind = rng.choice(["crash", "handover", "partition", "stall", "crash_after_fire"])
        if kind != "crash" and target is not leader:
            kind = "crash"
        fleet.seen.events[kind] += 1
        fleet.seen.timeline.append((trio.current_time(), kind, target.runner.config.host))
        if kind == "crash":
            fleet.crash(target)
        elif kind == "handover":
            target.healthy = False
            target.runner.shutdown(grace=1.0)
        elif kind == "partition":
            target.healthy = False
            target.link.cut = True
            await trio.sleep(rng.uniform(3, 60))
            target.link.cut = False
            target.healthy = True
        elif kind == "stall":
            target.link.stall_until = trio.current_time() + 3 * TTL
        else:
            target.link.crash_after_fire = lambda target=target: fleet.crash(target)
            target.healthy = False  # crashes at its next fire


async def simulate(season: str, seed: int, days: float) -> Observed:
    start = STARTS[season]
    backend = MemoryBackend()
    seen = observe(backend)
    rng = random.Random(seed)
    end = start + days * 86400
    async with trio.open_nursery() as nursery:
        fleet = Fleet(backend, nursery, seen)
        for _ in range(3):
            await fleet.start()
        await chaos(fleet, rng, end - 3600)
        await trio.sleep_until(end)
        nursery.cancel_scope.cancel()
    check(seen, start, end, season)
    lateness = max(at - tick for _, tick, at in seen.fires)
    log.warning(
        "%s (seed %d): %.1f simulated days, %d fires, %d duplicates, latest fire %.2fs after "
        "its tick, store refusals %s, events %s",
        season,
        seed,
        days,
        len(seen.fires),
        sum(n - 1 for n in Counter((s, t) for s, t, _ in seen.fires).values() if n > 1),
        lateness,
        dict(seen.refused),
        dict(seen.events),
    )
    return seen


def check(seen: Observed, start: float, end: float, season: str) -> None:
    from taskrunner import Schedule

    counts = Counter((schedule, tick) for schedule, tick, _ in seen.fires)
    duplicates = {key: n for key, n in counts.items() if n > 1}
    assert duplicates == {}, f"ticks fired more than once: {duplicates}"
    early = [(s, t, at) for s, t, at in seen.fires if at < t]
    assert early == [], f"ticks fired before they were due: {early}"
    late = [(s, t, at - t) for s, t, at in seen.fires if at - t > LATENESS_BOUND]
    assert late == [], f"ticks fired more than {LATENESS_BOUND}s late: {late}"
    for name, options in SCHEDULES.items():
        if not options.get("overlap", True):
            continue
        timetable = Schedule(name=name, task="t", **options).timetable
        expected = list(timetable.between(start + 60, end - 60))
        fired = sorted(t for s, t, _ in seen.fires if s == name and start + 60 < t <= end - 60)
        assert fired == expected, f"{name}: missed {sorted(set(expected) - set(fired))[:10]}"
    nightly = [local(t) for s, t, _ in seen.fires if s == "nightly"]
    assert nightly == NIGHTLY[season][: round((end - start) / 86400)]
    exclusive = sorted(t for s, t, _ in seen.fires if s == "hourly-exclusive")
    # (A crashed run waits reclaim_delay for another worker and runs its 70 minutes again.)
    assert len(exclusive) >= (end - start) / 3600 / 6, f"the exclusive schedule ran {exclusive}"
    assert all(b - a >= 2 * 3600 for a, b in itertools.pairwise(exclusive)), (
        "an exclusive run of 70 minutes fires every other hour at most"
    )
    assert seen.most_exclusive == 1, "two runs of the exclusive schedule overlapped:\n" + "\n".join(
        f"{at:.3f} {what} {host}" for at, what, host in seen.timeline
    )


@pytest.mark.usefixtures("idle_services_poll_slowly")
@pytest.mark.parametrize(("season", "seed", "days"), [("spring", 1, 3.0), ("fall", 2, 2.0)])
async def test_every_tick_fires_once_through_crashes_handovers_and_partitions(
    autojump_clock: trio.testing.MockClock, season: str, seed: int, days: float
) -> None:
    autojump_clock.jump(STARTS[season] - trio.current_time())
    seen = await simulate(season, seed, days)
    assert seen.events["crash_after_fire"] >= 1, seen.events
    assert seen.events["stall"] >= 1, seen.events
    assert seen.refused["not_leader"] >= 1, (
        f"no stalled leader's late fire reached the store to be refused: {seen.refused}"
    )
