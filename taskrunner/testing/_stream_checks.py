"""Contract checks of the MessageQueue half: add, read, ack."""

from __future__ import annotations

import itertools

import trio

from taskrunner.backends._protocols import Backend
from taskrunner.testing._harness import (
    _ID_CLOCK_TOLERANCE,
    _ID_RE,
    _LATE,
    _SLACK,
    _consumers,
    _contract_check,
    _delete_on_ack,
    _drain,
    _fresh_group,
    _id_key,
    _ids,
    _name,
    _shares_stream,
)

# Stream: add and read -----------------------------------------------------


@_contract_check
async def check_add_returns_ordered_ids(backend: Backend) -> None:
    """``add`` returns one ``<ms>-<seq>`` id per payload, strictly increasing.

    The millisecond part must be close to :meth:`SharedState.now` (it is the
    add time used for claim delays). The memory backend takes it from trio's
    clock and numbers ``<seq>`` globally rather than per millisecond as Redis
    does; the check only relies on the format and the ordering.
    """
    group = _name("group")
    assert await backend.add(group, []) == [], "add([]) must add nothing and return []"
    first = await backend.add(group, [b"a", b"b", b"c"])
    second = await backend.add(group, [b"d"])
    ids = first + second
    assert len(first) == 3, f"add of 3 payloads returned {len(first)} ids: {first!r}"
    assert len(second) == 1, f"add of 1 payload returned {second!r}"
    for entry_id in ids:
        assert _ID_RE.fullmatch(entry_id), f"id {entry_id!r} is not '<ms>-<seq>'"
    keys = [_id_key(i) for i in ids]
    increasing = all(a < b for a, b in itertools.pairwise(keys))
    assert increasing, f"ids are not strictly increasing across and within adds: {ids!r}"
    now = backend.now()
    added_at = keys[-1][0] / 1000
    assert abs(added_at - now) <= _ID_CLOCK_TOLERANCE, (
        f"id {ids[-1]!r} says {added_at} s but backend.now() is {now}"
    )


@_contract_check
async def check_read_returns_entries_in_order(backend: Backend) -> None:
    """``read`` returns entries in id order, payload bytes intact (empty and
    binary included), delivery count 1."""
    group = await _fresh_group(backend)
    payloads = [b"first", b"", b"\x00\xff\r\n binary", b"x" * 65536]
    ids = await backend.add(group, payloads)
    got = await backend.read(group, _name("consumer"), 10, 0)
    assert _ids(got) == ids, f"read returned ids {_ids(got)!r}, added {ids!r}"
    assert [e.payload for e in got] == payloads, "payloads did not round-trip byte for byte"
    assert [e.delivery_count for e in got] == [1] * 4, (
        f"first deliveries must have delivery_count 1: {[e.delivery_count for e in got]!r}"
    )


@_contract_check
async def check_read_creates_group_lazily(backend: Backend) -> None:
    """An unknown group reports nothing pending; the first ``read`` creates it
    at the beginning of the stream, so entries added before it are delivered."""
    group, consumer = _name("group"), _name("consumer")
    before = await backend.group_info(group)
    assert (before.name, before.pending, before.lag, before.consumers) == (group, 0, 0, ()), (
        f"group_info of a group that does not exist: {before!r}"
    )
    ids = await backend.add(group, [b"one", b"two"])
    got = await _drain(backend, group, consumer)
    assert _ids(got)[-2:] == ids, (
        f"a new group must start at the beginning of the stream: read {_ids(got)!r}, "
        f"expected it to end with {ids!r}"
    )
    assert all(e.delivery_count == 1 for e in got), "first deliveries must have delivery_count 1"
    info = await backend.group_info(group)
    assert info.pending == len(got), f"pending {info.pending}, delivered {len(got)}"
    assert _consumers(info).get(consumer, (None,))[0] == len(got), (
        f"consumer {consumer!r} must hold every delivered entry: {info.consumers!r}"
    )


