"""Contract checks of the Tracking protocol: results and their waiters, lookup by task
id, cancellation in every state, dead-letter replay and purge."""

from __future__ import annotations

import json
import uuid

import trio

from taskrunner import _keys, _wire
from taskrunner._wire import TaskState
from taskrunner.backends._protocols import Backend
from taskrunner.backends._protocols.queue import DelayedMove
from taskrunner.backends._protocols.tracking import Outcome, Replay, TaskSnapshot
from taskrunner.testing._harness import (
    _LATE,
    _contract_check,
    _delete_on_ack,
    _fresh_group,
    _name,
    _within,
)


def _message(
    task: str = "t",
    *,
    keep_result: float | None = None,
    lock: tuple[str, str] | None = None,
    id: str = "",
) -> bytes:
    """A task message as the dispatcher writes it (with a unique lock ``(key suffix,
    token)`` when given)."""
    extras = _wire.MessageExtras(id=id, keep_result=keep_result)
    message = _wire.TaskMessage(
        task_name=task,
        payload={"n": 1},
        unique=lock is not None,
        unique_for=60 if lock is not None else 0,
        unique_key=lock[0] if lock is not None else "",
        unique_lock_value=lock[1] if lock is not None else "",
        extras=extras or None,
    )
    return _wire.encode_message(message)


def _result(task: str = "t", value: object = 1) -> bytes:
    return _wire.encode_result(
        _wire.succeeded(task, value, attempts=1, enqueued_at=1.0, started_at=2.0, finished_at=3.0)
    )


async def _one_entry(backend: Backend, group: str, payload: bytes) -> str:
    (entry_id,) = await backend.add(group, [payload])
    return entry_id


@_contract_check
async def check_finish_keeps_results(backend: Backend) -> None:
    """``finish`` acknowledges like ``ack`` and keeps each outcome's document for its
    ``keep`` seconds, where ``wait_result`` finds it at once; an outcome without a
    document keeps nothing."""
    group, consumer = await _fresh_group(backend), _name("c")
    kept, plain = await backend.add(group, [_message(), _message()])
    await backend.read(group, consumer, 10, 0)
    before = await backend.length(group)
    document = _result(value={"w": 100})
    kept_at = trio.current_time()
    acked = await backend.finish(
        group,
        [kept, plain],
        [
            Outcome(entry_id=kept, task_id=kept, document=document, keep=0.4, notify=0.4),
            Outcome(entry_id=plain, task_id=plain, indexed=True),
        ],
    )
    assert acked == 2, f"finish must acknowledge both pending entries, said {acked}"
    info = await backend.group_info(group)
    assert info.pending == 0, f"finish left {info.pending} entries pending"
    if _delete_on_ack(backend):
        assert await backend.length(group) == before - 2, "finish must delete on ack"
    found = await backend.wait_result(group, kept, 0)
    snapshot = await backend.lookup(group, kept)
    _within(kept_at, 0.4)
    assert found == document, f"wait_result must return the kept document, got {found!r}"
    assert snapshot == TaskSnapshot(task_id=kept, result=document), (
        f"lookup of a task with a kept result must report it, got {snapshot!r}"
    )
    assert await backend.wait_result(group, plain, 0) is None, "no document was given"
    assert await backend.lookup(group, plain) is None, "an acknowledged task keeps nothing"
    await trio.sleep(0.5)
    assert await backend.wait_result(group, kept, 0) is None, "a result lives for its keep"
    assert await backend.lookup(group, kept) is None, "an expired result reads as unknown"
    assert await backend.finish(group, [kept, plain], []) == 0, "finish twice acks nothing"


@_contract_check
async def check_wait_result_wakes_every_waiter(backend: Backend) -> None:
    """``wait_result`` blocks until a document is kept (every waiter gets it, at
    once), or returns ``None`` after ``block``; a waiter writes nothing."""
    group, consumer = await _fresh_group(backend), _name("c")
    entry = await _one_entry(backend, group, _message())
    await backend.read(group, consumer, 1, 0)
    start = trio.current_time()
    assert await backend.wait_result(group, entry, 0.3) is None, "nothing is kept yet"
    waited = trio.current_time() - start
    assert 0.3 - 0.02 <= waited < 0.3 + _LATE, f"wait_result(0.3) returned after {waited:.3f} s"
    snapshot = await backend.lookup(group, entry)
    assert snapshot is not None, "a waiter must not change the task"
    assert snapshot.result is None, "a waiter that timed out must leave nothing behind"
    assert snapshot.pending, f"the task is still running: {snapshot!r}"
    document = _result()
    got: list[tuple[bytes | None, float]] = []

    async def wait() -> None:
        found = await backend.wait_result(group, entry, 5.0)
        got.append((found, trio.current_time()))

    async with trio.open_nursery() as nursery:
        for _ in range(3):
            nursery.start_soon(wait)
        await trio.sleep(0.3)
        assert got == [], f"the waiters returned before the result was kept: {got!r}"
        kept_at = trio.current_time()
        await backend.finish(
            group,
            [entry],
            [Outcome(entry_id=entry, task_id=entry, document=document, keep=5.0, notify=5.0)],
        )
    assert [found for found, _ in got] == [document] * 3, f"every waiter gets it: {got!r}"
    late = max(at for _, at in got) - kept_at
    assert late < _LATE, f"the waiters woke {late:.3f} s after the result was kept"


