"""Fleet coordination simulated deterministically: several runners, one
MemoryBackend, trio's MockClock."""

from __future__ import annotations

import random
from collections import Counter
from typing import Any

import attrs
import pytest
import trio
import trio.testing
from _fleet import Partition, make_runner, serving, start_each, wait_until

from taskrunner import TaskRunner, _keys
from taskrunner._serve.cleanup import consumers_to_delete
from taskrunner._serve.leadership import lease_intervals
from taskrunner._serve.scheduler import sleep_time
from taskrunner.backends import ConsumerInfo, GroupInfo
from taskrunner.backends.memory import MemoryBackend
from taskrunner.errors import BackendError

TTL = 5.0
RETRY_MAX = TTL / 2 * 1.1  # a follower's retry interval, with jitter


async def monitor_single_leader(runners: list[TaskRunner], leaders: list[set[int]]) -> None:
    """Check, every millisecond of simulated time, that at most one runner leads."""
    while True:
        now_leading = {i for i, r in enumerate(runners) if r.is_leader}
        assert len(now_leading) <= 1, f"two leaders at t={trio.current_time()}: {now_leading}"
        if now_leading and (not leaders or leaders[-1] != now_leading):
            leaders.append(now_leading)
        await trio.sleep(0.001)


async def test_three_runners_elect_exactly_one_leader(
    autojump_clock: trio.testing.MockClock,
) -> None:
    backend = MemoryBackend()
    runners = [make_runner(backend) for _ in range(3)]
    leaders: list[set[int]] = []
    async with serving(*runners) as nursery:
        nursery.start_soon(monitor_single_leader, runners, leaders)
        await trio.sleep(60)
        assert sum(r.is_leader for r in runners) == 1
    assert len(leaders) == 1, f"leadership changed hands without a failure: {leaders}"
    assert await backend.lease_owner("g") is None, "the leader resigns on shutdown"


async def test_crashed_leader_is_replaced_within_ttl_plus_one_retry(
    autojump_clock: trio.testing.MockClock,
) -> None:
    backend = MemoryBackend()
    links = [Partition(backend) for _ in range(3)]
    runners = [make_runner(link) for link in links]  # type: ignore[arg-type]
    leaders: list[set[int]] = []
    async with trio.open_nursery() as outer:
        outer.start_soon(monitor_single_leader, runners, leaders)
        scopes = start_each(outer, runners)
        await wait_until(lambda: any(r.is_leader for r in runners))
        await trio.sleep(7)
        (old,) = (i for i, r in enumerate(runners) if r.is_leader)
        crashed_at = trio.current_time()
        links[old].cut = True  # the process vanishes: no resign, no more renews
        scopes[old].cancel()
        await wait_until(lambda: any(r.is_leader for i, r in enumerate(runners) if i != old))
        failover = trio.current_time() - crashed_at
        await trio.sleep(30)
        outer.cancel_scope.cancel()
    assert failover <= TTL + RETRY_MAX, failover
    assert failover > TTL / 2, "took over before the crashed lease could have expired"
    assert [len(s) for s in leaders] == [1, 1]
    assert leaders[0] != leaders[1]


async def test_graceful_stop_hands_over_faster_than_a_crash(
    autojump_clock: trio.testing.MockClock,
) -> None:
    backend = MemoryBackend()
    runners = [make_runner(backend) for _ in range(3)]
    async with trio.open_nursery() as outer:
        scopes = start_each(outer, runners)
        await wait_until(lambda: any(r.is_leader for r in runners))
        (old,) = (i for i, r in enumerate(runners) if r.is_leader)
        stopped_at = trio.current_time()
        scopes[old].cancel()
        await wait_until(lambda: any(r.is_leader for i, r in enumerate(runners) if i != old))
        handover = trio.current_time() - stopped_at
        outer.cancel_scope.cancel()
    assert handover <= RETRY_MAX, handover


