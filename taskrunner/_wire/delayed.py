"""The delayed member (Go's ``DelayedTask``): see the package docstring for its bytes."""

from __future__ import annotations

import math
from typing import Any

import attrs

from taskrunner._wire.encoding import dumps, field, json_object
from taskrunner._wire.message import TaskMessage
from taskrunner.errors import InvalidTaskPayload


@attrs.frozen(kw_only=True)
class DelayedTask:
    """A member of the delayed set (Go's ``DelayedTask``): run ``task`` with ``payload``.

    Its score in the set, not :attr:`time`, says when: Python never reads
    ``time``; it is there for Go.
    """

    id: str
    """A uuid4, which also keeps equal payloads apart in the set."""
    task: str
    time: int
    """The run-at time in whole seconds, rounded down: unix time on Redis (what
    Go reads), trio's clock on the in-memory backend."""
    payload: Any = None
    unique_key: str | None = None
    """Ours, for unique tasks: the message ``unique_key``, computed at dispatch."""
    queue: str | None = None
    """Ours: the queue whose stream the member moves to; ``None`` (absent) is the
    default queue."""
    attempts: int = 0
    """Ours: attempts already used by this task's earlier entries, copied into the
    message it becomes (absent when 0)."""
    unique_lock_value: str | None = None
    """Ours, for a unique task's re-queued run: the token of the lock it still
    holds, carried into the message instead of taking a new lock."""


def new_delayed(
    task_name: str,
    payload: Any,
    run_at: float,
    *,
    id: str,
    unique_key: str | None = None,
    queue: str | None = None,
) -> DelayedTask:
    """The delayed member that runs ``task_name`` at ``run_at`` (the backend's seconds).

    Args:
        task_name: The task to run.
        payload: The payload in its wire (JSON-ready) form.
        run_at: The run-at time; also the member's score, which keeps the fraction.
        id: A fresh uuid4 string (a fixed one in tests).
        unique_key: For a unique task, :func:`unique_key_for` of the payload.
        queue: The queue it moves to; ``None``: the default queue (and no field).
    """
    return DelayedTask(
        id=id,
        task=task_name,
        time=math.floor(run_at),
        payload=payload,
        unique_key=unique_key,
        queue=queue,
    )


def requeued_delayed(
    message: TaskMessage,
    run_at: float,
    *,
    id: str,
    queue: str | None,
    attempts: int,
) -> DelayedTask:
    """The member that runs ``message`` again at ``run_at``: a run re-queued
    through the delayed set (a wait for a concurrency slot, a rate limit, a
    pause), which keeps its payload, its attempts and its unique lock.

    Args:
        message: The message as read from the stream.
        run_at: When it is due (the backend's seconds).
        id: The member's id (the task's: the entry's stream id).
        queue: The queue it goes back to (``None``: the default queue).
        attempts: Attempts used so far, all entries of the task included.
    """
    unique = message.unique and bool(message.unique_lock_value)
    return DelayedTask(
        id=id,
        task=message.task_name,
        time=math.floor(run_at),
        payload=message.payload,
        unique_key=message.unique_key if unique else None,
        queue=queue,
        attempts=attempts,
        unique_lock_value=message.unique_lock_value if unique else None,
    )


def encode_delayed(delayed: DelayedTask) -> bytes:
    """The member's JSON: Go's four fields, then ``unique_key``, ``queue``,
    ``attempts`` and ``unique_lock_value``, each only when set.

    Raises:
        InvalidTaskPayload: the payload is not JSON-serialisable.
    """
    doc: dict[str, Any] = {
        "id": delayed.id,
        "task": delayed.task,
        "time": delayed.time,
        "payload": delayed.payload,
    }
    if delayed.unique_key is not None:
        doc["unique_key"] = delayed.unique_key
    if delayed.queue is not None:
        doc["queue"] = delayed.queue
    if delayed.attempts:
        doc["attempts"] = delayed.attempts
    if delayed.unique_lock_value is not None:
        doc["unique_lock_value"] = delayed.unique_lock_value
    try:
        return dumps(doc).encode()
    except (TypeError, ValueError) as exc:
        raise InvalidTaskPayload(f"not JSON-serialisable: {exc}", task_name=delayed.task) from exc


def decode_delayed(raw: bytes) -> DelayedTask:
    """Parse a member of the delayed set (Go's, 0.1.0's or ours).

    A fractional ``time`` (0.1.0 wrote one) is read rounded down.

    Raises:
        InvalidTaskPayload: invalid JSON, not an object, or a field of the wrong type.
    """
    doc = json_object(raw)
    task = doc.get("task")
    if not isinstance(task, str) or not task:
        raise InvalidTaskPayload(f"field 'task' should be a non-empty string, got {task!r}")
    moment = doc.get("time", 0)
    if isinstance(moment, bool) or not isinstance(moment, int | float) or not math.isfinite(moment):
        raise InvalidTaskPayload(f"field 'time' should be unix seconds, got {moment!r}")
    attempts = field(doc, "attempts", int, 0)
    if attempts < 0:
        raise InvalidTaskPayload(f"field 'attempts' should be an integer >= 0, got {attempts!r}")
    return DelayedTask(
        id=field(doc, "id", str, ""),
        task=task,
        time=math.floor(moment),
        payload=doc.get("payload"),
        unique_key=field(doc, "unique_key", str, None),
        queue=field(doc, "queue", str, None),
        attempts=attempts,
        unique_lock_value=field(doc, "unique_lock_value", str, None),
    )
