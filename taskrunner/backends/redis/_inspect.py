"""The :class:`~taskrunner.backends.Inspection` protocol on Redis.

Theory of operation: an operator read finds names first and reads them after.
Names come from the group's fixed keys
(:func:`~taskrunner.backends._layout.group_keys`)
and from ``SCAN MATCH`` walks for the keys that are not per group (heartbeats, unique
locks), never ``KEYS``. Then every name found is read in one pipelined round trip,
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

from collections.abc import Sequence

import trio

from taskrunner import _keys
from taskrunner.backends._layout import (
    HEARTBEAT_PREFIX,
    UNIQUE_LOCK_PATTERN,
    group_keys,
    group_named_by,
    keys_to_flush,
    per_task_patterns,
)
from taskrunner.backends._protocols.inspection import (
    REDIS_TYPES,
    Heartbeat,
    KeyCounts,
    KeyInfo,
    KeyKind,
    Lease,
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

_PATTERNS = (
    (KeyKind.HEARTBEAT, _keys.REPLICATION_PATTERN),
    (KeyKind.UNIQUE_LOCK, UNIQUE_LOCK_PATTERN),
)
"""The kinds of key that are not per group, found by pattern."""
_SCANNED = frozenset([*(kind for kind, _ in _PATTERNS), KeyKind.RESULT, KeyKind.RESULT_NOTICE])


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
        for name in await scan(self._client, f"{_keys.PREFIX}:*"):
            group = group_named_by(_text(name), self.queue)
            if group is not None:
                found.add(group)
        return sorted(found)

    async def _layout_keys(self, group: str) -> list[tuple[CommandArg, str, KeyKind]]:
        """``(name as sent, name as text, kind)`` of every key :meth:`list_keys` may
        list: the fixed ones (present or not), then every heartbeat and lock found."""
        fixed = group_keys(self.stream_keys(group), group)
        found: list[tuple[CommandArg, str, KeyKind]] = [(n, n, k) for n, k in fixed.items()]
        for kind, pattern in (*_PATTERNS, *per_task_patterns(group)):
            for raw in sorted(await scan(self._client, pattern)):
                name = _text(raw)
                if name not in fixed:
                    found.append((raw, name, kind))
        return found

    async def _list(self, group: str) -> list[tuple[CommandArg, KeyInfo]]:
        """:meth:`list_keys`, each key with its name as sent (bytes, for a name
        found that is not UTF-8 and so is listed escaped)."""
        found = await self._layout_keys(group)
        commands: list[tuple[CommandArg, ...]] = []
        for raw, _, kind in found:
            commands += [("TYPE", raw), (SIZE_COMMANDS[REDIS_TYPES[kind]], raw), ("PTTL", raw)]
        replies = await self._client.pipeline(commands, raise_on_error=False)
        out = []
        for (raw, name, kind), at in zip(found, range(0, len(replies), 3), strict=True):
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
        return out

    async def list_keys(self, group: str) -> list[KeyInfo]:
        return [key for _, key in await self._list(group)]

    async def count_keys(self, group: str) -> KeyCounts:
        found = await self._layout_keys(group)
        fixed = [(raw, kind) for raw, _, kind in found if kind not in _SCANNED]
        exists = await self._client.pipeline([("EXISTS", raw) for raw, _ in fixed])
        scanned = [kind for _, _, kind in found if kind in _SCANNED]
        return KeyCounts.of(
            [*(kind for (_, kind), n in zip(fixed, exists, strict=True) if n), *scanned]
        )

    async def list_heartbeats(self) -> list[Heartbeat]:
        names = sorted(await scan(self._client, _keys.REPLICATION_PATTERN))
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
                    host=_text(raw).removeprefix(HEARTBEAT_PREFIX),
                    instance_id=value.decode(errors="replace"),
                    ttl=_ttl(int(_checked(pttl))),
                )
            )
        return sorted(out, key=lambda beat: beat.host)

    async def read_lease(self, group: str) -> Lease | None:
        key = _keys.leader(group)
        value, pttl = await self._client.pipeline([("GET", key), ("PTTL", key)])
        if value is None or pttl == -2:  # none, or expired between the two
            return None
        return Lease(owner=bytes(value).decode(errors="backslashreplace"), ttl=_ttl(int(pttl)))

    async def flush_group(self, group: str, *, heartbeats: bool) -> list[str]:
        stream = self.stream_keys(group).stream
        others = [g for g in await self.stream_groups(group) if g != group]
        listed = await self._list(group)
        doomed = keys_to_flush(
            [key for _, key in listed], stream_shared=bool(others), heartbeats=heartbeats
        )
        sent_as = {key.name: raw for raw, key in listed}
        commands: list[Sequence[CommandArg]] = [("XGROUP", "DESTROY", stream, group)]
        if doomed:
            commands.append(("DEL", *(sent_as[name] for name in doomed)))
        # XGROUP DESTROY answers an error when there is no stream or no such group:
        # nothing to destroy. DEL's errors are real.
        replies = await self._client.pipeline(commands, raise_on_error=False)
        for reply in replies[1:]:
            _checked(reply)
        return doomed
