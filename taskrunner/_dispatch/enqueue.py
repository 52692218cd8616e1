"""What a dispatch sends, decided before anything is sent: one set of rules for every sender.

Theory of operation. A dispatch, from a :class:`~taskrunner.TaskRunner` (trio,
its registered tasks) or from a producer (``taskrunner.producer``: sync or
asyncio, tasks known by name), goes the same way, one way:

1. the payload becomes its wire form (a registered task's
   ``Task.dispatch_form``: its key functions run on the payload as given, then
   a typed payload is checked and unstructured by cattrs; a producer's
   ``wire_payload``);
2. a :class:`Planner` encodes it once into the plan that one backend call
   sends (:meth:`Planner.entry`, :meth:`Planner.entries`,
   :meth:`Planner.member`), refusing what cannot be sent
   (:class:`~taskrunner.errors.InvalidTaskPayload`: not JSON, over the size
   limit) and, for a unique task, naming the lock to take;
3. the sender takes the lock (``SET NX PX``), adds the entry, and when the add
   fails gives the lock back only if :func:`give_back_lock` says so: when the
   add certainly did not happen. Otherwise the lock is kept until it expires,
   so a message that was queued after all still has its lock (no duplicate
   gets in), and the worker that runs it releases it.

A payload therefore visits each module once on its way to the backend:
``_dispatch.api`` (``TaskRunner.dispatch``) -> ``_dispatch.dispatcher`` ->
``_task`` -> ``_codec`` (a typed payload) -> ``_dispatch.enqueue`` -> ``_wire``
(tests/test_dispatch_path.py follows it).

Delays and times are checked here too (:func:`delay_seconds`,
:func:`unix_seconds`), so every sender refuses the same values with the same
one-line errors. Pure: no I/O, no clock (callers pass ``now``); tested with
tables in ``tests/test_enqueue.py``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from datetime import datetime, timedelta
from functools import partial
from typing import Any, NamedTuple

import attrs

from taskrunner import _wire
from taskrunner._wire.message import TaskSettings


@attrs.frozen(kw_only=True)
class LockRequest:
    """The unique lock a dispatch takes before adding its message."""

    key: str
    """``taskrunner:unique:`` + the message's ``unique_key``."""
    token: str
    """The value it is taken with, carried in the message (``unique_lock_value``)."""
    ttl: float
    """Seconds until it expires unless released (the task's ``unique_for``)."""


class Enqueue(NamedTuple):
    """One stream entry to add, and the lock to take first (unique tasks): the plan
    of one dispatch.

    A named tuple, not an attrs class: one is made per dispatch, and a frozen attrs
    class costs 0.5 µs to make (2% of a dispatch to Redis)."""

    data: bytes
    """The entry's ``payload`` field: the encoded message."""
    lock: LockRequest | None = None


_unlocked = partial(tuple.__new__, Enqueue)
"""``_unlocked((data, None))`` is ``Enqueue(data)`` at a third of the cost (no
Python-level ``__new__`` with defaults): the plan of every plain dispatch."""


