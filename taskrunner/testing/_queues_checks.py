"""Contract checks of several queues per group: one stream each, and ``read_many``."""

from __future__ import annotations

import trio

from taskrunner.backends._protocols import Backend
from taskrunner.backends._protocols.queue import DelayedMove, QueueEntry
from taskrunner.testing._harness import _LATE, _SLACK, _contract_check, _name


def _tagged(entries: list[QueueEntry]) -> list[tuple[str | None, bytes | None]]:
    return [(e.queue, e.payload) for e in entries]


@_contract_check
async def check_queues_are_separate_streams(backend: Backend) -> None:
    """Each queue of a group is a stream of its own: adds, reads, acks, lengths,
    pending counts, dead letters and metrics stay apart, and every entry read
    says which queue it came from. ``queue=None`` is the backend's own queue."""
    group, consumer = _name("group"), _name("c")
    qa, qb = _name("qa"), _name("qb")
    keys_a, keys_b = backend.stream_keys(group, qa), backend.stream_keys(group, qb)
    assert (keys_a.queue, keys_b.queue) == (qa, qb), f"stream keys name their queue: {keys_a!r}"
    assert keys_a.stream != keys_b.stream, f"two queues share a stream: {keys_a!r}"
    default = backend.stream_keys(group)
    assert default == backend.stream_keys(group, default.queue), (
        f"queue=None must be the backend's own queue {default.queue!r}: {default!r}"
    )
    ids_a = await backend.add(group, [b"a1", b"a2"], queue=qa)
    await backend.add(group, [b"b1"], queue=qb)
    lengths = (await backend.length(group, queue=qa), await backend.length(group, queue=qb))
    assert lengths == (2, 1), f"lengths per queue: {lengths!r}, expected (2, 1)"
    got_a = await backend.read(group, consumer, 10, 0, queue=qa)
    got_b = await backend.read(group, consumer, 10, 0, queue=qb)
    assert _tagged(got_a) == [(qa, b"a1"), (qa, b"a2")], f"read of {qa!r} gave {got_a!r}"
    assert _tagged(got_b) == [(qb, b"b1")], f"read of {qb!r} gave {got_b!r}"
    assert await backend.ack(group, ids_a, queue=qa) == 2, "acking both entries of qa"
    pending = (
        (await backend.group_info(group, queue=qa)).pending,
        (await backend.group_info(group, queue=qb)).pending,
    )
    assert pending == (0, 1), f"pending per queue after acking qa: {pending!r}"
    await backend.dead_letter(group, got_b[0].id, b"b1", "failed", queue=qb)
    dead_a = await backend.dead_letters(group, queue=qa)
    dead_b = await backend.dead_letters(group, queue=qb)
    assert (dead_a, [d.payload for d in dead_b]) == ([], [b"b1"]), (
        f"dead letters per queue: {dead_a!r}, {dead_b!r}"
    )
    metrics = await backend.get_metrics(group, queue=qb)
    assert metrics.queue_size == 1, f"metrics of {qb!r}: {metrics!r}"


@_contract_check
async def check_read_many_by_quota_then_in_order(backend: Backend) -> None:
    """``read_many`` reads each queue's quota first, in order, then fills what is
    left from the queues in order; all quotas 0 is strict priority."""
    group, consumer = _name("group"), _name("c")
    qa, qb, qc = _name("qa"), _name("qb"), _name("qc")
    for queue, tag in ((qa, b"a"), (qb, b"b"), (qc, b"c")):
        await backend.add(group, [tag + b"1", tag + b"2", tag + b"3"], queue=queue)
    got = await backend.read_many(group, consumer, [qa, qb, qc], [1, 2, 0], 5, 0)
    assert _tagged(got) == [(qa, b"a1"), (qb, b"b1"), (qb, b"b2"), (qa, b"a2"), (qa, b"a3")], (
        f"quotas (1, 2, 0) of 5, then in order: got {_tagged(got)!r}"
    )
    assert all(e.delivery_count == 1 for e in got), f"first deliveries: {got!r}"
    strict = await backend.read_many(group, consumer, [qa, qb, qc], [0, 0, 0], 3, 0)
    assert _tagged(strict) == [(qb, b"b3"), (qc, b"c1"), (qc, b"c2")], (
        f"strict order with {qa!r} empty: got {_tagged(strict)!r}"
    )
    pending = [(await backend.group_info(group, queue=q)).pending for q in (qa, qb, qc)]
    assert pending == [3, 3, 2], f"everything read is pending, per queue: {pending!r}"
    assert await backend.read_many(group, consumer, [qa, qb], [0, 0], 5, 0) == [], "all read"


