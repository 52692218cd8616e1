"""The :class:`~taskrunner.backends.SharedState` half of the Redis backend.

Theory of operation. Every piece of fleet-wide state is one Redis key named
by :mod:`taskrunner._keys` (the documented layout), so a Go fleet and a Python
fleet sharing a server see the same state:

- leases, unique locks, heartbeats and the published pool size are strings
  with a ``PX`` expiry. Taking one is ``SET NX PX``; renewing a lease and
  deleting a lease, lock or heartbeat compare the stored value with the
  caller's first, which needs a Lua script to be atomic. The scripts live in
  ``lua/*.lua`` beside this module, are read once at import and run by
  :class:`~._scripts.Script` (``EVALSHA``, ``EVAL`` when the server answers
  ``NOSCRIPT``);
- the delayed set is a ZSET scored by run-at unix seconds. Moving a batch of
  due members to the stream is one script call, so a leader that dies
  mid-pass moves all of the batch or none of it;
- the timing metrics are a hash of integers, as the Go library reads them:
  whole milliseconds and runs per task, plus our microseconds beside the
  milliseconds (fast tasks must not round to 0). One script call adds a
  whole flush, re-basing the microseconds wherever a Go writer moved the
  milliseconds since (``lua/add_timings.lua``, :func:`taskrunner._wire.add_timing`).

Clocks: :meth:`RedisState.now` is this machine's unix time, and delayed tasks
are scored and found due by the clocks of whichever instances add and move
them, so the fleet needs reasonably synchronised clocks (NTP), as the
original does. Expiries are the server's (``PX``), so leases and locks do not
depend on client clocks.

Redis Cluster: every script passes the keys it touches in ``KEYS``, but a
delayed move touches the ZSET, the stream and the unique locks together, and
those live in different hash slots unless the names share a hash tag, which
the documented layout does not give them. Running the move on a cluster is
out of scope; the single-key operations are cluster-safe.

Errors: the client raises :class:`~taskrunner.errors.BackendError`
subclasses already (a failing script as a ``ResponseError`` carrying the
server's message), so nothing is translated here.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Sequence

from taskrunner import _keys, _shards
from taskrunner._wire import TimingIncrement
from taskrunner.backends._key_layout import KeyLayoutHolder
from taskrunner.backends._protocols.events import EventBatch
from taskrunner.backends._protocols.queue import DelayedMove

from ._connection import CommandArg
from ._errors import NoScriptError, ResponseError
from ._event_commands import event_commands
from ._protocol import RedisClient
from ._scripts import load_script

__all__ = ["RedisState", "scan"]

logger = logging.getLogger(__name__)


ACQUIRE = load_script("acquire.lua")
"""``SET KEYS[1] ARGV[1] NX PX ARGV[2]``; 1 if taken, else 0."""
RENEW = load_script("renew.lua")
"""``PEXPIRE KEYS[1] ARGV[2]`` only if its value is ``ARGV[1]``; 1 if renewed, else 0."""
RELEASE = load_script("release.lua")
"""``DEL KEYS[1]`` only if its value is ``ARGV[1]``; 1 if deleted, else 0."""
HEARTBEAT = load_script("heartbeat.lua")
"""``SET KEYS[1] ARGV[1] PX ARGV[2]`` unless it holds another value; nil if set,
else the value it holds."""
MOVE_DELAYED = load_script("move_delayed.lua")
"""Move a batch of delayed members to the stream; returns how many moved."""
ADD_DELAYED = load_script("add_delayed.lua")
"""``ZADD`` a member and ``HSET`` it in the delayed id index under its task id."""
ADD_TIMINGS = load_script("add_timings.lua")
"""Add a flush's timings to the metrics hash, keeping every field an integer."""

SCAN_COUNT = 1000
"""Keys a ``SCAN`` step looks at (its ``COUNT`` hint)."""


async def scan(client: RedisClient, pattern: str, *, kind: str | None = None) -> set[bytes]:
    """Every key name matching ``pattern`` (and of type ``kind``, if given): a
    ``SCAN MATCH`` loop, never ``KEYS``, so the server is never blocked. On a
    cluster the walk visits every master.

    ``SCAN`` may return a name twice; each is in the set once. A key added or
    removed during the loop may or may not be in it.
    """
    extra: tuple[CommandArg, ...] = ("TYPE", kind) if kind is not None else ()
    found: set[bytes] = set()
    for node in await client.masters():  # every master of a cluster; else the one server
        cursor: CommandArg = 0
        while True:
            cursor, batch = await node.execute(
                "SCAN", cursor, "MATCH", pattern, "COUNT", SCAN_COUNT, *extra
            )
            found.update(batch)
            if int(cursor) == 0:
                break
    return found


