r"""The part of a producer that does no I/O, shared by :class:`~taskrunner.producer.Producer`
and :class:`~taskrunner.producer.AsyncProducer`: from a call's arguments to the bytes to send.

Each public method of a producer is: ask this core what to send (it refuses
what cannot be sent, before anything is), send it the way the producer's
client sends (redis-py, or redis.asyncio), and hand back a handle. A strict
producer reads the catalog first when :meth:`ProducerCore.needs_catalog` says
so. redis-py's errors become taskrunner's at this boundary
(:func:`translated`), so a failed add tells whether it may have happened
(``BackendError.maybe_applied``), which decides whether a unique lock is
given back.

Results and cancellation use the runner's keys and scripts (see
docs/redis-key-layout.md, "Results, lookup and cancellation"): a handle's
``result`` reads the task's result key and registers as its waiter in one call
of the runner's ``lua/wait.lua``, then blocks on its notice with ``BLMOVE
notice notice RIGHT LEFT`` (in slices shorter than the client's socket
timeout, each starting with ``lua/wait.lua`` again): runners push a notice only
for a task someone registered for, and a waiter that gives up leaves only its
registration, which ends by itself; ``cancel`` is one call of the runner's ``lua/track.lua``; a
delayed dispatch is one call of ``lua/add_delayed.lua``, which indexes the
member under its id so that the task can be looked up and cancelled.
"""

from __future__ import annotations

import contextlib
import logging
import math
import time
import uuid
from collections.abc import Iterable, Iterator
from datetime import datetime, timedelta
from importlib import resources
from typing import Any

import attrs
import redis
import redis.asyncio
import redis.exceptions
from redis.connection import parse_url

from taskrunner import _keys, _shards, _wire
from taskrunner._config import queue_name_problem
from taskrunner._dispatch.enqueue import Enqueue, LockRequest, Planner, delay_seconds, unix_seconds
from taskrunner._dispatch.results import outcome_of
from taskrunner._keys import KeyLayout
from taskrunner._wire import CatalogDocument, CatalogTask
from taskrunner.backends._protocols.tracking import CANCELLED_STATES, cancel_arguments, track_keys
from taskrunner.backends.redis._catalog import live_documents
from taskrunner.backends.redis._errors import ClusterCommandError
from taskrunner.backends.redis._pyredis import translate_error
from taskrunner.backends.redis._step_cancel import STEP_FLAG
from taskrunner.producer._plan import (
    CATALOG_CACHE,
    DEFAULT_QUEUE,
    CatalogView,
    Destination,
    Settings,
    check_task_name,
    queue_of_stream,
    served_task,
    task_settings,
    wire_payload,
)
from taskrunner.producer._sharding import ProducerShards, recorded_count, shard_count

log = logging.getLogger("taskrunner.producer")

ADD_CHUNK = 2000
"""Entries per pipeline in ``dispatch_many`` (as ``RedisBackend.add``)."""
CONNECT_TIMEOUT = 5.0
SOCKET_TIMEOUT = 30.0
"""Defaults for clients a producer makes from a URL (those of the runner's redis-py
transport), so that no call waits forever on a dead server."""
WAIT_SLICE = 20.0
"""Longest single ``BLMOVE`` of a result wait (a longer wait takes several), below
:data:`SOCKET_TIMEOUT`."""
LUA = resources.files("taskrunner.backends.redis") / "lua"
RELEASE_SOURCE = (LUA / "release.lua").read_text()
"""The runner's compare-and-delete of a lock (``lua/release.lua``)."""
TRACK_SOURCE = (LUA / "track.lua").read_text()
"""The runner's lookup-and-cancel script (``lua/track.lua``)."""
ADD_DELAYED_SOURCE = (LUA / "add_delayed.lua").read_text()
"""The runner's add-and-index of a delayed member (``lua/add_delayed.lua``)."""
WAIT_SOURCE = (LUA / "wait.lua").read_text()
"""The runner's read-or-register of a result waiter (``lua/wait.lua``)."""
WAITER_MARGIN = 10.0
"""Seconds a waiter's registration outlives the ``BLMOVE`` it was made for (as the
runner's, ``RedisTracking``)."""