@_contract_check
async def check_lookup_follows_an_entry(backend: Backend) -> None:
    """A task id that is a stream id names its entry: queued until delivered, running
    (with its delivery count and consumer) while pending, unknown once acknowledged
    (deleted or not); an id nobody wrote is unknown."""
    group, consumer = await _fresh_group(backend), _name("c")
    payload = _message()
    entry = await _one_entry(backend, group, payload)
    queued = await backend.lookup(group, entry)
    assert queued == TaskSnapshot(task_id=entry, entry_id=entry, payload=payload), (
        f"an entry not delivered yet is queued, got {queued!r}"
    )
    await backend.read(group, consumer, 1, 0)
    running = await backend.lookup(group, entry)
    expected = TaskSnapshot(
        task_id=entry,
        entry_id=entry,
        payload=payload,
        pending=True,
        delivery_count=1,
        consumer=consumer,
    )
    assert running == expected, f"a pending entry is running, got {running!r}"
    await backend.ack(group, [entry])
    assert await backend.lookup(group, entry) is None, (
        "an acknowledged entry (kept in the stream or not) is done, nothing kept: unknown"
    )
    for unknown in ("1-999999999", "99999999999999-0", str(uuid.uuid4()), "not an id"):
        found = await backend.lookup(group, unknown)
        assert found is None, f"lookup of {unknown!r}, never written, gave {found!r}"


@_contract_check
async def check_delayed_tasks_keep_their_id(backend: Backend) -> None:
    """A member added with its task id is found by it (scheduled, with its run-at);
    moved, the task id names the new entry (queued); its finish ends that mapping.
    A member added without an id is not found."""
    group, consumer = await _fresh_group(backend), _name("c")
    task_id, other = str(uuid.uuid4()), str(uuid.uuid4())
    member = json.dumps({"id": task_id, "task": "t", "time": 0, "payload": 1}).encode()
    unindexed = json.dumps({"id": other, "task": "t", "time": 0, "payload": 2}).encode()
    run_at = backend.now() + 60
    await backend.add_delayed(group, member, run_at, task_id=task_id)
    await backend.add_delayed(group, unindexed, run_at)
    found = await backend.lookup(group, task_id)
    assert found is not None, "a member added with its task id must be found by it"
    assert (found.member, found.entry_id) == (member, None), f"it is scheduled: {found!r}"
    assert found.run_at is not None, "a scheduled task has a run-at time"
    assert abs(found.run_at - run_at) < 1e-3, f"run_at must be its score, got {found.run_at}"
    assert await backend.lookup(group, other) is None, "a member added without an id is not"
    message = _message(id=task_id)
    moves = [
        DelayedMove(member=member, message=message, task_id=task_id),
        DelayedMove(member=unindexed, message=_message(id=other), task_id=other),
    ]
    assert await backend.move_delayed(group, moves) == 2
    moved = await backend.lookup(group, task_id)
    assert moved is not None, "a moved task must be found by its task id"
    assert moved.member is None, f"a moved task is in the stream: {moved!r}"
    assert moved.entry_id is not None, f"a moved task has an entry: {moved!r}"
    assert (moved.payload, moved.pending) == (message, False), f"it is queued: {moved!r}"
    assert await backend.lookup(group, other) is None, "an unindexed member stays unindexed"
    await backend.read(group, consumer, 10, 0)
    running = await backend.lookup(group, task_id)
    assert running is not None, "a delivered moved task is found by its id"
    assert running.pending, f"it is running: {running!r}"
    entry = moved.entry_id
    await backend.finish(group, [entry], [Outcome(entry_id=entry, task_id=task_id, indexed=True)])
    assert await backend.lookup(group, task_id) is None, "its finish ended the mapping"


