"""Contract checks of the FlowControl protocol: slots, rate limits, pauses, parking."""

from __future__ import annotations

import json

import trio

from taskrunner._flow.limits import Paused, RateLimit
from taskrunner._wire.results import TaskState
from taskrunner.backends._protocols import Backend
from taskrunner.backends._protocols.flow import LimitedBy, ParkOutcome, SlotHold
from taskrunner.testing._harness import _LATE, _contract_check, _name, _within


@_contract_check
async def check_concurrency_slots(backend: Backend) -> None:
    """At most ``max_concurrency`` holders at once; a holder keeps its slot when
    admitted again; a released or expired slot is free again; ``renew_slots``
    extends leases still held and reports those dropped."""
    group, task = _name("group"), _name("task")
    h1, h2, h3, h4 = (_name(f"h{i}") for i in range(1, 5))

    async def admit(holder: str) -> bool:
        got = await backend.admit(group, task, holder, max_concurrency=2, lease=0.5)
        assert got.admitted or (got.limited_by, got.retry_after) == (LimitedBy.CONCURRENCY, 0.0), (
            f"a run refused a slot says so, with no retry time: {got!r}"
        )
        return got.admitted

    taken = trio.current_time()
    assert [await admit(h) for h in (h1, h2, h3)] == [True, True, False], "two slots"
    assert await admit(h1) is True, "a holder admitted again keeps its slot"
    await backend.release_slots(group, [SlotHold(task=task, holder=h1, lease=0.5)])
    assert await admit(h3) is True, "a released slot is free again"
    lost = await backend.renew_slots(group, [SlotHold(task=task, holder=h2, lease=0.5)])
    assert lost == [], f"h2 holds its slot: {lost!r}"
    _within(taken, 0.5)
    assert await admit(h4) is False, "h2 and h3 hold both slots"
    await trio.sleep(0.6)  # both leases ran out (h3 taken, h2 renewed, over 0.5 s ago)
    assert await admit(h4) is True, "expired leases are dropped"
    assert await admit(h1) is True, "the second slot, free since h2's lease expired"
    gone = [SlotHold(task=task, holder=h, lease=0.5) for h in (h2, h3)]
    assert await backend.renew_slots(group, gone) == gone, "dropped holds are reported lost"
    assert await admit(h2) is False, "a lost hold is not put back by renewing it"


@_contract_check
async def check_rate_limit(backend: Backend) -> None:
    """At most ``limit`` starts in any window of ``per`` seconds; refused runs are
    told to come back when the oldest start leaves the window, each next one
    an interval later; each ``rate_key`` is a limit of its own; a run refused
    by the rate limit takes no concurrency slot."""
    group, task = _name("group"), _name("task")
    rate = RateLimit(3, per=0.6)

    async def admit(holder: str, key: str = "", slots: int | None = None) -> float | None:
        got = await backend.admit(
            group, task, holder, rate=rate, rate_key=key, max_concurrency=slots, lease=5.0
        )
        if got.admitted:
            return None
        assert got.limited_by is LimitedBy.RATE, f"refused by the rate limit: {got!r}"
        return got.retry_after

    started = trio.current_time()
    assert [await admit(_name("h")) for _ in range(3)] == [None, None, None], "three starts"
    asked_first = trio.current_time()
    first = await admit(_name("h"))
    second = await admit(_name("h"))
    between = trio.current_time() - asked_first
    _within(started, 0.6)
    assert first is not None, "the fourth start in the window is refused"
    assert second is not None, "so is the fifth"
    assert 0 < first <= 0.6, f"come back when a start leaves the window: {first!r}"
    # Each wait counts from its own admit call, and the second call came up to
    # ``between`` seconds after the first (0 on the mock clock): the times they are
    # told to come back at are an interval apart.
    gap = (second - first, second - first + between)
    assert gap[0] - 0.05 < rate.interval < gap[1] + 0.05, (
        f"the next refused run comes an interval ({rate.interval:.3f} s) later: "
        f"{first!r}, then {second!r}, asked within {between:.3f} s"
    )
    assert await admit(_name("h"), key="other") is None, "another key has a limit of its own"
    assert await admit(_name("h"), slots=1) is not None, "still full, with a slot free"
    await trio.sleep(0.7)  # the window moved past all three starts
    assert await admit(_name("h"), slots=1) is None, "a new window"
    assert await admit(_name("h"), slots=5) is None, "the refused run took no slot"