async def test_partitioned_leader_steps_down_before_its_lease_expires(
    autojump_clock: trio.testing.MockClock,
) -> None:
    backend = MemoryBackend()
    links = [Partition(backend) for _ in range(2)]
    runners = [make_runner(link) for link in links]  # type: ignore[arg-type]
    async with serving(*runners):
        await wait_until(lambda: any(r.is_leader for r in runners))
        (old,) = (i for i, r in enumerate(runners) if r.is_leader)
        links[old].cut = True
        cut_at = trio.current_time()
        await wait_until(lambda: not runners[old].is_leader)
        stepped_down = trio.current_time() - cut_at
        lease_left = backend.ttl(_keys.leader("g"))
        await wait_until(lambda: runners[1 - old].is_leader)
        links[old].cut = False
    assert stepped_down < TTL
    assert lease_left is not None, "stepped down only after the store expired the lease"


async def test_delayed_tasks_run_exactly_once_on_time_across_a_leader_crash(
    autojump_clock: trio.testing.MockClock,
) -> None:
    rng = random.Random(7)
    backend = MemoryBackend()
    links = [Partition(backend) for _ in range(3)]
    runners = [
        make_runner(link, delayed_poll_interval=1.0)  # type: ignore[arg-type]
        for link in links
    ]
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
        await wait_until(lambda: any(r.is_leader for r in runners))
        (old,) = (i for i, r in enumerate(runners) if r.is_leader)
        producer = runners[(old + 1) % 3]
        for i in range(1000):
            delay = rng.uniform(0, 60)
            due[i] = trio.current_time() + delay
            await producer.dispatch_delayed("job", {"i": i}, delay)
        await trio.sleep(20)
        links[old].cut = True  # crash the leader mid-way
        scopes[old].cancel()
        await wait_until(lambda: len(runs) == 1000)
        await trio.sleep(30)
        outer.cancel_scope.cancel()
    assert set(runs.values()) == {1}, "a delayed task ran twice"
    assert min(late) >= 0, "a delayed task ran early"
    failover = TTL + RETRY_MAX
    assert max(late) <= 1.0 + failover + 0.1, max(late)


async def test_short_delay_fires_promptly_not_at_the_next_poll(
    autojump_clock: trio.testing.MockClock,
) -> None:
    backend = MemoryBackend()
    runner = make_runner(backend)  # delayed_poll_interval 5 s
    ran: list[float] = []

    @runner.task()
    async def ping(payload: None) -> None:
        ran.append(trio.current_time())

    async with serving(runner):
        await wait_until(lambda: runner.is_leader)
        await trio.sleep(1)
        sent = trio.current_time()
        await runner.dispatch_delayed("ping", None, 0.2)
        await wait_until(lambda: bool(ran))
    assert ran[0] - sent == pytest.approx(0.2, abs=0.05)


async def test_unique_lock_kept_across_a_retry_and_released_on_final_failure(
    autojump_clock: trio.testing.MockClock,
) -> None:
    from taskrunner import TaskAlreadyDispatched

    backend = MemoryBackend()
    runner = make_runner(backend, reclaim_delay=20)
    attempts = 0

    @runner.task(max_retry=2, reservation_timeout=5, unique=True, unique_for=300)
    async def once(payload: None) -> None:
        nonlocal attempts
        attempts += 1
        raise RuntimeError("fails")

    await runner.dispatch("once")
    async with serving(runner):
        await wait_until(lambda: attempts == 1)
        with pytest.raises(TaskAlreadyDispatched):
            await runner.dispatch("once")  # held across the retry
        await wait_until(lambda: runner.statistics().acked == 1)  # dead-lettered after 2
        await trio.sleep(0.1)
        assert attempts == 2
        await runner.dispatch("once")  # released by the final failure
    assert len(await backend.dead_letters("g")) == 1


async def test_unique_lock_expires_if_its_worker_dies(
    autojump_clock: trio.testing.MockClock,
) -> None:
    from taskrunner import TaskAlreadyDispatched

    backend = MemoryBackend()
    runner = make_runner(backend, shutdown_grace=0)

    @runner.task(unique=True, unique_for=60)
    async def hang(payload: None) -> None:
        await trio.sleep_forever()

    await runner.dispatch("hang")
    async with serving(runner):
        await wait_until(lambda: runner.statistics().running == 1)
    dispatched_at = trio.current_time()
    with pytest.raises(TaskAlreadyDispatched):
        await runner.dispatch("hang")
    await trio.sleep(60 - (trio.current_time() - dispatched_at) + 0.01)
    await runner.dispatch("hang")  # the dead worker's lock expired


