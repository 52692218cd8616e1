"""Contract checks of the :class:`~taskrunner.backends.Inspection` protocol: the
operator reads and operations (ping, groups, keys, key counts, heartbeats, the
lease, flushing a group).

A backend of your own that does not implement the protocol still serves tasks;
leave these checks out with ``contract_parametrize(inspection=False)``. Run on
such a backend, each fails at once saying which methods are missing.

Heartbeats and unique locks are not per group in the go layout: the listings
include every group's, so the checks look for their own names among them (in
the cluster layout they are the group's, and the checks make them so). ``check_flush``
deletes every heartbeat and unique lock (go layout), and ``check_count_keys`` compares two
listings: nobody else may use heartbeats or locks on the same store meanwhile.
"""

from __future__ import annotations

import math
from typing import cast

import trio

from taskrunner import _keys
from taskrunner._dispatch.guards import missing_inspection
from taskrunner._wire import CatalogDocument, TimingIncrement, task_fields
from taskrunner.backends._protocols import Backend
from taskrunner.backends._protocols.inspection import Inspection, KeyCounts, KeyInfo, KeyKind
from taskrunner.backends._protocols.schedules import ScheduleRecords
from taskrunner.testing._harness import (
    _LATE,
    _SLACK,
    _contract_check,
    _fresh_group,
    _heartbeat,
    _lock_key,
    _name,
    _shares_stream,
    _within,
)


def _inspection(backend: Backend) -> Inspection:
    missing = missing_inspection(backend)
    assert not missing, (
        f"{type(backend).__name__} does not implement taskrunner.backends.Inspection "
        f"(no {', '.join(missing)}); leave these checks out: contract_parametrize(inspection=False)"
    )
    return cast(Inspection, backend)


_FLOAT_NOISE = 1e-9
"""Seconds of rounding in clock arithmetic: ``(now + ttl) - now`` may exceed ``ttl`` by
a few ulps once the clock reads a large number."""


def _catalog_document(host: str, now: float) -> CatalogDocument:
    return CatalogDocument(host=host, instance=f"instance-of-{host}", expires=now + 30.0)


def _fresh_ttl(left: float | None, ttl: float, what: str) -> float:
    """``left``, the seconds a key set for ``ttl`` just now reports: in ``(0, ttl]``
    (give or take float rounding), and more than ``ttl - _LATE``."""
    assert left is not None, f"{what} was set for {ttl} s just now, but reports no expiry"
    assert max(0.0, ttl - _LATE) < left <= ttl + _FLOAT_NOISE, (
        f"{what} was set for {ttl} s just now, but has {left!r} s left"
    )
    return left


async def _timing(backend: Backend, group: str) -> None:
    await backend.increment_metrics(
        group, [TimingIncrement(fields=task_fields("t"), micros=1000, count=1)]
    )


@_contract_check
async def check_ping(backend: Backend) -> None:
    """``ping`` answers with the seconds its round trip took, and like every call is a
    checkpoint: in a cancelled scope it is cancelled."""
    inspection = _inspection(backend)
    start = trio.current_time()
    took = await inspection.ping()
    elapsed = trio.current_time() - start
    assert isinstance(took, float), f"ping must return seconds as a float, got {took!r}"
    assert 0.0 <= took <= elapsed + 1e-9, (
        f"ping reports {took!r} s for a round trip that took {elapsed!r} s"
    )
    with trio.CancelScope() as scope:
        scope.cancel()
        await inspection.ping()
    assert scope.cancelled_caught, "ping returned inside a cancelled scope: it is no checkpoint"


