"""Fleet coordination: several runners of one group, each through a link that can be
cut (a crash, a partition), on every backend.

One fixture, ``fleet``, gives the backend and the clock: ``memory`` is one shared
MemoryBackend on trio's MockClock (deterministic, the production timings: a 5 s
lease); ``redis`` is a real server, every runner on a connection of its own, in real
time with short timings (a 1 s lease) and a little slack for scheduling noise. The
scenarios are the same; only the fixture's numbers differ. (The heartbeat's cache and
expiry timings are tests/test_heartbeat.py's, on the mock clock.)
"""

from __future__ import annotations

import random
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Callable
from typing import Any

import attrs
import pytest
import trio
import trio.testing
from _fleet import Partition, start_each

from taskrunner import TaskRunner, TaskRunnerConfig
from taskrunner.backends import Backend
from taskrunner.backends.memory import MemoryBackend
from taskrunner.backends.redis import RedisBackend


@attrs.frozen(kw_only=True)
class DelayedPlan:
    """The delayed-tasks-across-a-crash scenario's numbers."""

    count: int
    spread: float
    """Delays are uniform in [0, spread) seconds."""
    crash_after: float
    settle: float
    """How long to look for a second run once every task ran."""
    poll: float
    """``delayed_poll_interval``."""
    early: float
    """How early a task may seem to run (the server's clock against trio's)."""
    late_slack: float


@attrs.define(kw_only=True)
class Fleet:
    """One backend and clock for the fleet scenarios."""

    kind: str
    ttl: float
    """The leader lease's lifetime."""
    slack: float
    """Real-time scheduling noise allowed in a bound (0 on the mock clock)."""
    observe: float
    """How long the election scenario watches a stable fleet."""
    after_failover: float
    """How long the failover scenario watches for a second change of leader."""
    wait_limit: float
    delayed: DelayedPlan
    store: Backend
    """The backend itself, for the test to look at (not through any link)."""
    new_backend: Callable[[], Backend]
    """A backend for one runner (the shared one, or a connection of its own)."""
    group: str
    config: dict[str, Any]
    links: list[Partition] = attrs.Factory(list)

    @property
    def simulated(self) -> bool:
        return self.kind == "memory"

    @property
    def retry_max(self) -> float:
        """A follower's longest retry interval (ttl / 2, +10 % jitter)."""
        return self.ttl / 2 * 1.1

    def runners(self, n: int, **config: Any) -> tuple[list[Partition], list[TaskRunner]]:
        """``n`` runners of the group, each through a fresh link."""
        links = [Partition(self.new_backend()) for _ in range(n)]
        self.links.extend(links)
        runners = [
            TaskRunner(
                TaskRunnerConfig(
                    consumer_group=self.group,
                    host=f"{self.group}-h{len(self.links) - n + i}",
                    **{**self.config, **config},
                ),
                link,
            )
            for i, link in enumerate(links)
        ]
        return links, runners

    async def wait_until(self, predicate: Callable[[], bool]) -> None:
        with trio.fail_after(self.wait_limit):
            while not predicate():  # noqa: ASYNC110
                await trio.sleep(0.005)


@pytest.fixture(params=[pytest.param("memory", marks=pytest.mark.mockclock), "redis"])
def fleet_kind(request: pytest.FixtureRequest) -> str:
    kind: str = request.param
    return kind


@pytest.fixture
def fleet_clock(fleet_kind: str) -> trio.testing.MockClock | None:
    """The mock clock for ``memory`` (pytest-trio runs the test on it); none for redis."""
    return trio.testing.MockClock(autojump_threshold=0) if fleet_kind == "memory" else None