@_contract_check
async def check_defer_indexes_the_retry(backend: Backend) -> None:
    """A retry deferred with its task id is found by it (scheduled) and can be cancelled
    there; the entry index no longer names the entry it left. Deferred without an id,
    it is not indexed."""
    group, consumer = await _fresh_group(backend), _name("c")
    task_id = str(uuid.uuid4())
    member = json.dumps({"id": task_id, "task": "t", "time": 0, "payload": 1}).encode()
    await backend.add_delayed(group, member, backend.now() - 1, task_id=task_id)
    moved = DelayedMove(member=member, message=_message(id=task_id), task_id=task_id)
    assert await backend.move_delayed(group, [moved]) == 1
    (entry,) = [e.id for e in await backend.read(group, consumer, 10, 0)]
    retry = json.dumps({"id": task_id, "task": "t", "time": 0, "payload": 1, "attempts": 1})
    run_at = backend.now() + 60
    assert await backend.defer(group, entry, retry.encode(), run_at, task_id=task_id)
    found = await backend.lookup(group, task_id)
    assert found is not None, "a deferred retry must be found by its task id"
    assert (found.member, found.entry_id) == (retry.encode(), None), f"scheduled: {found!r}"
    plain = await _one_entry(backend, group, _message())
    (delivered,) = [e.id for e in await backend.read(group, consumer, 10, 0)]
    assert delivered == plain
    other = json.dumps({"id": plain, "task": "t", "time": 0, "payload": 2}).encode()
    assert await backend.defer(group, plain, other, run_at)
    assert await backend.lookup(group, plain) is None, "deferred without an id: not indexed"
    done = await backend.cancel(group, task_id)
    assert done.state is TaskState.SCHEDULED, f"the retry is cancelled in the set: {done!r}"
    assert await backend.due_delayed(group, run_at + 1, 10) == [other]


@_contract_check
async def check_cancel_removes_queued_and_scheduled_tasks(backend: Backend) -> None:
    """Cancelling a scheduled task removes its member; a queued one deletes its entry,
    so no read delivers it. Each releases its unique lock and, keeping results,
    is recorded as cancelled; cancelling again finds nothing."""
    group, consumer = await _fresh_group(backend), _name("c")
    suffix, token = _name("lock"), uuid.uuid4().hex
    lock = _wire.unique_lock("t", suffix, _keys.unique_prefix(group, backend.key_layout))
    assert await backend.acquire_lock(lock, token, 5.0), "the lock must be free"
    queued = await _one_entry(backend, group, _message(keep_result=30.0, lock=(suffix, token)))
    kept_after = await _one_entry(backend, group, _message())
    task_id = str(uuid.uuid4())
    member = json.dumps(
        {"id": task_id, "task": "later", "time": 0, "payload": None, "keep_result": 30}
    ).encode()
    await backend.add_delayed(group, member, backend.now() + 60, task_id=task_id)

    done = await backend.cancel(group, task_id)
    assert (done.state, done.raw) == (TaskState.SCHEDULED, member), f"cancel gave {done!r}"
    assert await backend.due_delayed(group, backend.now() + 100, 10) == [], "the member stays"
    done = await backend.cancel(group, queued)
    assert done.state is TaskState.QUEUED, f"cancel of a queued task gave {done!r}"
    got = await backend.read(group, consumer, 10, 0)
    assert [e.id for e in got] == [kept_after], f"the cancelled entry was delivered: {got!r}"
    assert await backend.acquire_lock(lock, "other", 1.0), "its unique lock must be released"
    await backend.release_lock(lock, "other")
    for cancelled, name in ((task_id, "later"), (queued, "t")):
        raw = await backend.wait_result(group, cancelled, 0)
        assert raw is not None, f"a task that keeps results is recorded cancelled: {name}"
        doc = _wire.decode_result(raw)
        assert (doc.state, doc.task) == (TaskState.CANCELLED, name), f"recorded {doc!r}"
        again = await backend.cancel(group, cancelled)
        assert again.state is None, f"cancelling twice must find nothing, got {again!r}"
    await backend.ack(group, [kept_after])
    gone = await backend.cancel(group, kept_after)
    assert gone.state is None, f"cancelling a finished task must find nothing, got {gone!r}"
    nobody = await backend.cancel(group, str(uuid.uuid4()))
    assert nobody.state is None, f"cancelling an unknown task must find nothing: {nobody!r}"


@_contract_check
async def check_cancel_asks_a_running_task_to_stop(backend: Backend) -> None:
    """Cancelling a running (pending) task leaves its entry and records a stop request
    that ``cancel_requested`` reports, until the entry's finish says it was cancelled."""
    group, consumer = await _fresh_group(backend), _name("c")
    payload = _message()
    running, other = await backend.add(group, [payload, _message()])
    await backend.read(group, consumer, 10, 0)
    assert await backend.cancel_requested(group, [running, other]) == [], "nobody asked yet"
    done = await backend.cancel(group, running)
    assert (done.state, done.raw) == (TaskState.RUNNING, payload), f"cancel gave {done!r}"
    asked = await backend.cancel_requested(group, [other, running, "1-999999999"])
    assert asked == [running], f"cancel_requested must name the running task alone: {asked!r}"
    snapshot = await backend.lookup(group, running)
    assert snapshot is not None, "a running task asked to stop is still running"
    assert (snapshot.pending, snapshot.stopping) == (True, True), f"lookup: {snapshot!r}"
    again = await backend.cancel(group, running)
    assert again.state is TaskState.RUNNING, f"asking again is harmless: {again!r}"
    await backend.finish(
        group, [running, other], [Outcome(entry_id=running, task_id=running, cancelled=True)]
    )
    asked = await backend.cancel_requested(group, [running])
    assert asked == [], f"the stop request must end with its finish: {asked!r}"
    assert (await backend.cancel(group, running)).state is None, "a finished task is gone"