def wait_slice(socket_timeout: float | None) -> float:
    """The longest ``BLMOVE`` a client with this socket timeout can wait for."""
    if socket_timeout is None:
        return WAIT_SLICE
    return max(0.05, min(WAIT_SLICE, socket_timeout / 2))


def registration_ms(wait: float) -> int:
    """How long, in ms, ``lua/wait.lua`` registers a waiter that blocks for ``wait`` s."""
    return max(1, math.ceil((wait + WAITER_MARGIN) * 1000))


def check_timeout(timeout: float | None) -> float:
    """``timeout`` as seconds to wait (``None``: without end).

    Raises:
        ValueError: negative, or not a number.
    """
    if timeout is None:
        return math.inf
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not timeout >= 0:
        raise ValueError(f"timeout must be seconds >= 0 or None, got {timeout!r}")
    return float(timeout)


def raw_bytes(reply: Any) -> bytes | None:
    """A ``GET``/``BLMOVE`` reply as bytes (``None`` stays), whatever the client decodes."""
    if reply is None:
        return None
    return reply if isinstance(reply, bytes) else str(reply).encode()


def is_cluster_client(client: object) -> bool:
    """Whether ``client`` is a redis-py Redis Cluster client (sync or asyncio): what
    ``key_layout=None`` resolves by."""
    return type(client).__name__ == "RedisCluster"


def was_cancelled(reply: Any) -> bool:
    """Whether ``lua/track.lua``'s cancel reply says something was cancelled."""
    state = reply[0] if reply else b"none"
    return _bytes(state) in CANCELLED_STATES


def lock_px(seconds: float) -> int:
    """A lock's ``PX``: whole milliseconds, rounded up, at least 1 (as ``RedisState``)."""
    return max(1, math.ceil(round(seconds * 1000, 6)))


@contextlib.contextmanager
def translated() -> Iterator[None]:
    """Raise redis-py's errors as taskrunner's :class:`~taskrunner.errors.BackendError`."""
    try:
        yield
    except (redis.exceptions.RedisError, OSError) as exc:
        raise translate_error(exc) from exc


def is_cluster(info: Any) -> bool:
    """Whether redis-py's ``info("cluster")`` reply says ``cluster_enabled:1``."""
    return str(info.get("cluster_enabled", 0)) == "1" if isinstance(info, dict) else False


def _probe_pool(pool_class: Any, url: str, options: dict[str, Any]) -> Any:
    pool = pool_class.from_url(url, **options)
    # Database 0: a cluster node refuses SELECT, and Valkey 9's clusters may
    # have other databases we still refuse.
    pool.connection_kwargs["db"] = 0
    return pool


def ask_is_cluster(url: str, options: dict[str, Any]) -> bool:
    """Ask the server at ``url`` once, on a connection of its own to database 0, whether
    it is a cluster node (``INFO cluster``); a user without ``INFO`` is taken as standalone.

    Raises:
        redis.exceptions.RedisError: It cannot be reached.
    """
    probe = redis.Redis(connection_pool=_probe_pool(redis.ConnectionPool, url, options))
    try:
        return is_cluster(probe.info("cluster"))
    except redis.exceptions.NoPermissionError:
        return False
    finally:
        probe.close()
        probe.connection_pool.disconnect()


async def ask_is_cluster_async(url: str, options: dict[str, Any]) -> bool:
    """:func:`ask_is_cluster` with ``redis.asyncio``."""
    pool = _probe_pool(redis.asyncio.ConnectionPool, url, options)
    probe = redis.asyncio.Redis(connection_pool=pool)
    try:
        return is_cluster(await probe.info("cluster"))
    except redis.exceptions.NoPermissionError:
        return False
    finally:
        await probe.aclose()
        await pool.disconnect()


