"""Operator tools: inspect and wipe a group's keys.

:func:`flush` is the "Flushing / cleanup" recipe of the key layout
(docs/redis-key-layout.md) as one call, for development and staging: it drops
in-flight messages, forces a re-election and may let a duplicate unique job
in, so it refuses to run without ``confirm=True``. :func:`list_keys` shows
every documented key of a group that exists, with its type, size and TTL.

Both work on :class:`~taskrunner.backends.redis.RedisBackend` (with ``SCAN``,
never ``KEYS``) and on :class:`~taskrunner.backends.memory.MemoryBackend`.
"""

from __future__ import annotations

from typing import Any

import attrs

from taskrunner import _keys, _wire
from taskrunner.backends import Backend
from taskrunner.backends.memory import MemoryBackend

__all__ = ["KeyInfo", "documented_keys", "flush", "list_keys"]


@attrs.frozen(kw_only=True)
class KeyInfo:
    """One key as found on the server."""

    name: str
    type: str
    """``stream``, ``zset``, ``string``, ``hash`` or ``list``."""
    size: int
    """Entries (stream, zset, hash, list) or bytes (string)."""
    ttl: float | None
    """Seconds left, or ``None`` when the key does not expire."""
    purpose: str
    """What the key is for, from the key layout."""


def documented_keys(backend: Backend, group: str) -> dict[str, str]:
    """The fixed key names of ``group`` on ``backend``, with their purpose.

    Per-instance (``taskrunner:replication:*``) and per-job
    (``taskrunner:unique:*``) keys are found by pattern instead.
    """
    keys = backend.stream_keys(group)
    return {
        keys.stream: "main stream (+ consumer group state)",
        keys.dead_letter: "dead-letter stream",
        keys.claim_delay_ring: "claim-delay ring (newest 1000, ns)",
        _keys.delayed_tasks(group): "delayed tasks (score = run-at)",
        _keys.leader(group): "leader lease",
        _keys.worker_tuning_capacity(group): "published pool capacity",
        _keys.metrics(group): "timing metrics",
    }


PATTERNS = {
    _keys.REPLICATION_PATTERN: "instance heartbeat",
    f"{_wire.UNIQUE_LOCK_PREFIX}*": "unique-job lock",
}
_HEARTBEAT_PREFIX = _keys.REPLICATION_PATTERN.rstrip("*")


async def _scan(client: Any, pattern: str) -> list[str]:
    cursor: bytes | str = b"0"
    found: set[str] = set()
    while True:
        cursor, batch = await client.execute("SCAN", cursor, "MATCH", pattern, "COUNT", 1000)
        found.update(k.decode() for k in batch)
        if cursor in (b"0", "0", 0):
            return sorted(found)


_SIZE = {"stream": "XLEN", "zset": "ZCARD", "hash": "HLEN", "list": "LLEN", "string": "STRLEN"}


async def list_keys(backend: Backend, group: str) -> list[KeyInfo]:
    """Every documented key of ``group`` that exists now (plus all heartbeat and
    unique-lock keys, which are not per group)."""
    fixed = documented_keys(backend, group)
    if isinstance(backend, MemoryBackend):
        return _memory_keys(backend, group, fixed)
    client = _redis_client(backend)
    names = dict(fixed)
    for pattern, purpose in PATTERNS.items():
        names.update(dict.fromkeys(await _scan(client, pattern), purpose))
    out = []
    for name, purpose in names.items():
        kind = (await client.execute("TYPE", name)).decode()
        if kind == "none":
            continue
        size = await client.execute(_SIZE.get(kind, "STRLEN"), name)
        pttl = await client.execute("PTTL", name)
        out.append(
            KeyInfo(
                name=name,
                type=kind,
                size=int(size),
                ttl=pttl / 1000 if pttl >= 0 else None,
                purpose=purpose,
            )
        )
    return out


def _memory_keys(backend: MemoryBackend, group: str, fixed: dict[str, str]) -> list[KeyInfo]:
    out = []
    for name, kind, size, ttl in backend.key_summary(group):
        purpose = fixed.get(name) or next(
            (p for pat, p in PATTERNS.items() if name.startswith(pat[:-1])), "unknown"
        )
        out.append(KeyInfo(name=name, type=kind, size=size, ttl=ttl, purpose=purpose))
    return out


def _redis_client(backend: Backend) -> Any:
    from taskrunner.backends.redis import RedisBackend

    if not isinstance(backend, RedisBackend):
        raise TypeError(f"expected a RedisBackend or MemoryBackend, got {backend!r}")
    return backend.client


async def flush(
    backend: Backend, group: str, *, confirm: bool = False, replication: bool = True
) -> list[str]:
    """Delete every key of ``group`` (the stream and its dead letters too, unless shared).

    The same on every backend: ``group`` is destroyed (``XGROUP DESTROY``,
    dropping its pending entries and cursor); when other consumer groups read
    the same stream (an explicit shared prefix), the stream, the dead-letter
    stream and the claim-delay ring are kept for them. Other groups' leases,
    delayed sets, metrics and tuning values are never touched. Unique locks
    and (with ``replication``) heartbeats are not per group: they are deleted
    either way.

    Args:
        confirm: Must be ``True``: this drops in-flight messages.
        replication: Also delete all heartbeat keys (they repopulate within
            10 s from live instances).

    Returns:
        The names of the keys deleted (not those kept for other groups).

    Raises:
        ValueError: ``confirm`` is not ``True``.
    """
    if confirm is not True:
        raise ValueError(
            f"flush deletes every key of group {group!r}, including in-flight messages; "
            "call it with confirm=True (dev and staging only)"
        )
    present = [k.name for k in await list_keys(backend, group)]
    keys = backend.stream_keys(group)
    shared = {keys.stream, keys.dead_letter, keys.claim_delay_ring}
    others = [g for g in await backend.stream_groups(group) if g != group]
    doomed = [
        k
        for k in present
        if (replication or not k.startswith(_HEARTBEAT_PREFIX)) and not (others and k in shared)
    ]
    if isinstance(backend, MemoryBackend):
        backend.flush_keys(group, doomed)
        return doomed
    from taskrunner.backends.redis._errors import ResponseError

    client = _redis_client(backend)
    try:
        await client.execute("XGROUP", "DESTROY", keys.stream, group)
    except ResponseError:  # no stream or no group: nothing to destroy
        pass
    if doomed:
        await client.execute("DEL", *doomed)
    return doomed
