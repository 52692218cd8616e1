"""Contract checks of the SharedState half: leases, delayed set, metrics, heartbeats,
locks, tuning, the desired instance count; and text no backend can store."""

from __future__ import annotations

import math
import secrets
import time
from collections.abc import Awaitable, Callable

import trio

from taskrunner._wire import TimingIncrement, task_fields
from taskrunner.backends._protocols import Backend
from taskrunner.backends._protocols.queue import DelayedMove
from taskrunner.errors import InvalidCommandArgument
from taskrunner.testing._harness import (
    _LATE,
    _SLACK,
    _contract_check,
    _fresh_group,
    _lock_key,
    _name,
    _within,
)

# Shared state -------------------------------------------------------------------


@_contract_check
async def check_now_advances(backend: Backend) -> None:
    """``now`` is seconds on the backend's clock and advances with trio's sleep."""
    start = backend.now()
    assert isinstance(start, float), f"now() must be a float, got {start!r}"
    await trio.sleep(0.2)
    elapsed = backend.now() - start
    assert 0.2 - _SLACK <= elapsed < 0.2 + _LATE, f"now() advanced {elapsed} s over trio.sleep(0.2)"


_UNIX_2020 = 1_577_836_800.0
"""2020-01-01 UTC: any unix time a backend reports now is later."""


@_contract_check
async def check_unix_time(backend: Backend) -> None:
    """``unix_time`` turns the backend's clock into unix seconds: a fixed shift
    (the same time always converts alike, differences are kept), and ``now()``
    converts to a plausible unix time (after 2020, not a day ahead of ``time.time()``)."""
    start = backend.now()
    first = backend.unix_time(start)
    assert isinstance(first, float), f"unix_time() must be a float, got {first!r}"
    assert _UNIX_2020 < first < time.time() + 86_400, (
        f"unix_time(now()) is not unix seconds: {first!r} (now() is {start!r})"
    )
    later = backend.unix_time(start + 10.0)
    assert math.isclose(later - first, 10.0, abs_tol=1e-5), (
        f"unix_time(t + 10) - unix_time(t) is {later - first!r}, not 10"
    )
    await trio.sleep(0.2)
    again = backend.unix_time(start)
    assert again == first, f"unix_time({start!r}) moved from {first!r} to {again!r}"


@_contract_check
async def check_lease_ownership(backend: Backend) -> None:
    """One owner at a time; only the owner renews or resigns; leases are per group."""
    group, other_group, a, b = _name("group"), _name("group"), _name("a"), _name("b")
    assert await backend.lease_owner(group) is None, "nobody holds a new group's lease"
    assert await backend.renew_lease(group, a, 5.0) is False, "renewing an unheld lease"
    assert await backend.acquire_lease(group, a, 5.0) is True, "a free lease must be taken"
    assert await backend.acquire_lease(group, b, 5.0) is False, "a held lease was taken"
    assert await backend.acquire_lease(group, a, 5.0) is False, "acquire is SET NX, even for a"
    assert await backend.lease_owner(group) == a, "lease_owner must name the holder"
    assert await backend.renew_lease(group, b, 5.0) is False, "a non-owner renewed"
    assert await backend.resign_lease(group, b) is False, "a non-owner resigned"
    assert await backend.lease_owner(group) == a, "a non-owner's renew/resign changed the lease"
    assert await backend.acquire_lease(other_group, b, 5.0) is True, "leases are per group"
    assert await backend.renew_lease(group, a, 5.0) is True, "the owner must be able to renew"
    assert await backend.resign_lease(group, a) is True, "the owner must be able to resign"
    assert await backend.lease_owner(group) is None, "a resigned lease is free"
    assert await backend.resign_lease(group, a) is False, "resigning twice"
    assert await backend.acquire_lease(group, b, 5.0) is True, "a resigned lease must be free"
    owners = await backend.lease_owner(group), await backend.lease_owner(other_group)
    assert owners == (b, b), f"b took both leases, lease_owner says {owners!r}"
    await backend.resign_lease(group, b)
    await backend.resign_lease(other_group, b)


