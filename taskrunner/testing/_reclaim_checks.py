"""Contract checks of the MessageQueue half: reclaim, refresh, introspection, dead letters."""

from __future__ import annotations

import trio

from taskrunner.backends._protocols import Backend
from taskrunner.testing._harness import (
    _ID_RE,
    _LATE,
    _SLACK,
    _consumers,
    _contract_check,
    _delete_on_ack,
    _fresh_group,
    _ids,
    _name,
    _shares_stream,
    _within,
)

# Stream: add and read -----------------------------------------------------


# Stream: reclaim ------------------------------------------------------------


@_contract_check
async def check_claim_stale(backend: Backend) -> None:
    """``claim_stale`` takes only entries idle >= ``min_idle``, oldest id first,
    at most ``count``, from any consumer; each claim adds one to the delivery
    count and resets the idle time."""
    group = await _fresh_group(backend)
    c1, c2, c3 = _name("c1"), _name("c2"), _name("c3")
    e1, e2, e3 = await backend.add(group, [b"e1", b"e2", b"e3"])
    read_12 = trio.current_time()
    await backend.read(group, c1, 2, 0)  # e1, e2 at t=0
    await trio.sleep(0.2)
    read_3 = trio.current_time()
    await backend.read(group, c1, 1, 0)  # e3 at t=0.2
    got = await backend.claim_stale(group, c2, 0.3, 10)
    _within(read_12, 0.3)
    assert got == [], f"nothing is idle 0.3 s yet, claimed {_ids(got)!r}"

    await trio.sleep(0.2)  # t=0.4: e1, e2 idle 0.4; e3 idle 0.2
    claim_12 = trio.current_time()
    first = await backend.claim_stale(group, c2, 0.3, 1)
    assert _ids(first) == [e1], f"count=1 must claim the oldest idle entry, got {_ids(first)!r}"
    assert (first[0].delivery_count, first[0].payload) == (2, b"e1"), f"claimed {first[0]!r}"
    rest = await backend.claim_stale(group, c2, 0.3, 10)
    _within(read_3, 0.3)
    assert _ids(rest) == [e2], f"expected only {e2!r} (e1 was just claimed), got {_ids(rest)!r}"
    consumers = _consumers(await backend.group_info(group))
    assert (consumers[c1][0], consumers[c2][0]) == (1, 2), (
        f"claimed entries must move to the claiming consumer: {consumers!r}"
    )

    await trio.sleep(0.2)  # t=0.6: e3 idle 0.4; e1, e2 idle 0.2 (reset by the claim)
    claim_3 = trio.current_time()
    got = await backend.claim_stale(group, c3, 0.3, 10)
    _within(claim_12, 0.3)
    assert _ids(got) == [e3], f"a claim must reset idle time: expected only e3, got {got!r}"
    assert got[0].delivery_count == 2, f"first claim of e3: {got[0]!r}"

    await trio.sleep(0.2)  # t=0.8: e1, e2 idle 0.4; e3 idle 0.2
    got = await backend.claim_stale(group, c3, 0.3, 10)
    _within(claim_3, 0.3)
    assert _ids(got) == [e1, e2], f"expected e1, e2 in id order, got {_ids(got)!r}"
    assert [e.delivery_count for e in got] == [3, 3], f"second claims: {got!r}"
    assert [e.payload for e in got] == [b"e1", b"e2"], f"payloads after two claims: {got!r}"


@_contract_check
async def check_claim_stale_drops_deleted_entries(backend: Backend) -> None:
    """A pending id whose entry was deleted from the stream is dropped from the
    pending list by ``claim_stale`` and not returned.

    Entries are deleted here by acking in another group of the same stream
    with ``delete_on_ack``; without it the entry must still be claimable. When
    the backend gives each group a stream of its own, an ack in the other
    group must leave this group's entries alone, delete_on_ack or not.
    """
    deletes = _delete_on_ack(backend)
    g_ack, g_claim = await _fresh_group(backend), await _fresh_group(backend)
    shared = _shares_stream(backend, g_ack, g_claim)
    ids = await backend.add(g_claim, [b"deleted", b"kept"])
    await backend.read(g_ack, _name("consumer"), 10, 0)
    await backend.read(g_claim, _name("consumer"), 10, 0)
    await backend.ack(g_ack, ids[:1])
    await trio.sleep(0.3)
    got = await backend.claim_stale(g_claim, _name("claimer"), 0.2, 10)
    expected = ids[1:] if deletes and shared else ids
    assert _ids(got) == expected, (
        f"with delete_on_ack={deletes} and {'one stream' if shared else 'a stream each'}, "
        f"claim_stale must return {expected!r}, got {_ids(got)!r}"
    )
    assert all(e.payload is not None for e in got), f"claimed a deleted entry: {got!r}"
    pending = (await backend.group_info(g_claim)).pending
    assert pending == len(expected), (
        f"the deleted entry must leave the pending list: pending {pending}, "
        f"expected {len(expected)}"
    )