class Planner:
    """Plans dispatches: each payload's JSON is checked and encoded once, into the
    bytes one backend call sends (pure; a cache per task, no I/O).

    The runner's :class:`~taskrunner._dispatch.dispatcher.Dispatcher` and the
    producers each hold one. What a plan's payload went through before it gets
    here (a typed payload unstructured, key functions run) is the caller's: a
    registered task's ``Task.dispatch_form``, a producer's ``wire_payload``. The
    encoding is :mod:`taskrunner._wire`'s, called from here only.
    """

    def __init__(self) -> None:
        # By name, checked by identity: a task registered anew (or a catalog read
        # afresh) gets a new encoder; hashing a Task by value would cost more.
        self._encoders: dict[str, tuple[TaskSettings, Callable[[Any], bytes]]] = {}
        self._frames: dict[str, tuple[TaskSettings, int | None]] = {}

    def encoder(self, task: TaskSettings) -> Callable[[Any], bytes]:
        """``encode_message(new_message(task, payload))`` of a task that is not unique,
        as a function of the payload made once per task (see
        :func:`~taskrunner._wire.plain_encoder`)."""
        cached = self._encoders.get(task.name)
        if cached is None or cached[0] is not task:
            cached = self._encoders[task.name] = (task, _wire.plain_encoder(task))
        return cached[1]

    def entry(
        self,
        task: TaskSettings,
        payload: Any,
        *,
        key: str | None = None,
        unique_key: str | None = None,
        token: str = "",
        trace: dict[str, str] | None = None,
    ) -> Enqueue:
        """The entry that runs ``task`` once with ``payload`` (its wire form).

        Args:
            task: The task's settings (registered, or known by name).
            payload: The payload, JSON-ready.
            key: For a unique task, what its key function gave (``""`` for
                ``None``), or ``None`` without one: the lock is
                ``taskrunner:unique:`` + :func:`~taskrunner._wire.message_unique_key`.
            unique_key: For a unique task, the message ``unique_key`` when it is
                known already (a producer's), instead of ``key``.
            token: For a unique task, a fresh random lock token.
            trace: The dispatch's trace context, when traced (``taskrunner.otel``).

        Raises:
            InvalidTaskPayload: the message cannot be encoded, or is over the size limit.
        """
        if not task.unique:
            if trace is None:  # the common case: the encoder looked up here, not called for
                cached = self._encoders.get(task.name)
                if cached is None or cached[0] is not task:
                    cached = self._encoders[task.name] = (task, _wire.plain_encoder(task))
                return _unlocked((cached[1](payload), None))
            traced = _wire.new_message(task, payload, trace=trace)
            return Enqueue(data=_wire.encode_message(traced))
        if unique_key is None:
            unique_key = _wire.message_unique_key(task.name, key)
        lock = LockRequest(
            key=_wire.unique_lock(task.name, unique_key), token=token, ttl=task.unique_for
        )
        message = _wire.new_message(task, payload, unique_key=unique_key, token=token, trace=trace)
        return Enqueue(data=_wire.encode_message(message), lock=lock)

    def entries(
        self, task: TaskSettings, payloads: Iterable[Any], trace: dict[str, str] | None = None
    ) -> list[bytes]:
        """The entries of a task that is not unique, one per payload (wire forms), every
        one encoded before any is sent.

        Raises:
            InvalidTaskPayload: as :meth:`entry`.
        """
        if trace is None:
            return list(map(self.encoder(task), payloads))
        return [
            _wire.encode_message(_wire.new_message(task, payload, trace=trace))
            for payload in payloads
        ]

    def member(
        self,
        task: TaskSettings,
        payload: Any,
        run_at: float,
        *,
        id: str,
        key: str | None = None,
        unique_key: str | None = None,
        queue: str | None = None,
        dispatched_at: float | None = None,
        trace: dict[str, str] | None = None,
    ) -> bytes:
        """The delayed-set member that runs ``task`` at ``run_at`` (its score).

        The payload's JSON is encoded once: the size of the message it will become
        is checked from it (what could not be sent is refused before anything is
        added), and it is spliced into the member. A unique task takes its lock
        when the scheduler moves the member, not now; its message ``unique_key``
        is computed now, from ``key``, on the payload as given (the scheduler only
        has its JSON). A task that keeps results carries its ``keep_result`` in
        the member (and the message it becomes).

        Args:
            task: The task's settings.
            payload: The payload, JSON-ready.
            run_at: The run-at time in the backend's clock.
            id: A fresh uuid4 string: the member's (and the task's) id.
            key: For a unique task, as :meth:`entry`'s.
            unique_key: For a unique task, the message ``unique_key`` when it is
                known already (else it is computed from ``key``).
            queue: The queue whose stream it moves to; ``None``: the default queue
                (no field).
            dispatched_at: The dispatch's time (the backend's clock), carried into
                the message when it is moved (``ctx.dispatched_at``).
            trace: The dispatch's trace context, when traced.

        Raises:
            InvalidTaskPayload: the message cannot be encoded, or is over the size limit.
        """
        if task.unique and unique_key is None:
            unique_key = _wire.message_unique_key(task.name, key)
        body = _wire.payload_bytes(task.name, payload)
        frame = self._frame(task)
        if frame is None:  # the message's frame could not be told apart: encode it whole
            whole = _wire.new_message(task, payload)
            _wire.encode_message(whole)  # for its checks (JSON, size) alone
        else:
            _wire.check_size(task.name, frame, body)
        delayed = _wire.new_delayed(
            task.name,
            _wire.PAYLOAD_MARK,
            run_at,
            id=id,
            unique_key=unique_key,
            queue=queue,
            dispatched_at=dispatched_at,
            trace=trace,
            keep_result=task.keep_result,
        )
        data = _wire.encode_delayed_around(delayed, body)
        if data is None:
            return _wire.encode_delayed(attrs.evolve(delayed, payload=payload))
        return data

    def _frame(self, task: TaskSettings) -> int | None:
        cached = self._frames.get(task.name)
        if cached is None or cached[0] is not task:
            cached = self._frames[task.name] = (task, _wire.frame_size(task))
        return cached[1]