@_contract_check
async def check_replay_dead_letters(backend: Backend) -> None:
    """A replay adds the dead letter's new message to the stream, maps its task id to
    the new entry, drops the task's kept result and deletes the dead letter, once;
    a replay whose lock is held is refused. ``find_dead_letters`` reads by id."""
    group, consumer = await _fresh_group(backend), _name("c")
    first = await backend.dead_letter(group, "1700000000000-0", _message(), "boom")
    second = await backend.dead_letter(group, "1700000000000-1", _message(), "bang")
    found = await backend.find_dead_letters(group, [second, "1-1", first])
    assert [d.id for d in found] == [second, first], f"found by id, in order: {found!r}"
    task_id = "1700000000000-0"
    document = _result()
    waited: list[bytes | None] = []

    async def wait() -> None:
        waited.append(await backend.wait_result(group, task_id, 5.0))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(wait)  # a waiter, so the finish writes the notice too
        await trio.sleep(0.2)
        await backend.finish(
            group,
            [],
            [Outcome(entry_id=task_id, task_id=task_id, document=document, keep=30.0, notify=30.0)],
        )
    assert waited == [document], f"the waiter gets the kept result: {waited!r}"
    lock_suffix = _name("lock")
    lock = _wire.unique_lock("t", lock_suffix, _keys.unique_prefix(group, backend.key_layout))
    assert await backend.acquire_lock(lock, "holder", 5.0)
    new_message = _message(id=task_id)
    replays = [
        Replay(dead_id=first, task_id=task_id, message=new_message),
        Replay(dead_id=second, task_id="1700000000000-1", message=b"{}", lock_key=lock),
        Replay(dead_id="1-1", task_id="1-1", message=b"{}"),
    ]
    done = await backend.replay_dead_letters(group, replays)
    assert [(r.dead_id, r.reason) for r in done] == [
        (first, ""),
        (second, "locked"),
        ("1-1", "gone"),
    ], f"replays: {done!r}"
    entry = done[0].entry_id
    assert entry is not None, "a replayed dead letter has a new entry"
    assert (done[1].entry_id, done[2].entry_id) == (None, None), "refused replays add nothing"
    got = await backend.read(group, consumer, 10, 0)
    assert [(e.id, e.payload) for e in got] == [(entry, new_message)], f"read {got!r}"
    snapshot = await backend.lookup(group, task_id)
    assert snapshot is not None, "the replayed task is found by its task id"
    assert (snapshot.entry_id, snapshot.result) == (entry, None), (
        f"the replayed task runs again: its old result is dropped, got {snapshot!r}"
    )
    late = await backend.wait_result(group, task_id, 0.05)
    assert late is None, f"and so is its old notice (a waiter would get it), got {late!r}"
    left = await backend.find_dead_letters(group, [first, second])
    assert [d.id for d in left] == [second], f"the replayed dead letter must go: {left!r}"
    again = await backend.replay_dead_letters(group, replays[:1])
    assert again[0].reason == "gone", f"a dead letter is replayed once: {again!r}"
    await backend.release_lock(lock, "holder")


@_contract_check
async def check_purge_and_page_dead_letters(backend: Backend) -> None:
    """``dead_letters(after=)`` pages; ``purge_dead_letters`` deletes the ids named
    (and counts them), or every one (the dead-letter stream is shared with the
    groups that share the stream)."""
    group = _name("group")
    before = await backend.dead_letters(group, 100_000)
    start = before[-1].id if before else None
    ids = [await backend.dead_letter(group, f"17-{i}", None, "why") for i in range(4)]
    page = await backend.dead_letters(group, 2, after=ids[0])
    assert [d.id for d in page] == ids[1:3], f"after= must start past that id: {page!r}"
    assert await backend.purge_dead_letters(group, [ids[1], "1-999999999"]) == 1, "purge counts"
    left = [d.id for d in await backend.dead_letters(group, 10, after=start)]
    assert left == [ids[0], *ids[2:]], f"purge of one id deleted {left!r}"
    purged = await backend.purge_dead_letters(group)
    assert purged == len(before) + 3, f"purge of all must count them all, said {purged}"
    assert await backend.dead_letters(group, 10) == [], "purge of all leaves none"
    assert await backend.purge_dead_letters(group) == 0, "a second purge finds none"
