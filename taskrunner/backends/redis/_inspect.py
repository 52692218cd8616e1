"""The :class:`~taskrunner.backends.Inspection` protocol on Redis.

Theory of operation: an operator read finds names first and reads them after.
Names come from the group's fixed keys (:func:`~taskrunner.backends._layout.group_keys`)
and from ``SCAN MATCH`` walks, never ``KEYS``: of the names under ``taskrunner:<group>:``
(its tasks' results and notices, their flow-control keys), of the streams under the
group's stream head (``TYPE stream``: every queue's stream and dead-letter stream), of
its rings (``ring:<prefix>:metrics:*``), and of the keys that are not per group
(heartbeats, unique locks). Then every name found is read in one pipelined round trip,
whatever their number: ``TYPE``, the size command of the type the layout gives that kind
of key, then ``PTTL``. ``PTTL`` comes last so that it decides: a key that expired or
was deleted at any point of the read answers ``-2`` there and is left out, never
reported with the zeros of a missing key. A key of another type than the layout's (set
by hand) is sized in a second round trip with its own command.

Which name is which kind, which names name a group and what a flush deletes are the
pure functions of :mod:`taskrunner.backends._protocols.inspection`, shared with the memory
backend, so both answer alike (the contract suite holds them to it).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import trio

from taskrunner import _keys
from taskrunner._keys import StreamKeys, glob_escape
from taskrunner.backends._layout import (
    _STREAM_KINDS,
    group_head,
    group_key_kind,
    group_keys,
    group_named_by,
    keys_to_flush,
    queue_key,
    queues_in,
    ring_head,
    scanned_patterns,
    stream_head,
)
from taskrunner.backends._protocols.inspection import (
    REDIS_TYPES,
    Heartbeat,
    KeyCounts,
    KeyInfo,
    KeyKind,
    Lease,
    MessageCounts,
)
from taskrunner.backends.redis._connection import CommandArg, Reply
from taskrunner.backends.redis._errors import ResponseError, WrongTypeError
from taskrunner.backends.redis._queue import RedisQueue
from taskrunner.backends.redis._state import RedisState, scan

__all__ = ["RedisInspection"]

SIZE_COMMANDS = {
    "stream": "XLEN",
    "zset": "ZCARD",
    "hash": "HLEN",
    "list": "LLEN",
    "string": "STRLEN",
    "set": "SCARD",
}
"""The command that sizes a key of each Redis type (entries, or bytes of a string)."""

_SCANNED = frozenset(
    [
        KeyKind.HEARTBEAT,
        KeyKind.UNIQUE_LOCK,
        KeyKind.RESULT,
        KeyKind.RESULT_NOTICE,
        KeyKind.PROGRESS,
        KeyKind.WORKFLOW,
    ]
)
"""The kinds of key found by pattern (:func:`scanned_patterns`)."""

_QUEUE_KINDS = frozenset({KeyKind.STREAM, KeyKind.DEAD_LETTER, KeyKind.CLAIM_DELAY_RING})
_STREAMS = frozenset({KeyKind.STREAM, KeyKind.DEAD_LETTER})
"""The kinds that are streams: found by the walk of streams (``TYPE stream``) only."""


def _text(value: bytes | str) -> str:
    # Names on the server come from whoever wrote them: bytes that are not UTF-8
    # are shown escaped rather than allowed to raise out of an operator read.
    return value.decode(errors="backslashreplace") if isinstance(value, bytes) else value


def _ttl(pttl: int) -> float | None:
    """``PTTL``'s reply for a live key as seconds; ``None`` for no expiry."""
    return pttl / 1000 if pttl >= 0 else None


def _checked(reply: Reply) -> Reply:
    if isinstance(reply, ResponseError):
        raise reply
    return reply


