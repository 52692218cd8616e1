"""Contract checks of :class:`~taskrunner.backends.Deferral` (a retry, or a run held
back by a limit, re-queued through the delayed set), and of the delayed move that
keeps a retry's unique lock."""

from __future__ import annotations

import trio

from taskrunner.backends._protocols import Backend
from taskrunner.backends._protocols.queue import DelayedMove
from taskrunner.testing._harness import (
    _contract_check,
    _delete_on_ack,
    _fresh_group,
    _ids,
    _name,
)


@_contract_check
async def check_defer(backend: Backend) -> None:
    """``defer`` acks a pending entry and adds the member at ``run_at``, as one step;
    an entry that is not pending (deferred already, never delivered) adds nothing."""
    group, consumer, other = await _fresh_group(backend), _name("c"), _name("c")
    first, second = await backend.add(group, [b"first", b"second"])
    assert _ids(await backend.read(group, consumer, 10, 0)) == [first, second]
    length = await backend.length(group)
    run_at = backend.now() + 100.0
    member, again = b'{"id":"retry"}', b'{"id":"retry-again"}'
    assert await backend.defer(group, first, member, run_at) is True, "a pending entry defers"
    assert (await backend.group_info(group)).pending == 1, "the deferred entry must be acked"
    assert await backend.due_delayed(group, run_at, 10) == [member], "the member must be added"
    assert await backend.due_delayed(group, run_at - 1, 10) == [], "its run-at time is run_at"
    expected = length - 1 if _delete_on_ack(backend) else length
    got = await backend.length(group)
    assert got == expected, f"defer must ack as ack does (delete_on_ack): length {got}"
    claimed = await backend.claim_stale(group, other, 0.0, 10)
    assert _ids(claimed) == [second], f"only the other entry is still pending: {claimed!r}"
    assert await backend.defer(group, first, again, run_at) is False, "deferred twice"
    never = (await backend.add(group, [b"never read"]))[0]
    assert await backend.defer(group, never, again, run_at) is False, "an undelivered entry"
    assert await backend.defer(_name("group"), second, again, run_at) is False, (
        "an entry of another group"
    )
    assert await backend.due_delayed(group, run_at, 10) == [member], (
        "a defer that returned False must add nothing"
    )
    assert await backend.defer(group, second, again, run_at + 1) is True
    assert await backend.due_delayed(group, run_at + 1, 10) == [member, again]
    assert (await backend.group_info(group)).pending == 0


@_contract_check
async def check_defer_on_a_queue(backend: Backend) -> None:
    """``defer(..., queue=)`` acks the entry pending on that queue's stream (deleting
    it when the backend deletes on ack) and adds the member at ``run_at``; an entry
    not pending there (acked already, never read, or in a group that does not
    exist) is refused and nothing is added."""
    group, consumer, queue = _name("group"), _name("c"), _name("q")
    first, second = await backend.add(group, [b"e1", b"e2"], queue=queue)
    await backend.read(group, consumer, 1, 0, queue=queue)  # e1 pending, e2 not read
    run_at = backend.now() + 30
    member = _name("member").encode()
    assert await backend.defer(group, first, member, run_at, queue=queue) is True
    info = await backend.group_info(group, queue=queue)
    assert info.pending == 0, f"the deferred entry must be acked: {info!r}"
    expected_length = 1 if _delete_on_ack(backend) else 2
    length = await backend.length(group, queue=queue)
    assert length == expected_length, (
        f"with delete_on_ack={_delete_on_ack(backend)} the stream holds {length} entries, "
        f"expected {expected_length}"
    )
    assert await backend.due_delayed(group, run_at - 1, 10) == [], "added before its run_at"
    assert await backend.due_delayed(group, run_at, 10) == [member], "the member at run_at"
    again = _name("again").encode()
    assert await backend.defer(group, first, again, run_at, queue=queue) is False, (
        "an entry deferred already is no longer pending"
    )
    assert await backend.defer(group, second, again, run_at, queue=queue) is False, (
        "an entry never read is not pending"
    )
    assert await backend.defer(_name("nogroup"), first, again, run_at, queue=queue) is False, (
        "a group that does not exist has nothing pending"
    )
    assert await backend.due_delayed(group, run_at + 1, 10) == [member], (
        "a refused defer must add nothing"
    )


@_contract_check
async def check_move_delayed_keeps_own_lock(backend: Backend) -> None:
    """A move whose lock is held with the move's own token (a retry keeping its lock)
    moves, and the lock's lifetime starts again at ``lock_ttl``."""
    group, consumer = await _fresh_group(backend), _name("c")
    lock = f"taskrunner:unique:{_name('task')}"
    member = b'{"id":"retry"}'
    assert await backend.acquire_lock(lock, "kept", 0.3) is True
    await backend.add_delayed(group, member, backend.now() - 1)
    move = DelayedMove(member=member, message=member, lock_key=lock, lock_token="kept", lock_ttl=5)
    assert await backend.move_delayed(group, [move]) == 1, "a lock held with its own token"
    got = await backend.read(group, consumer, 10, 0)
    assert [e.payload for e in got] == [member], f"the member must be a stream entry: {got!r}"
    await trio.sleep(0.4)  # past the first ttl: alive only if the move gave it lock_ttl
    assert await backend.acquire_lock(lock, "other", 1.0) is False, (
        "the move must give the kept lock lock_ttl again"
    )
    assert await backend.release_lock(lock, "kept") is True, "the lock keeps its token"