def enqueue(
    task: TaskSettings,
    payload: Any,
    *,
    unique_key: str = "",
    token: str = "",
    trace: dict[str, str] | None = None,
) -> Enqueue:
    """The entry that runs ``task`` once with ``payload`` (its wire form), for a
    message ``unique_key`` already known (:meth:`Planner.entry` takes the key).

    Raises:
        InvalidTaskPayload: the message cannot be encoded, or is over the size limit.
    """
    if not task.unique:
        return Enqueue(data=_wire.encode_message(_wire.new_message(task, payload, trace=trace)))
    message = _wire.new_message(task, payload, unique_key=unique_key, token=token, trace=trace)
    return Enqueue(
        data=_wire.encode_message(message),
        lock=LockRequest(
            key=_wire.unique_lock(task.name, unique_key), token=token, ttl=task.unique_for
        ),
    )


def delayed_member(
    task: TaskSettings,
    payload: Any,
    run_at: float,
    *,
    id: str,
    unique_key: str | None = None,
    queue: str | None = None,
    dispatched_at: float | None = None,
    trace: dict[str, str] | None = None,
) -> bytes:
    """:meth:`Planner.member` without a cache, for a message ``unique_key`` already
    known (``None`` for a unique task: the task name's lock).

    Raises:
        InvalidTaskPayload: the message cannot be encoded, or is over the size limit.
    """
    return Planner().member(
        task,
        payload,
        run_at,
        id=id,
        unique_key=unique_key,
        queue=queue,
        dispatched_at=dispatched_at,
        trace=trace,
    )


def give_back_lock(maybe_applied: bool) -> bool:
    """Whether a unique lock is released after its add failed: only when the add
    certainly did not happen (a ``BackendError`` whose ``maybe_applied`` is false)."""
    return not maybe_applied


def delay_seconds(delay: float | timedelta) -> float:
    """``delay`` as seconds.

    Raises:
        ValueError: not seconds or a timedelta, negative, or not finite.
    """
    seconds = delay.total_seconds() if isinstance(delay, timedelta) else delay
    if isinstance(seconds, bool) or not isinstance(seconds, int | float):
        raise ValueError(f"delay must be seconds or a timedelta, got {delay!r}")
    if not (math.isfinite(seconds) and seconds >= 0):
        raise ValueError(f"delay must be a finite number of seconds >= 0, got {delay!r}")
    return float(seconds)


def unix_seconds(when: datetime | float) -> float:
    """``when`` (an aware datetime, or unix seconds) as unix seconds.

    Raises:
        ValueError: a naive datetime, or not a finite number.
    """
    if isinstance(when, datetime):
        if when.tzinfo is None or when.utcoffset() is None:
            raise ValueError(f"when must be a timezone-aware datetime, got {when!r}")
        return when.timestamp()
    if isinstance(when, int | float) and not isinstance(when, bool) and math.isfinite(when):
        return float(when)
    raise ValueError(f"when must be an aware datetime or unix seconds, got {when!r}")