@_contract_check
async def check_read_many_waits_for_any_queue(backend: Backend) -> None:
    """With every queue empty, ``read_many`` waits for an add to any of the queues
    it waits on and returns at once, at least one entry and at most
    ``total // m``; with no add, it returns nothing after ``block``."""
    group, consumer = _name("group"), _name("c")
    qa, qb = _name("qa"), _name("qb")
    await backend.read_many(group, consumer, [qa, qb], [0, 0], 4, 0)  # creates the groups

    async def add_later() -> None:
        await trio.sleep(0.1)
        await backend.add(group, [b"b1", b"b2", b"b3"], queue=qb)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(add_later)
        start = trio.current_time()
        got = await backend.read_many(group, consumer, [qa, qb], [0, 0], 4, 3.0)
        elapsed = trio.current_time() - start
    # (Redis may answer the blocked read as soon as the first of the three lands.)
    assert _tagged(got) in ([(qb, b"b1")], [(qb, b"b1"), (qb, b"b2")]), (
        f"waiting on two queues for 4 entries takes at most 2 from the one added to: {got!r}"
    )
    assert 0.1 - _SLACK <= elapsed < 0.1 + _LATE, f"returned after {elapsed} s, added after 0.1 s"
    rest = await backend.read_many(group, consumer, [qa, qb], [0, 0], 4, 0)
    assert _tagged(got + rest) == [(qb, b"b1"), (qb, b"b2"), (qb, b"b3")], (
        f"the entries left after {got!r}: {rest!r}"
    )
    start = trio.current_time()
    assert await backend.read_many(group, consumer, [qa, qb], [0, 0], 4, 0.3) == []
    elapsed = trio.current_time() - start
    assert 0.3 - _SLACK <= elapsed < 0.3 + _LATE, f"an empty wait of 0.3 s took {elapsed} s"


@_contract_check
async def check_queue_reclaim_and_moves_stay_apart(backend: Backend) -> None:
    """``claim_stale`` and ``refresh`` act on their queue's stream only, and a
    delayed move lands in the stream of its ``queue``."""
    group, consumer, other = _name("group"), _name("c"), _name("other")
    qa, qb = _name("qa"), _name("qb")
    await backend.add(group, [b"a1"], queue=qa)
    await backend.read_many(group, consumer, [qa, qb], [0, 0], 10, 0)
    await trio.sleep(0.3)
    assert await backend.claim_stale(group, other, 0.2, 10, queue=qb) == [], (
        f"claim_stale of {qb!r} took an entry of {qa!r}"
    )
    claimed = await backend.claim_stale(group, other, 0.2, 10, queue=qa)
    assert _tagged(claimed) == [(qa, b"a1")], f"claim_stale of {qa!r}: {claimed!r}"
    assert claimed[0].delivery_count == 2, f"a claim counts a delivery: {claimed!r}"
    refreshed = await backend.refresh(group, consumer, [claimed[0].id], queue=qa)
    assert refreshed == [claimed[0].id], f"refresh of a pending entry: {refreshed!r}"

    member = _name("member").encode()
    await backend.add_delayed(group, member, backend.now() - 1)
    moved = await backend.move_delayed(group, [DelayedMove(member=member, message=b"m", queue=qb)])
    assert moved == 1, "the member was in the set"
    got = await backend.read_many(group, consumer, [qa, qb], [0, 0], 10, 0)
    assert _tagged(got) == [(qb, b"m")], f"the move must land in {qb!r}: {got!r}"