@_contract_check
async def check_pause_and_resume(backend: Backend) -> None:
    """Pausing and resuming queues and tasks: each answers whether it changed
    anything, ``paused`` shows the state, and exactly one of queue or task is given."""
    group, queue, task = _name("group"), _name("q"), _name("t")
    assert await backend.paused(group) == Paused(), "nothing is paused in a new group"
    assert await backend.pause(group, queue=queue) is True
    assert await backend.pause(group, queue=queue) is False, "paused already"
    assert await backend.pause(group, task=task) is True
    state = await backend.paused(group)
    assert state == Paused(queues=frozenset({queue}), tasks=frozenset({task})), f"{state!r}"
    assert await backend.paused(_name("other")) == Paused(), "pauses are per group"
    assert await backend.resume(group, queue=queue) is True
    assert await backend.resume(group, queue=queue) is False, "resumed already"
    assert await backend.paused(group) == Paused(tasks=frozenset({task}))
    for wrong in ({}, {"queue": queue, "task": task}):
        for call in (backend.pause, backend.resume):
            try:
                await call(group, **wrong)
            except ValueError:
                continue
            raise AssertionError(f"{call.__name__}({wrong!r}) must raise ValueError")


@_contract_check
async def check_park_and_resume(backend: Backend) -> None:
    """``park`` acks and parks a run only while its task is paused (and its entry
    pending); resuming the task makes every parked run due at once."""
    group, consumer, queue, task = _name("group"), _name("c"), _name("q"), _name("t")
    entry_id, other_id = await backend.add(group, [b"e1", b"e2"], queue=queue)
    await backend.read(group, consumer, 2, 0, queue=queue)
    far = backend.now() + 3600
    member, other = _name("m").encode(), _name("o").encode()
    got = await backend.park(group, entry_id, member, far, task, queue=queue)
    assert got is ParkOutcome.NOT_PAUSED, f"the task is not paused: {got!r}"
    assert (await backend.group_info(group, queue=queue)).pending == 2, "nothing was acked"
    await backend.pause(group, task=task)
    assert await backend.park(group, entry_id, member, far, task, queue=queue) is (
        ParkOutcome.PARKED
    )
    assert await backend.park(group, other_id, other, far, task, queue=queue) is (
        ParkOutcome.PARKED
    )
    assert await backend.park(group, entry_id, b"again", far, task, queue=queue) is (
        ParkOutcome.NOT_PENDING
    ), "an entry parked already is not pending"
    assert (await backend.group_info(group, queue=queue)).pending == 0, "parked entries are acked"
    assert await backend.due_delayed(group, backend.now() + 60, 10) == [], "parked far ahead"
    start = trio.current_time()
    assert await backend.resume(group, task=task) is True
    due = await backend.due_delayed(group, backend.now() + 0.05, 10)
    assert trio.current_time() - start < _LATE
    assert sorted(due) == sorted([member, other]), f"resumed runs are due now: {due!r}"
    assert await backend.resume(group, task=task) is False, "resumed already"


@_contract_check
async def check_a_parked_run_is_found_and_cancelled_by_its_task_id(backend: Backend) -> None:
    """A run parked with its task id is found by it (scheduled, its member) and can be
    cancelled there; resuming its task then brings nothing back."""
    group, consumer, queue, task = _name("group"), _name("c"), _name("q"), _name("t")
    (entry_id,) = await backend.add(group, [b"e1"], queue=queue)
    await backend.read(group, consumer, 1, 0, queue=queue)
    task_id = _name("id")
    member = json.dumps({"id": task_id, "task": task, "time": 0, "payload": 1}).encode()
    await backend.pause(group, task=task)
    far = backend.now() + 3600
    got = await backend.park(group, entry_id, member, far, task, queue=queue, task_id=task_id)
    assert got is ParkOutcome.PARKED, f"{got!r}"
    found = await backend.lookup(group, task_id, queues=[queue])
    assert found is not None, "a parked run must be found by its task id"
    assert (found.member, found.entry_id) == (member, None), f"parked in the set: {found!r}"
    done = await backend.cancel(group, task_id, queues=[queue])
    assert done.state is TaskState.SCHEDULED, f"the parked run is cancelled in the set: {done!r}"
    await backend.resume(group, task=task)
    assert await backend.due_delayed(group, backend.now() + 60, 10) == [], "nothing resumed"
