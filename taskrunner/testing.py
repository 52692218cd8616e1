"""The backend contract suite: plain async checks every backend must pass.

Each check is ``async def check_xxx(backend) -> None``: it drives one
:class:`~taskrunner.backends.Backend` through the behaviour the protocol
docstrings promise (``taskrunner/backends/_protocols.py``) and raises
:class:`AssertionError` with a message saying what was expected. The checks
know nothing about pytest; :func:`contract_parametrize` turns
:data:`CONTRACT_CHECKS` into one test per check::

    from taskrunner.backends.memory import MemoryBackend
    from taskrunner.testing import contract_parametrize

    @contract_parametrize()
    async def test_backend_contract(check, autojump_clock):
        async with MemoryBackend() as backend:  # a fresh backend per check
            await check(backend)

    # A networked backend: real time, a fresh queue name per check.
    @contract_parametrize(exclude=["check_heartbeats"])  # e.g. a busy shared server
    async def test_redis_contract(check):
        backend = await open_my_backend(queue=f"contract-{uuid.uuid4().hex}")
        try:
            await check(backend)
        finally:
            await backend.aclose()

It also offers :class:`PartitionedBackend`, a backend wrapper whose link can
be cut, to simulate partitions and crashed processes in fleet tests.

Theory of operation. Time only passes through ``trio.sleep``, in steps of a
few tenths of a second with at least 0.1 s between what must and what must
not have happened, so the same check is exact under trio's ``MockClock``
(instant with ``autojump_clock``) and reliable against a real server in real
time (the whole suite takes a few seconds there). Every group, consumer, key
and host name is random, so checks do not collide in shared state. The stream
is the one thing a backend instance has only one of: a check starts from a
group whose cursor is already at the end of the stream (see ``_fresh_group``)
and measures lengths as differences, so leftovers from earlier checks are
harmless, but nobody else may write to that stream while a check runs.

Whether ``ack`` deletes entries is a backend setting, not part of the
protocol: the checks read a ``delete_on_ack`` attribute from the backend and
treat a backend without one as never deleting.

A "not yet" assertion (the lease is still held, the entry is not claimable
yet) is only made while trio's clock shows that the interval on the server is
surely below its limit; if a stall (a loaded machine, a slow round trip) pushed
the run past it, the answer is legitimately either way, so the check starts
over with fresh names, at most three times, and then fails saying so. Under
``MockClock`` this never happens, and nothing is ever silently skipped.

Each check runs under a hang guard of :data:`CHECK_TIMEOUT` seconds (trio's
clock), so a backend call that never returns fails the check instead of
hanging the test run.
"""

from __future__ import annotations

import functools
import itertools
import math
import re
import secrets
from collections.abc import Awaitable, Callable, Collection, Sequence
from typing import TYPE_CHECKING, TypeAlias

import trio

from taskrunner._partition import PartitionedBackend
from taskrunner.backends._protocols import Backend, DelayedMove, GroupInfo, QueueEntry

if TYPE_CHECKING:
    import pytest

__all__ = [
    "CHECK_TIMEOUT",
    "CONTRACT_CHECKS",
    "ContractCheck",
    "PartitionedBackend",
    "contract_parametrize",
]

ContractCheck: TypeAlias = Callable[[Backend], Awaitable[None]]
"""One contract check: takes a backend, raises :class:`AssertionError` on a breach."""

CHECK_TIMEOUT = 10.0
"""Seconds (trio's clock) a single check may take before it fails as hung."""

_SLACK = 0.02
"""Real-time tolerance for lower bounds: servers count idle time in whole milliseconds."""
_LATE = 1.0
"""Generous real-time tolerance for upper bounds (scheduling, network round trips)."""
_ID_CLOCK_TOLERANCE = 30.0
"""How far an id's millisecond part may be from :meth:`SharedState.now` (clock skew)."""

_ID_RE = re.compile(r"[0-9]+-[0-9]+")
_registry: list[ContractCheck] = []


class _MissedWindow(Exception):
    """The run was too slow to decide a "not yet" assertion; the check is retried."""


_ATTEMPTS = 3
_RETRY_PAUSE = 1.0
"""Longer than any ttl a check leaves behind, so a retry starts from a quiet store."""


