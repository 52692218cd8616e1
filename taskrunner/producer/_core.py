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
``result`` reads the task's result key (``GET``), then blocks on its notice with
``BLMOVE notice notice RIGHT LEFT`` (in slices shorter than the client's
socket timeout), which writes nothing, so a waiter that gives up leaves
nothing behind; ``cancel`` is one call of the runner's ``lua/track.lua``; a
delayed dispatch is one call of ``lua/add_delayed.lua``, which indexes the
member under its id so that the task can be looked up and cancelled.
"""

from __future__ import annotations

import contextlib
import logging
import math
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from datetime import datetime, timedelta
from importlib import resources
from typing import Any

import attrs
import redis.exceptions

from taskrunner import _keys
from taskrunner._dispatch.enqueue import (
    Enqueue,
    LockRequest,
    delay_seconds,
    delayed_member,
    enqueue,
    unix_seconds,
)
from taskrunner._dispatch.results import outcome_of
from taskrunner._wire import CatalogDocument, CatalogTask, plain_encoder
from taskrunner.backends._protocols.tracking import CANCELLED_STATES, cancel_arguments, track_keys
from taskrunner.backends.redis._catalog import live_documents
from taskrunner.backends.redis._pyredis import translate_error
from taskrunner.producer._plan import (
    DEFAULT_QUEUE,
    CatalogView,
    Destination,
    Settings,
    check_task_name,
    served_task,
    task_settings,
    wire_payload,
)

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
TRACK_SOURCE = (LUA / "track.lua").read_text()
"""The runner's lookup-and-cancel script (``lua/track.lua``)."""
ADD_DELAYED_SOURCE = (LUA / "add_delayed.lua").read_text()
"""The runner's add-and-index of a delayed member (``lua/add_delayed.lua``)."""


def wait_slice(socket_timeout: float | None) -> float:
    """The longest ``BLMOVE`` a client with this socket timeout can wait for."""
    if socket_timeout is None:
        return WAIT_SLICE
    return max(0.05, min(WAIT_SLICE, socket_timeout / 2))


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
        self, *, consumer_group: str, prefix: str | None, queue: str, strict: bool
    ) -> None:
        self.destination = Destination(consumer_group=consumer_group, prefix=prefix, queue=queue)
        self.strict = strict
        self.catalog = CatalogView()
        self._names: set[str] = set()
        self._tasks: dict[str, CatalogTask] = {}  # by name, when not strict
        self._encoders: dict[CatalogTask, Callable[[Any], bytes]] = {}

    def needs_catalog(self, name: str) -> bool:
        """Whether a strict producer reads the catalog before dispatching ``name``."""
        return self.strict and self.catalog.needs_read(name, time.monotonic(), time.time())

    def catalog_read(self, fields: dict[Any, Any]) -> None:
        """Take a fresh ``HGETALL`` of the catalog."""
        self.catalog = CatalogView(catalog_documents(fields), time.monotonic())

    def _served(self, name: str) -> list[CatalogTask] | None:
        if name not in self._names:  # checked once per name, not on every call
            self._names.add(check_task_name(name))
        return self.catalog.served(name, time.time()) if self.strict else None

    def settings(
        self, name: str, unique_key: str | None = None, unique_for: float | None = None
    ) -> Settings:
        return task_settings(
            name, self.destination, self._served(name), unique_key=unique_key, unique_for=unique_for
        )

    def _task(self, name: str) -> CatalogTask:
        """What is known of task ``name`` (see :func:`served_task`); cached by name
        when not strict."""
        if self.strict:
            return served_task(name, self.destination, self._served(name))
        task = self._tasks.get(name)
        if task is None:
            task = self._tasks[name] = served_task(name, self.destination, self._served(name))
        return task

    def _encode(self, task: CatalogTask, payload: Any) -> bytes:
        """The message of ``task`` (not unique) for ``payload``: one encoder per task's
        settings, so only the payload is encoded per call."""
        encode = self._encoders.get(task)
        if encode is None:
            encode = self._encoders[task] = plain_encoder(task)
        return encode(wire_payload(payload))

    def one(
        self,
        name: str,
        payload: Any,
        unique_key: str | None = None,
        unique_for: float | None = None,
    ) -> Enqueue:
        """The entry (and lock) of one dispatch.

        Raises:
            TaskNotFound, InvalidTaskPayload, ValueError: see ``Producer.dispatch``.
        """
        if unique_key is None and unique_for is None:
            task = self._task(name)
            if not task.unique:  # the common case, without a lock
                return Enqueue(data=self._encode(task, payload))
        settings = self.settings(name, unique_key, unique_for)
        if not settings.task.unique:
            return enqueue(settings.task, wire_payload(payload))
        return enqueue(
            settings.task,
            wire_payload(payload),
            unique_key=settings.unique_key,
            token=uuid.uuid4().hex,
        )

    def many(self, name: str, payloads: Iterable[Any]) -> list[bytes]:
        """The entries of ``dispatch_many``, every one encoded before any is sent.

        Raises:
            ValueError: the task is unique (per the catalog).
        """
        task = self._task(name)
        if task.unique:
            raise ValueError(f"task {name!r} is unique; dispatch it with dispatch(), one at a time")
        return [self._encode(task, p) for p in payloads]

    def delayed(self, name: str, payload: Any, run_at: float) -> tuple[str, bytes]:
        """``(id, member)`` of a delayed dispatch at ``run_at`` (unix seconds).

        The lock of a unique task is taken when the group's leader moves the
        member to the stream, with the settings it registered.
        """
        task = served_task(name, self.destination, self._served(name))
        member_id = str(uuid.uuid4())
        # The leader computes a unique task's key from the payload when it moves it.
        plain = attrs.evolve(task, unique=False, unique_for=0.0)
        member = delayed_member(
            plain,
            wire_payload(payload),
            run_at,
            id=member_id,
            dispatched_at=time.time(),
            # The leader moves it to this producer's queue (no field: the default one).
            queue=None if self.destination.queue == DEFAULT_QUEUE else self.destination.queue,
        )
        return member_id, member

    def result_keys(self, task_id: str) -> tuple[str, str]:
        """``(result key, notice key)`` of task ``task_id``."""
        group = self.destination.consumer_group
        return _keys.result(group, task_id), _keys.notify(group, task_id)

    def cancel_call(self, task_id: str) -> tuple[list[str], list[str | bytes]]:
        """``(KEYS, ARGV)`` of ``lua/track.lua`` cancelling ``task_id`` (now, unix time)."""
        group = self.destination.consumer_group
        return (
            track_keys(self.destination.stream, group, task_id),
            cancel_arguments(group, task_id, time.time()),
        )

    def add_delayed_call(
        self, member_id: str, member: bytes, run_at: float
    ) -> tuple[list[str], list[str | bytes]]:
        """``(KEYS, ARGV)`` of ``lua/add_delayed.lua`` adding ``member`` at ``run_at``."""
        group = self.destination.consumer_group
        keys = [self.destination.delayed, _keys.delayed_index(group)]
        return keys, [repr(float(run_at)), member, member_id]

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