@_contract_check
async def check_read_respects_count(backend: Backend) -> None:
    """``read`` returns at most ``count`` entries and continues where it stopped."""
    group, consumer = await _fresh_group(backend), _name("consumer")
    ids = await backend.add(group, [b"1", b"2", b"3", b"4", b"5"])
    batches = [await backend.read(group, consumer, n, 0) for n in (2, 2, 10, 10)]
    assert [_ids(b) for b in batches] == [ids[:2], ids[2:4], ids[4:], []], (
        f"reads of count 2, 2, 10, 10 over 5 entries gave {[_ids(b) for b in batches]!r}"
    )


@_contract_check
async def check_read_blocks_until_timeout(backend: Backend) -> None:
    """With nothing to deliver, ``read`` waits ``block`` seconds and returns ``[]``;
    ``block=0`` does not wait (on Redis: no ``BLOCK 0``, which waits forever)."""
    group, consumer = await _fresh_group(backend), _name("consumer")
    start = trio.current_time()
    with trio.move_on_after(2.0) as guard:
        got = await backend.read(group, consumer, 10, 0)
    assert not guard.cancelled_caught, "read(block=0) on an empty group waited (forever?)"
    assert got == [], f"read on an empty group returned {got!r}"
    assert trio.current_time() - start < 0.2, "read(block=0) on an empty group waited"

    start = trio.current_time()
    got = await backend.read(group, consumer, 10, 0.3)
    elapsed = trio.current_time() - start
    assert got == [], f"blocked read on an empty group returned {got!r}"
    assert 0.3 - _SLACK <= elapsed < 0.3 + _LATE, f"read(block=0.3) returned after {elapsed} s"

    ids = await backend.add(group, [b"ready"])
    start = trio.current_time()
    got = await backend.read(group, consumer, 10, 1.0)
    assert _ids(got) == ids, f"read(block=1.0) with an entry ready returned {got!r}"
    assert trio.current_time() - start < 0.5, "read waited although an entry was ready"


@_contract_check
async def check_read_block_returns_early_on_add(backend: Backend) -> None:
    """A blocked ``read`` returns as soon as another task adds an entry."""
    group, consumer = await _fresh_group(backend), _name("consumer")
    added: list[str] = []

    async def add_later() -> None:
        await trio.sleep(0.1)
        added.extend(await backend.add(group, [b"late"]))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(add_later)
        start = trio.current_time()
        got = await backend.read(group, consumer, 10, 3.0)
        elapsed = trio.current_time() - start
    assert _ids(got) == added, f"blocked read returned {got!r}, the other task added {added!r}"
    assert 0.1 - _SLACK <= elapsed < 0.1 + _LATE, (
        f"blocked read returned after {elapsed} s, the entry was added after 0.1 s"
    )


@_contract_check
async def check_read_never_redelivers_in_group(backend: Backend) -> None:
    """Within one group each entry is delivered once, whichever consumer reads;
    pending or acked entries are not read again (only ``claim_stale`` re-delivers)."""
    group = await _fresh_group(backend)
    c1, c2, c3 = _name("c1"), _name("c2"), _name("c3")
    ids = await backend.add(group, [b"a", b"b", b"c"])
    first = await backend.read(group, c1, 2, 0)
    second = await backend.read(group, c2, 10, 0)
    assert (_ids(first), _ids(second)) == (ids[:2], ids[2:]), (
        f"consumers of one group got {_ids(first)!r} and {_ids(second)!r} from {ids!r}"
    )
    await backend.ack(group, ids[:1])
    again = [await backend.read(group, c, 10, 0) for c in (c1, c2, c3)]
    assert again == [[], [], []], f"entries were delivered twice in one group: {again!r}"
    more = await backend.add(group, [b"d"])
    assert _ids(await backend.read(group, c3, 10, 0)) == more, "a new entry was not delivered"