async def test_replication_count_follows_instances_joining_and_leaving(
    autojump_clock: trio.testing.MockClock,
) -> None:
    backend = MemoryBackend()
    links = [Partition(backend) for _ in range(3)]
    runners = [make_runner(link) for link in links]  # type: ignore[arg-type]
    assert await runners[0].get_number_of_replications() == 0  # not serving yet
    async with trio.open_nursery() as outer:
        await outer.start(runners[0].serve)
        assert await runners[0].get_number_of_replications() == 1
        await outer.start(runners[1].serve)
        await outer.start(runners[2].serve)
        assert await runners[0].get_number_of_replications() == 1  # cached for 10 s
        await trio.sleep(10)
        assert await runners[0].get_number_of_replications() == 3
        links[2].cut = True  # a crash: its key is not deleted, it expires in 15 s
        await trio.sleep(10)
        assert await runners[0].get_number_of_replications() == 3
        await trio.sleep(10)
        assert await runners[0].get_number_of_replications() == 2
        outer.cancel_scope.cancel()


async def test_idle_consumers_without_pending_are_cleaned_up(
    autojump_clock: trio.testing.MockClock,
) -> None:
    backend = MemoryBackend()
    gone = make_runner(backend, host="gone", num_fetchers=2)
    async with serving(gone):
        await trio.sleep(1)
    runner = make_runner(backend, host="live")
    async with serving(runner):
        await trio.sleep(300)
        names = {c.name for c in (await backend.group_info("g")).consumers}
        assert {"g_gone_1", "g_gone_2"} <= names
        await trio.sleep(400)
        names = {c.name for c in (await backend.group_info("g")).consumers}
    assert names == {"g_live_1"}


def test_cleanup_keeps_consumers_with_pending_entries() -> None:
    info = GroupInfo(
        name="g",
        pending=1,
        lag=0,
        consumers=(
            ConsumerInfo(name="a", pending=0, idle=601),
            ConsumerInfo(name="b", pending=1, idle=9000),
            ConsumerInfo(name="c", pending=0, idle=600),
        ),
    )
    assert consumers_to_delete(info) == ["a"]


@pytest.mark.parametrize(
    ("now", "next_at", "held", "expected"),
    [
        (0, None, False, 5),
        (0, 0.2, False, 0.2),
        (10, 9, False, 0),  # due and not held: new since the pass, go again
        (10, 9, True, 1.0),  # due but its lock is held: look again later, no spinning
        (10, 10.5, True, 0.5),
        (0, 30, False, 5),
    ],
)
def test_scheduler_sleep_time(
    now: float, next_at: float | None, held: bool, expected: float
) -> None:
    assert sleep_time(now, next_at, 5, held=held) == expected


def test_lease_intervals_are_about_half_the_ttl() -> None:
    rng = random.Random(1)
    for _ in range(100):
        renew, retry = lease_intervals(5, rng)
        assert 2.25 <= renew <= 2.5
        assert 2.25 <= retry <= 2.75