@_contract_check
async def check_list_groups(backend: Backend) -> None:
    """``list_groups`` is sorted and names every group with a consumer group on a
    stream, a delayed set, a metrics hash or a published tuning capacity, but no
    unique lock or heartbeat whose key merely looks like a group key; a group whose
    last key expired is gone."""
    inspection = _inspection(backend)
    reader, waiting, timed, tuned = (_name("group") for _ in range(4))
    lookalike = _name("task")
    await backend.read(reader, _name("consumer"), 1, 0)  # creates the consumer group
    await backend.add_delayed(waiting, b'{"id":"later"}', backend.now() + 60)
    await _timing(backend, timed)
    tuned_at = trio.current_time()
    await backend.publish_tuning(tuned, 3, 0.3)
    lock = _lock_key(backend, reader, f"{lookalike}:metrics")
    await backend.acquire_lock(lock, "token", 30.0)
    async with _heartbeat(backend, f"{lookalike}:metrics", group=reader):
        groups = await inspection.list_groups()
    _within(tuned_at, 0.3)
    assert groups == sorted(set(groups)), f"list_groups must be sorted and distinct: {groups!r}"
    missing = [g for g in (reader, waiting, timed, tuned) if g not in groups]
    assert not missing, f"list_groups misses groups {missing!r} (it found {groups!r})"
    assert not [g for g in groups if lookalike in g], (
        f"a unique lock or heartbeat named like a group key is not a group: {groups!r}"
    )
    await trio.sleep(0.4)
    groups = await inspection.list_groups()
    assert tuned not in groups, f"{tuned!r} has no key left (its tuning expired): {groups!r}"
    assert reader in groups, f"a consumer group stays listed: {groups!r}"
    await backend.release_lock(lock, "token")


@_contract_check
async def check_list_keys(backend: Backend) -> None:
    """``list_keys`` reports each key of the group that exists with its kind, Redis
    type, size and seconds left, in kind order; heartbeats and unique locks of
    every group; no other group's keys; a key that expired is left out."""
    inspection = _inspection(backend)
    group, other = await _fresh_group(backend), await _fresh_group(backend)
    keys, layout = backend.stream_keys(group), backend.key_layout
    lock, host = _lock_key(backend, group, _name("task")), _name("host")
    await backend.add(group, [b"entry"])
    await backend.read(group, _name("consumer"), 10, 0)
    await backend.get_metrics(group)  # the claim delay is in the ring now
    await backend.dead_letter(group, "1700000000000-0", b"payload", "boom")
    for member in (b'{"id":"a"}', b'{"id":"b"}'):
        await backend.add_delayed(group, member, backend.now() + 60)
    await backend.acquire_lease(group, "owner-7", 30.0)
    await backend.start_schedules(group, "owner-7", ["nightly", "hourly"], backend.now())
    await backend.publish_schedule_specs(group, {"nightly": b"{}"})
    await _timing(backend, group)
    await backend.acquire_lock(lock, "token", 30.0)
    await backend.add_delayed(other, b'{"id":"other"}', backend.now() + 60)
    for g, catalog_host in ((group, host), (group, _name("host")), (other, host)):
        await backend.publish_catalog(g, _catalog_document(catalog_host, backend.now()), 30.0)
    async with _heartbeat(backend, host, group=group):
        tuned_at = trio.current_time()  # before the 0.3 s key is written: its window
        for g in (group, other):
            await backend.publish_tuning(g, 12, 0.3 if g == group else 30.0)
        listed = await inspection.list_keys(group)
    _within(tuned_at, 0.3)
    by_name = {k.name: k for k in listed}
    assert len(by_name) == len(listed), f"a key listed twice: {[k.name for k in listed]!r}"
    assert [k.order for k in listed] == sorted(k.order for k in listed), (
        f"keys must come by kind, then name: {[(k.kind.value, k.name) for k in listed]!r}"
    )
    length, dead = await backend.length(group), len(await backend.dead_letters(group, 100_000))
    expected = {
        keys.stream: (KeyKind.STREAM, "stream", length, None),
        keys.dead_letter: (KeyKind.DEAD_LETTER, "stream", dead, None),
        _keys.delayed_tasks(group, layout): (KeyKind.DELAYED_TASKS, "zset", 2, None),
        _keys.metrics(group, layout): (KeyKind.METRICS, "hash", 3, None),
        _keys.schedules(group, layout): (
            KeyKind.SCHEDULES,
            "hash",
            2,
            None,
        ),  # a watermark each
        _keys.schedule_specs(group, layout): (KeyKind.SCHEDULE_SPECS, "hash", 1, None),
    }
    for name, want in expected.items():
        key = by_name.get(name)
        got = None if key is None else (key.kind, key.type, key.size, key.ttl)
        assert got == want, f"{name}: (kind, type, size, ttl) is {got!r}, not {want!r}"
    ring = by_name.get(keys.claim_delay_ring)
    assert ring is not None, f"the claim-delay ring is not listed: {sorted(by_name)!r}"
    assert (ring.kind, ring.type, ring.ttl) == (KeyKind.CLAIM_DELAY_RING, "list", None), ring
    assert 1 <= ring.size <= 1000, f"the ring holds 1 to 1000 delays: {ring!r}"
    catalog = by_name.get(_keys.catalog(group, layout))
    assert catalog is not None, f"the task catalog is not listed: {sorted(by_name)!r}"
    assert (catalog.kind, catalog.type, catalog.size) == (KeyKind.CATALOG, "hash", 2), catalog
    _fresh_ttl(catalog.ttl, 30.0, "the task catalog")
    strings = {
        _keys.leader(group, layout): (KeyKind.LEADER, len("owner-7"), 30.0),
        _keys.worker_tuning_capacity(group, layout): (KeyKind.TUNING, len("12"), 0.3),
        lock: (KeyKind.UNIQUE_LOCK, len("token"), 30.0),
        _keys.replication(host, layout, group): (
            KeyKind.HEARTBEAT,
            len("instance"),
            30.0,
        ),
    }
    for name, (kind, size, ttl) in strings.items():
        key = by_name.get(name)
        assert key is not None, f"{name} is not listed: {sorted(by_name)!r}"
        assert (key.kind, key.type, key.size) == (kind, "string", size), key
        _fresh_ttl(key.ttl, ttl, name)
    assert all(k.purpose for k in listed), "every key has a purpose"
    foreign = {
        _keys.delayed_tasks(other, layout),
        _keys.worker_tuning_capacity(other, layout),
        _keys.catalog(other, layout),
    }
    assert not foreign & set(by_name), f"another group's keys were listed: {foreign & set(by_name)}"

    await trio.sleep(0.4)
    names = {k.name for k in await inspection.list_keys(group)}
    assert _keys.worker_tuning_capacity(group, layout) not in names, "an expired key was listed"
    assert {keys.stream, _keys.metrics(group, layout), lock} <= names, "live keys went missing"
    await backend.release_lock(lock, "token")
    await backend.resign_lease(group, "owner-7")
    await backend.remove_catalog(other, host)


