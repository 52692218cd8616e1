"""The in-memory streams: a faithful small model of Redis streams with groups.

Theory of operation: each consumer group and queue is resolved to a stream
key exactly as on Redis (``taskrunner._keys.stream_keys``), and each stream
key to one :class:`_Stream`, so one backend holds several groups' (and
queues') streams and groups configured with one prefix share them. In a
stream, entries live in a dict keyed by a sequence number (insertion order is
id order). Each group keeps a
cursor (the last sequence delivered) and a pending list mapping id ->
(consumer, last delivery time, delivery count). Reading new entries walks
forward from the cursor, skipping deleted ones, so each entry is visited once
per group. Blocked readers park on their stream's ParkingLot, which every
``add`` to it wakes (and readers of several streams on the backend's own,
which every ``add`` wakes). Every time comes from ``trio.current_time()``, so
``MockClock`` drives idle times, reclaim and blocking reads deterministically.
Every method is a checkpoint, like a real network call, so simulated fleets
interleave fairly.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Sequence

import attrs
import trio

from taskrunner import _keys
from taskrunner._keys import StreamKeys
from taskrunner.backends._key_layout import KeyLayoutHolder
from taskrunner.backends._protocols.queue import (
    ConsumerInfo,
    DeadLetter,
    GroupInfo,
    QueueEntry,
    QueueMetrics,
)
from taskrunner.backends.memory._state import check_text

RING_SIZE = 1000


@attrs.define
class _Pending:
    consumer: str
    delivered_at: float
    count: int


@attrs.define
class _Group:
    cursor: int = 0
    pending: dict[str, _Pending] = attrs.Factory(dict)
    consumers: dict[str, float] = attrs.Factory(dict)  # name -> last seen


@attrs.define(eq=False)
class _Stream:
    """One stream: its entries, groups, claim-delay ring and dead letters."""

    entries: dict[int, tuple[str, bytes | None, float]] = attrs.Factory(dict)
    """seq -> (id, payload, add time)."""
    seq_of: dict[str, int] = attrs.Factory(dict)
    last_seq: int = 0
    groups: dict[str, _Group] = attrs.Factory(dict)
    lot: trio.lowlevel.ParkingLot = attrs.Factory(trio.lowlevel.ParkingLot)
    ring: deque[float] = attrs.Factory(lambda: deque(maxlen=RING_SIZE))
    dead: list[DeadLetter] = attrs.Factory(list)
    dead_seq: int = 0
    """The last dead-letter sequence number given (ids stay unique once some are deleted)."""

    def group(self, name: str) -> _Group:
        g = self.groups.get(name)
        if g is None:
            g = self.groups[name] = _Group()
        return g

    def add(self, payload: bytes | None, now: float | None = None) -> str:
        """Add one entry at ``now`` (trio's clock, read here when not given)."""
        self.last_seq += 1
        if now is None:
            now = trio.current_time()
        entry_id = f"{int(now * 1000)}-{self.last_seq}"
        self.entries[self.last_seq] = (entry_id, payload, now)
        self.seq_of[entry_id] = self.last_seq
        return entry_id

    def clear(self) -> None:
        """Forget every entry, group and dead letter (``DEL`` of the keys)."""
        self.entries.clear()
        self.seq_of.clear()
        self.groups.clear()
        self.ring.clear()
        self.dead.clear()


class MemoryStream(KeyLayoutHolder):
    """A :class:`~taskrunner.backends.MessageQueue` held in process memory."""

    def __init__(
        self,
        *,
        prefix: str | None = None,
        queue: str = "tasks",
        delete_on_ack: bool = True,
        key_layout: _keys.KeyLayout | None = None,
    ) -> None:
        self._init_key_layout(key_layout)
        self.prefix = prefix
        self.queue = queue
        self.delete_on_ack = delete_on_ack
        self._stream_keys: dict[tuple[str, str | None, _keys.KeyLayout], StreamKeys] = {}
        self._streams: dict[str, _Stream] = {}  # by stream key
        # (group, queue) -> (the layout it was named in, its stream, the queue's name):
        # every call of the hot path looks its stream up, and naming its keys each
        # time cost more than the rest of an ack.
        self._stream_of: dict[tuple[str, str | None], tuple[_keys.KeyLayout, _Stream, str]] = {}
        self._added = trio.lowlevel.ParkingLot()  # every add, to any stream

    def stream_keys(self, group: str, queue: str | None = None) -> StreamKeys:
        """The stream, dead-letter stream and ring of ``group`` on ``queue`` (cached)."""
        layout = self._resolved_layout or self.key_layout
        keys = self._stream_keys.get((group, queue, layout))
        if keys is None:
            name = self.queue if queue is None else queue
            keys = self._stream_keys[group, queue, layout] = _keys.stream_keys(
                self.prefix, group, name, layout
            )
        return keys

    def _stream(self, group: str, queue: str | None = None) -> _Stream:
        """The stream ``group`` reads on ``queue`` (created empty on first use)."""
        return self._stream_named(group, queue)[0]

    def _stream_named(self, group: str, queue: str | None) -> tuple[_Stream, str]:
        """:meth:`_stream`, and the name of its queue (``queue``, or the default one)."""
        known = self._stream_of.get((group, queue))
        if known is not None and known[0] is self._resolved_layout:
            return known[1], known[2]
        keys = self.stream_keys(group, queue)
        stream = self._streams.get(keys.stream)
        if stream is None:
            stream = self._streams[keys.stream] = _Stream()
        if self._resolved_layout is not None:  # named for good (else asked again next time)
            self._stream_of[group, queue] = (self._resolved_layout, stream, keys.queue)
        return stream, keys.queue

    def _woken(self, stream: _Stream) -> None:
        """Wake the readers blocked on ``stream`` (or on every stream), if any."""
        if stream.lot:
            stream.lot.unpark_all()
        if self._added:
            self._added.unpark_all()

    async def add(
        self, group: str, payloads: Sequence[bytes], *, queue: str | None = None
    ) -> list[str]:
        await trio.lowlevel.checkpoint()
        return self._add(group, payloads, queue)

    def _add(self, group: str, payloads: Sequence[bytes], queue: str | None) -> list[str]:
        """:meth:`add`, without its checkpoint (for the calls built on it)."""
        stream = self._stream(group, queue)
        if len(payloads) == 1:  # one dispatch: no comprehension
            ids = [stream.add(payloads[0])]
        else:
            now = trio.current_time()  # one time for the batch, as one pipeline has
            ids = [stream.add(payload, now) for payload in payloads]
        if ids:
            self._woken(stream)
        return ids

    def add_raw(self, group: str, fields: dict[str, bytes], *, queue: str | None = None) -> str:
        """Add an entry with arbitrary fields to ``group``'s stream of ``queue`` (for
        tests of malformed input): only ``payload`` is kept; an entry without it is
        read with ``payload=None``."""
        stream = self._stream(group, queue)
        entry_id = stream.add(fields.get("payload"))
        self._woken(stream)
        return entry_id

    def _take_new(
        self, s: _Stream, g: _Group, consumer: str, count: int, queue: str, now: float
    ) -> list[QueueEntry]:
        out: list[QueueEntry] = []
        seq, last = g.cursor, s.last_seq
        entries, pending, ring = s.entries, g.pending, s.ring
        while len(out) < count and seq < last:
            seq += 1
            entry = entries.get(seq)
            if entry is None:
                continue
            entry_id, payload, added_at = entry
            pending[entry_id] = _Pending(consumer, now, 1)
            out.append(QueueEntry(id=entry_id, payload=payload, delivery_count=1, queue=queue))
            ring.append((now - added_at) * 1e9)
        g.cursor = seq
        return out

    async def read(
        self, group: str, consumer: str, count: int, block: float, *, queue: str | None = None
    ) -> list[QueueEntry]:
        # A checkpoint first, even when it will park: by the time it reads, the next
        # dispatch has often come, and a park (its cancel scope's deadline entered and
        # left) costs more than the scheduler pass. For the same reason a read that
        # found nothing looks once more after one more pass before it parks: a
        # producer that awaits one dispatch at a time adds once per scheduler batch,
        # and in half the batches (trio's order within one is random) it runs after
        # this reader; the second look then finds that entry without the park.
        await trio.lowlevel.checkpoint()
        check_text("read", "consumer", consumer)
        s, name = self._stream_named(group, queue)
        g = s.group(group)
        now = trio.current_time()
        deadline = now + block
        looked_again = False
        while True:
            g.consumers[consumer] = now
            got = self._take_new(s, g, consumer, count, name, now)
            if got or now >= deadline:
                return got
            if looked_again:
                with trio.move_on_at(deadline):
                    await s.lot.park()
            else:
                looked_again = True
                await trio.lowlevel.checkpoint()
            now = trio.current_time()

    async def read_many(
        self,
        group: str,
        consumer: str,
        queues: Sequence[str],
        quotas: Sequence[int],
        total: int,
        block: float,
    ) -> list[QueueEntry]:
        await trio.lowlevel.checkpoint()
        check_text("read_many", "consumer", consumer)
        if len(quotas) != len(queues):
            raise ValueError(f"quotas must be as long as queues ({len(queues)}), got {quotas!r}")
        streams = [(q, self._stream(group, q)) for q in queues]
        now = trio.current_time()
        deadline = now + block
        out: list[QueueEntry] = []
        # No checkpoint from here to the wait: one step, like the Lua script.
        for (queue, s), quota in zip(streams, quotas, strict=True):
            g = s.group(group)
            g.consumers[consumer] = now
            out += self._take_new(s, g, consumer, min(quota, total - len(out)), queue, now)
        for queue, s in streams:
            if len(out) >= total:
                break
            out += self._take_new(s, s.group(group), consumer, total - len(out), queue, now)
        waited = streams[: min(len(streams), total)]
        each = total // len(waited) if waited else 0
        while not out and each and trio.current_time() < deadline:
            with trio.move_on_at(deadline):
                await self._added.park()
            now = trio.current_time()
            for queue, s in waited:
                g = s.group(group)
                g.consumers[consumer] = now
                out += self._take_new(s, g, consumer, each, queue, now)
        return out

    async def ack(self, group: str, ids: Sequence[str], *, queue: str | None = None) -> int:
        await trio.lowlevel.checkpoint()
        return self._checked_ack(group, ids, queue)

    def _checked_ack(self, group: str, ids: Sequence[str], queue: str | None) -> int:
        """:meth:`ack`, without its checkpoint (for the calls built on it)."""
        check_text("ack", "id", *ids)
        return self._ack(group, ids, queue)

    def is_pending(self, group: str, entry_id: str, queue: str | None = None) -> bool:
        """Whether ``entry_id`` is pending in ``group`` (no checkpoint: for atomic steps)."""
        g = self._stream(group, queue).groups.get(group)
        return g is not None and entry_id in g.pending

    def _ack(self, group: str, ids: Sequence[str], queue: str | None) -> int:
        """:meth:`ack`, without a checkpoint (for the atomic steps built on it)."""
        s = self._stream(group, queue)
        g = s.groups.get(group)
        acked = 0
        for entry_id in ids:
            if g is not None and g.pending.pop(entry_id, None) is not None:
                acked += 1
            if self.delete_on_ack:
                seq = s.seq_of.pop(entry_id, None)
                if seq is not None:
                    del s.entries[seq]
        return acked

    async def claim_stale(
        self, group: str, consumer: str, min_idle: float, count: int, *, queue: str | None = None
    ) -> list[QueueEntry]:
        await trio.lowlevel.checkpoint()
        check_text("claim_stale", "consumer", consumer)
        name = self.stream_keys(group, queue).queue
        s = self._stream(group, queue)
        g = s.group(group)
        now = trio.current_time()
        g.consumers[consumer] = now
        out: list[QueueEntry] = []
        stale = [i for i, p in g.pending.items() if now - p.delivered_at >= min_idle]
        stale.sort(key=_id_key)
        for entry_id in stale:
            if len(out) >= count:
                break
            seq = s.seq_of.get(entry_id)
            if seq is None:  # deleted from the stream: Redis drops it from the PEL too
                del g.pending[entry_id]
                continue
            p = g.pending[entry_id]
            p.consumer, p.delivered_at, p.count = consumer, now, p.count + 1
            out.append(
                QueueEntry(
                    id=entry_id, payload=s.entries[seq][1], delivery_count=p.count, queue=name
                )
            )
        return out

    async def refresh(
        self, group: str, consumer: str, ids: Sequence[str], *, queue: str | None = None
    ) -> list[str]:
        await trio.lowlevel.checkpoint()
        check_text("refresh", "consumer", consumer)
        check_text("refresh", "id", *ids)
        s = self._stream(group, queue)
        g = s.group(group)
        now = trio.current_time()
        g.consumers[consumer] = now
        done = []
        for entry_id in ids:
            p = g.pending.get(entry_id)
            if p is None:
                continue
            if entry_id not in s.seq_of:  # deleted: XCLAIM (Redis >= 7) drops it too
                del g.pending[entry_id]
                continue
            p.consumer, p.delivered_at = consumer, now
            done.append(entry_id)
        return done

    async def length(self, group: str, *, queue: str | None = None) -> int:
        await trio.lowlevel.checkpoint()
        return len(self._stream(group, queue).entries)

    async def stream_groups(self, group: str, *, queue: str | None = None) -> list[str]:
        await trio.lowlevel.checkpoint()
        return sorted(self._stream(group, queue).groups)

    def _group_info(self, s: _Stream, name: str, g: _Group) -> GroupInfo:
        now = trio.current_time()
        per_consumer = dict.fromkeys(g.consumers, 0)
        for p in g.pending.values():
            per_consumer[p.consumer] = per_consumer.get(p.consumer, 0) + 1
        consumers = tuple(
            ConsumerInfo(name=c, pending=n, idle=now - g.consumers.get(c, now))
            for c, n in sorted(per_consumer.items())
        )
        lag = sum(1 for seq in s.entries if seq > g.cursor)
        return GroupInfo(name=name, pending=len(g.pending), lag=lag, consumers=consumers)

    async def group_info(self, group: str, *, queue: str | None = None) -> GroupInfo:
        await trio.lowlevel.checkpoint()
        s = self._stream(group, queue)
        g = s.groups.get(group)
        if g is None:
            return GroupInfo(name=group, pending=0, lag=0)
        return self._group_info(s, group, g)

    async def delete_consumer(self, group: str, consumer: str, *, queue: str | None = None) -> int:
        await trio.lowlevel.checkpoint()
        g = self._stream(group, queue).groups.get(group)
        if g is None:
            return 0
        mine = [i for i, p in g.pending.items() if p.consumer == consumer]
        for entry_id in mine:
            del g.pending[entry_id]
        g.consumers.pop(consumer, None)
        return len(mine)

    async def delete_idle_consumer(
        self, group: str, consumer: str, min_idle: float, *, queue: str | None = None
    ) -> bool:
        await trio.lowlevel.checkpoint()
        # No checkpoint from here on: the check and the delete are one step.
        g = self._stream(group, queue).groups.get(group)
        if g is None or consumer not in g.consumers:
            return False
        if trio.current_time() - g.consumers[consumer] < min_idle:
            return False
        if any(p.consumer == consumer for p in g.pending.values()):
            return False
        del g.consumers[consumer]
        return True

    async def get_metrics(self, group: str, *, queue: str | None = None) -> QueueMetrics:
        await trio.lowlevel.checkpoint()
        s = self._stream(group, queue)
        ring = list(s.ring)
        avg = sum(ring) / len(ring) if ring else 0.0
        std = math.sqrt(sum((x - avg) ** 2 for x in ring) / len(ring)) if ring else 0.0
        return QueueMetrics(
            queue_size=len(s.entries),
            message_claim_delay_avg=avg,
            message_claim_delay_std=std,
            message_claim_delay_max=max(ring, default=0.0),
            message_claim_delay_last=ring[-1] if ring else 0.0,
            groups=tuple(self._group_info(s, n, g) for n, g in sorted(s.groups.items())),
        )

    async def dead_letter(
        self,
        group: str,
        message_id: str,
        payload: bytes | None,
        error: str,
        *,
        queue: str | None = None,
        task_id: str | None = None,
    ) -> str:
        await trio.lowlevel.checkpoint()
        check_text("dead_letter", "message_id", message_id)
        check_text("dead_letter", "error", error)
        if task_id is not None:
            check_text("dead_letter", "task_id", task_id)
        stream = self._stream(group, queue)
        stream.dead_seq += 1
        dead_id = f"{int(trio.current_time() * 1000)}-{stream.dead_seq}"
        stream.dead.append(
            DeadLetter(
                id=dead_id,
                message_id=message_id,
                group=group,
                payload=payload,
                error=error,
                task_id=task_id,
            )
        )
        return dead_id

    async def dead_letters(
        self,
        group: str,
        count: int = 100,
        *,
        after: str | None = None,
        queue: str | None = None,
    ) -> list[DeadLetter]:
        await trio.lowlevel.checkpoint()
        dead = self._stream(group, queue).dead
        if after is not None:
            bound = _id_key(after)
            dead = [d for d in dead if _id_key(d.id) > bound]
        return dead[:count]


def _id_key(entry_id: str) -> tuple[int, int]:
    ms, _, seq = entry_id.partition("-")
    return int(ms), int(seq)
