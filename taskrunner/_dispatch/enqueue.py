"""What a dispatch sends, decided before anything is sent: one set of rules for every sender.

Theory of operation. A dispatch, from a :class:`~taskrunner.TaskRunner` (trio,
its registered tasks) or from a producer (``taskrunner.producer``: sync or
asyncio, tasks known by name), goes the same way:

1. the payload becomes its wire form (a typed payload unstructured by cattrs);
2. :func:`enqueue` (or :func:`delayed_member`) builds and encodes the message,
   refusing what cannot be sent (:class:`~taskrunner.errors.InvalidTaskPayload`:
   not JSON, over the size limit) and, for a unique task, names the lock to take;
3. the sender takes the lock (``SET NX PX``), adds the entry, and when the add
   fails gives the lock back only if :func:`give_back_lock` says so: when the
   add certainly did not happen. Otherwise the lock is kept until it expires,
   so a message that was queued after all still has its lock (no duplicate
   gets in), and the worker that runs it releases it.

Delays and times are checked here too (:func:`delay_seconds`,
:func:`unix_seconds`), so every sender refuses the same values with the same
one-line errors. Pure: no I/O, no clock (callers pass ``now``); tested with
tables in ``tests/test_enqueue.py``.
"""

from __future__ import annotations

import math
from datetime import datetime, timedelta
from typing import Any

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


@attrs.frozen(kw_only=True)
class Enqueue:
    """One stream entry to add, and the lock to take first (unique tasks)."""

    data: bytes
    """The entry's ``payload`` field: the encoded message."""
    lock: LockRequest | None = None


def enqueue(
    task: TaskSettings,
    payload: Any,
    *,
    unique_key: str = "",
    token: str = "",
    trace: dict[str, str] | None = None,
) -> Enqueue:
    """The entry that runs ``task`` once with ``payload`` (its wire form).

    Args:
        task: The task's settings (registered, or known by name).
        payload: The payload, JSON-ready.
        unique_key: For a unique task, the message's ``unique_key``
            (``Task.message_unique_key``, or
            :func:`~taskrunner._wire.message_unique_key` for a key given by name).
        token: For a unique task, a fresh random lock token.
        trace: The dispatch's trace context, when traced (``taskrunner.otel``).

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
    """The delayed-set member that runs ``task`` at ``run_at`` (its score).

    The message it will become is encoded now, so what could not be sent is
    refused before anything is added. A unique task takes its lock when the
    scheduler moves the member, not now. A task that keeps results carries its
    ``keep_result`` in the member (and the message it becomes).

    Args:
        task: The task's settings.
        payload: The payload, JSON-ready.
        run_at: The run-at time in the backend's clock.
        id: A fresh uuid4 string: the member's (and the task's) id.
        unique_key: For a unique task, the message's ``unique_key`` when it is
            known now; without it the scheduler computes it from the payload.
        dispatched_at: The dispatch's time (the backend's clock), carried into
            the message when it is moved (``ctx.dispatched_at``).
        queue: The queue whose stream it moves to; ``None``: the default queue
            (no field).
        trace: The dispatch's trace context, when traced.

    Raises:
        InvalidTaskPayload: the message cannot be encoded, or is over the size limit.
    """
    _wire.encode_message(_wire.new_message(task, payload))
    return _wire.encode_delayed(
        _wire.new_delayed(
            task.name,
            payload,
            run_at,
            id=id,
            unique_key=unique_key,
            queue=queue,
            dispatched_at=dispatched_at,
            trace=trace,
            keep_result=task.keep_result,
        )
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