@_contract_check
async def check_count_keys(backend: Backend) -> None:
    """``count_keys`` counts, per kind, exactly what ``list_keys`` lists."""
    inspection = _inspection(backend)
    group = await _fresh_group(backend)
    lock, host = _lock_key(backend, group, _name("task")), _name("host")
    await backend.add(group, [b"entry"])
    await backend.add_delayed(group, b'{"id":"a"}', backend.now() + 60)
    await _timing(backend, group)
    await backend.acquire_lock(lock, "token", 30.0)
    await backend.heartbeat(host, "instance", 30.0, group=group)

    counts = await inspection.count_keys(group)
    listed = await inspection.list_keys(group)
    want = KeyCounts.of(k.kind for k in listed)
    assert counts == want, f"count_keys says {counts!r}, list_keys lists {want!r}"
    fixed = (counts.stream, counts.delayed_tasks, counts.metrics, counts.leader, counts.tuning)
    assert fixed == (1, 1, 1, 0, 0), f"(stream, delayed, metrics, leader, tuning): {fixed!r}"
    assert counts.heartbeat >= 1, f"every group's heartbeats count: {counts!r}"
    assert counts.unique_lock >= 1, f"every group's unique locks count: {counts!r}"
    assert counts.total == len(listed), f"total {counts.total} of {len(listed)} keys listed"
    await backend.release_lock(lock, "token")
    await backend.remove_heartbeat(host, "instance", group=group)