def _within(start: float, limit: float) -> None:
    """Raise :class:`_MissedWindow` unless less than ``limit`` seconds passed since
    ``start`` (trio's clock, taken before the call that started the interval).

    A "not yet" assertion (the lease is still held, the entry is not claimable
    yet) is only decided by the contract while the server-side interval is
    surely below its limit; call this after the observing call returns and
    before asserting. Under ``MockClock`` it never fires.
    """
    elapsed = trio.current_time() - start
    if elapsed >= limit:
        raise _MissedWindow(f"{elapsed:.3f} s passed where the check needed < {limit} s")


def _contract_check(fn: ContractCheck) -> ContractCheck:
    """Register ``fn`` in :data:`CONTRACT_CHECKS`, wrapped in the hang guard and
    retried (with fresh names) when a stall made a timing window inconclusive."""

    @functools.wraps(fn)
    async def check(backend: Backend) -> None:
        missed: list[str] = []
        for _ in range(_ATTEMPTS):
            try:
                with trio.fail_after(CHECK_TIMEOUT):
                    await fn(backend)
            except trio.TooSlowError:
                raise AssertionError(
                    f"{fn.__name__} did not finish within {CHECK_TIMEOUT} s: a backend call hung"
                ) from None
            except _MissedWindow as exc:
                missed.append(str(exc))
                await trio.sleep(_RETRY_PAUSE)
            else:
                return
        raise AssertionError(
            f"{fn.__name__} missed its timing windows {_ATTEMPTS} times ({'; '.join(missed)}): "
            "the backend or machine is too slow for the suite's 0.1 s margins"
        )

    _registry.append(check)
    return check


# Helpers ------------------------------------------------------------------


def _name(kind: str) -> str:
    return f"contract-{kind}-{secrets.token_hex(4)}"


def _id_key(entry_id: str) -> tuple[int, int]:
    ms, _, seq = entry_id.partition("-")
    return int(ms), int(seq)


def _ids(entries: Sequence[QueueEntry]) -> list[str]:
    return [e.id for e in entries]


def _delete_on_ack(backend: Backend) -> bool:
    return bool(getattr(backend, "delete_on_ack", False))


async def _fresh_group(backend: Backend) -> str:
    """A new group whose cursor is at the end of the stream, with nothing pending."""
    group, primer = _name("group"), _name("primer")
    while await backend.read(group, primer, 1000, 0):
        pass
    await backend.delete_consumer(group, primer)
    return group


async def _drain(backend: Backend, group: str, consumer: str) -> list[QueueEntry]:
    """Everything the group has not delivered yet (no waiting)."""
    out: list[QueueEntry] = []
    while batch := await backend.read(group, consumer, 1000, 0):
        out.extend(batch)
    return out


def _consumers(info: GroupInfo) -> dict[str, tuple[int, float]]:
    return {c.name: (c.pending, c.idle) for c in info.consumers}


# Stream: add and read -----------------------------------------------------


@_contract_check
async def check_add_returns_ordered_ids(backend: Backend) -> None:
    """``add`` returns one ``<ms>-<seq>`` id per payload, strictly increasing.

    The millisecond part must be close to :meth:`SharedState.now` (it is the
    add time used for claim delays). The memory backend takes it from trio's
    clock and numbers ``<seq>`` globally rather than per millisecond as Redis
    does; the check only relies on the format and the ordering.
    """
    assert await backend.add([]) == [], "add([]) must add nothing and return []"
    first = await backend.add([b"a", b"b", b"c"])
    second = await backend.add([b"d"])
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
    ids = await backend.add(payloads)
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
    ids = await backend.add([b"one", b"two"])
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
    ids = await backend.add([b"1", b"2", b"3", b"4", b"5"])
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

    ids = await backend.add([b"ready"])
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
        added.extend(await backend.add([b"late"]))

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
    ids = await backend.add([b"a", b"b", b"c"])
    first = await backend.read(group, c1, 2, 0)
    second = await backend.read(group, c2, 10, 0)
    assert (_ids(first), _ids(second)) == (ids[:2], ids[2:]), (
        f"consumers of one group got {_ids(first)!r} and {_ids(second)!r} from {ids!r}"
    )
    await backend.ack(group, ids[:1])
    again = [await backend.read(group, c, 10, 0) for c in (c1, c2, c3)]
    assert again == [[], [], []], f"entries were delivered twice in one group: {again!r}"
    more = await backend.add([b"d"])
    assert _ids(await backend.read(group, c3, 10, 0)) == more, "a new entry was not delivered"


