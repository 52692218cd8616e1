"""The MessageQueue half of the Redis backend: streams with consumer groups.

Theory of operation. Each consumer group reads, on each queue, the stream
that :meth:`RedisQueue.stream_keys` resolves the two to
(``taskrunner:<group>:<queue>`` by default, ``<prefix>:<queue>`` with an
explicit prefix), computed once per group and queue and cached. Every
fetcher (consumer) reads with ``XREADGROUP ... BLOCK`` on a dedicated
connection of its own, so a blocked read never holds up the shared,
auto-pipelined connection everything else uses. A fetcher of several queues
reads them in one script call (``lua/read_queues.lua``: the per-queue counts
of a priority plan need one ``XREADGROUP`` per stream, decided in order), and
only when every queue is empty blocks in one ``XREADGROUP`` over several
streams, with a ``COUNT`` small enough that all of them answering at once
still stays within what it may take. Acks are
batched by the runner and sent as one pipeline (``XACK``, then ``XDEL`` when
deleting on ack); the claim delays measured at read time ride along in the
same round trip (``LPUSH`` + ``LTRIM`` of the ring), so metrics cost no extra
round trip on the hot path. That push is best effort: an error reply to it
(``OOM``, ``WRONGTYPE``) is logged and its delays dropped, never raised by
the ack it rode with. The group is created lazily when a read answers
``NOGROUP``.

Redis differences the rest of the code relies on being hidden here:
``XAUTOCLAIM`` does not return delivery counts (read back with ``XPENDING``),
and reports entries deleted from the stream separately (Redis >= 7; 6.2 gives
them as nil entries, which are acked away here); ``XINFO GROUPS`` reports a
nil lag once entries after the group's cursor were deleted (estimated here,
see ``RedisQueue._lag``: exact with ``delete_on_ack``, else a lower bound
past 10,000 entries).
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Sequence
from typing import Any

from taskrunner import _keys
from taskrunner._keys import StreamKeys
from taskrunner.backends._key_layout import KeyLayoutHolder
from taskrunner.backends._protocols.events import EventBatch
from taskrunner.backends._protocols.queue import (
    ConsumerInfo,
    DeadLetter,
    GroupInfo,
    QueueEntry,
    QueueMetrics,
)
from taskrunner.backends.redis._connection import CommandArg
from taskrunner.backends.redis._errors import BusyGroupError, NoGroupError, ResponseError
from taskrunner.backends.redis._event_commands import (
    Command,
    event_commands,
    progress_commands,
)
from taskrunner.backends.redis._protocol import DedicatedRedisConnection, RedisClient
from taskrunner.backends.redis._scripts import load_script

RING_SIZE = 1000
ADD_CHUNK = 2000
"""Entries per pipeline when adding many at once."""
READ_TIMEOUT_MARGIN = 5.0
"""How much longer than its ``BLOCK`` a read may take before the connection is deemed dead."""
LAG_SCAN_PAGE = 1000
LAG_SCAN_PAGES = 10
"""At most this many ``XRANGE`` pages are read to count a nil lag (see ``RedisQueue._lag``)."""

RING_WARNING_INTERVAL = 60.0
"""Seconds between two warnings about failing claim-delay ring pushes."""

_PAYLOAD = b"payload"

DELETE_IDLE_CONSUMER = load_script("delete_idle_consumer.lua")
"""``XGROUP DELCONSUMER`` only while the consumer has nothing pending and is idle
for ``ARGV[3]`` ms; 1 if deleted, else 0."""
READ_QUEUES = load_script("read_queues.lua")
"""Read new entries from several streams by quota, then in order (see ``read_many``)."""

logger = logging.getLogger(__name__)


def _ms(seconds: float) -> int:
    return max(0, math.ceil(seconds * 1000))


def _text(value: bytes | str) -> str:
    # Names and texts come from whoever wrote them (another client's consumer or
    # group, a dead letter of the Go library): bytes that are not UTF-8 are shown
    # escaped rather than allowed to raise out of a service.
    return value.decode(errors="backslashreplace") if isinstance(value, bytes) else value


def _pairs(flat: Sequence[Any]) -> dict[bytes, Any]:
    """A flat RESP2 ``[k1, v1, k2, v2...]`` reply as a dict keyed by bytes."""
    it = iter(flat)
    return {k if isinstance(k, bytes) else str(k).encode(): v for k, v in zip(it, it, strict=True)}


def _entry_payload(fields: Sequence[Any] | None) -> bytes | None:
    if not fields:
        return None
    if len(fields) == 2 and fields[0] == _PAYLOAD:  # every entry we write: one field
        value = fields[1]
        return value if isinstance(value, bytes) else None
    value = _pairs(fields).get(_PAYLOAD)
    return value if isinstance(value, bytes) else None


def _entry_inputs(fields: Sequence[Any]) -> tuple[bytes | None, tuple[bytes, bytes] | None]:
    """The payload of an entry of several fields and a step's inputs carried in it
    (``step_parent``, ``step_result``: written by ``lua/finish.lua`` when it queues a
    chain's next step), or ``None``; the fields read once for both."""
    if (
        len(fields) == 6
        and fields[0] == _PAYLOAD
        and fields[2] == b"step_parent"
        and fields[4] == b"step_result"
    ):  # in the order finish.lua writes them
        payload, header, document = fields[1], fields[3], fields[5]
        if isinstance(payload, bytes) and isinstance(header, bytes) and isinstance(document, bytes):
            return payload, (header, document)
    pairs = _pairs(fields)
    payload = pairs.get(_PAYLOAD)
    header, document = pairs.get(b"step_parent"), pairs.get(b"step_result")
    inputs = None
    if isinstance(header, bytes) and isinstance(document, bytes):
        inputs = header, document
    return (payload if isinstance(payload, bytes) else None), inputs


def dead_letter_of(raw_id: bytes, flat: Sequence[Any]) -> DeadLetter:
    """A dead letter from its ``XRANGE`` row (id and flat fields)."""
    fields = _pairs(flat)
    return DeadLetter(
        id=_text(raw_id),
        message_id=_text(fields.get(b"message_id", b"")),
        group=_text(fields.get(b"group", b"")),
        payload=fields.get(_PAYLOAD),
        error=_text(fields.get(b"error", b"")),
        task_id=_text(task_id) if (task_id := fields.get(b"task_id")) is not None else None,
    )


def _id_ms(entry_id: str) -> int:
    return int(entry_id.partition("-")[0])


class RedisQueue(KeyLayoutHolder):
    """A :class:`~taskrunner.backends.MessageQueue` on Redis streams."""

    def __init__(
        self,
        client: RedisClient,
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
        self._client = client
        self._stream_keys: dict[tuple[str, str | None, _keys.KeyLayout], StreamKeys] = {}
        # One per (group, consumer): a sharded group's fetcher reads each shard (a group
        # of its own, named by its tag) under one consumer name, with blocking reads at
        # once, and a dedicated connection carries one at a time.
        self._readers: dict[tuple[str, str], DedicatedRedisConnection] = {}
        # Claim delays (ns) not yet pushed, per ring key.
        self._delays: dict[str, list[int]] = {}
        self._ring_warned_at = -math.inf  # time.monotonic() of the last ring warning

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

    def _stream(self, group: str, queue: str | None = None) -> str:
        return self.stream_keys(group, queue).stream

    def _events_key(self, group: str) -> str:
        return _keys.events(group, self.key_layout)

    def _event_commands(self, group: str, batch: EventBatch) -> list[Command]:
        """The ``XADD`` of each event of ``batch``, for a call to append to its pipeline."""
        return event_commands(self._events_key(group), batch)

    def _progress_commands(self, group: str, batch: EventBatch) -> list[Command]:
        """The writes of ``batch``'s progress, for a call to put before its own."""
        return progress_commands(
            [_keys.progress(group, u.task_id, self.key_layout) for u in batch.progress], batch
        )

    # Adding -----------------------------------------------------------------
    async def add(
        self, group: str, payloads: Sequence[bytes], *, queue: str | None = None
    ) -> list[str]:
        stream = self._stream(group, queue)
        if len(payloads) == 1:  # one dispatch: one command, no pipeline to build
            return [_text(await self._client.execute("XADD", stream, "*", _PAYLOAD, payloads[0]))]
        ids: list[str] = []
        for start in range(0, len(payloads), ADD_CHUNK):
            chunk = payloads[start : start + ADD_CHUNK]
            commands = [("XADD", stream, "*", _PAYLOAD, p) for p in chunk]
            replies = await self._client.pipeline(commands)
            ids.extend(_text(r) for r in replies)
        return ids

    # Reading ----------------------------------------------------------------
    def _reader(self, group: str, consumer: str) -> DedicatedRedisConnection:
        reader = self._readers.get((group, consumer))
        if reader is None:
            reader = self._readers[group, consumer] = self._client.dedicated()
        return reader

    async def _read(
        self, group: str, consumer: str, args: list[CommandArg], limit: float | None
    ) -> Any:
        if limit is None:  # not blocking: fine on the shared connection
            return await self._client.execute(*args)
        return await self._reader(group, consumer).execute(*args, reply_timeout=limit)

    async def _create_group(self, group: str, queue: str | None = None) -> None:
        try:
            await self._client.execute(
                "XGROUP", "CREATE", self._stream(group, queue), group, "0", "MKSTREAM"
            )
        except BusyGroupError:
            pass  # created meanwhile by another consumer

    def _entries(self, keys: StreamKeys, rows: Sequence[Any], now_ms: float) -> list[QueueEntry]:
        """``rows`` (``[id, fields]`` pairs of ``keys.stream``) as entries, their claim
        delays measured against ``now_ms`` and kept for the ring."""
        delays = self._delays.setdefault(keys.claim_delay_ring, [])
        entries = []
        for raw_id, fields in rows:
            entry_id = _text(raw_id)
            if fields is not None and len(fields) > 2:  # a chain's step, its inputs in it
                payload, inputs = _entry_inputs(fields)
                entry = QueueEntry(
                    id=entry_id, payload=payload, delivery_count=1, queue=keys.queue, inputs=inputs
                )
            else:
                entry = QueueEntry(
                    id=entry_id, payload=_entry_payload(fields), delivery_count=1, queue=keys.queue
                )
            entries.append(entry)
            delays.append(max(0, int((now_ms - _id_ms(entry_id)) * 1e6)))
        if len(delays) > RING_SIZE:
            del delays[:-RING_SIZE]
        return entries

    async def read(
        self, group: str, consumer: str, count: int, block: float, *, queue: str | None = None
    ) -> list[QueueEntry]:
        args: list[CommandArg] = ["XREADGROUP", "GROUP", group, consumer, "COUNT", count]
        timeout: float | None = None
        if block > 0:  # BLOCK 0 would mean "forever"
            args += ["BLOCK", max(1, _ms(block))]
            timeout = block + READ_TIMEOUT_MARGIN
        keys = self.stream_keys(group, queue)
        args += ["STREAMS", keys.stream, ">"]
        try:
            reply = await self._read(group, consumer, args, timeout)
        except ResponseError as exc:
            # NOGROUP on Redis; fakeredis answers a plain ERR when the stream
            # itself is missing. Creating the group is idempotent, so try it
            # once for either and let a second failure through.
            if not isinstance(exc, NoGroupError) and exc.code != "ERR":
                raise
            await self._create_group(group, queue)
            reply = await self._read(group, consumer, args, timeout)
        if not reply:
            return []
        return self._entries(keys, reply[0][1], time.time() * 1000)

    async def read_many(
        self,
        group: str,
        consumer: str,
        queues: Sequence[str],
        quotas: Sequence[int],
        total: int,
        block: float,
    ) -> list[QueueEntry]:
        """One script call reads by quota, then in order; only when every queue was
        empty, one blocking ``XREADGROUP`` over the first ``min(len(queues), total)``
        streams, ``COUNT total // m`` (see the protocol)."""
        if len(quotas) != len(queues):
            raise ValueError(f"quotas must be as long as queues ({len(queues)}), got {quotas!r}")
        if not queues or total < 1:
            return []
        keys = [self.stream_keys(group, q) for q in queues]
        reply = await READ_QUEUES(
            self._client, [k.stream for k in keys], [group, consumer, total, *quotas]
        )
        now_ms = time.time() * 1000
        if reply:
            return [
                entry
                for at in range(0, len(reply), 3)
                for entry in self._entries(
                    keys[int(reply[at]) - 1], [(reply[at + 1], reply[at + 2])], now_ms
                )
            ]
        if block <= 0:
            return []
        waited = keys[: min(len(keys), total)]
        args: list[CommandArg] = [
            "XREADGROUP", "GROUP", group, consumer, "COUNT", total // len(waited),
            "BLOCK", max(1, _ms(block)), "STREAMS",
            *(k.stream for k in waited), *(">" for _ in waited),
        ]  # fmt: skip
        try:
            answer = await self._read(group, consumer, args, block + READ_TIMEOUT_MARGIN)
        except NoGroupError:
            return []  # destroyed since the script created it: the next call does again
        if not answer:
            return []
        now_ms = time.time() * 1000
        of_stream = {k.stream: k for k in waited}
        entries: list[QueueEntry] = []
        for stream, rows_of in answer:
            entries += self._entries(of_stream[_text(stream)], rows_of, now_ms)
        return entries

    def _ring_commands(self, ring_key: str) -> list[tuple[CommandArg, ...]]:
        delays = self._delays.get(ring_key)
        if not delays:
            return []
        self._delays[ring_key] = []
        return [
            ("LPUSH", ring_key, *delays),
            ("LTRIM", ring_key, 0, RING_SIZE - 1),
        ]

    def _ring_failed(self, ring_key: str, replies: Sequence[Any]) -> bool:
        """Log (at most every ``RING_WARNING_INTERVAL``) if a ring command answered an error.

        The ring only feeds the claim-delay metrics, so a push refused by the
        server (``OOM`` under ``maxmemory``, ``WRONGTYPE``...) drops those
        delays: retrying them would fail the same way and must never fail or
        repeat the ack that carried them.
        """
        error = next((r for r in replies if isinstance(r, ResponseError)), None)
        if error is None:
            return False
        now = time.monotonic()
        if now - self._ring_warned_at >= RING_WARNING_INTERVAL:
            self._ring_warned_at = now
            logger.warning(
                "claim-delay ring %s not updated (delays dropped, metrics may be stale): %s",
                ring_key,
                error,
            )
        return True

    # Acknowledging ----------------------------------------------------------
    async def ack(
        self,
        group: str,
        ids: Sequence[str],
        *,
        queue: str | None = None,
        events: EventBatch | None = None,
    ) -> int:
        if not ids:
            if events is not None:
                writes = self._progress_commands(group, events)
                await self._client.pipeline(writes + self._event_commands(group, events))
            return 0
        stream = self.stream_keys(group, queue).stream
        before = [] if events is None else self._progress_commands(group, events)
        commands: list[tuple[CommandArg, ...]] = [*before, ("XACK", stream, group, *ids)]
        if self.delete_on_ack:
            commands.append(("XDEL", stream, *ids))
        if events is not None:  # after the acks, in their round trip
            commands += self._event_commands(group, events)
        acked: int = (await self._with_ring(group, commands))[len(before)]
        return acked

    async def _with_ring(self, group: str, commands: list[tuple[CommandArg, ...]]) -> list[Any]:
        """Send ``commands`` with every buffered claim delay, each queue's to its own
        ring, in one pipeline: the acks' round trip.

        Every ring with delays goes, not only the acked queue's: a queue's delays
        are measured when its entries are read, and an ack of another queue may come
        first (each ring is two commands; a ring without delays sends none).

        Returns:
            The replies of ``commands``.

        Raises:
            ResponseError: the first error reply of ``commands`` (the ring push is
                best effort: its errors are logged, see :meth:`_ring_failed`).
        """
        rings = [(key, self._ring_commands(key)) for key, delays in self._delays.items() if delays]
        pushes = [command for _, ring in rings for command in ring]
        try:
            replies = await self._client.pipeline(commands + pushes, raise_on_error=False)
        except BaseException:
            for ring_key, ring in rings:  # not known to have landed; keep them for next time
                pending = self._delays.setdefault(ring_key, [])
                pending[:0] = list(ring[0][2:])  # type: ignore[arg-type]
            raise
        at = len(commands)
        for ring_key, ring in rings:
            self._ring_failed(ring_key, replies[at : at + len(ring)])
            at += len(ring)
        for reply in replies[: len(commands)]:
            if isinstance(reply, ResponseError):
                raise reply
        return replies[: len(commands)]

    # Claiming and refreshing ------------------------------------------------
    async def claim_stale(
        self, group: str, consumer: str, min_idle: float, count: int, *, queue: str | None = None
    ) -> list[QueueEntry]:
        claimed: list[tuple[str, bytes | None]] = []
        keys = self.stream_keys(group, queue)
        stream = keys.stream
        cursor = "0-0"
        try:
            while len(claimed) < count:
                reply = await self._client.execute(
                    "XAUTOCLAIM", stream, group, consumer, _ms(min_idle), cursor,
                    "COUNT", count - len(claimed),
                )  # fmt: skip
                cursor = _text(reply[0])
                gone: list[str] = [_text(i) for i in reply[2]] if len(reply) > 2 else []
                for raw_id, fields in reply[1]:
                    if fields is None:  # Redis 6.2: deleted entry, still pending
                        gone.append(_text(raw_id))
                    else:
                        claimed.append((_text(raw_id), _entry_payload(fields)))
                if gone and len(reply) <= 2:
                    await self._client.execute("XACK", stream, group, *gone)
                if cursor == "0-0":
                    break
        except NoGroupError:
            return []
        if not claimed:
            return []
        pending = await self._client.pipeline(
            [("XPENDING", stream, group, i, i, 1) for i, _ in claimed]
        )
        entries = []
        for (entry_id, payload), rows in zip(claimed, pending, strict=True):
            count_now = int(rows[0][3]) if rows else 1
            entries.append(
                QueueEntry(id=entry_id, payload=payload, delivery_count=count_now, queue=keys.queue)
            )
        return entries

    async def refresh(
        self, group: str, consumer: str, ids: Sequence[str], *, queue: str | None = None
    ) -> list[str]:
        if not ids:
            return []
        try:
            reply = await self._client.execute(
                "XCLAIM", self._stream(group, queue), group, consumer, 0, *ids, "JUSTID"
            )
        except NoGroupError:
            return []
        return [_text(i) for i in reply]

    # Inspecting -------------------------------------------------------------
    async def length(self, group: str, *, queue: str | None = None) -> int:
        n: int = await self._client.execute("XLEN", self._stream(group, queue))
        return n

    async def stream_groups(self, group: str, *, queue: str | None = None) -> list[str]:
        return sorted(_text(g[b"name"]) for g in await self._groups(self._stream(group, queue)))

    async def _lag(self, stream: str, group: dict[bytes, Any]) -> int:
        """The group's lag: entries not yet delivered to it.

        ``XINFO GROUPS`` reports it directly unless entries were deleted after
        the group's cursor (or, on Redis 7.0, acked out of order with
        ``delete_on_ack``); then it answers nil and this estimates it without
        reading the stream's payloads wholesale:

        - with ``delete_on_ack``: ``XLEN`` minus the group's pending count,
          which is exact while entries leave the stream only by being acked
          (they are then either pending or undelivered); trimming or several
          groups deleting on the same stream make it an estimate;
        - otherwise: the entries after the cursor, counted with at most
          ``LAG_SCAN_PAGES`` ``XRANGE`` pages of ``LAG_SCAN_PAGE`` entries, so
          a longer backlog is reported as that lower bound (``GroupInfo.lag``
          is then "at least this many").
        """
        lag = group.get(b"lag")
        if lag is not None:
            return int(lag)
        if self.delete_on_ack:
            length: int = await self._client.execute("XLEN", stream)
            return max(0, length - int(group[b"pending"]))
        start = b"(" + group[b"last-delivered-id"]
        total = 0
        for _ in range(LAG_SCAN_PAGES):
            page = await self._client.execute("XRANGE", stream, start, "+", "COUNT", LAG_SCAN_PAGE)
            total += len(page)
            if len(page) < LAG_SCAN_PAGE:
                break
            start = b"(" + page[-1][0]
        return total

    async def _groups(self, stream: str) -> list[dict[bytes, Any]]:
        try:
            reply = await self._client.execute("XINFO", "GROUPS", stream)
        except ResponseError as exc:
            if "no such key" in exc.message.lower():
                return []
            raise
        return [_pairs(g) for g in reply]

    async def _group_info(self, stream: str, group: dict[bytes, Any]) -> GroupInfo:
        name = _text(group[b"name"])
        try:
            rows = await self._client.execute("XINFO", "CONSUMERS", stream, name)
        except NoGroupError:
            rows = []
        consumers = []
        for row in rows:
            fields = _pairs(row)
            consumers.append(
                ConsumerInfo(
                    name=_text(fields[b"name"]),
                    pending=int(fields[b"pending"]),
                    idle=int(fields[b"idle"]) / 1000,
                )
            )
        consumers.sort(key=lambda c: c.name)
        return GroupInfo(
            name=name,
            pending=int(group[b"pending"]),
            lag=await self._lag(stream, group),
            consumers=tuple(consumers),
        )

    async def group_info(self, group: str, *, queue: str | None = None) -> GroupInfo:
        stream = self._stream(group, queue)
        for found in await self._groups(stream):
            if _text(found[b"name"]) == group:
                return await self._group_info(stream, found)
        return GroupInfo(name=group, pending=0, lag=0)

    async def delete_consumer(self, group: str, consumer: str, *, queue: str | None = None) -> int:
        try:
            n: int = await self._client.execute(
                "XGROUP", "DELCONSUMER", self._stream(group, queue), group, consumer
            )
        except NoGroupError:
            return 0
        await self._close_reader(group, consumer)
        return n

    async def delete_idle_consumer(
        self, group: str, consumer: str, min_idle: float, *, queue: str | None = None
    ) -> bool:
        """One script call: ``XPENDING`` and ``XINFO CONSUMERS`` decide, then
        ``XGROUP DELCONSUMER``, with no command of another client in between."""
        reply = await DELETE_IDLE_CONSUMER(
            self._client, [self._stream(group, queue)], [group, consumer, _ms(min_idle)]
        )
        if reply != 1:
            return False
        await self._close_reader(group, consumer)
        return True

    async def _close_reader(self, group: str, consumer: str) -> None:
        reader = self._readers.pop((group, consumer), None)
        if reader is not None:
            await reader.aclose()

    async def get_metrics(self, group: str, *, queue: str | None = None) -> QueueMetrics:
        """The queue's size, claim delays and groups.

        The buffered claim delays are pushed to the ring first, best effort
        (see :meth:`_ring_failed`). If the ring cannot be read (a key of
        another type in its place), the claim-delay figures are reported as 0,
        as when nothing was measured yet, and a warning is logged.
        """
        keys = self.stream_keys(group, queue)
        ring_key = keys.claim_delay_ring
        ring = self._ring_commands(ring_key)
        replies = await self._client.pipeline(
            [*ring, ("XLEN", keys.stream), ("LRANGE", ring_key, 0, RING_SIZE - 1)],
            raise_on_error=False,
        )
        size, raw = replies[-2], replies[-1]
        if isinstance(size, ResponseError):
            raise size
        if self._ring_failed(ring_key, [*replies[: len(ring)], raw]):
            raw = []
        delays = [float(x) for x in raw]  # newest first (LPUSH)
        avg = sum(delays) / len(delays) if delays else 0.0
        std = math.sqrt(sum((d - avg) ** 2 for d in delays) / len(delays)) if delays else 0.0
        groups = tuple(
            [await self._group_info(keys.stream, g) for g in await self._groups(keys.stream)]
        )
        return QueueMetrics(
            queue_size=int(size),
            message_claim_delay_avg=avg,
            message_claim_delay_std=std,
            message_claim_delay_max=max(delays, default=0.0),
            message_claim_delay_last=delays[0] if delays else 0.0,
            groups=tuple(sorted(groups, key=lambda g: g.name)),
        )

    # Dead letters -----------------------------------------------------------
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
        fields: list[CommandArg] = ["message_id", message_id, "group", group, "error", error]
        if task_id is not None:  # optional: only our tools read this stream
            fields += ["task_id", task_id]
        if payload is not None:
            fields += [_PAYLOAD, payload]
        reply = await self._client.execute(
            "XADD", self.stream_keys(group, queue).dead_letter, "*", *fields
        )
        return _text(reply)

    async def dead_letters(
        self,
        group: str,
        count: int = 100,
        *,
        after: str | None = None,
        queue: str | None = None,
    ) -> list[DeadLetter]:
        start = "-" if after is None else f"({after}"
        rows = await self._client.execute(
            "XRANGE", self.stream_keys(group, queue).dead_letter, start, "+", "COUNT", count
        )
        return [dead_letter_of(raw_id, flat) for raw_id, flat in rows]

    async def _close_readers(self) -> None:
        readers, self._readers = list(self._readers.values()), {}
        for reader in readers:
            await reader.aclose()