class RedisInspection(RedisQueue, RedisState):
    """A :class:`~taskrunner.backends.Inspection` of a Redis server (see the module docstring)."""

    async def ping(self) -> float:
        start = trio.current_time()
        await self._client.execute("PING")
        return trio.current_time() - start

    async def list_groups(self) -> list[str]:
        streams = sorted(await scan(self._client, "*", kind="stream"))
        found: set[str] = set()
        if streams:
            replies = await self._client.pipeline(
                [("XINFO", "GROUPS", stream) for stream in streams], raise_on_error=False
            )
            for reply in replies:
                if isinstance(reply, ResponseError):
                    continue  # deleted (or replaced) since the scan
                for row in reply:
                    fields = dict(zip(row[::2], row[1::2], strict=True))
                    found.add(_text(fields[b"name"]))
        layout = self.key_layout
        for name in await scan(self._client, f"{_keys.PREFIX}:*"):
            group = group_named_by(_text(name), self.queue, layout)
            if group is not None:
                found.add(group)
        return sorted(found)

    async def _layout_keys(self, group: str) -> list[tuple[CommandArg, str, KeyKind, bool]]:
        """``(name as sent, name as text, kind, found by a walk)`` of every key
        :meth:`list_keys` may list: the fixed ones (present or not), then every key
        a walk finds: the group's other keys (results, notices, flow control), every
        queue's stream, dead-letter stream and ring, every heartbeat and lock."""
        own, layout = self.stream_keys(group), self.key_layout
        fixed = group_keys(own, group, layout)
        found: list[tuple[CommandArg, str, KeyKind, bool]] = [
            (n, n, k, False) for n, k in fixed.items()
        ]
        seen = set(fixed)
        walks: list[tuple[str, str | None]] = [
            (f"{glob_escape(group_head(group, layout))}*", None),
            (f"{glob_escape(stream_head(own))}*", "stream"),
            (f"{glob_escape(ring_head(own))}*", None),
            *((pattern, None) for _, pattern in scanned_patterns(group, layout)),
        ]
        for pattern, kind_filter in walks:
            for raw in sorted(await scan(self._client, pattern, kind=kind_filter)):
                name = _text(raw)
                kind = group_key_kind(name, group, own, layout)
                if kind is None or name in seen:
                    continue
                if kind in _STREAMS and kind_filter != "stream":
                    continue  # a stream is taken from the walk of streams only
                seen.add(name)
                found.append((raw, name, kind, True))
        if stream_head(own) != group_head(group, self.key_layout):
            found = await self._read_by(group, own, found)
        return found

    async def _read_by(
        self, group: str, own: StreamKeys, found: list[tuple[CommandArg, str, KeyKind, bool]]
    ) -> list[tuple[CommandArg, str, KeyKind, bool]]:
        """``found`` less the queue keys of streams ``group`` does not read: with an
        explicit prefix, the streams under it are every group's that uses it."""
        streams = [
            (raw, hit[1])
            for raw, name, kind, walked in found
            if walked
            and kind is KeyKind.STREAM
            and (hit := queue_key(name, own, self.key_layout)) is not None
        ]
        replies = await self._client.pipeline(
            [("XINFO", "GROUPS", raw) for raw, _ in streams], raise_on_error=False
        )
        read = {own.queue}
        for (_, queue), reply in zip(streams, replies, strict=True):
            if not isinstance(reply, ResponseError) and any(
                _text(dict(zip(row[::2], row[1::2], strict=True))[b"name"]) == group
                for row in reply
            ):
                read.add(queue)
        return [
            item
            for item in found
            if not item[3]
            or item[2] not in _QUEUE_KINDS
            or (hit := queue_key(item[1], own, self.key_layout)) is None
            or hit[1] in read
        ]

    async def _list(self, group: str) -> list[tuple[CommandArg, KeyInfo]]:
        """:meth:`list_keys`, each key with its name as sent (bytes, for a name
        found that is not UTF-8 and so is listed escaped)."""
        found = await self._layout_keys(group)
        commands: list[tuple[CommandArg, ...]] = []
        for raw, _, kind, _ in found:
            commands += [("TYPE", raw), (SIZE_COMMANDS[REDIS_TYPES[kind]], raw), ("PTTL", raw)]
        replies = await self._client.pipeline(commands, raise_on_error=False)
        out = []
        for (raw, name, kind, _), at in zip(found, range(0, len(replies), 3), strict=True):
            key_type = _text(_checked(replies[at]))
            size, pttl = replies[at + 1], int(_checked(replies[at + 2]))
            if key_type == "none" or pttl == -2:
                continue
            if isinstance(size, WrongTypeError):  # not the layout's type: set by hand
                command = SIZE_COMMANDS.get(key_type)
                size = await self._client.execute(command, raw) if command else 0
            size = int(_checked(size))
            out.append(
                (raw, KeyInfo(name=name, kind=kind, type=key_type, size=size, ttl=_ttl(pttl)))
            )
        out.sort(key=lambda item: item[1].order)
        return out

    async def list_keys(self, group: str) -> list[KeyInfo]:
        return [key for _, key in await self._list(group)]

    async def count_keys(self, group: str) -> KeyCounts:
        found = await self._layout_keys(group)
        fixed = [(raw, kind) for raw, _, kind, walked in found if not walked]
        exists = await self._client.pipeline([("EXISTS", raw) for raw, _ in fixed])
        walked = [kind for _, _, kind, by_walk in found if by_walk]
        return KeyCounts.of(
            [*(kind for (_, kind), n in zip(fixed, exists, strict=True) if n), *walked]
        )

    async def list_queues(self, group: str) -> list[str]:
        own = self.stream_keys(group)
        found: list[tuple[CommandArg, str, KeyKind, bool]] = []
        for pattern, kind_filter in (
            (f"{glob_escape(stream_head(own))}*", "stream"),
            (f"{glob_escape(ring_head(own))}*", None),
        ):
            for raw in sorted(await scan(self._client, pattern, kind=kind_filter)):
                name = _text(raw)
                hit = queue_key(name, own, self.key_layout)
                if hit is not None and (hit[0] in _STREAM_KINDS) == (kind_filter == "stream"):
                    found.append((raw, name, hit[0], True))
        if stream_head(own) != group_head(group, self.key_layout):
            found = await self._read_by(group, own, found)
        return queues_in((name for _, name, _, _ in found), own, self.key_layout)

    async def list_heartbeats(self) -> list[Heartbeat]:
        layout = self.key_layout
        names = sorted(await scan(self._client, _keys.replication_pattern(layout)))
        if not names:
            return []
        commands = [command for raw in names for command in (("GET", raw), ("PTTL", raw))]
        replies = await self._client.pipeline(commands, raise_on_error=False)
        out = []
        for raw, value, pttl in zip(names, replies[::2], replies[1::2], strict=True):
            if not isinstance(value, bytes) or pttl == -2:
                continue  # expired since the scan, or not a string (set by hand)
            out.append(
                Heartbeat(
                    host=_keys.heartbeat_host(_text(raw), layout) or "",
                    instance_id=value.decode(errors="replace"),
                    ttl=_ttl(int(_checked(pttl))),
                )
            )
        return sorted(out, key=lambda beat: beat.host)

    async def count_messages(self, group: str, queues: Iterable[str | None]) -> MessageCounts:
        keys = [self.stream_keys(group, queue) for queue in dict.fromkeys(queues)]
        commands: list[tuple[CommandArg, ...]] = [
            *(("XLEN", k.stream) for k in keys),
            *(("XLEN", k.dead_letter) for k in keys),
            ("ZCARD", _keys.delayed_tasks(group, self.key_layout)),
        ]
        replies = await self._client.pipeline(commands)
        counts = [int(reply) for reply in replies]
        return MessageCounts(
            queued=sum(counts[: len(keys)]),
            dead=sum(counts[len(keys) : 2 * len(keys)]),
            delayed=counts[-1],
        )

    async def read_lease(self, group: str) -> Lease | None:
        key = _keys.leader(group, self.key_layout)
        value, pttl = await self._client.pipeline([("GET", key), ("PTTL", key)])
        if value is None or pttl == -2:  # none, or expired between the two
            return None
        return Lease(owner=bytes(value).decode(errors="backslashreplace"), ttl=_ttl(int(pttl)))

    async def flush_group(self, group: str, *, heartbeats: bool) -> list[str]:
        own = self.stream_keys(group)
        listed = await self._list(group)
        queues = queues_in([key.name for _, key in listed], own, self.key_layout)
        shared: set[str] = set()
        for queue in queues:
            keys = self.stream_keys(group, queue)
            if any(g != group for g in await self.stream_groups(group, queue=queue)):
                shared.update((keys.stream, keys.dead_letter, keys.claim_delay_ring))
        doomed = keys_to_flush(
            [key for _, key in listed], heartbeats=heartbeats, shared_names=shared
        )
        sent_as = {key.name: raw for raw, key in listed}
        commands: list[Sequence[CommandArg]] = [
            ("XGROUP", "DESTROY", self.stream_keys(group, queue).stream, group) for queue in queues
        ]
        # One DEL per key, in the same round trip: on a cluster the heartbeats
        # and locks live in other slots than the group's keys.
        commands += [("DEL", sent_as[name]) for name in doomed]
        # XGROUP DESTROY answers an error when there is no stream or no such group:
        # nothing to destroy. DEL's errors are real.
        replies = await self._client.pipeline(commands, raise_on_error=False)
        for reply in replies[len(queues) :]:
            _checked(reply)
        return doomed