@_contract_check
async def check_refresh(backend: Backend) -> None:
    """``refresh`` returns the ids that were pending, moves them to the consumer
    and resets their idle time (not claimable for another ``min_idle``) without
    changing the delivery count."""
    group = await _fresh_group(backend)
    c1, c2, c3 = _name("c1"), _name("c2"), _name("c3")
    a, b = await backend.add(group, [b"a", b"b"])
    await backend.read(group, c1, 10, 0)
    await backend.ack(group, [b])
    await trio.sleep(0.4)  # a is idle 0.4 >= 0.3: claimable, were it not refreshed
    refreshed_at = trio.current_time()
    refreshed = await backend.refresh(group, c2, [a, b])
    assert refreshed == [a], f"refresh must return only pending ids ([a]), got {refreshed!r}"
    assert await backend.refresh(group, c2, []) == [], "refresh([]) must return []"
    consumers = _consumers(await backend.group_info(group))
    assert (consumers[c2][0], consumers.get(c1, (0,))[0]) == (1, 0), (
        f"refresh must move the entry to the refreshing consumer: {consumers!r}"
    )
    got = await backend.claim_stale(group, c3, 0.3, 10)
    _within(refreshed_at, 0.3)
    assert got == [], f"a refreshed entry was claimed: {got!r}"
    await trio.sleep(0.2)
    got = await backend.claim_stale(group, c3, 0.3, 10)
    _within(refreshed_at, 0.3)
    assert got == [], f"a refreshed entry was claimed before min_idle passed again: {got!r}"
    await trio.sleep(0.2)
    got = await backend.claim_stale(group, c3, 0.3, 10)
    assert _ids(got) == [a], f"after min_idle the refreshed entry must be claimable: {got!r}"
    assert got[0].delivery_count == 2, (
        f"refresh must not change the delivery count: claimed with {got[0].delivery_count}"
    )


@_contract_check
async def check_refresh_drops_deleted_entries(backend: Backend) -> None:
    """Like ``claim_stale``, ``refresh`` drops a pending id whose entry was
    deleted from the stream and does not return it (``XCLAIM`` on Redis >= 7).

    Entries are deleted here by acking in another group of the same stream
    with ``delete_on_ack``; without it the entry must still be refreshed. When
    the backend gives each group a stream of its own, an ack in the other
    group must leave this group's entries alone.
    """
    deletes = _delete_on_ack(backend)
    g_ack, g_refresh = await _fresh_group(backend), await _fresh_group(backend)
    shared = _shares_stream(backend, g_ack, g_refresh)
    ids = await backend.add(g_refresh, [b"deleted", b"kept"])
    await backend.read(g_ack, _name("consumer"), 10, 0)
    await backend.read(g_refresh, _name("consumer"), 10, 0)
    await backend.ack(g_ack, ids[:1])
    got = await backend.refresh(g_refresh, _name("refresher"), ids)
    expected = ids[1:] if deletes and shared else ids
    assert got == expected, (
        f"with delete_on_ack={deletes} and {'one stream' if shared else 'a stream each'}, "
        f"refresh must return {expected!r}, got {got!r}"
    )
    pending = (await backend.group_info(g_refresh)).pending
    assert pending == len(expected), (
        f"the deleted entry must leave the pending list: pending {pending}, "
        f"expected {len(expected)}"
    )


# Stream: introspection --------------------------------------------------------


@_contract_check
async def check_group_info_pending_and_lag(backend: Backend) -> None:
    """``group_info`` counts pending entries, lag (entries never delivered) and
    pending per consumer."""
    group = await _fresh_group(backend)
    c1, c2 = _name("c1"), _name("c2")
    info = await backend.group_info(group)
    assert (info.name, info.pending, info.lag) == (group, 0, 0), f"fresh group: {info!r}"
    ids = await backend.add(group, [b"a", b"b", b"c"])
    info = await backend.group_info(group)
    assert (info.pending, info.lag) == (0, 3), f"after adding 3: {info!r}"
    await backend.read(group, c1, 2, 0)
    info = await backend.group_info(group)
    assert (info.pending, info.lag) == (2, 1), f"after reading 2 of 3: {info!r}"
    await backend.read(group, c2, 10, 0)
    info = await backend.group_info(group)
    assert (info.pending, info.lag) == (3, 0), f"after reading all: {info!r}"
    pending = {name: n for name, (n, _) in _consumers(info).items()}
    assert pending == {c1: 2, c2: 1}, f"per-consumer pending: {pending!r}"
    await backend.ack(group, ids[:1])
    info = await backend.group_info(group)
    assert (info.pending, _consumers(info)[c1][0]) == (2, 1), f"after one ack: {info!r}"