def _ms(seconds: float) -> int:
    """A ``PX`` argument: whole milliseconds, rounded up, at least 1.

    ``PX 0`` is an error in Redis, and rounding up never expires a key early.
    Rounding to microseconds first keeps float noise (``1.1 * 1000`` is
    ``1100.0000000000002``) from adding a millisecond.
    """
    return max(1, math.ceil(round(seconds * 1000, 6)))


def _float_arg(value: float) -> str:
    """``repr`` is the shortest text that parses back to the same double, on every
    transport (hiredis and redis-py format floats differently otherwise)."""
    return repr(float(value))


class RedisState(KeyLayoutHolder):
    """Fleet-wide shared state on Redis (see the module docstring).

    Args:
        client: The connection to the server; not closed by this class.
        stream_of: The stream a group reads on a queue (``None``: the default
            queue), which :meth:`move_delayed` adds that group's entries to
            (the queue half's resolver).
    """

    def __init__(self, client: RedisClient, *, stream_of: Callable[[str, str | None], str]) -> None:
        self._client = client
        self._stream_of = stream_of

    def now(self) -> float:
        """This machine's unix time in seconds (see the module docstring on clocks)."""
        return time.time()

    def unix_time(self, t: float) -> float:
        """``t`` itself: this backend's clock is unix time."""
        return t

    # Leases ---------------------------------------------------------------

    async def acquire_lease(self, group: str, owner: str, ttl: float) -> bool:
        """Take the group's lease for ``owner`` if nobody holds it (``SET NX PX``).

        Cancellation: the lease may have been taken; ``owner`` then holds it
        until ``ttl`` ends, and a repeat returns ``False`` (``lease_owner``
        tells).
        """
        reply: int = await ACQUIRE(
            self._client, [_keys.leader(group, self.key_layout)], [owner, _ms(ttl)]
        )
        return reply == 1

    async def renew_lease(self, group: str, owner: str, ttl: float) -> bool:
        """Extend the lease to ``ttl`` from now, only if ``owner`` holds it.

        Cancellation: the lease may have been extended; a repeat is harmless.
        """
        reply: int = await RENEW(
            self._client, [_keys.leader(group, self.key_layout)], [owner, _ms(ttl)]
        )
        return reply == 1

    async def resign_lease(self, group: str, owner: str) -> bool:
        """Release the lease, only if ``owner`` holds it.

        Cancellation: the lease may have been released; a repeat returns ``False``.
        """
        reply: int = await RELEASE(self._client, [_keys.leader(group, self.key_layout)], [owner])
        return reply == 1

    async def lease_owner(self, group: str) -> str | None:
        """Who holds the group's lease, if anyone."""
        reply = await self._client.execute("GET", _keys.leader(group, self.key_layout))
        return None if reply is None else bytes(reply).decode(errors="backslashreplace")

    # Delayed set ----------------------------------------------------------

    async def add_delayed(
        self,
        group: str,
        member: bytes,
        run_at: float,
        *,
        task_id: str | None = None,
        events: EventBatch | None = None,
    ) -> None:
        """Add a member to the group's delayed set (``ZADD``; an existing member
        gets the new run-at time); with ``task_id``, also index it under that id, in
        one script call (``lua/add_delayed.lua``); ``events`` go in the same pipeline,
        after it.

        Cancellation: the member may have been added; a repeat is harmless.
        """
        zset, score = _keys.delayed_tasks(group, self.key_layout), _float_arg(run_at)
        if events is not None:
            await self._add_delayed_with_events(group, member, score, task_id, events)
            return
        if task_id is None:
            await self._client.execute("ZADD", zset, score, member)
            return
        await ADD_DELAYED(
            self._client,
            [zset, _keys.delayed_index(group, self.key_layout)],
            [score, member, task_id],
        )

    async def _add_delayed_with_events(
        self, group: str, member: bytes, score: str, task_id: str | None, events: EventBatch
    ) -> None:
        """:meth:`add_delayed` with ``events``: one pipeline, the add first."""
        zset = _keys.delayed_tasks(group, self.key_layout)
        keys: list[CommandArg] = [zset, _keys.delayed_index(group, self.key_layout)]
        args: list[CommandArg] = [score, member, task_id or ""]
        add: tuple[CommandArg, ...] = ("ZADD", zset, score, member)
        if task_id is not None:
            add = ADD_DELAYED.evalsha_command(keys, args)
        written = event_commands(_keys.events(group, self.key_layout), events)
        replies = await self._client.pipeline([add, *written], raise_on_error=False)
        if isinstance(replies[0], NoScriptError):  # the events landed; the add did not
            await ADD_DELAYED(self._client, keys, args)
        elif isinstance(replies[0], ResponseError):
            raise replies[0]
        for reply in replies[1:]:
            if isinstance(reply, ResponseError):
                raise reply

    async def due_delayed(
        self, group: str, until: float, limit: int, offset: int = 0
    ) -> list[bytes]:
        """Up to ``limit`` members whose run-at time is ``<= until``, earliest first,
        skipping the first ``offset``."""
        reply = await self._client.execute(
            "ZRANGEBYSCORE",
            _keys.delayed_tasks(group, self.key_layout),
            "-inf",
            _float_arg(until),
            "LIMIT",
            offset,
            limit,
        )
        return [bytes(member) for member in reply]

    async def next_delayed_at(self, group: str) -> float | None:
        """The earliest run-at time in the group's delayed set, if any."""
        reply = await self._client.execute(
            "ZRANGE", _keys.delayed_tasks(group, self.key_layout), 0, 0, "WITHSCORES"
        )
        if not reply:
            return None
        return float(reply[1])

    async def move_delayed(self, group: str, moves: Sequence[DelayedMove]) -> int:
        """Atomically move the batch's members still in the set (and whose lock,
        if any, is free) to the stream, in order: one script call.

        An empty batch does not reach the server.

        Returns:
            How many members were moved.

        Raises:
            ResponseError: The script failed on the server (its message is kept).

        Cancellation: the batch may have been moved (all of it that could
        be); a repeat skips the members already gone.
        """
        if not moves:
            return 0
        keys: list[CommandArg] = [
            _keys.delayed_tasks(group, self.key_layout),
            _keys.delayed_index(group, self.key_layout),
            _keys.entry_index(group, self.key_layout),
        ]
        stream_index: dict[str | None, int] = {}
        for move in moves:  # the streams first, each once
            if move.queue not in stream_index:
                keys.append(self._stream_of(group, move.queue))
                stream_index[move.queue] = len(keys)  # Lua's KEYS is 1-based
        args: list[CommandArg] = []
        for move in moves:
            if move.lock_key is None:
                lock_index = 0
            else:
                keys.append(move.lock_key)
                lock_index = len(keys)
            args += [
                move.member,
                move.message,
                lock_index,
                move.lock_token,
                _ms(move.lock_ttl),
                move.task_id or "",
                stream_index[move.queue],
            ]
        reply = await MOVE_DELAYED(self._client, keys, args)
        return int(reply)

    # Metrics hash ---------------------------------------------------------

    async def increment_metrics(self, group: str, increments: Sequence[TimingIncrement]) -> None:
        """Add timings to the group's metrics hash: one script call, atomic.

        Each ``<name>_sum`` stays whole milliseconds that Go reads and adds to
        with ``HINCRBY``; ``<name>_sum_us`` is re-based on it where Go moved it
        (see :meth:`taskrunner.backends.SharedState.increment_metrics`). An
        empty batch does not reach the server.

        Raises:
            ResponseError: The script failed on the server (e.g. a ``_count``
                field that is not an integer).

        Cancellation: the batch may have been applied (all of it); a repeat
        counts it again.
        """
        if not increments:
            return
        args: list[CommandArg] = []
        for increment in increments:
            fields = increment.fields
            args += [fields.sum, fields.sum_us, fields.count, increment.micros, increment.count]
        await ADD_TIMINGS(self._client, [_keys.metrics(group, self.key_layout)], args)

    async def read_metrics(self, group: str) -> dict[str, float]:
        """Every numeric field of the group's metrics hash (others are skipped)."""
        reply = await self._client.execute("HGETALL", _keys.metrics(group, self.key_layout))
        fields: dict[str, float] = {}
        for raw_name, raw_value in zip(reply[::2], reply[1::2], strict=True):
            try:
                value = float(raw_value)
            except ValueError:
                logger.debug("skipping non-numeric metrics field %r = %r", raw_name, raw_value)
                continue
            fields[bytes(raw_name).decode(errors="replace")] = value
        return fields

    async def reset_metrics(self, group: str, fields: Sequence[str]) -> None:
        """Set the given fields to 0 (one ``HSET``; no call for no fields).

        Cancellation: the fields may have been reset; a repeat is harmless.
        """
        if not fields:
            return
        args: list[CommandArg] = []
        for name in fields:
            args += [name, 0]
        await self._client.execute("HSET", _keys.metrics(group, self.key_layout), *args)

    # Heartbeats -----------------------------------------------------------

    async def heartbeat(
        self, host: str, instance_id: str, ttl: float, *, group: str | None = None
    ) -> str | None:
        """Set the heartbeat key of ``host`` to ``instance_id`` for ``ttl``, unless it
        holds another id (one script call); returns that other id."""
        key = _keys.replication(host, self.key_layout, group)
        reply = await HEARTBEAT(self._client, [key], [instance_id, _ms(ttl)])
        return None if reply is None else bytes(reply).decode(errors="replace")

    async def heartbeat_holder(
        self, host: str, *, group: str | None = None
    ) -> tuple[str, float] | None:
        """``GET`` and ``PTTL`` of the heartbeat key, pipelined (one round trip)."""
        key = _keys.replication(host, self.key_layout, group)
        value, pttl = await self._client.pipeline([("GET", key), ("PTTL", key)])
        if value is None or pttl == -2:  # none, or expired between the two
            return None
        left = math.inf if pttl == -1 else pttl / 1000  # -1: set by hand, no expiry
        return bytes(value).decode(errors="replace"), left

    async def remove_heartbeat(
        self, host: str, instance_id: str, *, group: str | None = None
    ) -> None:
        """Delete this instance's heartbeat key, only if it still holds ``instance_id``."""
        key = _keys.replication(host, self.key_layout, group)
        await RELEASE(self._client, [key], [instance_id])

    async def count_heartbeats(self, *, group: str | None = None) -> int:
        """Live heartbeat keys, counted with a ``SCAN MATCH`` loop (never ``KEYS``).

        A key added or removed during the scan may or may not be counted.
        """
        return len(await scan(self._client, _keys.replication_pattern(self.key_layout, group)))

    # Unique locks ---------------------------------------------------------

    async def acquire_lock(self, key: str, token: str, ttl: float) -> bool:
        """Take a lock that expires after ``ttl`` unless released (``SET NX PX``).

        Cancellation: the lock may have been taken with ``token``; it expires
        after ``ttl`` unless released with that token.
        """
        reply = await self._client.execute("SET", key, token, "NX", "PX", _ms(ttl))
        return reply is not None

    async def release_lock(self, key: str, token: str) -> bool:
        """Delete the lock only if it holds ``token`` (compare-and-delete)."""
        reply: int = await RELEASE(self._client, [key], [token])
        return reply == 1

    # Tuning ---------------------------------------------------------------

    async def publish_tuning(self, group: str, capacity: int, ttl: float) -> None:
        """Publish the leader's chosen pool capacity for ``ttl`` seconds."""
        await self._client.execute(
            "SET", _keys.worker_tuning_capacity(group, self.key_layout), capacity, "PX", _ms(ttl)
        )

    async def read_tuning(self, group: str) -> int | None:
        """The published capacity, if one is live (a non-integer value counts as none)."""
        reply = await self._client.execute(
            "GET", _keys.worker_tuning_capacity(group, self.key_layout)
        )
        if reply is None:
            return None
        try:
            return int(reply)
        except ValueError:
            logger.warning("ignoring a non-integer worker tuning capacity %r", reply)
            return None

    # Autoscaling ----------------------------------------------------------

    async def publish_desired_instances(self, group: str, count: int, ttl: float) -> None:
        """Publish the instance count asked of the autoscaler for ``ttl`` seconds."""
        await self._client.execute(
            "SET", _keys.desired_instances(group, self.key_layout), count, "PX", _ms(ttl)
        )

    async def read_desired_instances(self, group: str) -> int | None:
        """The published instance count, if one is live (a non-integer value counts as none)."""
        reply = await self._client.execute("GET", _keys.desired_instances(group, self.key_layout))
        if reply is None:
            return None
        try:
            return int(reply)
        except ValueError:
            logger.warning("ignoring a non-integer desired instance count %r", reply)
            return None

    # Sharding -------------------------------------------------------------

    async def read_shard_count(self, group: str) -> int | None:
        """The group's recorded shard count, if any (a non-integer value counts as none)."""
        reply = await self._client.execute("GET", _shards.shard_count_key(group))
        try:
            return None if reply is None else int(reply)
        except ValueError:
            logger.warning("ignoring a non-integer shard count %r", reply)
            return None

    async def record_shard_count(self, group: str, count: int) -> None:
        """Record the group's shard count (1: delete the record)."""
        key = _shards.shard_count_key(group)
        if count == 1:
            await self._client.execute("DEL", key)
        else:
            await self._client.execute("SET", key, count)