@_contract_check
async def check_groups_each_get_every_entry(backend: Backend) -> None:
    """Two groups each receive every entry; acking in one leaves the other's
    pending list alone."""
    g1, g2 = await _fresh_group(backend), await _fresh_group(backend)
    ids = await backend.add([b"a", b"b", b"c"])
    got1 = await backend.read(g1, _name("consumer"), 10, 0)
    got2 = await backend.read(g2, _name("consumer"), 10, 0)
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
    ids = await backend.add([b"a", b"b", b"c"])
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
    stream (``length`` drops, a new group never sees them); otherwise they stay."""
    deletes = _delete_on_ack(backend)
    group, consumer = await _fresh_group(backend), _name("consumer")
    base = await backend.length()
    ids = await backend.add([b"a", b"b"])
    assert await backend.length() == base + 2, "length must count added entries"
    await backend.read(group, consumer, 10, 0)
    await backend.ack(group, ids[:1])
    expected = base + 1 if deletes else base + 2
    length = await backend.length()
    assert length == expected, (
        f"after one ack, length is {length - base} of our 2 entries; with "
        f"delete_on_ack={deletes} it must be {expected - base} "
        "(a backend that deletes on ack must expose delete_on_ack = True)"
    )
    seen = set(_ids(await _drain(backend, _name("group"), _name("consumer"))))
    assert (ids[0] in seen) is not deletes, (
        f"a new group {'saw' if ids[0] in seen else 'did not see'} the acked entry "
        f"with delete_on_ack={deletes}"
    )
    assert ids[1] in seen, "an unacked entry vanished from the stream"


# Stream: reclaim ------------------------------------------------------------


@_contract_check
async def check_claim_stale(backend: Backend) -> None:
    """``claim_stale`` takes only entries idle >= ``min_idle``, oldest id first,
    at most ``count``, from any consumer; each claim adds one to the delivery
    count and resets the idle time."""
    group = await _fresh_group(backend)
    c1, c2, c3 = _name("c1"), _name("c2"), _name("c3")
    e1, e2, e3 = await backend.add([b"e1", b"e2", b"e3"])
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

    Entries are deleted here by acking in another group with
    ``delete_on_ack``; without it the entry must still be claimable.
    """
    deletes = _delete_on_ack(backend)
    g_ack, g_claim = await _fresh_group(backend), await _fresh_group(backend)
    ids = await backend.add([b"deleted", b"kept"])
    await backend.read(g_ack, _name("consumer"), 10, 0)
    await backend.read(g_claim, _name("consumer"), 10, 0)
    await backend.ack(g_ack, ids[:1])
    await trio.sleep(0.3)
    got = await backend.claim_stale(g_claim, _name("claimer"), 0.2, 10)
    expected = ids[1:] if deletes else ids
    assert _ids(got) == expected, (
        f"with delete_on_ack={deletes}, claim_stale must return {expected!r}, got {_ids(got)!r}"
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
    a, b = await backend.add([b"a", b"b"])
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

    Entries are deleted here by acking in another group with
    ``delete_on_ack``; without it the entry must still be refreshed.
    """
    deletes = _delete_on_ack(backend)
    g_ack, g_refresh = await _fresh_group(backend), await _fresh_group(backend)
    ids = await backend.add([b"deleted", b"kept"])
    await backend.read(g_ack, _name("consumer"), 10, 0)
    await backend.read(g_refresh, _name("consumer"), 10, 0)
    await backend.ack(g_ack, ids[:1])
    got = await backend.refresh(g_refresh, _name("refresher"), ids)
    expected = ids[1:] if deletes else ids
    assert got == expected, (
        f"with delete_on_ack={deletes}, refresh must return {expected!r}, got {got!r}"
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
    ids = await backend.add([b"a", b"b", b"c"])
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
    (a,) = await backend.add([b"a"])
    await backend.read(group, c1, 10, 0)
    await trio.sleep(0.3)
    await backend.add([b"b"])
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
    base = await backend.length()
    ids = await backend.add([b"a", b"b", b"c"])
    await backend.read(group, c1, 2, 0)
    await backend.read(group, c2, 10, 0)
    assert await backend.delete_consumer(group, c1) == 2, "c1 had 2 pending entries"
    info = await backend.group_info(group)
    assert info.pending == 1, f"after deleting c1: {info!r}"
    assert c1 not in _consumers(info), f"c1 is still listed: {info!r}"
    assert await backend.delete_consumer(group, c1) == 0, "deleting again must return 0"
    assert await backend.delete_consumer(group, _name("nobody")) == 0, "unknown consumer"
    assert await backend.length() == base + 3, "delete_consumer must not delete stream entries"
    got = await backend.claim_stale(group, _name("claimer"), 0, 10)
    assert _ids(got) == ids[2:], f"only c2's entry is still pending, claimed {_ids(got)!r}"


@_contract_check
async def check_get_metrics(backend: Backend) -> None:
    """``get_metrics``: ``queue_size`` equals ``length``; claim delays (ns) are
    >= 0 with max >= avg; ``last`` is the newest delivery's delay; every group
    is listed with its pending and lag."""
    group, consumer = await _fresh_group(backend), _name("consumer")
    await backend.add([b"slow"])
    await trio.sleep(0.3)
    await backend.read(group, consumer, 10, 0)
    slow = await backend.get_metrics()
    fast_start = trio.current_time()
    await backend.add([b"fast"])
    await backend.read(group, consumer, 10, 0)
    fast_window = trio.current_time() - fast_start  # bounds the "fast" delay
    fast = await backend.get_metrics()
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
    assert fast.queue_size == await backend.length(), (
        f"queue_size {fast.queue_size} != length {await backend.length()}"
    )
    groups = {g.name: g for g in fast.groups}
    assert group in groups, f"get_metrics must list group {group!r}: {sorted(groups)!r}"
    assert (groups[group].pending, groups[group].lag) == (2, 0), f"{groups[group]!r}"


@_contract_check
async def check_dead_letters(backend: Backend) -> None:
    """``dead_letter`` appends (payload may be ``None``); ``dead_letters`` returns
    the oldest ``count`` entries with every field intact."""
    before = await backend.dead_letters(100_000)
    group = _name("group")
    first = await backend.dead_letter(group, "1700000000000-0", b"\x00payload", "boom")
    second = await backend.dead_letter(group, "1700000000000-1", None, "ValueError: ünï")
    assert first != second, f"dead-letter ids must be distinct: {first!r}"
    for dead_id in (first, second):
        assert _ID_RE.fullmatch(dead_id), f"dead-letter id {dead_id!r} is not '<ms>-<seq>'"
    after = await backend.dead_letters(len(before) + 2)
    assert after[: len(before)] == before, "older dead letters changed or moved"
    got = [(d.id, d.message_id, d.group, d.payload, d.error) for d in after[len(before) :]]
    assert got == [
        (first, "1700000000000-0", group, b"\x00payload", "boom"),
        (second, "1700000000000-1", group, None, "ValueError: ünï"),
    ], f"dead letters did not round-trip: {got!r}"
    limited = await backend.dead_letters(len(before) + 1)
    assert [d.id for d in limited] == [d.id for d in before] + [first], (
        "dead_letters(count) must return the oldest count entries"
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
    group, stream_group, consumer = _name("group"), await _fresh_group(backend), _name("c")
    base = backend.now()
    m1, m2, m3 = b'{"id":"m1"}', b'{"id":"m2"}', b'{"id":"m3"}'
    for i, member in enumerate((m1, m2, m3)):
        await backend.add_delayed(group, member, base - 1 + i * 0.1)
    length = await backend.length()
    moves = [
        DelayedMove(member=m2, message=b"p2"),
        DelayedMove(member=b'{"id":"absent"}', message=b"absent"),
        DelayedMove(member=m1, message=b"p1"),
    ]
    assert await backend.move_delayed(group, moves) == 2, "two of three members were present"
    assert await backend.length() == length + 2, "two moves must add two stream entries"
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
    group, stream_group, consumer = _name("group"), await _fresh_group(backend), _name("c")
    lock, free_lock = f"taskrunner:unique:{_name('task')}", f"taskrunner:unique:{_name('task')}"
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
    """Increments add up with float precision; ``reset_metrics`` zeroes only the
    given fields; hashes are per group."""
    group, other = _name("group"), _name("group")
    assert await backend.read_metrics(group) == {}, "a new group's metrics hash is empty"
    await backend.increment_metrics(group, {"t_sum": 0.25, "t_count": 1})
    await backend.increment_metrics(group, {"t_sum": 0.5, "t_count": 1, "u_sum": 0.125})
    for _ in range(10):
        await backend.increment_metrics(group, {"fast_sum": 0.001})
    got = await backend.read_metrics(group)
    assert {k: got.get(k) for k in ("t_sum", "t_count", "u_sum")} == {
        "t_sum": 0.75,
        "t_count": 2.0,
        "u_sum": 0.125,
    }, f"increments must add up exactly: {got!r}"
    assert math.isclose(got.get("fast_sum", 0.0), 0.01, rel_tol=1e-9), (
        f"sub-millisecond increments must keep their precision: {got!r}"
    )
    await backend.reset_metrics(group, ["t_sum", "u_sum"])
    got = await backend.read_metrics(group)
    assert (got.get("t_sum"), got.get("u_sum"), got.get("t_count")) == (0.0, 0.0, 2.0), (
        f"reset must zero only the given fields: {got!r}"
    )
    assert await backend.read_metrics(other) == {}, "metrics hashes are per group"


@_contract_check
async def check_heartbeats(backend: Backend) -> None:
    """Heartbeats count while live, expire after ``ttl``, and are removed only
    with the instance id they hold.

    ``count_heartbeats`` is global: nobody else may add or drop heartbeats on
    the same store while this check runs.
    """
    base = await backend.count_heartbeats()
    h1, h2 = _name("host"), _name("host")
    await backend.heartbeat(h1, "i1", 0.3)
    h1_at = trio.current_time()
    await backend.heartbeat(h1, "i1", 0.3)  # a renew, not a second heartbeat
    await backend.heartbeat(h2, "i2", 0.6)
    live = await backend.count_heartbeats()
    await backend.remove_heartbeat(h1, "someone-else")
    still_live = await backend.count_heartbeats()
    _within(h1_at, 0.3)
    assert live == base + 2, f"two hosts, two heartbeats: counted {live - base}"
    assert still_live == base + 2, "removed with the wrong instance id"
    await backend.remove_heartbeat(h1, "i1")
    assert await backend.count_heartbeats() == base + 1, "the owner's remove must delete it"
    await backend.remove_heartbeat(h1, "i1")  # gone already: a no-op
    h2_at = trio.current_time()
    await backend.heartbeat(h2, "i3", 0.6)  # another instance took the host name over
    await backend.remove_heartbeat(h2, "i2")
    assert await backend.count_heartbeats() == base + 1, "the old instance removed the new one"
    await trio.sleep(0.4)
    live = await backend.count_heartbeats()
    _within(h2_at, 0.6)
    assert live == base + 1, "a heartbeat expired before its ttl"
    await trio.sleep(0.3)
    assert await backend.count_heartbeats() == base, "a heartbeat outlived its ttl"


@_contract_check
async def check_locks(backend: Backend) -> None:
    """Locks are ``SET NX`` with a ttl and released only with their token."""
    key = f"taskrunner:unique:{_name('task')}"
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


CONTRACT_CHECKS: tuple[ContractCheck, ...] = tuple(_registry)
"""Every check, in a stable order (stream first, then shared state)."""


def contract_parametrize(*, exclude: Collection[str] = ()) -> pytest.MarkDecorator:
    """A ``pytest.mark.parametrize("check", ...)`` over :data:`CONTRACT_CHECKS`.

    Test ids are the check names without ``check_``. Give the test a fresh
    backend per check (see the module docstring).

    Args:
        exclude: Names of checks to leave out (``"check_heartbeats"``), e.g. one a
            shared server cannot support. Prefer an ``xfail`` with a reason.

    Raises:
        ValueError: ``exclude`` names a check that does not exist.
    """
    import pytest  # not a runtime dependency of taskrunner

    known = {check.__name__ for check in CONTRACT_CHECKS}
    unknown = set(exclude) - known
    if unknown:
        raise ValueError(f"no such contract checks: {sorted(unknown)!r}")
    checks = [check for check in CONTRACT_CHECKS if check.__name__ not in exclude]
    return pytest.mark.parametrize(
        "check", checks, ids=[check.__name__.removeprefix("check_") for check in checks]
    )