@_contract_check
async def check_lease_expiry(backend: Backend) -> None:
    """A lease expires ``ttl`` after it was taken or last renewed."""
    group, a, b = _name("group"), _name("a"), _name("b")
    acquired_at = trio.current_time()
    assert await backend.acquire_lease(group, a, 0.3) is True, "a free lease must be taken"
    await trio.sleep(0.2)
    renewed_at = trio.current_time()
    renewed = await backend.renew_lease(group, a, 0.3)
    _within(acquired_at, 0.3)
    assert renewed is True, "renew within the ttl"
    await trio.sleep(0.2)  # 0.4 s after acquire: only alive because of the renew
    owner = await backend.lease_owner(group)
    taken = await backend.acquire_lease(group, b, 0.3)
    _within(renewed_at, 0.3)
    assert owner == a, f"renew must extend the lease to ttl from now, owner is {owner!r}"
    assert taken is False, "a renewed lease was taken"
    await trio.sleep(0.2)  # 0.4 s after the renew
    assert await backend.lease_owner(group) is None, "the lease must expire ttl after renew"
    assert await backend.renew_lease(group, a, 0.3) is False, "an expired lease was renewed"
    assert await backend.acquire_lease(group, b, 0.3) is True, "an expired lease must be free"
    await backend.resign_lease(group, b)


@_contract_check
async def check_delayed_set(backend: Backend) -> None:
    """``due_delayed`` returns members with run-at <= ``until``, earliest first,
    at most ``limit``, without removing them; ``next_delayed_at`` is the earliest."""
    group, other = _name("group"), _name("group")
    base = backend.now()
    early, mid, late = b'{"id":"early"}', b'{"id":"mid"}', b'{"id":"late"}'
    assert await backend.next_delayed_at(group) is None, "next_delayed_at of an empty set"
    assert await backend.due_delayed(group, base + 100, 10) == [], "due_delayed of an empty set"
    await backend.add_delayed(group, late, base + 3.5)
    await backend.add_delayed(group, early, base + 1.25)
    await backend.add_delayed(group, mid, base + 2.0)
    await backend.add_delayed(group, mid, base + 2.0)  # a set: still one member
    due = await backend.due_delayed(group, base + 2.0, 10)
    assert due == [early, mid], f"due by base+2.0 (inclusive) must be [early, mid], got {due!r}"
    assert await backend.due_delayed(group, base + 100, 2) == [early, mid], "limit 2"
    every = await backend.due_delayed(group, base + 100, 10)
    assert every == [early, mid, late], f"all members, earliest first: {every!r}"
    assert await backend.due_delayed(group, base + 1.0, 10) == [], "nothing is due yet"
    next_at = await backend.next_delayed_at(group)
    assert next_at is not None, "next_delayed_at of a non-empty set"
    assert math.isclose(next_at, base + 1.25, abs_tol=1e-3), (
        f"next_delayed_at must be the earliest run-at {base + 1.25}, got {next_at!r}"
    )
    assert await backend.due_delayed(other, base + 100, 10) == [], "delayed sets are per group"


@_contract_check
async def check_move_delayed(backend: Backend) -> None:
    """``move_delayed`` removes each member still in the set and adds its message
    to the stream, in order, as an entry a group reads; members already gone
    are skipped, so nothing moves twice."""
    group, consumer = await _fresh_group(backend), _name("c")
    stream_group = group  # the moves land in the group's own stream
    base = backend.now()
    m1, m2, m3 = b'{"id":"m1"}', b'{"id":"m2"}', b'{"id":"m3"}'
    for i, member in enumerate((m1, m2, m3)):
        await backend.add_delayed(group, member, base - 1 + i * 0.1)
    length = await backend.length(group)
    moves = [
        DelayedMove(member=m2, message=b"p2"),
        DelayedMove(member=b'{"id":"absent"}', message=b"absent"),
        DelayedMove(member=m1, message=b"p1"),
    ]
    assert await backend.move_delayed(group, moves) == 2, "two of three members were present"
    assert await backend.length(group) == length + 2, "two moves must add two stream entries"
    assert await backend.due_delayed(group, base + 100, 10) == [m3], "moved members must go"
    got = await backend.read(stream_group, consumer, 10, 0)
    assert [e.payload for e in got] == [b"p2", b"p1"], (
        f"moved messages must be stream entries in move order, read {got!r}"
    )
    assert await backend.move_delayed(group, moves) == 0, "members were moved twice"
    assert await backend.read(stream_group, consumer, 10, 0) == [], "a repeat move added entries"
    assert await backend.move_delayed(group, []) == 0, "move_delayed([]) must return 0"
    moved = await backend.move_delayed(group, [DelayedMove(member=m3, message=b"p3")])
    assert moved == 1, f"moving the last member returned {moved}"
    assert await backend.next_delayed_at(group) is None, "the set must be empty now"
    got = await backend.read(stream_group, consumer, 10, 0)
    assert [e.payload for e in got] == [b"p3"], f"read {got!r}"


