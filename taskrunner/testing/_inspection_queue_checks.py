"""Contract checks of the :class:`~taskrunner.backends.Inspection` protocol on a group of
several queues (issue 24): every queue's keys listed, counted and flushed, and no other
group's touched. Part of :data:`~taskrunner.testing.INSPECTION_CHECKS`."""

from __future__ import annotations

from taskrunner import _keys
from taskrunner.backends._protocols import Backend
from taskrunner.backends._protocols.inspection import KeyKind
from taskrunner.testing._harness import _contract_check, _name, _shares_stream
from taskrunner.testing._inspection_checks import _inspection

_QUEUE_KINDS = (KeyKind.STREAM, KeyKind.DEAD_LETTER, KeyKind.CLAIM_DELAY_RING)


@_contract_check
async def check_every_queue_in_keys_and_flush(backend: Backend) -> None:
    """``list_queues`` finds every queue the group reads, by its stream or its dead
    letters;
    ``list_keys`` lists every queue's stream and dead-letter stream, the paused set
    and the flow-control keys; ``flush_group`` deletes them all (and destroys the
    group on every queue) and touches no key of another group."""
    inspection = _inspection(backend)
    group, other = _name("group"), _name("other")
    qa, qb = _name("qa"), _name("qb")
    for g in (group, other):
        await backend.add(g, [b"a1"], queue=qa)
        read = await backend.read_many(g, _name("c"), [qa, qb], [0, 0], 10, 0)  # reads both
        await backend.ack(g, [e.id for e in read], queue=qa)  # its claim delay: qa's ring
        await backend.dead_letter(g, "1700000000000-0", b"x", "boom", queue=qb)
        await backend.pause(g, task="t")
        await backend.admit(g, "t", "h1", max_concurrency=1, lease=30.0)
    queues = await inspection.list_queues(group)
    own = backend.stream_keys(group).queue
    assert queues[0] == own, f"the backend's own queue comes first: {queues!r}"
    assert {qa, qb} <= set(queues), f"{qa!r} (a stream) and {qb!r} (dead letters): {queues!r}"
    names = {k.name: k.kind for k in await inspection.list_keys(group)}
    wanted = {
        backend.stream_keys(group, qa).stream: KeyKind.STREAM,
        backend.stream_keys(group, qb).dead_letter: KeyKind.DEAD_LETTER,
        backend.stream_keys(group, qa).claim_delay_ring: KeyKind.CLAIM_DELAY_RING,
        _keys.paused(group, backend.key_layout): KeyKind.PAUSED,
        _keys.concurrency(group, "t", backend.key_layout): KeyKind.CONCURRENCY,
    }
    missing = {n: k for n, k in wanted.items() if names.get(n) is not k}
    assert not missing, f"list_keys must list every queue's and flow key: missing {missing!r}"
    counts = await inspection.count_keys(group)
    assert counts.paused == 1, f"count_keys counts the paused set: {counts!r}"
    assert counts.concurrency == 1, f"count_keys counts the slots: {counts!r}"
    others = sorted(k.name for k in await inspection.list_keys(other) if other in k.name)
    deleted = await inspection.flush_group(group, heartbeats=False)
    shared = _shares_stream(backend, group, other)  # its streams are kept for the other
    doomed = {n for n, kind in wanted.items() if not (shared and kind in _QUEUE_KINDS)}
    assert doomed <= set(deleted), f"flush must delete {sorted(doomed)!r}: {deleted!r}"
    left = [k.name for k in await inspection.list_keys(group) if group in k.name]
    assert left == [], f"flush left keys of the group: {left!r}"
    assert (await backend.group_info(group, queue=qa)).pending == 0, "destroyed on every queue"
    after = sorted(k.name for k in await inspection.list_keys(other) if other in k.name)
    assert after == others, f"flush touched another group's keys: {others!r} -> {after!r}"
    await inspection.flush_group(other, heartbeats=False)
