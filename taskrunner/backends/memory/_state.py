"""Fleet-wide shared state in process memory, on trio's clock.

String keys with expiry model Redis strings with ``PX`` (leases, locks,
heartbeats, the tuning value, the desired instance count); the delayed set is a
dict of member -> score per group; the metrics hash a dict of integers,
incremented by the wire's rule (:func:`taskrunner._wire.add_timing`, which the
Redis backend runs in Lua). Expired keys vanish lazily when looked at, exactly
as observed through Redis. Key names are the documented ones
(``taskrunner._keys``), so a test can inspect them the same way on both backends.

Text that Redis could not be sent (a string with no UTF-8 form: a lone
surrogate) is refused here too, with the same
:class:`~taskrunner.errors.InvalidCommandArgument`, so code tested on this
backend meets the error it would meet on Redis.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence

import trio

from taskrunner import _keys, _shards, _wire
from taskrunner._wire import TimingIncrement
from taskrunner.backends._key_layout import KeyLayoutHolder
from taskrunner.backends._protocols.queue import DelayedMove
from taskrunner.errors import InvalidCommandArgument


def seconds_left(expires_at: float) -> float:
    """Seconds until ``expires_at`` on trio's clock, rounded down to the microsecond.

    ``(now + ttl) - now`` is not always ``ttl`` in floating point (30 s set at
    7.5 s reads back as 30.000000000000004): rounding down keeps a key from ever
    reporting more time left than it was given, as Redis's whole-millisecond
    ``PTTL`` never does.
    """
    return math.floor((expires_at - trio.current_time()) * 1e6) / 1e6


def _wall_origin() -> float:
    """Unix seconds minus trio's clock, now (inside ``trio.run`` only)."""
    return time.time() - trio.current_time()


def check_text(method: str, argument: str, *values: str) -> None:
    """Refuse, as the Redis backend does, a string that has no UTF-8 form.

    Raises:
        InvalidCommandArgument: one of ``values`` (the ``argument`` of
            ``method``) holds a lone surrogate.
    """
    for value in values:
        if not value.isascii():
            try:
                value.encode()
            except UnicodeEncodeError as exc:
                raise InvalidCommandArgument(method, argument, value, exc.reason) from None