@_contract_check
async def check_move_delayed_unique_lock(backend: Backend) -> None:
    """A move whose lock is held is skipped (the member stays); otherwise the
    move takes the lock with its token and ttl."""
    group, consumer = await _fresh_group(backend), _name("c")
    stream_group = group  # the moves land in the group's own stream
    lock, free_lock = _lock_key(backend, group, _name("task")), _lock_key(backend, group, "f")
    base = backend.now()
    locked, free = b'{"id":"locked"}', b'{"id":"free"}'
    await backend.add_delayed(group, locked, base - 1)
    await backend.add_delayed(group, free, base - 0.5)
    assert await backend.acquire_lock(lock, "holder", 5.0) is True

    def move(member: bytes, key: str) -> DelayedMove:
        return DelayedMove(
            member=member, message=member, lock_key=key, lock_token="mover", lock_ttl=0.3
        )

    moved_at = trio.current_time()
    moved = await backend.move_delayed(group, [move(locked, lock), move(free, free_lock)])
    assert moved == 1, f"one member's lock is held, one is free, but {moved} moved"
    assert await backend.due_delayed(group, base + 100, 10) == [locked], (
        "a member whose lock is held must stay in the set"
    )
    got = await backend.read(stream_group, consumer, 10, 0)
    assert [e.payload for e in got] == [free], f"only the free member may move: {got!r}"
    assert await backend.release_lock(lock, "holder") is True, "the skipped move took the lock"
    taken = await backend.acquire_lock(free_lock, "other", 5.0)
    _within(moved_at, 0.3)
    assert taken is False, "the move must take the member's lock"
    assert await backend.release_lock(free_lock, "mover") is True, "the lock token is lock_token"

    moved_at = trio.current_time()
    assert await backend.move_delayed(group, [move(locked, lock)]) == 1, "the lock is free now"
    assert await backend.next_delayed_at(group) is None, "the moved member is still in the set"
    taken = await backend.acquire_lock(lock, "other", 5.0)
    _within(moved_at, 0.3)
    assert taken is False, "the move took no lock"
    await trio.sleep(0.4)
    assert await backend.acquire_lock(lock, "other", 0.3) is True, "lock_ttl must apply"
    await backend.release_lock(lock, "other")