@_contract_check
async def check_group_info_consumer_idle(backend: Backend) -> None:
    """A consumer's ``idle`` is the time since it last read, claimed or refreshed.

    Redis >= 7.2 also resets it on reads and claims that return nothing (so does
    the memory backend); the check only looks at calls that move entries.
    """
    group = await _fresh_group(backend)
    c1, c2 = _name("c1"), _name("c2")
    (a,) = await backend.add(group, [b"a"])
    await backend.read(group, c1, 10, 0)
    await trio.sleep(0.3)
    await backend.add(group, [b"b"])
    c2_read = trio.current_time()
    await backend.read(group, c2, 10, 0)
    consumers = _consumers(await backend.group_info(group))
    _within(c2_read, 0.1)
    assert 0.3 - _SLACK <= consumers[c1][1] < 0.3 + _LATE, (
        f"c1 last read 0.3 s ago but reports idle {consumers[c1][1]}"
    )
    assert 0 <= consumers[c2][1] < 0.1, f"c2 just read but reports idle {consumers[c2][1]}"
    c1_refresh = trio.current_time()
    assert await backend.refresh(group, c1, [a]) == [a], "refresh of a pending id"
    consumers = _consumers(await backend.group_info(group))
    _within(c1_refresh, 0.1)
    assert 0 <= consumers[c1][1] < 0.1, f"c1 just refreshed but reports idle {consumers[c1][1]}"


@_contract_check
async def check_delete_consumer(backend: Backend) -> None:
    """``delete_consumer`` removes the consumer, drops its pending entries (not
    the stream entries) and returns how many it had; unknown consumers give 0."""
    group = await _fresh_group(backend)
    c1, c2 = _name("c1"), _name("c2")
    base = await backend.length(group)
    ids = await backend.add(group, [b"a", b"b", b"c"])
    await backend.read(group, c1, 2, 0)
    await backend.read(group, c2, 10, 0)
    assert await backend.delete_consumer(group, c1) == 2, "c1 had 2 pending entries"
    info = await backend.group_info(group)
    assert info.pending == 1, f"after deleting c1: {info!r}"
    assert c1 not in _consumers(info), f"c1 is still listed: {info!r}"
    assert await backend.delete_consumer(group, c1) == 0, "deleting again must return 0"
    assert await backend.delete_consumer(group, _name("nobody")) == 0, "unknown consumer"
    assert await backend.length(group) == base + 3, "delete_consumer must not delete stream entries"
    got = await backend.claim_stale(group, _name("claimer"), 0, 10)
    assert _ids(got) == ids[2:], f"only c2's entry is still pending, claimed {_ids(got)!r}"


@_contract_check
async def check_delete_idle_consumer(backend: Backend) -> None:
    """``delete_idle_consumer`` removes a consumer only while it has nothing
    pending and has been idle for ``min_idle``, and says whether it did."""
    group = await _fresh_group(backend)
    busy, quiet = _name("busy"), _name("quiet")
    await backend.add(group, [b"a", b"b"])
    await backend.read(group, busy, 1, 0)
    quiet_at = trio.current_time()
    done = await backend.read(group, quiet, 1, 0)
    await backend.ack(group, _ids(done))  # quiet has nothing pending now
    early = await backend.delete_idle_consumer(group, quiet, 0.3)
    _within(quiet_at, 0.3)
    assert early is False, "a consumer idle for less than min_idle was deleted"
    await trio.sleep(0.4)
    assert await backend.delete_idle_consumer(group, busy, 0.3) is False, (
        "a consumer with a pending entry was deleted (its entry would be lost)"
    )
    assert await backend.delete_idle_consumer(group, quiet, 0.3) is True, (
        "an idle consumer with nothing pending must be deleted"
    )
    consumers = _consumers(await backend.group_info(group))
    assert quiet not in consumers, f"the deleted consumer is still listed: {consumers!r}"
    assert consumers.get(busy, (0,))[0] == 1, f"the busy consumer lost its entry: {consumers!r}"
    assert await backend.delete_idle_consumer(group, quiet, 0.3) is False, "deleted twice"
    assert await backend.delete_idle_consumer(group, _name("nobody"), 0) is False, "unknown"
    assert await backend.delete_idle_consumer(_name("nogroup"), quiet, 0) is False, "no group"


