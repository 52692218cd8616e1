"""The in-memory stream: a faithful small model of a Redis stream with groups.

Theory of operation: entries live in a dict keyed by a global sequence number
(insertion order is id order). Each group keeps a cursor (the last sequence
delivered) and a pending list mapping id -> (consumer, last delivery time,
delivery count). Reading new entries walks forward from the cursor, skipping
deleted ones, so each entry is visited once per group. Blocked readers park
on one ParkingLot that every ``add`` wakes. Every time comes from
``trio.current_time()``, so ``MockClock`` drives idle times, reclaim and
blocking reads deterministically. Every method is a checkpoint, like a real
network call, so simulated fleets interleave fairly.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Sequence

import attrs
import trio

from taskrunner.backends._memory_state import check_text
from taskrunner.backends._protocols import (
    ConsumerInfo,
    DeadLetter,
    GroupInfo,
    QueueEntry,
    QueueMetrics,
)

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


class MemoryStream:
    """A :class:`~taskrunner.backends.MessageQueue` held in process memory."""

    def __init__(self, *, delete_on_ack: bool = True) -> None:
        self.delete_on_ack = delete_on_ack
        self._entries: dict[int, tuple[str, bytes | None, float]] = {}  # seq -> (id, payload, t)
        self._seq_of: dict[str, int] = {}
        self._last_seq = 0
        self._groups: dict[str, _Group] = {}
        self._lot = trio.lowlevel.ParkingLot()
        self._ring: deque[float] = deque(maxlen=RING_SIZE)
        self._dead: list[DeadLetter] = []

    def _next_id(self) -> tuple[int, str]:
        self._last_seq += 1
        return self._last_seq, f"{int(trio.current_time() * 1000)}-{self._last_seq}"

    def _group(self, group: str) -> _Group:
        g = self._groups.get(group)
        if g is None:
            g = self._groups[group] = _Group()
        return g

    async def add(self, payloads: Sequence[bytes]) -> list[str]:
        await trio.lowlevel.checkpoint()
        now = trio.current_time()
        ids = []
        for payload in payloads:
            seq, entry_id = self._next_id()
            self._entries[seq] = (entry_id, payload, now)
            self._seq_of[entry_id] = seq
            ids.append(entry_id)
        if ids:
            self._lot.unpark_all()
        return ids

    def add_raw(self, fields: dict[str, bytes]) -> str:
        """Add an entry with arbitrary fields (for tests of malformed input): only
        ``payload`` is kept; an entry without it is read with ``payload=None``."""
        seq, entry_id = self._next_id()
        self._entries[seq] = (entry_id, fields.get("payload"), trio.current_time())
        self._seq_of[entry_id] = seq
        self._lot.unpark_all()
        return entry_id

    def _take_new(self, g: _Group, consumer: str, count: int) -> list[QueueEntry]:
        out: list[QueueEntry] = []
        now = trio.current_time()
        seq = g.cursor
        entries = self._entries
        while len(out) < count and seq < self._last_seq:
            seq += 1
            entry = entries.get(seq)
            if entry is None:
                continue
            entry_id, payload, added_at = entry
            g.pending[entry_id] = _Pending(consumer, now, 1)
            out.append(QueueEntry(id=entry_id, payload=payload, delivery_count=1))
            self._ring.append((now - added_at) * 1e9)
        g.cursor = seq
        return out

    async def read(self, group: str, consumer: str, count: int, block: float) -> list[QueueEntry]:
        await trio.lowlevel.checkpoint()
        check_text("read", "consumer", consumer)
        g = self._group(group)
        deadline = trio.current_time() + block
        while True:
            g.consumers[consumer] = trio.current_time()
            got = self._take_new(g, consumer, count)
            if got or trio.current_time() >= deadline:
                return got
            with trio.move_on_at(deadline):
                await self._lot.park()

    async def ack(self, group: str, ids: Sequence[str]) -> int:
        await trio.lowlevel.checkpoint()
        check_text("ack", "id", *ids)
        g = self._groups.get(group)
        acked = 0
        for entry_id in ids:
            if g is not None and g.pending.pop(entry_id, None) is not None:
                acked += 1
            if self.delete_on_ack:
                seq = self._seq_of.pop(entry_id, None)
                if seq is not None:
                    del self._entries[seq]
        return acked

    async def claim_stale(
        self, group: str, consumer: str, min_idle: float, count: int
    ) -> list[QueueEntry]:
        await trio.lowlevel.checkpoint()
        check_text("claim_stale", "consumer", consumer)
        g = self._group(group)
        now = trio.current_time()
        g.consumers[consumer] = now
        out: list[QueueEntry] = []
        stale = [i for i, p in g.pending.items() if now - p.delivered_at >= min_idle]
        stale.sort(key=_id_key)
        for entry_id in stale:
            if len(out) >= count:
                break
            seq = self._seq_of.get(entry_id)
            if seq is None:  # deleted from the stream: Redis drops it from the PEL too
                del g.pending[entry_id]
                continue
            p = g.pending[entry_id]
            p.consumer, p.delivered_at, p.count = consumer, now, p.count + 1
            out.append(
                QueueEntry(id=entry_id, payload=self._entries[seq][1], delivery_count=p.count)
            )
        return out

    async def refresh(self, group: str, consumer: str, ids: Sequence[str]) -> list[str]:
        await trio.lowlevel.checkpoint()
        check_text("refresh", "consumer", consumer)
        check_text("refresh", "id", *ids)
        g = self._group(group)
        now = trio.current_time()
        g.consumers[consumer] = now
        done = []
        for entry_id in ids:
            p = g.pending.get(entry_id)
            if p is None:
                continue
            if entry_id not in self._seq_of:  # deleted: XCLAIM (Redis >= 7) drops it too
                del g.pending[entry_id]
                continue
            p.consumer, p.delivered_at = consumer, now
            done.append(entry_id)
        return done

    async def length(self) -> int:
        await trio.lowlevel.checkpoint()
        return len(self._entries)

    def _group_info(self, name: str, g: _Group) -> GroupInfo:
        now = trio.current_time()
        per_consumer = dict.fromkeys(g.consumers, 0)
        for p in g.pending.values():
            per_consumer[p.consumer] = per_consumer.get(p.consumer, 0) + 1
        consumers = tuple(
            ConsumerInfo(name=c, pending=n, idle=now - g.consumers.get(c, now))
            for c, n in sorted(per_consumer.items())
        )
        lag = sum(1 for seq in self._entries if seq > g.cursor)
        return GroupInfo(name=name, pending=len(g.pending), lag=lag, consumers=consumers)

    async def group_info(self, group: str) -> GroupInfo:
        await trio.lowlevel.checkpoint()
        g = self._groups.get(group)
        if g is None:
            return GroupInfo(name=group, pending=0, lag=0)
        return self._group_info(group, g)

    async def delete_consumer(self, group: str, consumer: str) -> int:
        await trio.lowlevel.checkpoint()
        g = self._groups.get(group)
        if g is None:
            return 0
        mine = [i for i, p in g.pending.items() if p.consumer == consumer]
        for entry_id in mine:
            del g.pending[entry_id]
        g.consumers.pop(consumer, None)
        return len(mine)

    async def get_metrics(self) -> QueueMetrics:
        await trio.lowlevel.checkpoint()
        ring = list(self._ring)
        avg = sum(ring) / len(ring) if ring else 0.0
        std = math.sqrt(sum((x - avg) ** 2 for x in ring) / len(ring)) if ring else 0.0
        return QueueMetrics(
            queue_size=len(self._entries),
            message_claim_delay_avg=avg,
            message_claim_delay_std=std,
            message_claim_delay_max=max(ring, default=0.0),
            message_claim_delay_last=ring[-1] if ring else 0.0,
            groups=tuple(self._group_info(n, g) for n, g in sorted(self._groups.items())),
        )

    async def dead_letter(
        self, group: str, message_id: str, payload: bytes | None, error: str
    ) -> str:
        await trio.lowlevel.checkpoint()
        check_text("dead_letter", "message_id", message_id)
        check_text("dead_letter", "error", error)
        dead_id = f"{int(trio.current_time() * 1000)}-{len(self._dead) + 1}"
        self._dead.append(
            DeadLetter(id=dead_id, message_id=message_id, group=group, payload=payload, error=error)
        )
        return dead_id

    async def dead_letters(self, count: int = 100) -> list[DeadLetter]:
        await trio.lowlevel.checkpoint()
        return self._dead[:count]


def _id_key(entry_id: str) -> tuple[int, int]:
    ms, _, seq = entry_id.partition("-")
    return int(ms), int(seq)
