"""A sharded group's periodic ticks land in its shards (issue 27), on one MemoryBackend on
trio's MockClock: each tick is queued in one shard (routed by the payload's shard key,
else by schedule and tick), under a sharded id that ``get_task``, ``cancel`` and a
result find, from inside the run and out; ``overlap=False`` holds (the outcome clears
the in-flight mark, which holds the sharded id); and a leader that dies between the
add in the shard and the fenced record leaves the tick to the next leader, which runs
it once, never twice. The same on a real server: tests/redis/test_shard_ticks_redis.py."""

from __future__ import annotations

import collections
import itertools
from typing import Any

import pytest
import trio
import trio.testing
from _fleet import make_runner, serving, start_each, wait_until

from taskrunner import TaskContext, TaskRunner, TaskState, _shards
from taskrunner._dispatch.routing import stable_shard
from taskrunner._schedules.shard_fires import fires_to_add, tick_shard
from taskrunner.backends import Backend, ScheduleState, TickFire
from taskrunner.backends.memory import MemoryBackend
from taskrunner.testing import PartitionedBackend

GROUP = "shop"


def sharded(backend: Backend, shards: int, **config: Any) -> TaskRunner:
    return make_runner(backend, consumer_group=GROUP, shards=shards, **config)


def shard_of(task_id: str, shards: int) -> int:
    found = _shards.parse_task_id(task_id, shards)
    assert found is not None, f"{task_id!r} names no shard of {shards}"
    return found[0]


def fire(schedule: str, tick: float, *, exclusive: bool = False) -> TickFire:
    return TickFire(
        schedule=schedule, tick=tick, message=b"{}", exclusive=exclusive, in_flight_ttl=60.0
    )


def test_tick_shard_is_the_key_s_else_schedule_and_tick_s() -> None:
    assert tick_shard(16, "s", 60.0, "7") == stable_shard("7", 16)
    assert tick_shard(16, "s", 60.0, None) == stable_shard("s@60.0", 16)
    spread = {tick_shard(16, "s", 60.0 * n, None) for n in range(200)}
    assert len(spread) == 16, "a schedule's ticks spread over the shards"


@pytest.mark.parametrize(
    ("fires", "states", "added"),
    [
        pytest.param([fire("s", 1), fire("s", 2)], {}, [True, True], id="plain"),
        pytest.param(
            [fire("s", 1, exclusive=True), fire("s", 2, exclusive=True)],
            {},
            [True, False],
            id="exclusive-the-first-is-in-flight",
        ),
        pytest.param(
            [fire("s", 1, exclusive=True), fire("t", 1, exclusive=True)],
            {},
            [True, True],
            id="exclusive-per-schedule",
        ),
        pytest.param(
            [fire("s", 3, exclusive=True)],
            {"s": ScheduleState(tick=2, running="1.1-0", running_until=1000.0)},
            [False],
            id="exclusive-in-flight",
        ),
        pytest.param(
            [fire("s", 3, exclusive=True)],
            {"s": ScheduleState(tick=2, running="1.1-0", running_until=50.0)},
            [True],
            id="exclusive-lapsed",
        ),
        pytest.param([fire("s", 2)], {"s": ScheduleState(tick=2)}, [False], id="stale"),
    ],
)
def test_fires_to_add(
    fires: list[TickFire], states: dict[str, ScheduleState], added: list[bool]
) -> None:
    assert fires_to_add(fires, states, 100.0) == added


@pytest.mark.parametrize("shards", [4, 16])
async def test_ticks_land_in_the_shards_and_are_found_by_their_ids(
    autojump_clock: trio.testing.MockClock, shards: int
) -> None:
    backend = MemoryBackend()
    runner = sharded(backend, shards)
    seen: dict[str, TaskState] = {}

    @runner.task(name="report", keep_result=3600.0)
    async def report(payload: None, ctx: TaskContext) -> float:
        info = await runner.get_task(ctx.task_id)  # from inside: its own shard
        assert info is not None, ctx.task_id
        seen[ctx.task_id] = info.state
        assert ctx.tick is not None
        return ctx.tick

    runner.add_schedule("every-minute", task="report", every=60)
    async with serving(runner):
        await trio.sleep(60 * 40 + 30)
    assert len(seen) >= 39
    assert set(seen.values()) == {TaskState.RUNNING}
    used = collections.Counter(shard_of(task_id, shards) for task_id in seen)
    assert len(used) >= min(shards, 8), f"the ticks spread over the shards: {used}"
    for task_id in seen:  # from outside: found, its result kept
        info = await runner.get_task(task_id)
        assert info is not None, task_id
        assert info.state is TaskState.SUCCEEDED
    # Nothing was queued in the group's own stream.
    assert await backend.length(GROUP) == 0
    state = (await backend.read_schedules(GROUP)).states["every-minute"]
    assert state.message_id in seen, f"the fire's id is the sharded one: {state!r}"


