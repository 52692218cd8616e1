"""The backend contract suite against the in-memory backend, on trio's MockClock."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from typing import Any

import attrs
import pytest
import trio.testing

from taskrunner import StepState, _keys
from taskrunner._wire import CatalogDocument, TaskState, decode_catalog, encode_catalog
from taskrunner.backends import (
    Cancellation,
    DeadLetter,
    DelayedMove,
    FireResult,
    Heartbeat,
    KeyCounts,
    KeyInfo,
    KeyKind,
    Lease,
    LimitedBy,
    MessageCounts,
    Outcome,
    Paused,
    QueueEntry,
    Replay,
    Replayed,
    RunOutcome,
    ScheduleState,
    SlotHold,
    TaskSnapshot,
    TickFire,
    TimingIncrement,
)
from taskrunner.backends.memory import MemoryBackend
from taskrunner.backends.memory._catalog import _Catalog
from taskrunner.backends.memory._queue import _id_key
from taskrunner.testing import CONTRACT_CHECKS, ContractCheck, contract_parametrize
from taskrunner.testing._harness import _ATTEMPTS

LAYOUTS = pytest.mark.parametrize(
    "prefix", [None, "taskrunner"], ids=["stream_per_group", "shared_stream"]
)
"""Both stream layouts: the default (a stream per group) and an explicit prefix
that every group shares, under which the multi-group checks run in full."""


@contract_parametrize()
@pytest.mark.parametrize("delete_on_ack", [True, False], ids=["delete_on_ack", "keep_on_ack"])
@LAYOUTS
async def test_memory_backend(
    check: ContractCheck,
    delete_on_ack: bool,
    prefix: str | None,
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with MemoryBackend(prefix=prefix, delete_on_ack=delete_on_ack) as backend:
        await check(backend)


@contract_parametrize()
@pytest.mark.parametrize("delete_on_ack", [True, False], ids=["delete_on_ack", "keep_on_ack"])
async def test_memory_backend_cluster_layout(
    check: ContractCheck, delete_on_ack: bool, autojump_clock: trio.testing.MockClock
) -> None:
    """The cluster key layout names every key differently (``taskrunner:{<group>}:...``,
    heartbeats and locks the group's): the contract holds all the same."""
    async with MemoryBackend(delete_on_ack=delete_on_ack, key_layout="cluster") as backend:
        await check(backend)


@pytest.mark.parametrize("delete_on_ack", [True, False], ids=["delete_on_ack", "keep_on_ack"])
async def test_memory_backend_on_a_used_stream(
    delete_on_ack: bool, autojump_clock: trio.testing.MockClock
) -> None:
    """Checks start from the end of the stream, so they also pass one after
    another on one backend whose shared stream already holds entries."""
    async with MemoryBackend(prefix="taskrunner", delete_on_ack=delete_on_ack) as backend:
        await backend.add("any", [b"left over"])
        for check in CONTRACT_CHECKS:
            await check(backend)


def test_contract_parametrize_rejects_unknown_names() -> None:
    with pytest.raises(ValueError, match="check_nonexistent"):
        contract_parametrize(exclude=["check_nonexistent"])


def test_contract_parametrize_excludes() -> None:
    mark = contract_parametrize(exclude=["check_locks"])
    names = [check.__name__ for check in mark.args[1]]
    assert "check_locks" not in names
    assert len(names) == len(CONTRACT_CHECKS) - 1


# Every check must be able to fail: each mutant below breaks one promise of the
# protocol in a MemoryBackend, and the named check must notice.

Mutant = Callable[[MemoryBackend], None]


def _wrap(backend: MemoryBackend, name: str, make: Callable[[Any], Any]) -> None:
    setattr(backend, name, make(getattr(backend, name)))


def _bad_ids(b: MemoryBackend) -> None:
    def make(orig: Any) -> Any:
        async def add(group: str, payloads: Sequence[bytes]) -> list[str]:
            return [i.replace("-", ":") for i in await orig(group, payloads)]

        return add

    _wrap(b, "add", make)


def _delivery_count_zero(b: MemoryBackend) -> None:
    def make(orig: Any) -> Any:
        async def read(*args: Any) -> list[QueueEntry]:
            return [attrs.evolve(e, delivery_count=0) for e in await orig(*args)]

        return read

    _wrap(b, "read", make)


def _read_ignores_count(b: MemoryBackend) -> None:
    def make(orig: Any) -> Any:
        async def read(group: str, consumer: str, count: int, block: float) -> Any:
            return await orig(group, consumer, count + 1, block)

        return read

    _wrap(b, "read", make)


def _read_never_blocks(b: MemoryBackend) -> None:
    def make(orig: Any) -> Any:
        async def read(group: str, consumer: str, count: int, block: float) -> Any:
            return await orig(group, consumer, count, 0)

        return read

    _wrap(b, "read", make)


def _read_sleeps_full_block(b: MemoryBackend) -> None:
    def make(orig: Any) -> Any:
        async def read(group: str, consumer: str, count: int, block: float) -> Any:
            got = await orig(group, consumer, count, 0)
            if got or not block:
                return got
            await trio.sleep(block)
            return await orig(group, consumer, count, 0)

        return read

    _wrap(b, "read", make)


def _read_starts_at_end(b: MemoryBackend) -> None:
    def make(orig: Any) -> Any:
        async def read(group: str, consumer: str, count: int, block: float) -> Any:
            stream = b._stream(group)
            if group not in stream.groups:
                stream.group(group).cursor = stream.last_seq
            return await orig(group, consumer, count, block)

        return read

    _wrap(b, "read", make)


def _read_redelivers_pending(b: MemoryBackend) -> None:
    def make(orig: Any) -> Any:
        async def read(group: str, consumer: str, count: int, block: float) -> Any:
            got = await orig(group, consumer, count, block)
            g = b._stream(group).groups[group]
            return (
                got
                or [
                    QueueEntry(id=i, payload=b"", delivery_count=1)
                    for i, p in g.pending.items()
                    if p.consumer == consumer
                ][:count]
            )

        return read

    _wrap(b, "read", make)


def _ack_acks_every_group(b: MemoryBackend) -> None:
    def make(orig: Any) -> Any:
        async def ack(group: str, ids: Sequence[str]) -> int:
            n = await orig(group, ids)
            for g in b._stream(group).groups.values():
                for i in ids:
                    g.pending.pop(i, None)
            return n

        return ack

    _wrap(b, "ack", make)


def _ack_counts_everything(b: MemoryBackend) -> None:
    def make(orig: Any) -> Any:
        async def ack(group: str, ids: Sequence[str]) -> int:
            await orig(group, ids)
            return len(ids)

        return ack

    _wrap(b, "ack", make)


def _claim_keeps_count(b: MemoryBackend) -> None:
    def make(orig: Any) -> Any:
        async def claim_stale(*args: Any) -> list[QueueEntry]:
            return [attrs.evolve(e, delivery_count=1) for e in await orig(*args)]

        return claim_stale

    _wrap(b, "claim_stale", make)


def _claim_ignores_min_idle(b: MemoryBackend) -> None:
    def make(orig: Any) -> Any:
        async def claim_stale(group: str, consumer: str, min_idle: float, count: int) -> Any:
            return await orig(group, consumer, 0, count)

        return claim_stale

    _wrap(b, "claim_stale", make)


def _claim_newest_first(b: MemoryBackend) -> None:
    def make(orig: Any) -> Any:
        async def claim_stale(group: str, consumer: str, min_idle: float, count: int) -> Any:
            now = trio.current_time()
            g = b._stream(group).groups[group]
            stale = [i for i, p in g.pending.items() if now - p.delivered_at >= min_idle]
            keep = set(sorted(stale, key=_id_key, reverse=True)[:count])
            for i in stale:
                if i not in keep:
                    g.pending[i].delivered_at = now  # hide it from this call
            got = await orig(group, consumer, min_idle, count)
            return sorted(got, key=lambda e: _id_key(e.id), reverse=True)

        return claim_stale

    _wrap(b, "claim_stale", make)


def _claim_keeps_deleted(b: MemoryBackend) -> None:
    def make(orig: Any) -> Any:
        async def claim_stale(group: str, consumer: str, min_idle: float, count: int) -> Any:
            g = b._stream(group).groups[group]
            deleted = {i: p for i, p in g.pending.items() if i not in b._stream(group).seq_of}
            got = await orig(group, consumer, min_idle, count)
            g.pending.update(deleted)
            return got

        return claim_stale

    _wrap(b, "claim_stale", make)


def _refresh_keeps_deleted(b: MemoryBackend) -> None:
    def make(orig: Any) -> Any:
        async def refresh(group: str, consumer: str, ids: Sequence[str]) -> list[str]:
            stream = b._stream(group)
            g = stream.groups[group]
            deleted = {i: g.pending[i] for i in ids if i in g.pending and i not in stream.seq_of}
            done = set(await orig(group, consumer, ids))
            g.pending.update(deleted)
            return [i for i in ids if i in done or i in deleted]

        return refresh

    _wrap(b, "refresh", make)


def _refresh_counts_delivery(b: MemoryBackend) -> None:
    def make(orig: Any) -> Any:
        async def refresh(group: str, consumer: str, ids: Sequence[str]) -> list[str]:
            done: list[str] = await orig(group, consumer, ids)
            for i in done:
                b._stream(group).groups[group].pending[i].count += 1
            return done

        return refresh

    _wrap(b, "refresh", make)


def _refresh_keeps_idle(b: MemoryBackend) -> None:
    def make(orig: Any) -> Any:
        async def refresh(group: str, consumer: str, ids: Sequence[str]) -> list[str]:
            g = b._stream(group).groups[group]
            old = {i: g.pending[i].delivered_at for i in ids if i in g.pending}
            done: list[str] = await orig(group, consumer, ids)
            for i, t in old.items():
                g.pending[i].delivered_at = t
            return done

        return refresh

    _wrap(b, "refresh", make)


def _no_lag(b: MemoryBackend) -> None:
    def make(orig: Any) -> Any:
        async def group_info(group: str) -> Any:
            return attrs.evolve(await orig(group), lag=0)

        return group_info

    _wrap(b, "group_info", make)


def _idle_always_zero(b: MemoryBackend) -> None:
    def make(orig: Any) -> Any:
        async def group_info(group: str) -> Any:
            info = await orig(group)
            consumers = tuple(attrs.evolve(c, idle=0.0) for c in info.consumers)
            return attrs.evolve(info, consumers=consumers)

        return group_info

    _wrap(b, "group_info", make)


def _delete_consumer_returns_zero(b: MemoryBackend) -> None:
    def make(orig: Any) -> Any:
        async def delete_consumer(group: str, consumer: str) -> int:
            await orig(group, consumer)
            return 0

        return delete_consumer

    _wrap(b, "delete_consumer", make)


def _delete_idle_ignores_pending(b: MemoryBackend) -> None:
    async def delete_idle_consumer(group: str, consumer: str, min_idle: float) -> bool:
        g = b._stream(group).groups.get(group)
        if g is None or trio.current_time() - g.consumers.get(consumer, math.inf) < min_idle:
            return False
        return await b.delete_consumer(group, consumer) >= 0

    b.delete_idle_consumer = delete_idle_consumer  # type: ignore[method-assign]


def _last_is_oldest(b: MemoryBackend) -> None:
    def make(orig: Any) -> Any:
        async def get_metrics(group: str) -> Any:
            m = await orig(group)
            ring = b._stream(group).ring
            return attrs.evolve(m, message_claim_delay_last=ring[0] if ring else 0.0)

        return get_metrics

    _wrap(b, "get_metrics", make)


def _dead_letters_newest(b: MemoryBackend) -> None:
    async def dead_letters(group: str, count: int = 100) -> list[DeadLetter]:
        return list(reversed(b._stream(group).dead))[:count]

    b.dead_letters = dead_letters  # type: ignore[method-assign]


def _dead_letter_drops_task_id(b: MemoryBackend) -> None:
    orig = b.dead_letter

    async def dead_letter(
        group: str, message_id: str, payload: bytes | None, error: str, **options: Any
    ) -> str:
        options.pop("task_id", None)
        return await orig(group, message_id, payload, error, **options)

    b.dead_letter = dead_letter  # type: ignore[method-assign]


def _step_counted_again(b: MemoryBackend) -> None:
    orig = b._step_finished

    def step_finished(group: str, outcome: Any) -> None:
        flow = b._flow(group, outcome.workflow)
        if flow is not None and outcome.step in flow.steps:
            flow.steps[outcome.step] = StepState.QUEUED  # forgets it was counted
        orig(group, outcome)

    b._step_finished = step_finished  # type: ignore[method-assign]


def _cascade_cancels_nothing(b: MemoryBackend) -> None:
    b._cancel_now = lambda *args, **kwargs: Cancellation(state=None)  # type: ignore[method-assign]


def _cancel_workflow_only_says_so(b: MemoryBackend) -> None:
    async def cancel_workflow(group: str, workflow_id: str) -> bool:
        return True

    b.cancel_workflow = cancel_workflow  # type: ignore[method-assign]


def _frozen_now(b: MemoryBackend) -> None:
    b.now = lambda: 0.0  # type: ignore[method-assign]


def _unix_time_is_trio_clock(b: MemoryBackend) -> None:
    b.unix_time = lambda t: t  # type: ignore[method-assign]


def _unix_time_origin_follows_the_clock(b: MemoryBackend) -> None:
    # Recomputing the origin at each call: under MockClock it shifts as trio's clock jumps.
    b.unix_time = lambda t: t + time.time() - trio.current_time()  # type: ignore[method-assign]


def _renew_without_owner_check(b: MemoryBackend) -> None:
    async def renew_lease(group: str, owner: str, ttl: float) -> bool:
        key = _keys.leader(group)
        if b._get(key) is None:
            return False
        b._strings[key] = (owner, trio.current_time() + ttl)
        return True

    b.renew_lease = renew_lease  # type: ignore[method-assign]


def _renew_does_not_extend(b: MemoryBackend) -> None:
    async def renew_lease(group: str, owner: str, ttl: float) -> bool:
        return b._get(_keys.leader(group)) == owner

    b.renew_lease = renew_lease  # type: ignore[method-assign]


def _due_ignores_limit(b: MemoryBackend) -> None:
    def make(orig: Any) -> Any:
        async def due_delayed(group: str, until: float, limit: int) -> Any:
            return await orig(group, until, limit + 1)

        return due_delayed

    _wrap(b, "due_delayed", make)


def _move_twice(b: MemoryBackend) -> None:
    async def move_delayed(group: str, moves: Sequence[DelayedMove]) -> int:
        for move in moves:
            b._delayed.get(group, {}).pop(move.member, None)
            b.add_raw(group, {"payload": move.message})
        return len(moves)

    b.move_delayed = move_delayed  # type: ignore[method-assign]


def _move_ignores_lock(b: MemoryBackend) -> None:
    def make(orig: Any) -> Any:
        async def move_delayed(group: str, moves: Sequence[DelayedMove]) -> int:
            return await orig(group, [attrs.evolve(m, lock_key=None) for m in moves])

        return move_delayed

    _wrap(b, "move_delayed", make)


def _float_sums(b: MemoryBackend) -> None:
    # taskrunner 0.1.0's HINCRBYFLOAT: fractional milliseconds that Go cannot read.
    async def increment_metrics(group: str, increments: Sequence[TimingIncrement]) -> None:
        stored = b._metrics.setdefault(group, {})
        for i in increments:
            stored[i.fields.sum] = stored.get(i.fields.sum, 0) + i.micros / 1000
            stored[i.fields.count] = stored.get(i.fields.count, 0) + i.count

    b.increment_metrics = increment_metrics  # type: ignore[method-assign]


def _no_rebase(b: MemoryBackend) -> None:
    # Trusts _sum_us even after someone else moved _sum (a Go leader's reset).
    async def increment_metrics(group: str, increments: Sequence[TimingIncrement]) -> None:
        stored = b._metrics.setdefault(group, {})
        for i in increments:
            stored[i.fields.sum_us] = stored.get(i.fields.sum_us, 0) + i.micros
            stored[i.fields.sum] = int(stored[i.fields.sum_us]) // 1000
            stored[i.fields.count] = stored.get(i.fields.count, 0) + i.count

    b.increment_metrics = increment_metrics  # type: ignore[method-assign]


def _heartbeat_overwrites(b: MemoryBackend) -> None:
    """The old heartbeat: a plain ``SET``, whoever holds the key."""

    async def heartbeat(
        host: str, instance_id: str, ttl: float, *, group: str | None = None
    ) -> str | None:
        key = _keys.replication(host, b.key_layout, group)
        b._strings[key] = (instance_id, trio.current_time() + ttl)
        return None

    b.heartbeat = heartbeat  # type: ignore[method-assign]


def _holder_left_is_ttl(b: MemoryBackend) -> None:
    """Seconds left that never run down (the ttl it was set with, say)."""

    def make(orig: Any) -> Any:
        async def heartbeat_holder(host: str, *, group: str | None = None) -> Any:
            seen = await orig(host, group=group)
            return None if seen is None else (seen[0], 1.0)

        return heartbeat_holder

    _wrap(b, "heartbeat_holder", make)


def _remove_any_heartbeat(b: MemoryBackend) -> None:
    async def remove_heartbeat(host: str, instance_id: str, *, group: str | None = None) -> None:
        b._strings.pop(_keys.replication(host, b.key_layout, group), None)

    b.remove_heartbeat = remove_heartbeat  # type: ignore[method-assign]


def _release_any_lock(b: MemoryBackend) -> None:
    async def release_lock(key: str, token: str) -> bool:
        return b._strings.pop(key, None) is not None

    b.release_lock = release_lock  # type: ignore[method-assign]


def _flush_clears_every_string(b: MemoryBackend) -> None:
    """The old ``flush_group``: every group's leases, locks and tuning values went."""

    def make(orig: Any) -> Any:
        async def flush_group(group: str, *, heartbeats: bool) -> list[str]:
            deleted: list[str] = await orig(group, heartbeats=heartbeats)
            b._strings.clear()
            return deleted

        return flush_group

    _wrap(b, "flush_group", make)


def _flush_ignores_replication(b: MemoryBackend) -> None:
    """The old ``flush_group``: heartbeats went even with ``replication=False``."""

    def make(orig: Any) -> Any:
        async def flush_group(group: str, *, heartbeats: bool) -> list[str]:
            deleted: list[str] = await orig(group, heartbeats=heartbeats)
            for key in b.keys():
                if key.startswith(_keys.replication("")):
                    del b._strings[key]
            return deleted

        return flush_group

    _wrap(b, "flush_group", make)


def _flush_reports_kept_keys(b: MemoryBackend) -> None:
    """Reports the whole listing as deleted, the keys kept for other groups included."""

    def make(orig: Any) -> Any:
        async def flush_group(group: str, *, heartbeats: bool) -> list[str]:
            listed = [k.name for k in await b.list_keys(group)]
            await orig(group, heartbeats=heartbeats)
            return listed

        return flush_group

    _wrap(b, "flush_group", make)


def _ping_is_no_checkpoint(b: MemoryBackend) -> None:
    async def ping() -> float:
        return 0.0

    b.ping = ping  # type: ignore[method-assign]


def _ping_returns_nothing(b: MemoryBackend) -> None:
    def make(orig: Any) -> Any:
        async def ping() -> Any:
            await orig()

        return ping

    _wrap(b, "ping", make)


def _groups_only_consumer_groups(b: MemoryBackend) -> None:
    """The groups of the streams only: a group that never served is not found."""

    async def list_groups() -> list[str]:
        await trio.lowlevel.checkpoint()
        return sorted({name for stream in b._streams.values() for name in stream.groups})

    b.list_groups = list_groups  # type: ignore[method-assign]


def _groups_from_every_metrics_key(b: MemoryBackend) -> None:
    """Any ``taskrunner:<x>:metrics`` names a group, unique locks and heartbeats too."""

    def make(orig: Any) -> Any:
        async def list_groups() -> list[str]:
            found = set(await orig())
            for name in b.keys():
                if name.endswith(":metrics"):
                    found.add(name.removeprefix("taskrunner:").removesuffix(":metrics"))
            return sorted(found)

        return list_groups

    _wrap(b, "list_groups", make)


def _keys_never_expire(b: MemoryBackend) -> None:
    """Every key listed as without expiry (a PTTL read as -1)."""

    def make(orig: Any) -> Any:
        async def list_keys(group: str) -> list[KeyInfo]:
            return [attrs.evolve(k, ttl=None) for k in await orig(group)]

        return list_keys

    _wrap(b, "list_keys", make)


def _keys_in_scan_order(b: MemoryBackend) -> None:
    def make(orig: Any) -> Any:
        async def list_keys(group: str) -> list[KeyInfo]:
            return list(reversed(await orig(group)))

        return list_keys

    _wrap(b, "list_keys", make)


def _counts_miss_unique_locks(b: MemoryBackend) -> None:
    def make(orig: Any) -> Any:
        async def count_keys(group: str) -> KeyCounts:
            return attrs.evolve(await orig(group), unique_lock=0)

        return count_keys

    _wrap(b, "count_keys", make)


def _message_counts_miss_dead_letters(b: MemoryBackend) -> None:
    def make(orig: Any) -> Any:
        async def count_messages(group: str, queues: Any) -> MessageCounts:
            return attrs.evolve(await orig(group, queues), dead=0)

        return count_messages

    _wrap(b, "count_messages", make)


def _message_counts_repeat_a_queue(b: MemoryBackend) -> None:
    """Each name given counted, a queue named twice twice."""

    def make(orig: Any) -> Any:
        async def count_messages(group: str, queues: Any) -> MessageCounts:
            total = MessageCounts()
            for queue in list(queues):
                counts = await orig(group, [queue])
                total += attrs.evolve(counts, delayed=0)
            return attrs.evolve(total, delayed=(await orig(group, [])).delayed)

        return count_messages

    _wrap(b, "count_messages", make)


def _heartbeats_keep_expired(b: MemoryBackend) -> None:
    """Heartbeats read from the raw store, expired keys included."""

    async def list_heartbeats() -> list[Heartbeat]:
        await trio.lowlevel.checkpoint()
        prefix = _keys.replication("")
        return [
            Heartbeat(host=k.removeprefix(prefix), instance_id=v, ttl=max(0.0, at - b.now()))
            for k, (v, at) in sorted(b._strings.items())
            if k.startswith(prefix)
        ]

    b.list_heartbeats = list_heartbeats  # type: ignore[method-assign]


def _heartbeats_unsorted(b: MemoryBackend) -> None:
    def make(orig: Any) -> Any:
        async def list_heartbeats() -> list[Heartbeat]:
            return list(reversed(await orig()))

        return list_heartbeats

    _wrap(b, "list_heartbeats", make)


def _lease_ttl_never_runs_down(b: MemoryBackend) -> None:
    def make(orig: Any) -> Any:
        async def read_lease(group: str) -> Lease | None:
            lease = await orig(group)
            return None if lease is None else attrs.evolve(lease, ttl=1.0)

        return read_lease

    _wrap(b, "read_lease", make)


def _tuning_never_expires(b: MemoryBackend) -> None:
    def make(orig: Any) -> Any:
        async def publish_tuning(group: str, capacity: int, ttl: float) -> None:
            await orig(group, capacity, 3600.0)

        return publish_tuning

    _wrap(b, "publish_tuning", make)


def _desired_never_expires(b: MemoryBackend) -> None:
    def make(orig: Any) -> Any:
        async def publish_desired_instances(group: str, count: int, ttl: float) -> None:
            await orig(group, count, 3600.0)

        return publish_desired_instances

    _wrap(b, "publish_desired_instances", make)


def _desired_is_the_tuning_value(b: MemoryBackend) -> None:
    def make(orig: Any) -> Any:
        async def publish_desired_instances(group: str, count: int, ttl: float) -> None:
            await b.publish_tuning(group, count, ttl)

        return publish_desired_instances

    _wrap(b, "publish_desired_instances", make)
    b.read_desired_instances = b.read_tuning  # type: ignore[method-assign]


def _shard_count_one_is_kept(b: MemoryBackend) -> None:
    def make(orig: Any) -> Any:
        async def record_shard_count(group: str, count: int) -> None:
            if count != 1:
                await orig(group, count)

        return record_shard_count

    _wrap(b, "record_shard_count", make)


def _shard_count_of_every_group(b: MemoryBackend) -> None:
    def make(orig: Any) -> Any:
        async def read_shard_count(group: str) -> int | None:
            return await orig("shared")

        return read_shard_count

    _wrap(b, "read_shard_count", make)

    def make_record(orig: Any) -> Any:
        async def record_shard_count(group: str, count: int) -> None:
            await orig("shared", count)

        return record_shard_count

    _wrap(b, "record_shard_count", make_record)


def _catalog_keeps_first(b: MemoryBackend) -> None:
    def make(orig: Any) -> Any:
        async def publish_catalog(group: str, document: CatalogDocument, ttl: float) -> None:
            known = {d.host for d in await b.read_catalog(group)}
            if document.host not in known:
                await orig(group, document, ttl)

        return publish_catalog

    _wrap(b, "publish_catalog", make)


def _catalog_remove_clears_all(b: MemoryBackend) -> None:
    async def remove_catalog(group: str, host: str) -> None:
        await trio.lowlevel.checkpoint()
        b._catalogs.pop(group, None)

    b.remove_catalog = remove_catalog  # type: ignore[method-assign]


def _catalog_ignores_expires(b: MemoryBackend) -> None:
    def make(orig: Any) -> Any:
        async def read_catalog(group: str) -> list[CatalogDocument]:
            catalog = b._catalog(group)
            await orig(group)
            if catalog is None:
                return []
            return [decode_catalog(catalog.documents[h]) for h in sorted(catalog.documents)]

        return read_catalog

    _wrap(b, "read_catalog", make)


def _catalog_ttl_cuts_short(b: MemoryBackend) -> None:
    def make(orig: Any) -> Any:
        async def publish_catalog(group: str, document: CatalogDocument, ttl: float) -> None:
            await orig(group, document, ttl)
            b._catalogs[group].until = trio.current_time() + ttl

        return publish_catalog

    _wrap(b, "publish_catalog", make)


def _catalog_never_cleaned(b: MemoryBackend) -> None:
    async def publish_catalog(group: str, document: CatalogDocument, ttl: float) -> None:
        await trio.lowlevel.checkpoint()
        now = trio.current_time()
        catalog = b._catalog(group) or b._catalogs.setdefault(group, _Catalog({}, now))
        catalog.documents[document.host] = encode_catalog(document)
        catalog.until = max(catalog.until, now + ttl)

    b.publish_catalog = publish_catalog  # type: ignore[method-assign]


def _release_accepts_surrogates(b: MemoryBackend) -> None:
    async def release_lock(key: str, token: str) -> bool:  # the old check-free release
        await trio.lowlevel.checkpoint()
        return b._delete_if(key, token)

    b.release_lock = release_lock  # type: ignore[method-assign]


def _dead_letter_accepts_surrogates(b: MemoryBackend) -> None:
    def make(orig: Any) -> Any:
        async def dead_letter(
            group: str, message_id: str, payload: bytes | None, e: str, **options: Any
        ) -> str:
            fixed = e.encode(errors="replace").decode()
            return await orig(group, message_id, payload, fixed, **options)

        return dead_letter

    _wrap(b, "dead_letter", make)


def _refused_move_moves(b: MemoryBackend) -> None:
    def make(orig: Any) -> Any:
        async def move_delayed(group: str, moves: Sequence[DelayedMove]) -> int:
            for move in moves:  # applies the moves, then refuses
                b._delayed.get(group, {}).pop(move.member, None)
            return int(await orig(group, moves))

        return move_delayed

    _wrap(b, "move_delayed", make)


def _finish_never_expires(b: MemoryBackend) -> None:
    def make(orig: Any) -> Any:
        async def finish(group: str, ids: Sequence[str], outcomes: Sequence[Outcome]) -> int:
            kept = [attrs.evolve(o, keep=3600.0) if o.document else o for o in outcomes]
            return int(await orig(group, ids, kept))

        return finish

    _wrap(b, "finish", make)


def _finish_does_not_ack(b: MemoryBackend) -> None:
    def make(orig: Any) -> Any:
        async def finish(group: str, ids: Sequence[str], outcomes: Sequence[Outcome]) -> int:
            return int(await orig(group, [], outcomes))

        return finish

    _wrap(b, "finish", make)


def _finish_keeps_stop_request(b: MemoryBackend) -> None:
    def make(orig: Any) -> Any:
        async def finish(group: str, ids: Sequence[str], outcomes: Sequence[Outcome]) -> int:
            kept = [attrs.evolve(o, cancelled=False) for o in outcomes]
            return int(await orig(group, ids, kept))

        return finish

    _wrap(b, "finish", make)


def _wait_does_not_block(b: MemoryBackend) -> None:
    def make(orig: Any) -> Any:
        async def wait_result(group: str, task_id: str, block: float) -> Any:
            return await orig(group, task_id, 0.0)

        return wait_result

    _wrap(b, "wait_result", make)


def _result_wakes_one_waiter(b: MemoryBackend) -> None:
    """The notice as a plain list popped by each waiter: the first takes it, the
    others sleep on."""

    def keep(
        group: str, task_id: str, document: bytes, keep: float, notify: float, **_: Any
    ) -> None:
        key = _keys.result(group, task_id)
        b._results[key] = (document, trio.current_time() + keep)
        lot = b._result_lots.get(key)
        if lot is not None:
            lot.unpark()

    b._keep = keep  # type: ignore[method-assign]


def _lookup_acked_is_queued(b: MemoryBackend) -> None:
    """An acknowledged entry kept in the stream read as queued (no cursor check)."""

    def make(orig: Any) -> Any:
        async def lookup(group: str, task_id: str) -> TaskSnapshot | None:
            found = await orig(group, task_id)
            if found is None and b._stream(group).seq_of.get(task_id) is not None:
                seq = b._stream(group).seq_of[task_id]
                return TaskSnapshot(
                    task_id=task_id, entry_id=task_id, payload=b._stream(group).entries[seq][1]
                )
            if found is None:
                return TaskSnapshot(task_id=task_id, entry_id=task_id) if "-" in task_id else None
            return found

        return lookup

    _wrap(b, "lookup", make)


def _move_forgets_task_id(b: MemoryBackend) -> None:
    def make(orig: Any) -> Any:
        async def move_delayed(group: str, moves: Sequence[DelayedMove]) -> int:
            return int(await orig(group, [attrs.evolve(m, task_id=None) for m in moves]))

        return move_delayed

    _wrap(b, "move_delayed", make)


# Several queues, deferral, flow control ------------------------------------------


def _queues_share_a_stream(b: MemoryBackend) -> None:
    """Every queue resolved to the backend's own: one stream for all."""
    orig = b.stream_keys

    def stream_keys(group: str, queue: str | None = None) -> Any:
        return attrs.evolve(orig(group), queue=queue or b.queue)

    b.stream_keys = stream_keys  # type: ignore[method-assign]


def _read_many_ignores_quotas(b: MemoryBackend) -> None:
    def make(orig: Any) -> Any:
        async def read_many(group: str, consumer: str, queues: Any, quotas: Any, *a: Any) -> Any:
            return await orig(group, consumer, queues, [0] * len(quotas), *a)

        return read_many

    _wrap(b, "read_many", make)


def _read_many_waits_on_the_first(b: MemoryBackend) -> None:
    def make(orig: Any) -> Any:
        async def read_many(
            group: str, consumer: str, queues: Any, quotas: Any, total: int, block: float
        ) -> Any:
            got = await orig(group, consumer, queues, quotas, total, 0)
            if got or not block:
                return got
            return await orig(group, consumer, queues[:1], quotas[:1], total, block)

        return read_many

    _wrap(b, "read_many", make)


def _move_ignores_queue(b: MemoryBackend) -> None:
    def make(orig: Any) -> Any:
        async def move_delayed(group: str, moves: Sequence[DelayedMove]) -> int:
            return int(await orig(group, [attrs.evolve(m, queue=None) for m in moves]))

        return move_delayed

    _wrap(b, "move_delayed", make)


def _defer_unchecked(b: MemoryBackend) -> None:
    """Adds the member whether or not the entry was pending."""

    def make(orig: Any) -> Any:
        async def defer(group: str, entry_id: str, member: bytes, run_at: float, **kw: Any) -> Any:
            done = await orig(group, entry_id, member, run_at, **kw)
            b._delayed.setdefault(group, {})[member] = run_at
            return done

        return defer

    _wrap(b, "defer", make)


# Schedules: each mutant drops one of the fenced fire's promises.


def _fire_without_lease(b: MemoryBackend) -> None:
    """The lock-free scheduler's fire: whoever calls it fires."""
    b._holds_lease = lambda group, owner: True  # type: ignore[method-assign]


def _fire_ignores_watermark(b: MemoryBackend) -> None:
    """Fires every tick it is given, as a scheduler that trusts its own memory would."""

    def make(orig: Any) -> Any:
        async def fire_ticks(group: str, owner: str, fires: Sequence[TickFire]) -> Any:
            results: list[FireResult] = []
            for fire in fires:
                states = b._schedule_states.setdefault(group, {})
                state = states.get(fire.schedule, ScheduleState())
                states[fire.schedule] = attrs.evolve(state, tick=None)
                results += await orig(group, owner, [fire])
            return results

        return fire_ticks

    _wrap(b, "fire_ticks", make)


def _watermark_rounded(b: MemoryBackend) -> None:
    """Stores ticks at a script's default precision (cjson's 14 digits)."""

    def make(orig: Any) -> Any:
        async def start_schedules(group: str, owner: str, names: Any, baseline: float) -> Any:
            return await orig(group, owner, names, float(f"{baseline:.14g}"))

        return start_schedules

    _wrap(b, "start_schedules", make)


def _start_overwrites_watermark(b: MemoryBackend) -> None:
    def make(orig: Any) -> Any:
        async def start_schedules(group: str, owner: str, names: Any, baseline: float) -> Any:
            for name in names:
                state = b._schedule_states.setdefault(group, {}).get(name)
                if state is not None:
                    b._schedule_states[group][name] = attrs.evolve(state, tick=None)
            return await orig(group, owner, names, baseline)

        return start_schedules

    _wrap(b, "start_schedules", make)


def _outcome_keeps_mark(b: MemoryBackend) -> None:
    def make(orig: Any) -> Any:
        async def record_run_outcomes(group: str, outcomes: Sequence[RunOutcome]) -> None:
            states = b._schedule_states.setdefault(group, {})
            marks = {o.schedule: states.get(o.schedule, ScheduleState()) for o in outcomes}
            await orig(group, outcomes)
            for name, old in marks.items():
                states[name] = attrs.evolve(
                    states[name], running=old.running, running_until=old.running_until
                )

        return record_run_outcomes

    _wrap(b, "record_run_outcomes", make)


def _older_outcome_replaces(b: MemoryBackend) -> None:
    def make(orig: Any) -> Any:
        async def record_run_outcomes(group: str, outcomes: Sequence[RunOutcome]) -> None:
            states = b._schedule_states.setdefault(group, {})
            for o in outcomes:
                state = states.get(o.schedule, ScheduleState())
                states[o.schedule] = attrs.evolve(state, outcome_tick=None)
            await orig(group, outcomes)

        return record_run_outcomes

    _wrap(b, "record_run_outcomes", make)


def _mark_never_lapses(b: MemoryBackend) -> None:
    def make(orig: Any) -> Any:
        async def fire_ticks(group: str, owner: str, fires: Sequence[TickFire]) -> Any:
            return await orig(group, owner, [attrs.evolve(f, in_flight_ttl=3600.0) for f in fires])

        return fire_ticks

    _wrap(b, "fire_ticks", make)


def _specs_replaced_whole(b: MemoryBackend) -> None:
    def make(orig: Any) -> Any:
        async def publish_schedule_specs(group: str, specs: Any) -> None:
            b._schedule_specs.pop(group, None)
            await orig(group, specs)

        return publish_schedule_specs

    _wrap(b, "publish_schedule_specs", make)


def _flush_keeps_todays_keys(b: MemoryBackend) -> None:
    """A flush from before events, progress and workflows: their keys stay behind."""

    def make(orig: Any) -> Any:
        async def flush_group(group: str, *, heartbeats: bool) -> list[str]:
            entries = {g: list(s.entries) for g, s in b._event_streams.items()}
            progress, flows = dict(b._progress), dict(b._flows)
            deleted = await orig(group, heartbeats=heartbeats)
            for g, kept in entries.items():
                b._event_streams[g].entries[:] = kept
            b._progress.update(progress)
            b._flows.update(flows)
            return deleted

        return flush_group

    _wrap(b, "flush_group", make)


def _keys_without_todays_kinds(b: MemoryBackend) -> None:
    """A listing from before events, progress and workflows: it does not show them."""
    kinds = {KeyKind.EVENTS, KeyKind.PROGRESS, KeyKind.WORKFLOW, KeyKind.SHARD_COUNT}

    def make(orig: Any) -> Any:
        async def list_keys(group: str) -> list[KeyInfo]:
            return [key for key in await orig(group) if key.kind not in kinds]

        return list_keys

    _wrap(b, "list_keys", make)


def _flush_keeps_schedules(b: MemoryBackend) -> None:
    """A flush from before the schedules: their states and specs stay behind."""

    def make(orig: Any) -> Any:
        async def flush_group(group: str, *, heartbeats: bool) -> list[str]:
            states = b._schedule_states.get(group)
            specs = b._schedule_specs.get(group)
            deleted: list[str] = await orig(group, heartbeats=heartbeats)
            if states:
                b._schedule_states[group] = states
            if specs:
                b._schedule_specs[group] = specs
            return [n for n in deleted if not n.endswith((":schedules", ":schedule_specs"))]

        return flush_group

    _wrap(b, "flush_group", make)


def _defer_adds_anyway(b: MemoryBackend) -> None:
    def make(orig: Any) -> Any:
        async def defer(group: str, entry_id: str, member: bytes, run_at: float, **kw: Any) -> bool:
            if await orig(group, entry_id, member, run_at, **kw):
                return True
            await b.add_delayed(group, member, run_at)
            return False

        return defer

    _wrap(b, "defer", make)


def _slots_unlimited(b: MemoryBackend) -> None:
    def make(orig: Any) -> Any:
        async def admit(group: str, task: str, holder: str, **kw: Any) -> Any:
            if kw.get("max_concurrency") is not None:
                kw["max_concurrency"] = 10**6
            return await orig(group, task, holder, **kw)

        return admit

    _wrap(b, "admit", make)


def _renew_puts_back(b: MemoryBackend) -> None:
    async def renew_slots(group: str, holds: Sequence[SlotHold]) -> list[SlotHold]:
        await trio.lowlevel.checkpoint()
        for hold in holds:
            b._zset(_keys.concurrency(group, hold.task))[hold.holder] = trio.current_time() + 1
        return []

    b.renew_slots = renew_slots  # type: ignore[method-assign]


def _rate_unpaced(b: MemoryBackend) -> None:
    """Every refused run told to come back when the oldest start leaves: a stampede."""

    def make(orig: Any) -> Any:
        async def admit(group: str, task: str, holder: str, **kw: Any) -> Any:
            got = await orig(group, task, holder, **kw)
            for key in [k for k in b._strings if ":rate_pace:" in k]:
                del b._strings[key]
            return got

        return admit

    _wrap(b, "admit", make)


def _rate_refusal_takes_a_slot(b: MemoryBackend) -> None:
    def make(orig: Any) -> Any:
        async def admit(group: str, task: str, holder: str, **kw: Any) -> Any:
            got = await orig(group, task, holder, **kw)
            if got.limited_by is LimitedBy.RATE and kw.get("max_concurrency"):
                b._zset(_keys.concurrency(group, task))[holder] = trio.current_time() + 60
            return got

        return admit

    _wrap(b, "admit", make)


def _pauses_for_every_group(b: MemoryBackend) -> None:
    async def paused(group: str) -> Paused:
        await trio.lowlevel.checkpoint()
        members = {m.decode() for k, v in b._sets.items() if k.endswith(":paused") for m in v}
        return Paused(
            queues=frozenset(m[6:] for m in members if m.startswith("queue:")),
            tasks=frozenset(m[5:] for m in members if m.startswith("task:")),
        )

    b.paused = paused  # type: ignore[method-assign]


def _park_ignores_pause(b: MemoryBackend) -> None:
    def make(orig: Any) -> Any:
        async def park(group: str, entry_id: str, member: bytes, run_at: float, task: str,
                       **kw: Any) -> Any:  # fmt: skip
            b._sets.setdefault(_keys.paused(group), set()).add(f"task:{task}".encode())
            return await orig(group, entry_id, member, run_at, task, **kw)

        return park

    _wrap(b, "park", make)


def _resume_leaves_parked(b: MemoryBackend) -> None:
    def make(orig: Any) -> Any:
        async def resume(group: str, *, queue: str | None = None, task: str | None = None) -> Any:
            if task is not None:
                b._sets.pop(_keys.parked(group, task), None)
            return await orig(group, queue=queue, task=task)

        return resume

    _wrap(b, "resume", make)


def _defer_without_ack(b: MemoryBackend) -> None:
    async def defer(group: str, entry_id: str, member: bytes, run_at: float, **kw: Any) -> bool:
        g = b._stream(group).groups.get(group)
        if g is None or entry_id not in g.pending:
            return False
        await b.add_delayed(group, member, run_at)
        return True

    b.defer = defer  # type: ignore[method-assign]


def _defer_ignores_task_id(b: MemoryBackend) -> None:
    def make(orig: Any) -> Any:
        async def defer(group: str, entry_id: str, member: bytes, run_at: float, **kw: Any) -> bool:
            return bool(await orig(group, entry_id, member, run_at))

        return defer

    _wrap(b, "defer", make)


def _park_ignores_task_id(b: MemoryBackend) -> None:
    def make(orig: Any) -> Any:
        async def park(group: str, entry_id: str, member: bytes, run_at: float, task: str,
                       *, queue: str | None = None, **kw: Any) -> Any:  # fmt: skip
            return await orig(group, entry_id, member, run_at, task, queue=queue)

        return park

    _wrap(b, "park", make)


def _add_tick_every_time(b: MemoryBackend) -> None:
    """``add_tick`` adds the tick's message however often it is asked (not idempotent)."""

    def make(orig: Any) -> Any:
        async def add_tick(group: str, fire: Any) -> Any:
            b._schedule_states.get(group, {}).pop(fire.schedule, None)
            return await orig(group, fire)

        return add_tick

    _wrap(b, "add_tick", make)


def _replay_keeps_notice(b: MemoryBackend) -> None:
    def make(orig: Any) -> Any:
        async def replay_dead_letters(group: str, replays: Sequence[Replay]) -> Any:
            kept = {k: v for k, v in b._notices.items()}
            done = await orig(group, replays)
            b._notices.update(kept)
            return done

        return replay_dead_letters

    _wrap(b, "replay_dead_letters", make)


def _move_refuses_own_lock(b: MemoryBackend) -> None:
    def make(orig: Any) -> Any:
        async def move_delayed(group: str, moves: Sequence[DelayedMove]) -> int:
            kept = [m for m in moves if m.lock_key and b._get(m.lock_key) == m.lock_token]
            return await orig(group, [m for m in moves if m not in kept])

        return move_delayed

    _wrap(b, "move_delayed", make)


def _cancel_keeps_queued_entry(b: MemoryBackend) -> None:
    """Reports a queued task cancelled without deleting its entry."""

    def make(orig: Any) -> Any:
        async def cancel(group: str, task_id: str) -> Cancellation:
            found = await b.lookup(group, task_id)
            if found is not None and found.entry_id is not None and not found.pending:
                return Cancellation(state=TaskState.QUEUED, raw=found.payload)
            return await orig(group, task_id)  # type: ignore[no-any-return]

        return cancel

    _wrap(b, "cancel", make)


def _cancel_keeps_lock(b: MemoryBackend) -> None:
    b._delete_if = lambda key, value: False  # type: ignore[method-assign]


def _every_run_asked_to_stop(b: MemoryBackend) -> None:
    async def cancel_requested(group: str, entry_ids: Sequence[str]) -> list[str]:
        await trio.lowlevel.checkpoint()
        return list(entry_ids)

    b.cancel_requested = cancel_requested  # type: ignore[method-assign]


def _replay_keeps_dead_letter(b: MemoryBackend) -> None:
    def make(orig: Any) -> Any:
        async def replay_dead_letters(group: str, replays: Sequence[Replay]) -> list[Replayed]:
            dead = list(b._stream(group).dead)
            done: list[Replayed] = await orig(group, replays)
            b._stream(group).dead[:] = dead  # the dead letters come back
            return done

        return replay_dead_letters

    _wrap(b, "replay_dead_letters", make)


def _replay_ignores_lock(b: MemoryBackend) -> None:
    def make(orig: Any) -> Any:
        async def replay_dead_letters(group: str, replays: Sequence[Replay]) -> list[Replayed]:
            return list(await orig(group, [attrs.evolve(r, lock_key=None) for r in replays]))

        return replay_dead_letters

    _wrap(b, "replay_dead_letters", make)


def _purge_ignores_ids(b: MemoryBackend) -> None:
    def make(orig: Any) -> Any:
        async def purge_dead_letters(group: str, ids: Sequence[str] | None = None) -> int:
            return int(await orig(group, None))

        return purge_dead_letters

    _wrap(b, "purge_dead_letters", make)


def _dead_letters_ignore_after(b: MemoryBackend) -> None:
    def make(orig: Any) -> Any:
        async def dead_letters(group: str, count: int = 100, *, after: str | None = None) -> Any:
            return await orig(group, count)

        return dead_letters

    _wrap(b, "dead_letters", make)


def _lookup_only_first_queue(b: MemoryBackend) -> None:
    """Looks for a task's entry on the first queue named only (issue 24)."""

    def make(orig: Any) -> Any:
        async def lookup(group: str, task_id: str, *, queues: Any = None) -> Any:
            return await orig(group, task_id, queues=list(queues or [])[:1] or None)

        return lookup

    _wrap(b, "lookup", make)


def _cancel_ignores_queues(b: MemoryBackend) -> None:
    """Cancels on the backend's own queue whatever queues are named (the 0.2 bug)."""

    def make(orig: Any) -> Any:
        async def cancel(group: str, task_id: str, *, queues: Any = None) -> Cancellation:
            return await orig(group, task_id)  # type: ignore[no-any-return]

        return cancel

    _wrap(b, "cancel", make)


def _replay_to_own_queue(b: MemoryBackend) -> None:
    """Replays every dead letter into the backend's own queue."""

    def make(orig: Any) -> Any:
        async def replay_dead_letters(
            group: str, replays: Sequence[Replay], *, queue: str | None = None
        ) -> list[Replayed]:
            dead = b._stream(group, queue).dead
            own = b._stream(group).dead
            moved = [d for d in dead if d.id in {r.dead_id for r in replays}]
            own += moved
            dead[:] = [d for d in dead if d not in moved]
            return list(await orig(group, replays))

        return replay_dead_letters

    _wrap(b, "replay_dead_letters", make)


def _ring_of_own_queue_only(b: MemoryBackend) -> None:
    """Reports the backend's own queue's claim delays for every queue (as a ring
    pushed only for the default queue read)."""

    def make(orig: Any) -> Any:
        async def get_metrics(group: str, *, queue: str | None = None) -> Any:
            own = await orig(group)
            return (
                attrs.evolve(await orig(group, queue=queue), message_claim_delay_max=0.0)
                if (queue is not None)
                else own
            )

        return get_metrics

    _wrap(b, "get_metrics", make)


def _keys_of_own_queue_only(b: MemoryBackend) -> None:
    """Lists (and so flushes) the backend's own queue's keys only (the 0.2 layout)."""

    def make(orig: Any) -> Any:
        async def list_keys(group: str) -> list[Any]:
            own = b.stream_keys(group)
            mine = {own.stream, own.dead_letter, own.claim_delay_ring}
            return [
                k
                for k in await orig(group)
                if k.kind not in (KeyKind.STREAM, KeyKind.DEAD_LETTER) or k.name in mine
            ]

        return list_keys

    _wrap(b, "list_keys", make)


def _ack_drops_events(b: MemoryBackend) -> None:
    """Acks as ever, but writes none of the events the ack carries."""

    def make(orig: Any) -> Any:
        async def ack(group: str, ids: Sequence[str], **options: Any) -> int:
            options.pop("events", None)
            return int(await orig(group, ids, **options))

        return ack

    _wrap(b, "ack", make)


def _progress_dropped(b: MemoryBackend) -> None:
    """Writes the events, drops the progress."""

    def make(orig: Any) -> Any:
        async def write_events(group: str, events: Any, progress: Any = ()) -> None:
            await orig(group, events)

        return write_events

    _wrap(b, "write_events", make)


def _events_never_trimmed(b: MemoryBackend) -> None:
    """Ignores the cap."""

    def make(orig: Any) -> Any:
        async def write_events(group: str, events: Any, progress: Any = ()) -> None:
            if events is not None:
                events = attrs.evolve(events, maxlen=10**9)
            await orig(group, events, progress)

        return write_events

    _wrap(b, "write_events", make)


def _read_events_never_blocks(b: MemoryBackend) -> None:
    def make(orig: Any) -> Any:
        async def read_events(group: str, after: str, *, count: int, block: float) -> Any:
            return await orig(group, after, count=count, block=0)

        return read_events

    _wrap(b, "read_events", make)


MUTANTS: dict[str, tuple[str, Mutant]] = {
    "ack_drops_events": ("check_events_ride_with_their_calls", _ack_drops_events),
    "progress_dropped": ("check_progress", _progress_dropped),
    "events_never_trimmed": ("check_event_stream_is_capped", _events_never_trimmed),
    "read_events_never_blocks": (
        "check_read_events_blocks_until_one_comes",
        _read_events_never_blocks,
    ),
    "bad_ids": ("check_add_returns_ordered_ids", _bad_ids),
    "delivery_count_zero": ("check_read_returns_entries_in_order", _delivery_count_zero),
    "read_starts_at_end": ("check_read_creates_group_lazily", _read_starts_at_end),
    "read_ignores_count": ("check_read_respects_count", _read_ignores_count),
    "read_never_blocks": ("check_read_blocks_until_timeout", _read_never_blocks),
    "read_sleeps_full_block": ("check_read_block_returns_early_on_add", _read_sleeps_full_block),
    "read_redelivers": ("check_read_never_redelivers_in_group", _read_redelivers_pending),
    "ack_every_group": ("check_groups_each_get_every_entry", _ack_acks_every_group),
    "ack_counts_everything": ("check_ack_counts_and_is_idempotent", _ack_counts_everything),
    "claim_keeps_count": ("check_claim_stale", _claim_keeps_count),
    "claim_ignores_min_idle": ("check_claim_stale", _claim_ignores_min_idle),
    "claim_newest_first": ("check_claim_stale", _claim_newest_first),
    "claim_keeps_deleted": ("check_claim_stale_drops_deleted_entries", _claim_keeps_deleted),
    "refresh_keeps_deleted": ("check_refresh_drops_deleted_entries", _refresh_keeps_deleted),
    "refresh_counts_delivery": ("check_refresh", _refresh_counts_delivery),
    "refresh_keeps_idle": ("check_refresh", _refresh_keeps_idle),
    "no_lag": ("check_group_info_pending_and_lag", _no_lag),
    "idle_always_zero": ("check_group_info_consumer_idle", _idle_always_zero),
    "delete_consumer_zero": ("check_delete_consumer", _delete_consumer_returns_zero),
    "delete_idle_ignores_pending": ("check_delete_idle_consumer", _delete_idle_ignores_pending),
    "last_is_oldest": ("check_get_metrics", _last_is_oldest),
    "dead_letters_newest": ("check_dead_letters", _dead_letters_newest),
    "dead_letter_drops_task_id": ("check_dead_letter_task_id", _dead_letter_drops_task_id),
    "step_counted_again": ("check_workflow_fan_in_counts_each_step_once", _step_counted_again),
    "cascade_cancels_nothing": ("check_workflow_failure_cascades", _cascade_cancels_nothing),
    "cancel_workflow_only_says_so": (
        "check_workflow_cancel_removes_queued_steps",
        _cancel_workflow_only_says_so,
    ),
    "frozen_now": ("check_now_advances", _frozen_now),
    "unix_time_is_trio_clock": ("check_unix_time", _unix_time_is_trio_clock),
    "unix_time_origin_moves": ("check_unix_time", _unix_time_origin_follows_the_clock),
    "renew_without_owner": ("check_lease_ownership", _renew_without_owner_check),
    "renew_does_not_extend": ("check_lease_expiry", _renew_does_not_extend),
    "due_ignores_limit": ("check_delayed_set", _due_ignores_limit),
    "move_twice": ("check_move_delayed", _move_twice),
    "move_ignores_lock": ("check_move_delayed_unique_lock", _move_ignores_lock),
    "float_sums": ("check_metrics_hash", _float_sums),
    "no_rebase": ("check_metrics_hash", _no_rebase),
    "remove_any_heartbeat": ("check_heartbeats", _remove_any_heartbeat),
    "heartbeat_overwrites": ("check_heartbeats", _heartbeat_overwrites),
    "holder_left_is_ttl": ("check_heartbeat_holder", _holder_left_is_ttl),
    "release_any_lock": ("check_locks", _release_any_lock),
    "tuning_never_expires": ("check_tuning", _tuning_never_expires),
    "desired_never_expires": ("check_desired_instances", _desired_never_expires),
    "desired_is_the_tuning_value": ("check_desired_instances", _desired_is_the_tuning_value),
    "shard_count_one_is_kept": ("check_shard_count", _shard_count_one_is_kept),
    "shard_count_of_every_group": ("check_shard_count", _shard_count_of_every_group),
    "catalog_keeps_first": ("check_catalog", _catalog_keeps_first),
    "catalog_remove_clears_all": ("check_catalog", _catalog_remove_clears_all),
    "catalog_ignores_expires": ("check_catalog_expiry", _catalog_ignores_expires),
    "catalog_ttl_cuts_short": ("check_catalog_expiry", _catalog_ttl_cuts_short),
    "catalog_never_cleaned": ("check_catalog_expiry", _catalog_never_cleaned),
    "flush_clears_every_string": ("check_flush", _flush_clears_every_string),
    "flush_ignores_replication": ("check_flush", _flush_ignores_replication),
    "flush_reports_kept_keys": ("check_flush", _flush_reports_kept_keys),
    "ping_is_no_checkpoint": ("check_ping", _ping_is_no_checkpoint),
    "ping_returns_nothing": ("check_ping", _ping_returns_nothing),
    "groups_only_consumer_groups": ("check_list_groups", _groups_only_consumer_groups),
    "groups_from_every_metrics_key": ("check_list_groups", _groups_from_every_metrics_key),
    "keys_never_expire": ("check_list_keys", _keys_never_expire),
    "keys_in_scan_order": ("check_list_keys", _keys_in_scan_order),
    "counts_miss_unique_locks": ("check_count_keys", _counts_miss_unique_locks),
    "message_counts_miss_dead_letters": ("check_count_messages", _message_counts_miss_dead_letters),
    "message_counts_repeat_a_queue": ("check_count_messages", _message_counts_repeat_a_queue),
    "heartbeats_keep_expired": ("check_list_heartbeats", _heartbeats_keep_expired),
    "heartbeats_unsorted": ("check_list_heartbeats", _heartbeats_unsorted),
    "lease_ttl_never_runs_down": ("check_read_lease", _lease_ttl_never_runs_down),
    "release_accepts_surrogates": (
        "check_unencodable_text_is_refused",
        _release_accepts_surrogates,
    ),
    "dead_letter_accepts_surrogates": (
        "check_unencodable_text_is_refused",
        _dead_letter_accepts_surrogates,
    ),
    "refused_move_moves": ("check_unencodable_text_is_refused", _refused_move_moves),
    "finish_never_expires": ("check_finish_keeps_results", _finish_never_expires),
    "finish_does_not_ack": ("check_finish_keeps_results", _finish_does_not_ack),
    "wait_does_not_block": ("check_wait_result_wakes_every_waiter", _wait_does_not_block),
    "result_wakes_one_waiter": ("check_wait_result_wakes_every_waiter", _result_wakes_one_waiter),
    "lookup_acked_is_queued": ("check_lookup_follows_an_entry", _lookup_acked_is_queued),
    "move_forgets_task_id": ("check_delayed_tasks_keep_their_id", _move_forgets_task_id),
    "cancel_keeps_queued_entry": (
        "check_cancel_removes_queued_and_scheduled_tasks",
        _cancel_keeps_queued_entry,
    ),
    "cancel_keeps_lock": ("check_cancel_removes_queued_and_scheduled_tasks", _cancel_keeps_lock),
    "every_run_asked_to_stop": (
        "check_cancel_asks_a_running_task_to_stop",
        _every_run_asked_to_stop,
    ),
    "finish_keeps_stop_request": (
        "check_cancel_asks_a_running_task_to_stop",
        _finish_keeps_stop_request,
    ),
    "replay_keeps_dead_letter": ("check_replay_dead_letters", _replay_keeps_dead_letter),
    "replay_ignores_lock": ("check_replay_dead_letters", _replay_ignores_lock),
    "replay_keeps_notice": ("check_replay_dead_letters", _replay_keeps_notice),
    "purge_ignores_ids": ("check_purge_and_page_dead_letters", _purge_ignores_ids),
    "lookup_only_first_queue": ("check_lookup_and_cancel_on_every_queue", _lookup_only_first_queue),
    "cancel_ignores_queues": (
        "check_lookup_follows_a_moved_task_to_its_queue",
        _cancel_ignores_queues,
    ),
    "replay_to_own_queue": ("check_dead_letters_of_every_queue", _replay_to_own_queue),
    "ring_of_own_queue_only": ("check_claim_delays_of_every_queue", _ring_of_own_queue_only),
    "keys_of_own_queue_only": ("check_every_queue_in_keys_and_flush", _keys_of_own_queue_only),
    "dead_letters_ignore_after": ("check_purge_and_page_dead_letters", _dead_letters_ignore_after),
    "queues_share_a_stream": ("check_queues_are_separate_streams", _queues_share_a_stream),
    "read_many_ignores_quotas": (
        "check_read_many_by_quota_then_in_order",
        _read_many_ignores_quotas,
    ),
    "read_many_waits_on_the_first": (
        "check_read_many_waits_for_any_queue",
        _read_many_waits_on_the_first,
    ),
    "move_ignores_queue": ("check_queue_reclaim_and_moves_stay_apart", _move_ignores_queue),
    "defer_unchecked": ("check_defer_on_a_queue", _defer_unchecked),
    "slots_unlimited": ("check_concurrency_slots", _slots_unlimited),
    "renew_puts_back": ("check_concurrency_slots", _renew_puts_back),
    "rate_unpaced": ("check_rate_limit", _rate_unpaced),
    "rate_refusal_takes_a_slot": ("check_rate_limit", _rate_refusal_takes_a_slot),
    "pauses_for_every_group": ("check_pause_and_resume", _pauses_for_every_group),
    "park_ignores_pause": ("check_park_and_resume", _park_ignores_pause),
    "resume_leaves_parked": ("check_park_and_resume", _resume_leaves_parked),
    "add_tick_every_time": ("check_add_tick_adds_each_tick_once", _add_tick_every_time),
    "park_ignores_task_id": (
        "check_a_parked_run_is_found_and_cancelled_by_its_task_id",
        _park_ignores_task_id,
    ),
    "fire_without_lease": ("check_fires_are_fenced_by_the_lease", _fire_without_lease),
    "fire_ignores_watermark": ("check_fires_only_newer_ticks", _fire_ignores_watermark),
    "watermark_rounded": ("check_fires_only_newer_ticks", _watermark_rounded),
    "start_overwrites_watermark": ("check_fires_only_newer_ticks", _start_overwrites_watermark),
    "outcome_keeps_mark": ("check_in_flight_marks_and_outcomes", _outcome_keeps_mark),
    "older_outcome_replaces": ("check_in_flight_marks_and_outcomes", _older_outcome_replaces),
    "mark_never_lapses": ("check_in_flight_marks_and_outcomes", _mark_never_lapses),
    "specs_replaced_whole": ("check_schedule_specs", _specs_replaced_whole),
    "flush_keeps_schedules": ("check_flush", _flush_keeps_schedules),
    "flush_keeps_todays_keys": (
        "check_events_progress_and_workflows_in_keys_and_flush",
        _flush_keeps_todays_keys,
    ),
    "keys_without_todays_kinds": (
        "check_events_progress_and_workflows_in_keys_and_flush",
        _keys_without_todays_kinds,
    ),
    "defer_adds_anyway": ("check_defer", _defer_adds_anyway),
    "defer_ignores_task_id": ("check_defer_indexes_the_retry", _defer_ignores_task_id),
    "defer_without_ack": ("check_defer", _defer_without_ack),
    "move_refuses_own_lock": ("check_move_delayed_keeps_own_lock", _move_refuses_own_lock),
}
_CHECKS_BY_NAME = {check.__name__: check for check in CONTRACT_CHECKS}


@pytest.mark.parametrize("mutant", sorted(MUTANTS))
async def test_check_catches_mutant(mutant: str, autojump_clock: trio.testing.MockClock) -> None:
    check_name, mutate = MUTANTS[mutant]
    # A shared stream: the multi-group checks run in full only there.
    async with MemoryBackend(prefix="taskrunner") as backend:
        mutate(backend)
        with pytest.raises(AssertionError) as caught:
            await _CHECKS_BY_NAME[check_name](backend)
    assert "timing windows" not in str(caught.value), "caught by a stall, not by the check"


class _Claims:
    """Forwards to a backend but reports its own ``delete_on_ack`` (or none)."""

    def __init__(self, backend: MemoryBackend, delete_on_ack: bool | None) -> None:
        self._backend = backend
        if delete_on_ack is not None:
            self.delete_on_ack = delete_on_ack

    def __getattr__(self, name: str) -> Any:
        if name == "delete_on_ack":
            raise AttributeError(name)
        return getattr(self._backend, name)


@pytest.mark.parametrize(
    ("actually_deletes", "claims"),
    [(False, True), (True, False), (True, None)],
    ids=["claims_delete_but_keeps", "claims_keep_but_deletes", "deletes_silently"],
)
async def test_ack_delete_check_catches_mismatch(
    actually_deletes: bool, claims: bool | None, autojump_clock: trio.testing.MockClock
) -> None:
    async with MemoryBackend(delete_on_ack=actually_deletes) as backend:
        lying: Any = _Claims(backend, claims)
        with pytest.raises(AssertionError, match="delete_on_ack"):
            await _CHECKS_BY_NAME["check_ack_deletes_when_delete_on_ack"](lying)


def test_every_check_has_a_mutant() -> None:
    covered = {name for name, _ in MUTANTS.values()} | {"check_ack_deletes_when_delete_on_ack"}
    assert covered == set(_CHECKS_BY_NAME)


def _stall_publish(backend: MemoryBackend, times: int) -> dict[str, int]:
    """Make the short-ttl ``publish_tuning`` return 0.15 s late, ``times`` times.

    Returns counters, filled in as the check runs: ``short`` publishes seen and
    ``stalls`` made."""
    counts = {"short": 0, "stalls": 0}

    def make(orig: Any) -> Any:
        async def publish_tuning(group: str, capacity: int, ttl: float) -> None:
            await orig(group, capacity, ttl)
            if ttl < 1:
                counts["short"] += 1
                if counts["stalls"] < times:
                    counts["stalls"] += 1
                    await trio.sleep(0.15)

        return publish_tuning

    _wrap(backend, "publish_tuning", make)
    return counts


async def test_stalled_check_is_retried(autojump_clock: trio.testing.MockClock) -> None:
    async with MemoryBackend() as backend:
        counts = _stall_publish(backend, times=1)
        await _CHECKS_BY_NAME["check_tuning"](backend)
    # The first attempt stalled (and missed its window); a second one ran and passed.
    assert counts == {"short": 2, "stalls": 1}


async def test_always_stalled_check_fails(autojump_clock: trio.testing.MockClock) -> None:
    async with MemoryBackend() as backend:
        _stall_publish(backend, times=100)
        with pytest.raises(AssertionError, match=f"missed its timing windows {_ATTEMPTS} times"):
            await _CHECKS_BY_NAME["check_tuning"](backend)