@pytest.fixture
async def fleet(fleet_kind: str, request: pytest.FixtureRequest) -> AsyncIterator[Fleet]:
    if fleet_kind == "memory":
        store = MemoryBackend()
        env = Fleet(
            kind="memory",
            ttl=5.0,
            slack=0.0,
            observe=60.0,
            after_failover=30.0,
            wait_limit=3600.0,
            delayed=DelayedPlan(
                count=1000, spread=60.0, crash_after=20.0, settle=30.0, poll=1.0,
                early=0.0, late_slack=0.1,
            ),
            store=store,
            new_backend=lambda: store,
            group="g",
            config={},
        )  # fmt: skip
        yield env
        return
    url: str = request.getfixturevalue("redis_url")
    queue = f"q{uuid.uuid4().hex[:8]}"
    opened: list[RedisBackend] = []

    def connect() -> Backend:
        opened.append(RedisBackend.from_url(url, queue=queue))
        return opened[-1]

    ttl = 1.0
    env = Fleet(
        kind="redis",
        ttl=ttl,
        slack=0.3,
        observe=2 * ttl,
        after_failover=2 * ttl,
        wait_limit=20.0,
        delayed=DelayedPlan(
            count=300, spread=4.0, crash_after=1.5, settle=1.0, poll=0.5,
            early=0.01, late_slack=0.3,
        ),
        store=connect(),
        new_backend=connect,
        group=f"g{uuid.uuid4().hex[:6]}",
        config={
            "leader_lease_ttl": ttl,
            "block_duration": 0.1,
            "reclaim_delay": 2.0,
            "delayed_poll_interval": 0.5,
            "shutdown_grace": 1.0,
        },
    )  # fmt: skip
    try:
        yield env
    finally:
        for link in env.links:
            link.cut = False
        with trio.move_on_after(5, shield=True):
            for backend in opened:
                await backend.aclose()


async def monitor_single_leader(runners: list[TaskRunner], leaders: list[set[int]]) -> None:
    """Check, every millisecond, that at most one runner leads; record who led, in order."""
    while True:
        now_leading = {i for i, r in enumerate(runners) if r.is_leader}
        assert len(now_leading) <= 1, f"two leaders at t={trio.current_time()}: {now_leading}"
        if now_leading and (not leaders or leaders[-1] != now_leading):
            leaders.append(now_leading)
        await trio.sleep(0.001)


async def test_three_runners_elect_exactly_one_leader(
    fleet: Fleet, fleet_clock: trio.testing.MockClock | None
) -> None:
    _, runners = fleet.runners(3)
    leaders: list[set[int]] = []
    async with trio.open_nursery() as nursery:
        nursery.start_soon(monitor_single_leader, runners, leaders)
        for runner in runners:
            await nursery.start(runner.serve)
        await fleet.wait_until(lambda: any(r.is_leader for r in runners))
        await trio.sleep(fleet.observe)  # renewals keep the same leader
        assert sum(r.is_leader for r in runners) == 1
        nursery.cancel_scope.cancel()
    assert len(leaders) == 1, f"leadership changed hands without a failure: {leaders}"
    assert await fleet.store.lease_owner(fleet.group) is None, "the leader resigns on shutdown"


async def test_crashed_leader_is_replaced_within_ttl_plus_one_retry(
    fleet: Fleet, fleet_clock: trio.testing.MockClock | None
) -> None:
    links, runners = fleet.runners(3)
    leaders: list[set[int]] = []
    async with trio.open_nursery() as outer:
        outer.start_soon(monitor_single_leader, runners, leaders)
        scopes = start_each(outer, runners)
        await fleet.wait_until(lambda: any(r.is_leader for r in runners))
        await trio.sleep(fleet.ttl * 1.4)
        (old,) = (i for i, r in enumerate(runners) if r.is_leader)
        crashed_at = trio.current_time()
        links[old].cut = True  # the process vanishes: no resign, no more renews
        scopes[old].cancel()
        await fleet.wait_until(lambda: any(r.is_leader for i, r in enumerate(runners) if i != old))
        failover = trio.current_time() - crashed_at
        await trio.sleep(fleet.after_failover)
        outer.cancel_scope.cancel()
    assert failover <= fleet.ttl + fleet.retry_max + fleet.slack, failover
    assert failover > fleet.ttl / 2 - fleet.slack, "took over before the lease could expire"
    assert [len(s) for s in leaders] == [1, 1]
    assert leaders[0] != leaders[1]