async def test_schedule_for_and_dispatch_delayed_forms_and_errors(
    autojump_clock: trio.testing.MockClock,
) -> None:
    import math
    import time
    from datetime import UTC, datetime, timedelta

    from taskrunner import InvalidTaskPayload, TaskNotFound

    backend = MemoryBackend()
    runner = make_runner(backend)
    ran: dict[str, float] = {}

    @runner.task()
    async def mark(payload: str) -> None:
        ran[payload] = trio.current_time()

    start = trio.current_time()
    await runner.schedule_for("mark", "aware", datetime.now(UTC) + timedelta(seconds=30))
    await runner.schedule_for("mark", "unix", time.time() + 20)
    await runner.dispatch_delayed("mark", "timedelta", timedelta(seconds=10))
    await runner.dispatch_delayed("mark", "zero", 0)
    for bad in (-1, math.inf, math.nan, True, "5"):
        with pytest.raises(ValueError, match=r"delay must be"):
            await runner.dispatch_delayed("mark", "x", bad)  # type: ignore[arg-type]
    for when in (datetime.now() + timedelta(seconds=5), math.nan, True):
        with pytest.raises(ValueError, match=r"when must be"):
            await runner.schedule_for("mark", "x", when)  # type: ignore[arg-type]
    with pytest.raises(TaskNotFound):
        await runner.dispatch_delayed("nope", None, 1)
    with pytest.raises(InvalidTaskPayload):
        await runner.dispatch_delayed("mark", {1, 2}, 1)
    assert len(await backend.due_delayed("g", math.inf, 100)) == 4

    async with serving(runner):
        await wait_until(lambda: len(ran) == 4)
    offsets = {k: v - start for k, v in ran.items()}
    assert offsets["zero"] == pytest.approx(0, abs=0.1)
    assert offsets["timedelta"] == pytest.approx(10, abs=0.1)
    # Wall-clock times map onto the backend's clock (trio's here): real time passes
    # while the test runs, so allow a second.
    assert offsets["unix"] == pytest.approx(20, abs=1)
    assert offsets["aware"] == pytest.approx(30, abs=1)