def check_cluster_url(url: str) -> None:
    """Refuse a URL naming a database other than 0 for a cluster.

    Raises:
        ClusterCommandError: It names another database.
    """
    db = int(parse_url(url).get("db", 0) or 0)  # type: ignore[no-untyped-call]
    if db:
        raise ClusterCommandError(
            "SELECT", f"a cluster has only database 0, the URL names database {db}"
        )


def socket_timeout_of(client: Any) -> float | None:
    """The ``socket_timeout`` a redis-py client (standalone or cluster) was made with."""
    pool = getattr(client, "connection_pool", None)
    kwargs = pool.connection_kwargs if pool is not None else client.nodes_manager.connection_kwargs
    timeout: float | None = kwargs.get("socket_timeout")
    return timeout


def text(reply: bytes | str) -> str:
    """A reply as text, whether the client decodes responses or not."""
    return reply.decode() if isinstance(reply, bytes) else reply


def catalog_documents(fields: dict[Any, Any]) -> tuple[CatalogDocument, ...]:
    """The live documents of an ``HGETALL`` of the catalog (this machine's clock)."""
    raw = {_bytes(k): _bytes(v) for k, v in fields.items()}
    return tuple(live_documents(raw, time.time()))


def _bytes(value: bytes | str) -> bytes:
    return value if isinstance(value, bytes) else value.encode()


def log_kept_lock(task_name: str, lock: LockRequest, error: Exception) -> None:
    log.warning(
        "dispatch of unique task %s may or may not have queued it (%s); "
        "keeping lock %s until it expires in %ss",
        task_name,
        error,
        lock.key,
        lock.ttl,
    )