@_contract_check
async def check_groups_each_get_every_entry(backend: Backend) -> None:
    """Two groups on one stream each receive every entry; acking in one leaves
    the other's pending list alone. Groups whose ``stream_keys`` differ never
    see each other's entries. ``stream_groups`` names the groups of a stream."""
    g1, g2 = await _fresh_group(backend), await _fresh_group(backend)
    shared = _shares_stream(backend, g1, g2)
    ids = await backend.add(g1, [b"a", b"b", b"c"])
    got1 = await backend.read(g1, _name("consumer"), 10, 0)
    got2 = await backend.read(g2, _name("consumer"), 10, 0)
    groups = await backend.stream_groups(g1)
    if not shared:
        assert (_ids(got1), got2) == (ids, []), (
            f"groups with streams of their own must not see each other's entries: "
            f"added {ids!r} for group 1, group 2 read {_ids(got2)!r}"
        )
        assert (g1 in groups, g2 in groups) == (True, False), (
            f"stream_groups of group 1's own stream: {groups!r}"
        )
        return
    assert {g1, g2} <= set(groups), f"stream_groups must list both groups: {groups!r}"
    assert groups == sorted(groups), f"stream_groups must be sorted: {groups!r}"
    assert (_ids(got1), _ids(got2)) == (ids, ids), (
        f"each group must get all of {ids!r}: got {_ids(got1)!r} and {_ids(got2)!r}"
    )
    assert [e.payload for e in got2] == [b"a", b"b", b"c"], f"group 2 payloads: {got2!r}"
    assert all(e.delivery_count == 1 for e in got1 + got2), "delivery counts are per group"
    assert await backend.ack(g1, ids) == 3, "acking 3 pending entries must return 3"
    pending = (await backend.group_info(g1)).pending, (await backend.group_info(g2)).pending
    assert pending == (0, 3), f"after acking all in group 1, pending is {pending!r}"


# Stream: ack ----------------------------------------------------------------


@_contract_check
async def check_ack_counts_and_is_idempotent(backend: Backend) -> None:
    """``ack`` returns how many ids were pending, drops them from the pending
    list, and ignores unknown, repeated and already-acked ids."""
    group, consumer = await _fresh_group(backend), _name("consumer")
    ids = await backend.add(group, [b"a", b"b", b"c"])
    await backend.read(group, consumer, 10, 0)
    assert await backend.ack(group, ids[:2]) == 2, "ack of 2 pending ids must return 2"
    pending = (await backend.group_info(group)).pending
    assert pending == 1, f"3 read, 2 acked, but pending is {pending}"
    assert await backend.ack(group, ids[:2]) == 0, "a repeated ack must return 0"
    unknown = "9999999999999-0"
    assert await backend.ack(group, [ids[2], unknown]) == 1, "unknown ids must not count"
    assert await backend.ack(group, []) == 0, "ack([]) must return 0"
    assert await backend.ack(_name("nogroup"), ids) == 0, "ack in an unknown group must return 0"
    info = await backend.group_info(group)
    assert (info.pending, _consumers(info).get(consumer, (0,))[0]) == (0, 0), (
        f"everything was acked but group_info says {info!r}"
    )
    assert await backend.read(group, _name("consumer"), 10, 0) == [], "acked entries came back"
    assert await backend.claim_stale(group, _name("consumer"), 0, 10) == [], (
        "acked entries must not be claimable"
    )


@_contract_check
async def check_ack_deletes_when_delete_on_ack(backend: Backend) -> None:
    """With ``backend.delete_on_ack`` true, ``ack`` deletes the entries from the
    stream (``length`` drops, a new group on the stream never sees them);
    otherwise they stay."""
    deletes = _delete_on_ack(backend)
    group, consumer = await _fresh_group(backend), _name("consumer")
    base = await backend.length(group)
    ids = await backend.add(group, [b"a", b"b"])
    assert await backend.length(group) == base + 2, "length must count added entries"
    await backend.read(group, consumer, 10, 0)
    await backend.ack(group, ids[:1])
    expected = base + 1 if deletes else base + 2
    length = await backend.length(group)
    assert length == expected, (
        f"after one ack, length is {length - base} of our 2 entries; with "
        f"delete_on_ack={deletes} it must be {expected - base} "
        "(a backend that deletes on ack must expose delete_on_ack = True)"
    )
    newcomer = _name("group")
    if not _shares_stream(backend, group, newcomer):
        return  # a new group gets a stream of its own: the length said it all
    seen = set(_ids(await _drain(backend, newcomer, _name("consumer"))))
    assert (ids[0] in seen) is not deletes, (
        f"a new group {'saw' if ids[0] in seen else 'did not see'} the acked entry "
        f"with delete_on_ack={deletes}"
    )
    assert ids[1] in seen, "an unacked entry vanished from the stream"
