"""Contract checks of lookup, cancel, dead letters and claim delays on every queue of a
group (issue 24): each queue is a stream of its own, and what the tracking protocol
does on the backend's queue it does on any queue named."""

from __future__ import annotations

import trio

from taskrunner._wire import TaskState
from taskrunner.backends._protocols import Backend
from taskrunner.backends._protocols.queue import DelayedMove
from taskrunner.backends._protocols.tracking import Replay
from taskrunner.testing._harness import _contract_check, _name
from taskrunner.testing._tracking_checks import _message


@_contract_check
async def check_lookup_and_cancel_on_every_queue(backend: Backend) -> None:
    """``lookup`` and ``cancel`` with ``queues=`` find a queued or running entry on any
    of those queues' streams, the first holding it winning; a queue not named is not
    looked in; a queued entry's cancel deletes it from its own queue's stream only."""
    group, consumer = _name("group"), _name("c")
    qa, qb = _name("qa"), _name("qb")
    both = [qa, qb]
    (running,) = await backend.add(group, [_message()], queue=qa)
    # Stream ids are unique per stream only: a later millisecond keeps these two apart.
    await trio.sleep(0.01)
    (queued,) = await backend.add(group, [_message(keep_result=30.0)], queue=qb)
    assert queued != running, f"ids of two adds 10 ms apart: {running!r}, {queued!r}"
    await backend.read(group, consumer, 10, 0, queue=qa)
    found = await backend.lookup(group, queued, queues=both)
    assert found is not None, f"a queued entry of {qb!r} must be found looking in {both!r}"
    assert (found.entry_id, found.pending) == (queued, False), f"queued: {found!r}"
    assert await backend.lookup(group, queued, queues=[qa]) is None, (
        f"an entry of {qb!r} must not be found in {qa!r} alone"
    )
    assert await backend.lookup(group, queued) is None, "queues=None is the backend's own queue"
    on_a = await backend.lookup(group, running, queues=[qb, qa])
    assert on_a is not None, f"a running entry of {qa!r} must be found"
    assert on_a.pending, f"a running entry of {qa!r}: {on_a!r}"
    done = await backend.cancel(group, queued, queues=[qa, qb])
    assert done.state is TaskState.QUEUED, f"cancel of a queued entry of {qb!r}: {done!r}"
    assert await backend.length(group, queue=qb) == 0, "its entry is deleted from its stream"
    assert await backend.length(group, queue=qa) == 1, "the other queue's stream is untouched"
    assert await backend.read(group, consumer, 10, 0, queue=qb) == [], "no fetcher reads it"
    kept = await backend.lookup(group, queued, queues=both)
    assert kept is not None, "a task that keeps results is recorded cancelled"
    assert kept.result is not None, f"a task that keeps results is recorded: {kept!r}"
    stopping = await backend.cancel(group, running, queues=both)
    assert stopping.state is TaskState.RUNNING, f"cancel of a running entry: {stopping!r}"
    assert await backend.cancel_requested(group, [running]) == [running], "asked to stop"


@_contract_check
async def check_lookup_follows_a_moved_task_to_its_queue(backend: Backend) -> None:
    """A delayed member moved into a queue's stream is looked up and cancelled by its
    task id there (the entry index does not say which queue: every one named is
    looked in)."""
    group = _name("group")
    qa, qb = _name("qa"), _name("qb")
    task_id = _name("task")
    member = _message(id=task_id)
    await backend.add_delayed(group, member, backend.now() - 1, task_id=task_id)
    scheduled = await backend.lookup(group, task_id, queues=[qa, qb])
    assert scheduled is not None, "a scheduled task is found"
    assert scheduled.member is not None, f"scheduled: {scheduled!r}"
    moved = await backend.move_delayed(
        group, [DelayedMove(member=member, message=member, queue=qb, task_id=task_id)]
    )
    assert moved == 1, "the member was due"
    found = await backend.lookup(group, task_id, queues=[qa, qb])
    assert found is not None, f"a task moved to {qb!r} is found"
    assert found.entry_id is not None, f"moved to {qb!r}: {found!r}"
    done = await backend.cancel(group, task_id, queues=[qa, qb])
    assert done.state is TaskState.QUEUED, f"cancel of the moved task: {done!r}"
    assert await backend.length(group, queue=qb) == 0, "deleted from its queue's stream"


@_contract_check
async def check_dead_letters_of_every_queue(backend: Backend) -> None:
    """``find_dead_letters``, ``replay_dead_letters`` and ``purge_dead_letters`` with
    ``queue=`` act on that queue's dead-letter stream and stream only: a replay
    lands in the dead letter's own queue."""
    group, consumer = _name("group"), _name("c")
    qa, qb = _name("qa"), _name("qb")
    dead_a = await backend.dead_letter(group, "1700000000000-0", _message(), "boom", queue=qa)
    await trio.sleep(0.01)  # dead-letter ids are unique per stream only
    dead_b = await backend.dead_letter(group, "1700000000000-1", _message(), "bang", queue=qb)
    assert dead_a != dead_b, f"ids of two dead letters 10 ms apart: {dead_a!r}, {dead_b!r}"
    assert await backend.find_dead_letters(group, [dead_b], queue=qa) == [], "not in qa"
    (found,) = await backend.find_dead_letters(group, [dead_b], queue=qb)
    assert found.error == "bang", f"found in {qb!r}: {found!r}"
    replay = Replay(dead_id=dead_b, task_id="1700000000000-1", message=_message())
    (done,) = await backend.replay_dead_letters(group, [replay], queue=qb)
    assert done.entry_id is not None, f"replayed from {qb!r}: {done!r}"
    got = await backend.read(group, consumer, 10, 0, queue=qb)
    assert [e.id for e in got] == [done.entry_id], f"the replay lands in {qb!r}: {got!r}"
    assert await backend.length(group, queue=qa) == 0, f"nothing lands in {qa!r}"
    assert await backend.dead_letters(group, queue=qb) == [], "the replayed letter is gone"
    assert await backend.purge_dead_letters(group, queue=qb) == 0, f"{qb!r} has none left"
    assert await backend.purge_dead_letters(group, queue=qa) == 1, f"{qa!r} had one"
    assert await backend.dead_letters(group, queue=qa) == [], "purged"


@_contract_check
async def check_claim_delays_of_every_queue(backend: Backend) -> None:
    """Entries read from any queue and acknowledged there feed that queue's own
    claim-delay ring: ``get_metrics(queue=)`` of a queue that is not the backend's
    reports the delay (not 0)."""
    group, consumer = _name("group"), _name("c")
    qa = _name("qa")
    await backend.add(group, [b"a1"], queue=qa)
    await trio.sleep(0.2)
    got = await backend.read(group, consumer, 10, 0, queue=qa)
    await backend.ack(group, [e.id for e in got], queue=qa)
    metrics = await backend.get_metrics(group, queue=qa)
    assert metrics.message_claim_delay_max >= 0.15e9, (
        f"the claim delay of {qa!r} (0.2 s) must be in its ring: {metrics!r}"
    )