@_contract_check
async def check_list_heartbeats(backend: Backend) -> None:
    """``list_heartbeats`` names every live instance (host, instance id, seconds
    left, running down), sorted by host; expired and removed ones are gone."""
    inspection = _inspection(backend)
    short, long, group = _name("host"), _name("host"), _name("group")
    set_at = trio.current_time()
    await backend.heartbeat(short, "i-short", 0.3, group=group)
    await backend.heartbeat(long, "i-long", 1.0, group=group)
    beats = await inspection.list_heartbeats()
    _within(set_at, 0.3)
    hosts = [b.host for b in beats]
    assert hosts == sorted(hosts), f"heartbeats must be sorted by host: {hosts!r}"
    mine = {b.host: b for b in beats if b.host in (short, long)}
    assert set(mine) == {short, long}, f"live heartbeats missing: {hosts!r}"
    ids = mine[short].instance_id, mine[long].instance_id
    assert ids == ("i-short", "i-long"), f"each heartbeat names its instance: {mine!r}"
    first = _fresh_ttl(mine[long].ttl, 1.0, "a heartbeat")
    _fresh_ttl(mine[short].ttl, 0.3, "a heartbeat")

    await trio.sleep(0.4)
    mine = {b.host: b for b in await inspection.list_heartbeats() if b.host in (short, long)}
    _within(set_at, 1.0)
    assert short not in mine, f"an expired heartbeat was listed: {mine.get(short)!r}"
    assert long in mine, "a live heartbeat went missing"
    later = mine[long].ttl
    assert later is not None, f"a heartbeat lost its expiry: {mine[long]!r}"
    assert later <= first - 0.4 + _SLACK, f"seconds left must run down: {first!r} then {later!r}"
    await backend.remove_heartbeat(long, "i-long", group=group)
    hosts = [b.host for b in await inspection.list_heartbeats()]
    assert long not in hosts, "a removed heartbeat was listed"


@_contract_check
async def check_read_lease(backend: Backend) -> None:
    """``read_lease`` gives the holder and its seconds left (running down, back up on
    renew); ``None`` when nobody holds it, after a resign and after expiry."""
    inspection = _inspection(backend)
    group = _name("group")
    assert await inspection.read_lease(group) is None, "nobody holds a new group's lease"
    taken_at = trio.current_time()
    await backend.acquire_lease(group, "a", 1.0)
    first = await inspection.read_lease(group)
    assert first is not None, "a held lease must be read"
    assert first.owner == "a", f"the holder is 'a': {first!r}"
    first_left = _fresh_ttl(first.ttl, 1.0, "the lease")
    await trio.sleep(0.3)
    later = await inspection.read_lease(group)
    _within(taken_at, 1.0)
    assert later is not None, "the lease expired before its ttl"
    assert later.ttl is not None, f"the lease lost its expiry: {later!r}"
    assert later.ttl <= first_left - 0.3 + _SLACK, f"seconds left must run down: {later!r}"
    await backend.renew_lease(group, "a", 1.0)
    renewed = await inspection.read_lease(group)
    assert renewed is not None, "a renewed lease must be read"
    renewed_left = _fresh_ttl(renewed.ttl, 1.0, "the renewed lease")
    assert renewed_left > later.ttl + 0.2, f"a renew must show as more time left: {renewed!r}"
    await backend.resign_lease(group, "a")
    assert await inspection.read_lease(group) is None, "a resigned lease has no holder"
    await backend.acquire_lease(group, "b", 0.3)
    await trio.sleep(0.4)
    assert await inspection.read_lease(group) is None, "an expired lease has no holder"