@_contract_check
async def check_metrics_hash(backend: Backend) -> None:
    """Timings add up as integers the Go library reads: whole milliseconds in
    ``_sum``, the same total in microseconds in ``_sum_us``, runs in ``_count``;
    ``_sum_us`` is re-based on ``_sum`` when someone else moved it (a Go
    leader's reset); ``reset_metrics`` zeroes only the given fields; hashes
    are per group."""
    group, other = _name("group"), _name("group")
    t, u, fast = task_fields("t"), task_fields("u"), task_fields("fast")
    assert await backend.read_metrics(group) == {}, "a new group's metrics hash is empty"
    await backend.increment_metrics(group, [TimingIncrement(fields=t, micros=250, count=1)])
    await backend.increment_metrics(
        group,
        [
            TimingIncrement(fields=t, micros=1500, count=2),
            TimingIncrement(fields=u, micros=125, count=1),
        ],
    )
    for _ in range(10):
        await backend.increment_metrics(group, [TimingIncrement(fields=fast, micros=1, count=1)])
    await backend.increment_metrics(group, [])
    got = await backend.read_metrics(group)
    expected = {
        "t_sum": 1, "t_sum_us": 1750, "t_count": 3,
        "u_sum": 0, "u_sum_us": 125, "u_count": 1,
        "fast_sum": 0, "fast_sum_us": 10, "fast_count": 10,
    }  # fmt: skip
    assert got == expected, f"_sum must be whole ms of the exact _sum_us: {got!r}"
    assert all(float(v).is_integer() for v in got.values()), f"Go reads integers: {got!r}"

    await backend.reset_metrics(group, ["t_sum", "t_count"])  # what a Go leader's reset does
    await backend.increment_metrics(group, [TimingIncrement(fields=t, micros=400, count=1)])
    got = await backend.read_metrics(group)
    assert (got.get("t_sum"), got.get("t_sum_us"), got.get("t_count")) == (0, 400, 1), (
        f"_sum_us must be re-based on a _sum someone else reset, not keep its old total: {got!r}"
    )
    await backend.reset_metrics(group, ["u_sum", "u_sum_us"])
    got = await backend.read_metrics(group)
    assert (got.get("u_sum"), got.get("u_sum_us"), got.get("u_count")) == (0, 0, 1), (
        f"reset must zero only the given fields: {got!r}"
    )
    assert await backend.read_metrics(other) == {}, "metrics hashes are per group"


@_contract_check
async def check_heartbeats(backend: Backend) -> None:
    """Heartbeats count while live, expire after ``ttl``, and are removed only
    with the instance id they hold. ``heartbeat`` refuses a key another instance
    holds (and names it) until that key expires.

    ``count_heartbeats`` is global: nobody else may add or drop heartbeats on
    the same store while this check runs.
    """
    base = await backend.count_heartbeats()
    h1, h2, group = _name("host"), _name("host"), _name("group")
    assert await backend.heartbeat(h1, "i1", 0.3, group=group) is None, (
        "a free heartbeat key must be set"
    )
    h1_at = trio.current_time()
    assert await backend.heartbeat(h1, "i1", 0.3, group=group) is None, (
        "the holder must renew its key"
    )
    h2_at = trio.current_time()
    await backend.heartbeat(h2, "i2", 0.6, group=group)
    live = await backend.count_heartbeats()
    await backend.remove_heartbeat(h1, "someone-else", group=group)
    still_live = await backend.count_heartbeats()
    _within(h1_at, 0.3)
    assert live == base + 2, f"two hosts, two heartbeats: counted {live - base}"
    assert still_live == base + 2, "removed with the wrong instance id"
    await backend.remove_heartbeat(h1, "i1", group=group)
    assert await backend.count_heartbeats() == base + 1, "the owner's remove must delete it"
    await backend.remove_heartbeat(h1, "i1", group=group)  # gone already: a no-op
    refused = await backend.heartbeat(h2, "i3", 0.6, group=group)  # another instance, the same host
    await backend.remove_heartbeat(h2, "i3", group=group)
    holder = await backend.heartbeat_holder(h2, group=group)
    live = await backend.count_heartbeats()
    _within(h2_at, 0.6)
    assert refused == "i2", f"heartbeat over another instance's key must name it: {refused!r}"
    assert holder is not None, "a refused heartbeat or a non-holder's remove deleted the key"
    assert holder[0] == "i2", f"a refused heartbeat changed the key: {holder!r}"
    assert live == base + 1, "a non-holder removed the heartbeat"
    await trio.sleep(0.7)
    assert await backend.count_heartbeats() == base, "a heartbeat outlived its ttl"
    assert await backend.heartbeat(h2, "i3", 0.3, group=group) is None, (
        "an expired key must be free"
    )
    await backend.remove_heartbeat(h2, "i3", group=group)