async def test_graceful_stop_hands_over_faster_than_a_crash(
    fleet: Fleet, fleet_clock: trio.testing.MockClock | None
) -> None:
    _, runners = fleet.runners(3)
    async with trio.open_nursery() as outer:
        scopes = start_each(outer, runners)
        await fleet.wait_until(lambda: any(r.is_leader for r in runners))
        (old,) = (i for i, r in enumerate(runners) if r.is_leader)
        stopped_at = trio.current_time()
        scopes[old].cancel()  # graceful: resigns
        await fleet.wait_until(lambda: any(r.is_leader for i, r in enumerate(runners) if i != old))
        handover = trio.current_time() - stopped_at
        outer.cancel_scope.cancel()
    assert handover <= fleet.retry_max + fleet.slack, handover


async def test_partitioned_leader_steps_down_before_its_lease_expires(
    fleet: Fleet, fleet_clock: trio.testing.MockClock | None
) -> None:
    links, runners = fleet.runners(2)
    leaders: list[set[int]] = []
    async with trio.open_nursery() as outer:
        outer.start_soon(monitor_single_leader, runners, leaders)
        start_each(outer, runners)
        await fleet.wait_until(lambda: any(r.is_leader for r in runners))
        (old,) = (i for i, r in enumerate(runners) if r.is_leader)
        links[old].cut = True
        cut_at = trio.current_time()
        await fleet.wait_until(lambda: not runners[old].is_leader)
        stepped_down = trio.current_time() - cut_at
        if fleet.simulated:
            # Exactly at the step-down, the store still holds the old lease. (In real
            # time the margin is 50 ms, too little to read it reliably.)
            lease = await fleet.store.lease_owner(fleet.group)
            assert lease is not None, "stepped down only after the store expired the lease"
        await fleet.wait_until(lambda: runners[1 - old].is_leader)
        links[old].cut = False
        outer.cancel_scope.cancel()
    assert stepped_down < fleet.ttl, stepped_down


async def test_delayed_tasks_run_exactly_once_on_time_across_a_leader_crash(
    fleet: Fleet, fleet_clock: trio.testing.MockClock | None
) -> None:
    plan = fleet.delayed
    rng = random.Random(7)
    links, runners = fleet.runners(3, delayed_poll_interval=plan.poll)
    runs: Counter[int] = Counter()
    late: list[float] = []
    due: dict[int, float] = {}
    for runner in runners:

        @runner.task(name="job")
        async def job(payload: dict[str, Any]) -> None:
            runs[payload["i"]] += 1
            late.append(trio.current_time() - due[payload["i"]])

    async with trio.open_nursery() as outer:
        scopes = start_each(outer, runners)
        await fleet.wait_until(lambda: any(r.is_leader for r in runners))
        (old,) = (i for i, r in enumerate(runners) if r.is_leader)
        producer = runners[(old + 1) % 3]
        for i in range(plan.count):
            delay = rng.uniform(0, plan.spread)
            due[i] = trio.current_time() + delay
            await producer.dispatch_delayed("job", {"i": i}, delay)
        await trio.sleep(plan.crash_after)
        links[old].cut = True  # crash the leader mid-way
        scopes[old].cancel()
        await fleet.wait_until(lambda: len(runs) == plan.count)
        await trio.sleep(plan.settle)  # nothing runs twice later either
        outer.cancel_scope.cancel()
    assert set(runs.values()) == {1}, "a delayed task ran twice"
    assert min(late) >= -plan.early, "a delayed task ran early"
    failover = fleet.ttl + fleet.retry_max
    assert max(late) <= plan.poll + failover + plan.late_slack, max(late)


async def test_replication_count_follows_instances_joining_and_leaving(
    fleet: Fleet, fleet_clock: trio.testing.MockClock | None
) -> None:
    links, runners = fleet.runners(3)
    probe = runners[0]
    assert await probe.get_number_of_replications() == 0  # not serving yet
    async with trio.open_nursery() as outer:
        await outer.start(probe.serve)
        assert await probe.get_number_of_replications() == 1
        await outer.start(runners[1].serve)
        await outer.start(runners[2].serve)
        assert await probe.get_number_of_replications() == 1, "cached for 10 s"
        assert await probe.get_number_of_replications(refresh=True) == 3
        links[2].cut = True  # a crash leaves its key to expire (15 s): still counted
        assert await probe.get_number_of_replications(refresh=True) == 3
        links[2].cut = False
        outer.cancel_scope.cancel()
    # Graceful stops delete their keys; the "crashed" one's link is back, so it did too.
    assert await probe.get_number_of_replications(refresh=True) == 0