async def test_a_ticks_shard_follows_the_payloads_shard_key(
    autojump_clock: trio.testing.MockClock,
) -> None:
    shards = 16
    backend = MemoryBackend()
    runner = sharded(backend, shards)
    ids: list[str] = []

    @runner.task(name="charge", shard_key=lambda p: p["customer"])
    async def charge(payload: dict[str, int], ctx: TaskContext) -> None:
        ids.append(ctx.task_id)

    runner.add_schedule("nightly", task="charge", every=60, payload={"customer": 7})
    async with serving(runner):
        dispatched = await runner.dispatch("charge", {"customer": 7})
        await trio.sleep(60 * 10 + 30)
    assert dispatched.id in ids
    assert len(ids) >= 10
    assert {shard_of(i, shards) for i in ids} == {shard_of(dispatched.id, shards)}


async def test_a_tick_run_is_cancelled_by_its_id(autojump_clock: trio.testing.MockClock) -> None:
    backend = MemoryBackend()
    runner = sharded(backend, 4)
    started: list[str] = []
    stopped: list[str] = []

    @runner.task(name="slow")
    async def slow(payload: None, ctx: TaskContext) -> None:
        started.append(ctx.task_id)
        try:
            await trio.sleep(3600)
        except trio.Cancelled:
            stopped.append(ctx.task_id)
            raise

    runner.add_schedule("minutely", task="slow", every=60)
    async with serving(runner):
        await wait_until(lambda: bool(started), limit=120)
        assert await runner.cancel(started[0])
        await wait_until(lambda: bool(stopped), limit=60)
    assert stopped == started[:1]


async def test_overlap_false_holds_and_each_run_ends_its_mark(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """The in-flight mark holds the run's sharded id and its outcome names it so: were
    they apart, the mark would hold for its ``in_flight_ttl`` (a day) and no second run
    would start."""
    backend = MemoryBackend()
    runner = sharded(backend, 4)
    runs: list[tuple[float, float]] = []

    @runner.task(name="long")
    async def long(payload: None) -> None:
        start = trio.current_time()
        await trio.sleep(150)
        runs.append((start, trio.current_time()))

    runner.add_schedule("minutely", task="long", every=60, overlap=False, in_flight_ttl=86400)
    async with serving(runner):
        await trio.sleep(60 * 20)
    assert len(runs) >= 5, f"each run's outcome ended its mark: {runs}"
    for (_, end), (start, _) in itertools.pairwise(runs):
        assert start >= end, f"two runs overlapped: {runs}"


class DiesAfterTheAdd(PartitionedBackend):
    """A runner's link that is cut right after its first add in a shard: the leader
    dies between the two steps of a fire."""

    def __init__(self, backend: Backend, *, die: bool) -> None:
        super().__init__(backend)
        self.die = die
        self.adds: list[tuple[str, float, str | None]] = []

    async def add_tick(self, group: str, fire: TickFire) -> str | None:
        got = await super().add_tick(group, fire)
        self.adds.append((group, fire.tick, got))
        if self.die:
            self.cut = True
        return got


@pytest.mark.parametrize("shards", [4, 16])
async def test_a_leader_dying_between_the_steps_leaves_the_tick_run_once(
    autojump_clock: trio.testing.MockClock, shards: int
) -> None:
    backend = MemoryBackend()
    first = DiesAfterTheAdd(backend, die=True)
    second = DiesAfterTheAdd(backend, die=False)
    # The add may wake the dying leader's own blocked read in that shard, whose reply
    # the cut loses: the entry is then pending for a dead consumer, and reclaimed. That
    # second delivery counts as an attempt (as for any task a crash cut off), so the
    # task has retries: with too few, the delivery is taken for a poison message and
    # dead-lettered unrun (seen with max_retry=1).
    runners = [sharded(link, shards, reclaim_delay=30.0) for link in (first, second)]
    ran: list[tuple[float, str]] = []
    for runner in runners:

        @runner.task(name="report", max_retry=3)
        async def report(payload: None, ctx: TaskContext) -> None:
            assert ctx.tick is not None
            ran.append((ctx.tick, ctx.task_id))

        runner.add_schedule("every-minute", task="report", every=60)

    async with trio.open_nursery() as nursery:
        (dies,) = start_each(nursery, runners[:1])
        await wait_until(lambda: runners[0].is_leader)
        start_each(nursery, runners[1:])
        await wait_until(lambda: bool(first.adds))  # added in its shard, then cut
        dies.cancel()  # the process dies: no record, no resign
        await trio.sleep(60 * 5 + 30)
        nursery.cancel_scope.cancel()

    (shard, tick, inner) = first.adds[0]
    assert inner is not None
    again = [add for add in second.adds if add[1] == tick]
    assert again == [(shard, tick, inner)], "the next leader re-fired it and got its id back"
    counts = collections.Counter(t for t, _ in ran)
    assert counts[tick] == 1, f"the tick the leader died in ran {counts[tick]} times: {ran}"
    assert all(n == 1 for n in counts.values()), f"a tick ran twice: {counts}"
    assert len(counts) >= 5
    (task_id,) = [i for t, i in ran if t == tick]
    assert task_id.split(".", 1)[1] == inner
    assert _shards.shard_tag(GROUP, shard_of(task_id, shards), shards) == shard