async def test_a_held_unique_lock_neither_spins_the_scheduler_nor_blocks_others(
    autojump_clock: trio.testing.MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    from taskrunner._serve import scheduler

    monkeypatch.setattr(scheduler, "BATCH", 2)
    backend = MemoryBackend()
    runner = make_runner(backend)
    release = trio.Event()
    ran: list[str] = []

    @runner.task(unique=True, unique_for=600, unique_key=lambda p: p)
    async def sync(payload: str) -> None:
        ran.append(payload)
        await release.wait()

    @runner.task()
    async def plain(payload: str) -> None:
        ran.append(payload)

    calls = 0
    due_delayed = backend.due_delayed

    async def counting(*args: object, **kwargs: object) -> list[bytes]:
        nonlocal calls
        calls += 1
        return await due_delayed(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(backend, "due_delayed", counting)
    await runner.dispatch("sync", "a")
    await runner.dispatch("sync", "b")
    async with serving(runner):
        await wait_until(lambda: sorted(ran) == ["a", "b"])  # both locks now held
        await runner.dispatch_delayed("sync", "a", 0.1)  # held: stays in the set
        await runner.dispatch_delayed("sync", "b", 0.1)
        await runner.dispatch_delayed("plain", "p", 0.2)  # behind two held members
        await wait_until(lambda: "p" in ran)
        calls = 0
        await trio.sleep(10)
        # One pass a second (HELD_RECHECK), each reading two pages of two: not a spin.
        assert calls <= 2 * 11, f"the scheduler read the due range {calls} times in 10 s"
        assert len(await backend.due_delayed("g", backend.now(), 10)) == 2
        release.set()
        await wait_until(lambda: ran.count("a") == 2 and ran.count("b") == 2)


@attrs.frozen
class Account:
    user: str


async def test_unique_key_sees_the_typed_payload_for_delayed_tasks_too(
    autojump_clock: trio.testing.MockClock,
) -> None:
    backend = MemoryBackend()
    runner = make_runner(backend)
    seen: list[Account] = []

    @runner.task(unique=True, unique_for=60, unique_key=lambda p: f"user-{p.user}")
    async def sync(payload: Account) -> None:
        seen.append(payload)

    await runner.dispatch_delayed("sync", Account("ann"), 1.0)
    async with serving(runner):
        await wait_until(lambda: seen == [Account("ann")])
        await wait_until(lambda: runner.statistics().acked == 1)
    assert await backend.dead_letters("g") == []


async def test_a_unique_key_that_is_not_a_string_is_refused_at_dispatch(
    autojump_clock: trio.testing.MockClock,
) -> None:
    from taskrunner import InvalidTaskPayload

    backend = MemoryBackend()
    runner = make_runner(backend)

    @runner.task(unique=True, unique_for=60, unique_key=lambda p: p["id"])
    async def job(payload: dict[str, int]) -> None:
        pass

    with pytest.raises(InvalidTaskPayload, match="unique_key must return a str or None, got 7"):
        await runner.dispatch("job", {"id": 7})
    with pytest.raises(InvalidTaskPayload, match="unique_key raised KeyError"):
        await runner.dispatch_delayed("job", {}, 1)
    assert backend.keys() == []
    assert await backend.length("g") == 0
    assert await backend.next_delayed_at("g") is None


async def test_a_delayed_member_whose_key_cannot_be_computed_is_dead_lettered(
    autojump_clock: trio.testing.MockClock,
) -> None:
    import json

    backend = MemoryBackend()
    runner = make_runner(backend)

    @runner.task(unique=True, unique_for=60, unique_key=lambda p: p["user"])
    async def job(payload: dict[str, str]) -> None:
        pass

    @runner.task()
    async def fine(payload: None) -> None:
        pass

    # As the original library writes it: no unique_key field, and this payload has no
    # "user", so the key function raises.
    member = json.dumps({"id": "x", "task": "job", "time": 0.5, "payload": {}}).encode()
    await backend.add_delayed("g", member, 0.5)
    async with serving(runner):
        await wait_until(lambda: runner.statistics().dead_lettered == 1)
        await runner.dispatch("fine")  # the leader's scheduler did not crash
        await wait_until(lambda: runner.statistics().completed == 1)
    (dead,) = await backend.dead_letters("g")
    assert dead.payload == member


async def test_a_short_delay_dispatched_on_a_follower_fires_on_time(
    autojump_clock: trio.testing.MockClock,
) -> None:
    backend = MemoryBackend()
    runners = [make_runner(backend) for _ in range(3)]  # delayed_poll_interval 5 s
    ran: list[float] = []
    for runner in runners:

        @runner.task(name="ping")
        async def ping(payload: None) -> None:
            ran.append(trio.current_time())

    async with serving(*runners):
        await wait_until(lambda: any(r.is_leader for r in runners))
        await trio.sleep(1.3)  # the leader's scheduler is asleep until its next poll
        follower = next(r for r in runners if not r.is_leader)
        sent = trio.current_time()
        await follower.dispatch_delayed("ping", None, 0.2)
        await wait_until(lambda: bool(ran))
        await trio.sleep(10)
    assert ran[0] - sent == pytest.approx(0.2, abs=0.05)
    assert len(ran) == 1, "moved twice"


class _FailingDue(Partition):
    """A link on which the next ``failures`` ``due_delayed`` calls fail."""

    failures = 0

    async def due_delayed(self, *args: Any, **kwargs: Any) -> list[bytes]:
        if self.failures:
            self.failures -= 1
            raise BackendError("due_delayed failed")
        return await self._backend.due_delayed(*args, **kwargs)


async def test_a_failed_local_pass_is_retried_not_left_to_the_leaders_poll(
    autojump_clock: trio.testing.MockClock,
) -> None:
    backend = MemoryBackend()
    leader = make_runner(backend)  # delayed_poll_interval 5 s
    link = _FailingDue(backend)
    follower = make_runner(link)
    ran: list[float] = []
    for runner in (leader, follower):

        @runner.task(name="ping")
        async def ping(payload: None) -> None:
            ran.append(trio.current_time())

    async with serving(leader):
        await wait_until(lambda: leader.is_leader)
        async with serving(follower):
            await trio.sleep(1.3)  # the leader's scheduler is asleep until its next poll
            sent = trio.current_time()
            await follower.dispatch_delayed("ping", None, 0.2)
            link.failures = 2  # the follower's local passes fail twice
            await wait_until(lambda: bool(ran))
    assert link.failures == 0, "the local pass never ran"
    assert ran[0] - sent < 0.2 + 0.5, "fired at the leader's poll, not by a retried local pass"
