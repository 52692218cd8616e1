"""The delayed member (Go's ``DelayedTask``): see the package docstring for its bytes."""

from __future__ import annotations

import math
from typing import Any

import attrs

from taskrunner._wire.encoding import dumps, field, json_object
from taskrunner._wire.frames import PAYLOAD_MARK
from taskrunner._wire.message import TaskMessage, extras_of
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
    unique_lock_value: str = ""
    """Ours, for a re-queued run of a unique task (a retry, a wait for a limit):
    the token of the lock it keeps."""
    queue: str | None = None
    """Ours: the queue whose stream the member moves to; ``None`` (absent) is the
    default queue."""
    # Ours, copied into the message when the member is moved (see TaskMessage):
    attempts: int = 0
    dispatched_at: float | None = None
    trace: dict[str, str] | None = None
    schedule: str | None = None
    tick: float | None = None
    keep_result: float | None = None
    workflow: str | None = None
    step: str | None = None
    step_inputs: bool = False


def new_delayed(
    task_name: str,
    payload: Any,
    run_at: float,
    *,
    id: str,
    unique_key: str | None = None,
    queue: str | None = None,
    dispatched_at: float | None = None,
    trace: dict[str, str] | None = None,
    keep_result: float | None = None,
) -> DelayedTask:
    """The delayed member that runs ``task_name`` at ``run_at`` (the backend's seconds).

    Args:
        task_name: The task to run.
        payload: The payload in its wire (JSON-ready) form.
        run_at: The run-at time; also the member's score, which keeps the fraction.
        id: A fresh uuid4 string (a fixed one in tests); the task's id.
        unique_key: For a unique task, ``Task.message_unique_key`` of the payload.
        queue: The queue it moves to; ``None``: the default queue (and no field).
        dispatched_at: When it was dispatched (the backend's clock).
        trace: The trace context of the dispatch, if traced.
        keep_result: For a task that keeps results, its ``keep_result``.
    """
    return DelayedTask(
        id=id,
        task=task_name,
        time=math.floor(run_at),
        payload=payload,
        unique_key=unique_key,
        queue=queue,
        dispatched_at=dispatched_at,
        trace=trace,
        keep_result=keep_result,
    )


def retry_delayed(
    message: TaskMessage,
    run_at: float,
    *,
    id: str,
    attempts: int,
    dispatched_at: float,
    queue: str | None = None,
) -> DelayedTask:
    """The member that re-queues ``message`` for another attempt at ``run_at``, or
    for the same attempt once its wait is over (a concurrency slot, a rate limit,
    a pause: then ``attempts`` excludes the delivery that waited).

    It keeps what the next attempt needs of the message: its task, payload,
    trace, unique key and lock token (a unique task keeps its lock across
    the retry), its ``keep_result``, its workflow and step, with the task's ``id``, the ``attempts``
    used so far, the original ``dispatched_at``, a periodic run's ``schedule``
    and ``tick``, and the ``queue`` it goes back to (``None``: the default
    queue, and no field).
    """
    return DelayedTask(
        id=id,
        task=message.task_name,
        time=math.floor(run_at),
        payload=message.payload,
        unique_key=message.unique_key if message.unique else None,
        unique_lock_value=message.unique_lock_value if message.unique else "",
        queue=queue,
        attempts=attempts,
        dispatched_at=dispatched_at,
        trace=message.trace,
        schedule=message.schedule,
        tick=message.tick,
        keep_result=message.keep_result,
        workflow=message.workflow,
        step=message.extras.step if message.extras is not None else None,
        step_inputs=message.extras.step_inputs if message.extras is not None else False,
    )


def encode_delayed(delayed: DelayedTask) -> bytes:
    """The member's JSON: Go's four fields, then ours when set (``unique_key``,
    ``unique_lock_value``, ``queue``, ``attempts``, ``dispatched_at``, ``trace``,
    ``schedule``, ``tick`` and ``keep_result``).

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
    if delayed.unique_lock_value:
        doc["unique_lock_value"] = delayed.unique_lock_value
    if delayed.queue is not None:
        doc["queue"] = delayed.queue
    if delayed.attempts:
        doc["attempts"] = delayed.attempts
    if delayed.dispatched_at is not None:
        doc["dispatched_at"] = delayed.dispatched_at
    if delayed.trace:
        doc["trace"] = delayed.trace
    if delayed.schedule is not None:
        doc["schedule"] = delayed.schedule
        doc["tick"] = delayed.tick
    if delayed.keep_result is not None:
        doc["keep_result"] = delayed.keep_result
    if delayed.workflow is not None:
        doc["workflow"] = delayed.workflow
        doc["step"] = delayed.step
        if delayed.step_inputs:
            doc["step_inputs"] = True
    try:
        return dumps(doc).encode()
    except (TypeError, ValueError) as exc:
        raise InvalidTaskPayload(f"not JSON-serialisable: {exc}", task_name=delayed.task) from exc


def encode_delayed_around(delayed: DelayedTask, body: bytes) -> bytes | None:
    """The JSON of ``delayed``, whose payload is :data:`PAYLOAD_MARK`, with ``body``
    (the payload's JSON, encoded once) in its place: the bytes :func:`encode_delayed`
    writes for that payload. ``None`` when the mark is not found exactly once (a
    trace holding it, say): then encode the member whole."""
    mark = dumps(PAYLOAD_MARK).encode()
    data = encode_delayed(delayed)
    if data.count(mark) != 1:
        return None
    head, _, tail = data.partition(mark)
    return head + body + tail


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
    extras = extras_of(doc)  # the same optional fields as a message's
    return DelayedTask(
        id=field(doc, "id", str, ""),
        task=task,
        time=math.floor(moment),
        payload=doc.get("payload"),
        unique_key=field(doc, "unique_key", str, None),
        unique_lock_value=field(doc, "unique_lock_value", str, ""),
        queue=field(doc, "queue", str, None),
        attempts=extras.attempts,
        dispatched_at=extras.dispatched_at,
        trace=extras.trace,
        schedule=extras.schedule,
        tick=extras.tick,
        keep_result=extras.keep_result,
        workflow=extras.workflow,
        step=extras.step,
        step_inputs=extras.step_inputs,
    )