@_contract_check
async def check_flush(backend: Backend) -> None:
    """``flush_group`` means the same on every backend: the group's own keys go
    (lease, tuning value, metrics, delayed set, catalog, schedules, the group itself, and its stream
    and dead letters unless another group reads them), unique locks go, other
    groups' keys stay, and heartbeats go only with ``heartbeats=True``. It returns
    the names it deleted, in the order ``list_keys`` lists them.

    In the go layout ``count_heartbeats`` is global and ``heartbeats=True`` deletes
    every heartbeat: nobody else may use heartbeats on the same store meanwhile. In the
    cluster layout heartbeats are per group: the group's go, another group's stay.
    """
    inspection = _inspection(backend)
    group, other = await _fresh_group(backend), await _fresh_group(backend)
    shared = _shares_stream(backend, group, other)
    lock, host = _lock_key(backend, group, _name("task")), _name("host")
    base = await backend.length(group), len(await backend.dead_letters(group, 100_000))
    for g in (group, other):
        await backend.acquire_lease(g, "owner", 30.0)
        await backend.publish_tuning(g, 5, 30.0)
        await _timing(backend, g)
        await backend.add_delayed(g, b'{"id":"later"}', backend.now() + 60)
        await backend.publish_catalog(g, _catalog_document(host, backend.now()), 30.0)
        await backend.start_schedules(g, "owner", ["nightly"], backend.now())
        await backend.publish_schedule_specs(g, {"nightly": b"{}"})
        await backend.add(g, [b"entry"])
    for g in (group, other):
        await backend.read(g, _name("consumer"), 10, 0)
    await backend.dead_letter(group, "1700000000000-0", b"payload", "boom")
    await backend.acquire_lock(lock, "token", 30.0)
    beats = await backend.count_heartbeats()
    await backend.heartbeat(host, "instance", 30.0, group=group)
    await backend.heartbeat(host, "instance", 30.0, group=other)  # one key in the go layout
    listed: list[KeyInfo] = await inspection.list_keys(group)

    deleted = await inspection.flush_group(group, heartbeats=False)

    kept_kinds = {KeyKind.HEARTBEAT}
    if shared:
        kept_kinds |= {KeyKind.STREAM, KeyKind.DEAD_LETTER, KeyKind.CLAIM_DELAY_RING}
    want = [k.name for k in listed if k.kind not in kept_kinds]
    assert deleted == want, f"flush_group deleted {deleted!r}; of its listing, {want!r}"
    gone = (
        await backend.lease_owner(group),
        await backend.read_tuning(group),
        await backend.read_metrics(group),
        await backend.due_delayed(group, math.inf, 10),
        (await backend.group_info(group)).pending,
        await backend.read_catalog(group),
        await backend.read_schedules(group),
    )
    assert gone == (None, None, {}, [], 0, [], ScheduleRecords(specs={}, states={})), (
        f"flush left the group's lease, tuning, metrics, delayed set, pending, catalog or "
        f"schedules: {gone!r}"
    )
    kept = (
        await backend.lease_owner(other),
        await backend.read_tuning(other),
        await backend.read_metrics(other),
        len(await backend.due_delayed(other, math.inf, 10)),
        (await backend.group_info(other)).pending,
        len(await backend.read_catalog(other)),
        sorted((await backend.read_schedules(other)).specs),
    )
    metrics = {"t_sum": 1.0, "t_sum_us": 1000.0, "t_count": 1.0}
    expected = ("owner", 5, metrics, 1, 2 if shared else 1, 1, ["nightly"])
    assert kept == expected, f"flush touched another group's keys: {kept!r}, not {expected!r}"
    stream_left = await backend.length(group), len(await backend.dead_letters(group, 100_000))
    left = (base[0] + 2, base[1] + 1) if shared else (0, 0)
    assert stream_left == left, (
        f"{'a stream other groups read must stay' if shared else 'the stream must go'}: "
        f"(length, dead letters) is {stream_left!r}, not {left!r}"
    )
    assert await backend.acquire_lock(lock, "other", 1.0) is True, "unique locks must be deleted"
    await backend.release_lock(lock, "other")
    if backend.key_layout == "go":
        assert await backend.count_heartbeats() == beats + 1, "heartbeats=False deleted a heartbeat"
    else:
        kept_beats = [await backend.count_heartbeats(group=g) for g in (group, other)]
        assert kept_beats == [1, 1], f"heartbeats=False deleted a heartbeat: {kept_beats!r}"
    assert not any(other in name for name in deleted), f"another group's keys: {deleted!r}"

    deleted = await inspection.flush_group(group, heartbeats=True)
    if backend.key_layout == "go":
        assert await backend.count_heartbeats() == 0, "heartbeats=True must delete every heartbeat"
    else:
        # The group's own: other groups' heartbeats (another check's, say) are not its to
        # delete, and a global count would depend on them.
        assert await backend.count_heartbeats(group=group) == 0, (
            "heartbeats=True must delete the group's heartbeats"
        )
        assert await backend.count_heartbeats(group=other) == 1, (
            "heartbeats=True deleted another group's heartbeat"
        )
    beat = _keys.replication(host, backend.key_layout, group)
    assert beat in deleted, (
        f"flush_group(heartbeats=True) does not report the heartbeats it deleted: {deleted!r}"
    )
    await backend.remove_heartbeat(host, "instance", group=other)
    await backend.resign_lease(other, "owner")
    await backend.remove_catalog(other, host)
