"""The delayed-task scheduler's decisions: what a due member becomes, and how long to sleep.

Theory of operation (the scheduler that acts on them is
:mod:`taskrunner._serve.scheduler`). A member of the delayed set is Go's
``DelayedTask``; :func:`build_move` turns it into the stream message it
becomes, with a fresh lock token for a unique task, as one
:class:`~taskrunner.backends.DelayedMove` for the backend to apply
atomically. A member that cannot become a message (it does not decode,
whatever the decoder raises; its unique key cannot be computed; the lock key
would have no UTF-8 form) is moved as it is, without a lock, and logged:
the worker that reads it sends it down the failure path, so nothing
disappears silently and no bad member holds up its batch. A member naming a
task not registered here becomes a message with Go's zero values, for
whichever worker knows the task. A member that re-queues a run (flow
control's waits) names its queue, carries the attempts used so far into the
message, and, for a unique task, the token of the lock the run still holds:
that lock is kept, not taken again. :func:`sleep_time` is how long the
scheduler waits before its next pass.

Pure but for the fresh lock token and the error logged for a member that
cannot be scheduled: no I/O, table-tested in ``tests/test_schedule.py`` and
``tests/test_wire.py``.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Mapping
from typing import Any

from taskrunner import _wire
from taskrunner._codec import decode_payload
from taskrunner._config import is_utf8_text
from taskrunner._task import Task
from taskrunner.backends import DelayedMove
from taskrunner.errors import InvalidTaskPayload

__all__ = ["HELD_RECHECK", "build_move", "sleep_time"]

log = logging.getLogger(__name__)

HELD_RECHECK = 1.0
"""Seconds between looks at due unique tasks whose lock is still held."""


def sleep_time(now: float, next_at: float | None, poll_interval: float, *, held: bool) -> float:
    """How long to sleep before the next pass (pure).

    Until the earliest run-at time, at most ``poll_interval``. A member already
    due after a pass is either new (pass again at once) or a unique task whose
    lock is held (``held``: look again in :data:`HELD_RECHECK`, not in a loop).
    """
    if next_at is None:
        return poll_interval
    if next_at <= now and held:
        return min(poll_interval, HELD_RECHECK)
    return min(poll_interval, max(0.0, next_at - now))


def _undeliverable(raw: bytes, why: str) -> DelayedMove:
    # Moved as it is: the worker cannot decode it as a task message either, so it
    # goes down the failure path (dead letter or failed_task_handler) with the raw
    # member attached, never silently away and never stuck in the set.
    log.error(
        "delayed member %r cannot be scheduled (%s); moving it to the failure path", raw[:200], why
    )
    return DelayedMove(member=raw, message=raw)


def build_move(
    raw: bytes,
    tasks: Mapping[str, Task],
    *,
    token: str | None = None,
    lock_prefix: str = _wire.UNIQUE_LOCK_PREFIX,
) -> DelayedMove:
    """The stream message a delayed member becomes (pure but for a fresh lock token).

    Only the member's task, payload and our optional fields are used (the
    precomputed ``unique_key``; a retry's lock token; ``attempts``, ``id``,
    ``dispatched_at``, ``trace``, ``schedule``, ``tick`` and ``keep_result``, copied
    into the message; the ``queue`` whose stream it goes to); its ``time`` is Go's
    and the run-at time is the score. The entry keeps the member's id as the
    task's (lookup, cancel, results).

    Args:
        raw: The member as stored.
        tasks: The registered tasks.
        token: The lock token of a unique task; a random one by default. A
            retry's member carries its own, which is kept.

    Never raises: a member that cannot be turned into a message is moved as it
    is, for the worker's failure path to report.
    """
    try:
        delayed = _wire.decode_delayed(raw)
    except InvalidTaskPayload as exc:
        return _undeliverable(raw, f"not a delayed task: {exc}")
    except Exception as exc:  # RecursionError too: JSON nested 100,000 deep
        return _undeliverable(raw, f"not a delayed task: {type(exc).__name__}: {exc}")
    extras: dict[str, Any] = {
        "attempts": delayed.attempts,
        "id": delayed.id,
        "dispatched_at": delayed.dispatched_at,
        "trace": delayed.trace,
        "schedule": delayed.schedule,
        "tick": delayed.tick,
        "keep_result": delayed.keep_result,
        "workflow": delayed.workflow,
        "step": delayed.step,
        "step_inputs": delayed.step_inputs,
    }  # new_message's keywords
    task = tasks.get(delayed.task)
    task_id = delayed.id or None  # what the entry index maps to the new entry
    queue = delayed.queue  # a re-queued run goes back to its own queue's stream
    if task is None:
        # Go's zero values: the worker that knows the task (another deployment,
        # a Go fleet) runs it with its own settings, or dead-letters it.
        message = _wire.TaskMessage(
            task_name=delayed.task, payload=delayed.payload, extras=_wire.MessageExtras(**extras)
        )
        return DelayedMove(member=raw, message=_encode(message, raw), task_id=task_id, queue=queue)
    if not task.unique:
        message = _wire.new_message(task, delayed.payload, **extras)
        return DelayedMove(member=raw, message=_encode(message, raw), task_id=task_id, queue=queue)
    unique_key = delayed.unique_key
    if unique_key is None:  # written by the Go library: compute it
        try:
            payload = decode_payload(delayed.payload, task.payload_type, task.name, task.extra_keys)
            unique_key = task.message_unique_key(payload)
        except InvalidTaskPayload as exc:
            return _undeliverable(raw, str(exc))
        except Exception as exc:  # whatever else decoding raised (a RecursionError)
            return _undeliverable(raw, f"{type(exc).__name__}: {exc}")
    if not is_utf8_text(unique_key):  # the lock key could never be sent to the backend
        return _undeliverable(raw, f"unique_key {unique_key!r} is not valid UTF-8 text")
    if delayed.unique_lock_value:
        # A retry keeps the lock its first attempt took: the move takes it only if it
        # is free or still held with this token (it may have expired meanwhile).
        token = delayed.unique_lock_value
    elif token is None:
        token = uuid.uuid4().hex
    message = _wire.new_message(task, delayed.payload, unique_key=unique_key, token=token, **extras)
    return DelayedMove(
        member=raw,
        message=_encode(message, raw),
        lock_key=_wire.unique_lock(task.name, unique_key, lock_prefix),
        lock_token=token,
        lock_ttl=task.unique_for,
        task_id=task_id,
        queue=queue,
    )


def _encode(message: _wire.TaskMessage, raw: bytes) -> bytes:
    try:
        return _wire.encode_message(message)
    except Exception:  # not encodable (a RecursionError too): the worker reports the raw member
        return raw