class ProducerCore:
    """Settings, the strict catalog and the planning of every call (no I/O)."""

    def __init__(
        self,
        *,
        consumer_group: str,
        prefix: str | None,
        queue: str,
        strict: bool,
        key_layout: KeyLayout = "go",
        shards: int | None = None,
    ) -> None:
        self.destination = Destination(
            consumer_group=consumer_group, prefix=prefix, queue=queue, key_layout=key_layout
        )
        self.strict = strict
        self.wanted_shards = shards
        """The producer's ``shards=`` (``None``: the group's record decides)."""
        self._shards: ProducerShards | None = None
        """Known once the record is read (:meth:`take_shard_count`); at once in the go layout."""
        if key_layout == "go":
            self._shards = ProducerShards(consumer_group, 1)
        self.catalog = CatalogView()
        self._names: set[str] = set()
        self._tasks: dict[tuple[str, str], CatalogTask] = {}  # by (name, queue), when not strict
        self._planner = Planner()
        self._destinations: dict[str, Destination] = {queue: self.destination}
        """Every queue this producer sent to (or was made for): where ``cancel`` looks."""

    def destination_of(self, queue: str) -> Destination:
        """The keys of ``queue`` of this producer's group and prefix.

        Raises:
            ValueError: ``queue`` cannot name a queue.
        """
        found = self._destinations.get(queue)
        if found is None:
            problem = queue_name_problem(queue)
            if problem is not None:
                raise ValueError(f"queue {problem}, got {queue!r}")
            found = attrs.evolve(self.destination, queue=queue)
            self._destinations[queue] = found
        return found

    def route(self, name: str, queue: str | None) -> Destination:
        """Where a dispatch of ``name`` goes: ``queue`` when given; else, strict, the
        queue a live runner serves the task on (the producer's own when it is one of
        them); else the producer's queue.

        Raises:
            ValueError: ``queue`` cannot name a queue.
        """
        if queue is not None:
            return self.destination_of(queue)
        if not self.strict:
            return self.destination
        served = self._served(name) or []
        if not served or any(t.stream == self.destination.stream for t in served):
            return self.destination  # served here, or nowhere (refused by served_task)
        for task in served:
            found = queue_of_stream(self.destination, task.stream)
            if found is not None:
                return self.destination_of(found)
        return self.destination  # served only on streams of another layout: refused

    def on_cluster(self, key_layout: KeyLayout | None) -> None:
        """The server turned out to be a Redis Cluster (found at the first call): name
        the keys in the layout ``key_layout`` resolves to there.

        Raises:
            KeyLayoutError: ``key_layout="go"``, which cannot run on a cluster.
        """
        layout = _keys.resolve_layout(key_layout, cluster=True)
        self.destination = attrs.evolve(self.destination, key_layout=layout)
        # Every queue's keys are named anew, in that layout, and its shard count read.
        self._destinations = {self.destination.queue: self.destination}
        self._shards = None

    # Shards -----------------------------------------------------------------
    @property
    def shard_count_key(self) -> str | None:
        """The record to ``GET`` before the first dispatch, or ``None`` when the
        shard count is known (always, in the go layout: it has no shards)."""
        if self._shards is not None:
            return None
        return _shards.shard_count_key(self.destination.consumer_group)

    def take_shard_count(self, reply: object) -> None:
        """Take the ``GET`` of :attr:`shard_count_key` (see :mod:`._sharding`).

        Raises:
            ShardCountError: the producer's ``shards=`` differs from the record.
            ValueError: the group is sharded and the producer has a ``prefix``.
        """
        group, prefix = self.destination.consumer_group, self.destination.prefix
        count = shard_count(group, self.wanted_shards, recorded_count(reply), prefix)
        self._shards = ProducerShards(group, count)

    @property
    def shards(self) -> ProducerShards:
        """The group's shards (read before any call names a key: see :attr:`shard_count_key`)."""
        if self._shards is None:
            raise RuntimeError("the group's shard count was not read yet")
        return self._shards

    def needs_catalog(self, name: str | None) -> bool:
        """Whether a strict producer reads the catalog before dispatching ``name``;
        ``None``: whether any producer reads it before a ``cancel`` (for the queues
        the group's runners serve), which it does once it is stale."""
        if name is None:
            return time.monotonic() - self.catalog.read_at >= CATALOG_CACHE
        return self.strict and self.catalog.needs_read(name, time.monotonic(), time.time())

    def catalog_read(self, fields: dict[Any, Any]) -> None:
        """Take a fresh ``HGETALL`` of the catalog."""
        self.catalog = CatalogView(catalog_documents(fields), time.monotonic())

    def _served(self, name: str) -> list[CatalogTask] | None:
        if name not in self._names:  # checked once per name, not on every call
            self._names.add(check_task_name(name))
        return self.catalog.served(name, time.time()) if self.strict else None

    def settings(
        self,
        name: str,
        unique_key: str | None = None,
        unique_for: float | None = None,
        destination: Destination | None = None,
    ) -> Settings:
        return task_settings(
            name,
            self.destination if destination is None else destination,
            self._served(name),
            unique_key=unique_key,
            unique_for=unique_for,
        )

    def _task(self, name: str, destination: Destination) -> CatalogTask:
        """What is known of task ``name`` sent to ``destination`` (see
        :func:`served_task`); cached by name and queue when not strict."""
        if self.strict:
            return served_task(name, destination, self._served(name))
        task = self._tasks.get((name, destination.queue))
        if task is None:
            task = served_task(name, destination, self._served(name))
            self._tasks[name, destination.queue] = task
        return task

    def step_task(self, name: str, destination: Destination) -> CatalogTask:
        """What is known of task ``name`` run as a workflow step on ``destination``."""
        return self._task(name, destination)

    def one(
        self,
        name: str,
        payload: Any,
        unique_key: str | None = None,
        unique_for: float | None = None,
        destination: Destination | None = None,
        shard_key: object = None,
    ) -> tuple[Enqueue, int, str]:
        """``(entry and lock, shard, stream)`` of one dispatch to ``destination``
        (:meth:`route`; ``None``: the producer's own queue), in the shard the runner's
        routing picks for ``shard_key`` (else the unique key, else the round-robin).

        Raises:
            TaskNotFound, InvalidTaskPayload, ValueError, TypeError: see ``Producer.dispatch``.
        """
        destination = self.destination if destination is None else destination
        shards = self._shards or self.shards  # (the property raises when not read yet)
        if unique_key is None and unique_for is None:
            task = self._task(name, destination)
            if not task.unique:  # the common case, without a lock
                entry = self._planner.entry(task, wire_payload(payload))
                if shards.count == 1:
                    return entry, 0, destination.stream
                shard = shards.pick(shard_key, None)
                return entry, shard, shards.at(destination, shard).stream
        settings = self.settings(name, unique_key, unique_for, destination)
        if not settings.task.unique:
            shard = shards.pick(shard_key, None)
            entry = self._planner.entry(settings.task, wire_payload(payload))
            return entry, shard, shards.at(destination, shard).stream
        shard = shards.pick(shard_key, settings.unique_key)
        keys = shards.at(destination, shard)
        entry = self._planner.entry(
            settings.task,
            wire_payload(payload),
            unique_key=settings.unique_key,
            token=uuid.uuid4().hex,
            lock_prefix=keys.lock_prefix,
        )
        return entry, shard, keys.stream

    def many(
        self,
        name: str,
        payloads: Iterable[Any],
        destination: Destination | None = None,
        shard_keys: Iterable[object] | None = None,
    ) -> tuple[list[bytes], list[int], list[str]]:
        """``(entries, their shards, their streams)`` of ``dispatch_many`` to
        ``destination`` (``None``: the producer's queue), every one encoded (and
        routed, by ``shard_keys``, one per payload, as :meth:`one`) before any is sent.

        Raises:
            ValueError: the task is unique (per the catalog), or ``shard_keys`` does not
                give one key per payload.
            TypeError: a shard key is not a JSON value.
        """
        destination = self.destination if destination is None else destination
        task = self._task(name, destination)
        if task.unique:
            raise ValueError(f"task {name!r} is unique; dispatch it with dispatch(), one at a time")
        data = self._planner.entries(task, [wire_payload(p) for p in payloads])
        shards = self.shards
        keys = [None] * len(data) if shard_keys is None else list(shard_keys)
        if len(keys) != len(data):
            raise ValueError(
                f"shard_keys must give one key per payload: {len(data)} payload(s), "
                f"got {len(keys)} key(s)"
            )
        if shards.count == 1:
            return data, [0] * len(data), [destination.stream] * len(data)
        picked = [shards.pick(key, None) for key in keys]
        return data, picked, [shards.at(destination, shard).stream for shard in picked]

    def delayed(
        self,
        name: str,
        payload: Any,
        run_at: float,
        destination: Destination | None = None,
        shard_key: object = None,
    ) -> tuple[str, bytes, int, Destination]:
        """``(id, member, shard, the shard's keys)`` of a delayed dispatch at ``run_at``
        (unix seconds) to ``destination`` (``None``: the producer's queue).

        The lock of a unique task is taken when the group's leader moves the
        member to the stream, with the settings it registered. In a sharded group a
        strict producer routes a task unique by name by its name, as the runner
        does; one unique by a key of its payload needs ``shard_key`` to meet the
        runner's shard (the producer cannot compute the key).
        """
        destination = self.destination if destination is None else destination
        task = served_task(name, destination, self._served(name))
        shards = self.shards
        unique = _wire.message_unique_key(name, None) if task.unique and not task.keyed else None
        shard = shards.pick(shard_key, unique)
        member_id = str(uuid.uuid4())
        # The leader computes a unique task's key from the payload when it moves it.
        plain = attrs.evolve(task, unique=False, unique_for=0.0)
        member = self._planner.member(
            plain,
            wire_payload(payload),
            run_at,
            id=member_id,
            dispatched_at=time.time(),
            # The leader moves it to this queue (no field: the backend's default one).
            queue=None if destination.queue == DEFAULT_QUEUE else destination.queue,
        )
        return member_id, member, shard, shards.at(destination, shard)

    def result_keys(self, task_id: str) -> tuple[str, str, str, str]:
        """``(result key, notice key, result waiters key, the id in its shard)`` of task
        ``task_id``, in the shard its id names.

        Raises:
            ValueError: ``task_id`` names no shard of the group (as ``TaskHandle.result``).
        """
        shards = self.shards
        where = shards.locate(task_id)
        if where is None:
            raise ValueError(
                f"task id {task_id!r} names no shard of group "
                f"{self.destination.consumer_group!r} (shards={shards.count})"
            )
        group, layout = shards.group_of(where[0]), self.destination.key_layout
        inner = where[1]
        return (
            _keys.result(group, inner, layout),
            _keys.notify(group, inner, layout),
            _keys.result_waiters(group, layout),
            inner,
        )

    def cancel_call(
        self, task_id: str, lock: str | None = None
    ) -> tuple[list[str], list[str | bytes]] | None:
        """``(KEYS, ARGV)`` of ``lua/track.lua`` cancelling ``task_id`` (now, unix time)
        on every queue this producer knows (its own first, then those it sent to and
        those the catalog it read serves tasks on), in the shard its id names, given
        the unique lock a call before named (``{'lock', key}``), if any; ``None`` when
        the id names no shard of the group (nothing to cancel). A queued or delayed
        workflow step is named, not removed (``{'step', ...}``):
        :func:`taskrunner.producer._workflows.step_cancel_call` then counts it, as the
        runner's cancel does."""
        shards = self.shards
        where = shards.locate(task_id)
        if where is None:
            return None
        group, layout = self.destination.consumer_group, self.destination.key_layout
        streams = self.cancel_streams()
        # Steps are counted on an unsharded group (a sharded group's steps are not
        # named: removed as plain tasks, as before).
        flag = [STEP_FLAG]
        if shards.count > 1:  # each queue's stream in the id's shard
            index, task_id = where
            group = shards.group_of(index)
            streams = self._shard_streams(streams, index)
            flag = []
        return (
            track_keys(list(dict.fromkeys(streams)), group, task_id, layout, lock),
            [*cancel_arguments(group, task_id, time.time(), layout), *flag],
        )

    def cancel_streams(self) -> list[str]:
        """The streams ``cancel`` looks in, in order (see :meth:`cancel_call`)."""
        streams = [d.stream for d in self._destinations.values()]
        streams += [t.stream for doc in self.catalog.documents for t in doc.tasks]
        return list(dict.fromkeys(streams))

    def _shard_streams(self, streams: Iterable[str], index: int) -> list[str]:
        """The streams of shard ``index`` of the queues ``streams`` (the group's own
        streams, by the producer's layout) are; a stream naming no queue is left out."""
        out = []
        for stream in streams:
            queue = queue_of_stream(self.destination, stream)
            if queue is not None:
                out.append(self.shards.at(self.destination_of(queue), index).stream)
        return out

    def add_delayed_call(
        self, member_id: str, member: bytes, run_at: float, keys: Destination | None = None
    ) -> tuple[list[str], list[str | bytes]]:
        """``(KEYS, ARGV)`` of ``lua/add_delayed.lua`` adding ``member`` at ``run_at`` to
        the delayed set of ``keys`` (a shard's, :meth:`delayed`; ``None``: the group's)."""
        keys = self.destination if keys is None else keys
        index = _keys.delayed_index(keys.consumer_group, keys.key_layout)
        return [keys.delayed, index], [repr(float(run_at)), member, member_id]

    @staticmethod
    def outcome(task_id: str, raw: bytes, result_type: type[Any] | None) -> Any:
        """The value a kept result gives (see :func:`taskrunner._dispatch.results.outcome_of`)."""
        return outcome_of(task_id, raw, result_type)

    def run_at_after(self, delay: float | timedelta) -> float:
        """The run-at time (unix seconds, the Redis backend's clock) ``delay`` from now."""
        return time.time() + delay_seconds(delay)

    @staticmethod
    def run_at(when: datetime | float) -> float:
        return unix_seconds(when)