@_contract_check
async def check_get_metrics(backend: Backend) -> None:
    """``get_metrics``: ``queue_size`` equals ``length``; claim delays (ns) are
    >= 0 with max >= avg; ``last`` is the newest delivery's delay; every group
    is listed with its pending and lag."""
    group, consumer = await _fresh_group(backend), _name("consumer")
    await backend.add(group, [b"slow"])
    await trio.sleep(0.3)
    await backend.read(group, consumer, 10, 0)
    slow = await backend.get_metrics(group)
    fast_start = trio.current_time()
    await backend.add(group, [b"fast"])
    await backend.read(group, consumer, 10, 0)
    fast_window = trio.current_time() - fast_start  # bounds the "fast" delay
    fast = await backend.get_metrics(group)
    for m in (slow, fast):
        delays = (
            m.message_claim_delay_avg,
            m.message_claim_delay_std,
            m.message_claim_delay_max,
            m.message_claim_delay_last,
        )
        assert all(d >= 0 for d in delays), f"claim delays must be >= 0: {m!r}"
        assert m.message_claim_delay_max >= m.message_claim_delay_avg, f"max < avg: {m!r}"
        assert m.message_claim_delay_max >= m.message_claim_delay_last, f"max < last: {m!r}"
    gap = slow.message_claim_delay_last - fast.message_claim_delay_last
    assert (0.3 - fast_window - _SLACK) * 1e9 <= gap < (0.3 + _LATE) * 1e9, (
        "claim_delay_last must be the newest delivery's delay (nanoseconds): 0.3 s wait "
        f"then none, but last went {slow.message_claim_delay_last} -> "
        f"{fast.message_claim_delay_last}"
    )
    assert fast.message_claim_delay_max >= slow.message_claim_delay_last, (
        f"max claim delay {fast.message_claim_delay_max} is below an earlier delay "
        f"{slow.message_claim_delay_last}"
    )
    assert fast.queue_size == await backend.length(group), (
        f"queue_size {fast.queue_size} != length {await backend.length(group)}"
    )
    groups = {g.name: g for g in fast.groups}
    assert group in groups, f"get_metrics must list group {group!r}: {sorted(groups)!r}"
    assert (groups[group].pending, groups[group].lag) == (2, 0), f"{groups[group]!r}"


@_contract_check
async def check_dead_letters(backend: Backend) -> None:
    """``dead_letter`` appends (payload may be ``None``); ``dead_letters`` returns
    the oldest ``count`` entries with every field intact."""
    group = _name("group")
    before = await backend.dead_letters(group, 100_000)
    first = await backend.dead_letter(group, "1700000000000-0", b"\x00payload", "boom")
    second = await backend.dead_letter(group, "1700000000000-1", None, "ValueError: ünï")
    assert first != second, f"dead-letter ids must be distinct: {first!r}"
    for dead_id in (first, second):
        assert _ID_RE.fullmatch(dead_id), f"dead-letter id {dead_id!r} is not '<ms>-<seq>'"
    after = await backend.dead_letters(group, len(before) + 2)
    assert after[: len(before)] == before, "older dead letters changed or moved"
    got = [(d.id, d.message_id, d.group, d.payload, d.error) for d in after[len(before) :]]
    assert got == [
        (first, "1700000000000-0", group, b"\x00payload", "boom"),
        (second, "1700000000000-1", group, None, "ValueError: ünï"),
    ], f"dead letters did not round-trip: {got!r}"
    limited = await backend.dead_letters(group, len(before) + 1)
    assert [d.id for d in limited] == [d.id for d in before] + [first], (
        "dead_letters(count) must return the oldest count entries"
    )


@_contract_check
async def check_dead_letter_task_id(backend: Backend) -> None:
    """A dead letter keeps the task id it was given (``DeadLetter.task_id``), apart
    from its ``message_id``; one written without a task id reads ``None``."""
    group = _name("group")
    with_id = await backend.dead_letter(
        group, "1700000000002-0", b"x", "boom", task_id="1700000000000-0"
    )
    without = await backend.dead_letter(group, "1700000000003-0", b"y", "bang")
    got = {d.id: (d.message_id, d.task_id) for d in await backend.dead_letters(group, 100)}
    assert got[with_id] == ("1700000000002-0", "1700000000000-0"), f"{got[with_id]!r}"
    assert got[without] == ("1700000000003-0", None), f"{got[without]!r}"