@_contract_check
async def check_heartbeat_holder(backend: Backend) -> None:
    """``heartbeat_holder`` names the key's instance and its seconds left, which
    go down as time passes and back up when the holder renews; ``None`` once
    the key is gone."""
    host, group = _name("host"), _name("group")
    assert await backend.heartbeat_holder(host, group=group) is None, "no key yet"
    set_at = trio.current_time()
    await backend.heartbeat(host, "i1", 1.0, group=group)
    first = await backend.heartbeat_holder(host, group=group)
    assert first is not None, "a live key has a holder"
    assert first[0] == "i1", f"the holder is the instance that set it: {first!r}"
    assert 1.0 - _LATE < first[1] <= 1.0, f"seconds left of a 1.0 s key just set: {first!r}"
    await trio.sleep(0.4)
    later = await backend.heartbeat_holder(host, group=group)
    _within(set_at, 1.0)
    assert later is not None, "the key expired before its ttl"
    assert later[1] <= first[1] - 0.4 + _SLACK, f"seconds left must run down: {first!r} {later!r}"
    await backend.heartbeat(host, "i1", 1.0, group=group)
    renewed = await backend.heartbeat_holder(host, group=group)
    assert renewed is not None, "a renewed key has a holder"
    assert renewed[1] > later[1] + 0.3, f"a renew must show as more time left: {renewed!r}"
    await backend.remove_heartbeat(host, "i1", group=group)
    assert await backend.heartbeat_holder(host, group=group) is None, "a removed key has no holder"


@_contract_check
async def check_locks(backend: Backend) -> None:
    """Locks are ``SET NX`` with a ttl and released only with their token."""
    key = _lock_key(backend, _name("group"), _name("task"))
    locked_at = trio.current_time()
    assert await backend.acquire_lock(key, "t1", 0.3) is True, "a free lock must be taken"
    other = await backend.acquire_lock(key, "t2", 0.3)
    again = await backend.acquire_lock(key, "t1", 0.3)
    released = await backend.release_lock(key, "t2")
    await trio.sleep(0.2)
    later = await backend.acquire_lock(key, "t2", 0.3)
    _within(locked_at, 0.3)
    assert other is False, "a held lock was taken"
    assert again is False, "acquire is SET NX, even for the holder"
    assert released is False, "released with the wrong token"
    assert later is False, "the lock expired before its ttl"
    await trio.sleep(0.2)
    assert await backend.acquire_lock(key, "t2", 5.0) is True, "the lock must expire after ttl"
    assert await backend.release_lock(key, "t1") is False, "an expired holder released a lock"
    assert await backend.release_lock(key, "t2") is True, "the holder must be able to release"
    assert await backend.release_lock(key, "t2") is False, "released twice"
    assert await backend.acquire_lock(key, "t3", 5.0) is True, "a released lock must be free"
    await backend.release_lock(key, "t3")


@_contract_check
async def check_tuning(backend: Backend) -> None:
    """The published capacity is read back until its ttl ends; per group."""
    group, other = _name("group"), _name("group")
    assert await backend.read_tuning(group) is None, "nothing published yet"
    await backend.publish_tuning(group, 7, 5.0)
    assert await backend.read_tuning(group) == 7, "a published capacity must be read back"
    published_at = trio.current_time()
    await backend.publish_tuning(group, 9, 0.3)
    assert await backend.read_tuning(group) == 9, "a new publish replaces the value"
    assert await backend.read_tuning(other) is None, "tuning is per group"
    await trio.sleep(0.2)
    value = await backend.read_tuning(group)
    _within(published_at, 0.3)
    assert value == 9, f"the value expired before its ttl: read {value!r}"
    await trio.sleep(0.2)
    assert await backend.read_tuning(group) is None, "the value outlived its ttl"


@_contract_check
async def check_desired_instances(backend: Backend) -> None:
    """The published instance count is read back until its ttl ends; per group; apart
    from the tuning value."""
    group, other = _name("group"), _name("group")
    assert await backend.read_desired_instances(group) is None, "nothing published yet"
    await backend.publish_tuning(group, 3, 5.0)
    await backend.publish_desired_instances(group, 7, 5.0)
    assert await backend.read_desired_instances(group) == 7, "a published count must be read back"
    assert await backend.read_tuning(group) == 3, "the count must not replace the tuning value"
    published_at = trio.current_time()
    await backend.publish_desired_instances(group, 2, 0.3)
    assert await backend.read_desired_instances(group) == 2, "a new publish replaces the value"
    assert await backend.read_desired_instances(other) is None, "the count is per group"
    await trio.sleep(0.2)
    value = await backend.read_desired_instances(group)
    _within(published_at, 0.3)
    assert value == 2, f"the count expired before its ttl: read {value!r}"
    await trio.sleep(0.2)
    assert await backend.read_desired_instances(group) is None, "the count outlived its ttl"