class MemoryState(KeyLayoutHolder):
    """A :class:`~taskrunner.backends.SharedState` held in process memory."""

    def __init__(self, add_entry: Callable[[str, bytes, str | None], str]) -> None:
        self._add_entry = add_entry
        self._strings: dict[str, tuple[str, float]] = {}  # key -> (value, expires_at)
        self._delayed: dict[str, dict[bytes, float]] = {}
        # Per group: task id -> member (delayed_ids), task id -> stream id (entry_ids).
        self._delayed_index: dict[str, dict[str, bytes]] = {}
        self._entry_index: dict[str, dict[str, str]] = {}
        self._metrics: dict[str, dict[str, float]] = {}
        try:
            self._origin: float | None = _wall_origin()
        except RuntimeError:  # created outside trio.run: fixed at first use
            self._origin = None

    def now(self) -> float:
        return trio.current_time()

    @property
    def wall_origin(self) -> float:
        """Unix seconds at trio's time 0: ``time.time() - trio.current_time()`` when
        the backend was created (or first used, when created outside ``trio.run``).
        Fixed from then on, so times it converts stay deterministic under ``MockClock``."""
        if self._origin is None:
            self._origin = _wall_origin()
        return self._origin

    def unix_time(self, t: float) -> float:
        """``t`` (trio's clock) in unix seconds: ``t + wall_origin``."""
        return t + self.wall_origin

    # Strings with expiry ------------------------------------------------
    def _get(self, key: str) -> str | None:
        item = self._strings.get(key)
        if item is None:
            return None
        if item[1] <= trio.current_time():
            del self._strings[key]
            return None
        return item[0]

    def _set_nx(self, key: str, value: str, ttl: float) -> bool:
        if self._get(key) is not None:
            return False
        self._strings[key] = (value, trio.current_time() + ttl)
        return True

    def _expire_if(self, key: str, value: str, ttl: float) -> bool:
        if self._get(key) != value:
            return False
        self._strings[key] = (value, trio.current_time() + ttl)
        return True

    def _delete_if(self, key: str, value: str) -> bool:
        if self._get(key) != value:
            return False
        del self._strings[key]
        return True

    def keys(self) -> list[str]:
        """Every live string key (for tests and inspection)."""
        return [k for k in list(self._strings) if self._get(k) is not None]

    def ttl(self, key: str) -> float | None:
        """Seconds left on a live key, or ``None`` (no such key, or no expiry, as
        Redis's ``PTTL`` of -1 reads: the recorded shard count)."""
        if self._get(key) is None or self._strings[key][1] == math.inf:
            return None
        return seconds_left(self._strings[key][1])

    # Leases ---------------------------------------------------------------
    async def acquire_lease(self, group: str, owner: str, ttl: float) -> bool:
        await trio.lowlevel.checkpoint()
        check_text("acquire_lease", "owner", owner)
        return self._set_nx(_keys.leader(group, self.key_layout), owner, ttl)

    async def renew_lease(self, group: str, owner: str, ttl: float) -> bool:
        await trio.lowlevel.checkpoint()
        check_text("renew_lease", "owner", owner)
        return self._expire_if(_keys.leader(group, self.key_layout), owner, ttl)

    async def resign_lease(self, group: str, owner: str) -> bool:
        await trio.lowlevel.checkpoint()
        check_text("resign_lease", "owner", owner)
        return self._delete_if(_keys.leader(group, self.key_layout), owner)

    async def lease_owner(self, group: str) -> str | None:
        await trio.lowlevel.checkpoint()
        return self._get(_keys.leader(group, self.key_layout))

    # Delayed set ----------------------------------------------------------
    async def add_delayed(
        self, group: str, member: bytes, run_at: float, *, task_id: str | None = None
    ) -> None:
        await trio.lowlevel.checkpoint()
        if task_id is not None:
            check_text("add_delayed", "task_id", task_id)
            self._delayed_index.setdefault(group, {})[task_id] = member
        self._delayed.setdefault(group, {})[member] = run_at

    async def due_delayed(
        self, group: str, until: float, limit: int, offset: int = 0
    ) -> list[bytes]:
        await trio.lowlevel.checkpoint()
        members = self._delayed.get(group, {})
        due = sorted((score, m) for m, score in members.items() if score <= until)
        return [m for _, m in due[offset : offset + limit]]

    async def next_delayed_at(self, group: str) -> float | None:
        await trio.lowlevel.checkpoint()
        return min(self._delayed.get(group, {}).values(), default=None)

    async def move_delayed(self, group: str, moves: Sequence[DelayedMove]) -> int:
        await trio.lowlevel.checkpoint()
        for move in moves:  # all refused before any moves, as one script call on Redis
            check_text("move_delayed", "lock_key", move.lock_key or "")
            check_text("move_delayed", "lock_token", move.lock_token)
            check_text("move_delayed", "task_id", move.task_id or "")
        members = self._delayed.get(group, {})
        moved = 0
        for move in moves:  # no checkpoint inside: atomic, like the Lua script
            if move.member not in members:
                continue
            if move.lock_key is not None and not (
                self._set_nx(move.lock_key, move.lock_token, move.lock_ttl)
                or self._expire_if(move.lock_key, move.lock_token, move.lock_ttl)
            ):
                continue
            del members[move.member]
            entry_id = self._add_entry(group, move.message, move.queue)
            if move.task_id and self._delayed_index.get(group, {}).pop(move.task_id, None):
                self._entry_index.setdefault(group, {})[move.task_id] = entry_id
            moved += 1
        return moved

    # Metrics hash ---------------------------------------------------------
    async def increment_metrics(self, group: str, increments: Sequence[TimingIncrement]) -> None:
        await trio.lowlevel.checkpoint()
        check_text("increment_metrics", "field", *(i.fields.sum for i in increments))
        stored = self._metrics.setdefault(group, {})
        for increment in increments:  # no checkpoint inside: atomic, like the Lua script
            names = increment.fields
            stored[names.sum], stored[names.sum_us] = _wire.add_timing(
                stored.get(names.sum), stored.get(names.sum_us), increment.micros
            )
            stored[names.count] = stored.get(names.count, 0) + increment.count

    async def read_metrics(self, group: str) -> dict[str, float]:
        await trio.lowlevel.checkpoint()
        return dict(self._metrics.get(group, {}))

    async def reset_metrics(self, group: str, fields: Sequence[str]) -> None:
        await trio.lowlevel.checkpoint()
        check_text("reset_metrics", "field", *fields)
        stored = self._metrics.setdefault(group, {})
        for name in fields:
            stored[name] = 0

    # Heartbeats -----------------------------------------------------------
    async def heartbeat(
        self, host: str, instance_id: str, ttl: float, *, group: str | None = None
    ) -> str | None:
        await trio.lowlevel.checkpoint()
        check_text("heartbeat", "host", host)
        check_text("heartbeat", "instance_id", instance_id)
        key = _keys.replication(host, self.key_layout, group)
        holder = self._get(key)
        if holder is not None and holder != instance_id:
            return holder
        self._strings[key] = (instance_id, trio.current_time() + ttl)
        return None

    async def heartbeat_holder(
        self, host: str, *, group: str | None = None
    ) -> tuple[str, float] | None:
        await trio.lowlevel.checkpoint()
        key = _keys.replication(host, self.key_layout, group)
        holder = self._get(key)
        if holder is None:
            return None
        return holder, seconds_left(self._strings[key][1])

    async def remove_heartbeat(
        self, host: str, instance_id: str, *, group: str | None = None
    ) -> None:
        await trio.lowlevel.checkpoint()
        check_text("remove_heartbeat", "host", host)
        check_text("remove_heartbeat", "instance_id", instance_id)
        self._delete_if(_keys.replication(host, self.key_layout, group), instance_id)

    async def count_heartbeats(self, *, group: str | None = None) -> int:
        await trio.lowlevel.checkpoint()
        layout = self.key_layout
        return sum(1 for k in self.keys() if _keys.heartbeat_host(k, layout, group) is not None)

    # Unique locks ---------------------------------------------------------
    async def acquire_lock(self, key: str, token: str, ttl: float) -> bool:
        await trio.lowlevel.checkpoint()
        check_text("acquire_lock", "key", key)
        check_text("acquire_lock", "token", token)
        return self._set_nx(key, token, ttl)

    async def release_lock(self, key: str, token: str) -> bool:
        await trio.lowlevel.checkpoint()
        check_text("release_lock", "key", key)
        check_text("release_lock", "token", token)
        return self._delete_if(key, token)

    # Tuning ---------------------------------------------------------------
    async def publish_tuning(self, group: str, capacity: int, ttl: float) -> None:
        await trio.lowlevel.checkpoint()
        self._strings[_keys.worker_tuning_capacity(group, self.key_layout)] = (
            str(capacity),
            trio.current_time() + ttl,
        )

    async def read_tuning(self, group: str) -> int | None:
        await trio.lowlevel.checkpoint()
        value = self._get(_keys.worker_tuning_capacity(group, self.key_layout))
        return int(value) if value is not None else None

    # Autoscaling ----------------------------------------------------------
    async def publish_desired_instances(self, group: str, count: int, ttl: float) -> None:
        await trio.lowlevel.checkpoint()
        self._strings[_keys.desired_instances(group)] = (str(count), trio.current_time() + ttl)

    async def read_desired_instances(self, group: str) -> int | None:
        await trio.lowlevel.checkpoint()
        value = self._get(_keys.desired_instances(group))
        return int(value) if value is not None else None

    # Sharding -------------------------------------------------------------
    async def read_shard_count(self, group: str) -> int | None:
        await trio.lowlevel.checkpoint()
        value = self._get(_shards.shard_count_key(group))
        return int(value) if value is not None else None

    async def record_shard_count(self, group: str, count: int) -> None:
        await trio.lowlevel.checkpoint()
        key = _shards.shard_count_key(group)
        if count == 1:
            self._strings.pop(key, None)
        else:
            self._strings[key] = (str(count), math.inf)
