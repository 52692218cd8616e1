"""The delayed-task scheduler in a serving runner: on time, on a follower too, past
held locks and bad members, and retried when a local pass fails (MemoryBackend,
MockClock)."""

from __future__ import annotations

import json

import attrs
import pytest
import trio
import trio.testing
from _fleet import Partition, make_runner, serving, wait_until

from taskrunner.backends.memory import MemoryBackend
from taskrunner.errors import BackendError


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


async def test_a_delayed_member_whose_key_cannot_be_computed_is_dead_lettered(
    autojump_clock: trio.testing.MockClock,
) -> None:

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

    async def due_delayed(
        self, group: str, until: float, limit: int, offset: int = 0
    ) -> list[bytes]:
        if self.failures:
            self.failures -= 1
            raise BackendError("due_delayed failed")
        return await self.backend.due_delayed(group, until, limit, offset)


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