@_contract_check
async def check_shard_count(backend: Backend) -> None:
    """A recorded shard count is read back, with no expiry, per group, under the group's
    own hash tag; recording 1 removes it."""
    group, other = _name("group"), _name("group")
    assert await backend.read_shard_count(group) is None, "nothing recorded yet"
    await backend.record_shard_count(group, 16)
    assert await backend.read_shard_count(group) == 16, "a recorded count must be read back"
    assert await backend.read_shard_count(other) is None, "the count is per group"
    await trio.sleep(0.5)
    assert await backend.read_shard_count(group) == 16, "the count must not expire"
    await backend.record_shard_count(group, 4)
    assert await backend.read_shard_count(group) == 4, "a new count replaces the old"
    await backend.record_shard_count(group, 1)
    assert await backend.read_shard_count(group) is None, "shards=1 must leave no record"


@_contract_check
async def check_unencodable_text_is_refused(backend: Backend) -> None:
    """A string with no UTF-8 form (a lone surrogate, which JSON allows, so a message
    can carry one) is refused with ``InvalidCommandArgument``, not retryable and
    certainly not applied, before anything changes; the same call with good text works."""
    bad = "\udc80"
    group = _name("g")  # short names: a refusal shows the first 60 characters
    key = _lock_key(backend, group, f"t{secrets.token_hex(4)}")
    member = b'{"id":"contract","task":"t","time":0,"payload":null}'
    assert await backend.acquire_lock(key, "t", 5.0) is True, "a free lock must be taken"
    await backend.add_delayed(group, member, backend.now() - 1)
    length, dead = await backend.length(group), len(await backend.dead_letters(group, 100_000))
    calls: dict[str, Callable[[], Awaitable[object]]] = {
        "acquire_lock": lambda: backend.acquire_lock(f"{key}:{bad}", "t", 5.0),
        "release_lock": lambda: backend.release_lock(key, f"t{bad}"),
        "heartbeat": lambda: backend.heartbeat("h" + bad, "id", 5.0, group=group),
        "increment_metrics": lambda: backend.increment_metrics(
            group,
            [
                TimingIncrement(fields=task_fields("ok"), micros=1, count=1),
                TimingIncrement(fields=task_fields(f"job{bad}"), micros=1, count=1),
            ],
        ),
        "move_delayed": lambda: backend.move_delayed(
            group,
            [DelayedMove(member=member, message=b"m", lock_key=f"{key}:{bad}", lock_ttl=5.0)],
        ),
        "dead_letter": lambda: backend.dead_letter(group, "1-1", b"x", f"error {bad}"),
    }
    for name, call in calls.items():
        refusal: InvalidCommandArgument | None = None
        try:
            await call()
        except InvalidCommandArgument as exc:
            refusal = exc
        assert refusal is not None, f"{name} accepted a string with a lone surrogate"
        assert refusal.maybe_applied is False, f"{name}: a refusal must say it did not apply"
        assert refusal.retryable is False, f"{name}: retrying cannot encode it"
        assert "\\udc80" in str(refusal), f"{name}: the error must show the value: {refusal}"
    assert await backend.acquire_lock(key, "u", 5.0) is False, "a refused release released"
    assert await backend.read_metrics(group) == {}, "a refused increment applied a field"
    assert await backend.due_delayed(group, backend.now(), 10) == [member], "a refused move moved"
    assert await backend.length(group) == length, "a refused move added to the stream"
    assert len(await backend.dead_letters(group, 100_000)) == dead, (
        "a refused dead letter was added"
    )
    assert await backend.release_lock(key, "t") is True, "the holder must be able to release"
