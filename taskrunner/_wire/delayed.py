"""The delayed member (Go's ``DelayedTask``): see the package docstring for its bytes."""

from __future__ import annotations

import math
from typing import Any

import attrs

from taskrunner._wire.encoding import dumps, field, json_object, seconds_field
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
    keep_result: float | None = None
    """Ours, for tasks that keep results: copied into the message when it is moved."""


def new_delayed(
    task_name: str,
    payload: Any,
    run_at: float,
    *,
    id: str,
    unique_key: str | None = None,
    keep_result: float | None = None,
) -> DelayedTask:
    """The delayed member that runs ``task_name`` at ``run_at`` (the backend's seconds).

    Args:
        task_name: The task to run.
        payload: The payload in its wire (JSON-ready) form.
        run_at: The run-at time; also the member's score, which keeps the fraction.
        id: A fresh uuid4 string (a fixed one in tests); also the task's id.
        unique_key: For a unique task, :func:`unique_key_for` of the payload.
        keep_result: For a task that keeps results, its ``keep_result``.
    """
    return DelayedTask(
        id=id,
        task=task_name,
        time=math.floor(run_at),
        payload=payload,
        unique_key=unique_key,
        keep_result=keep_result,
    )


def encode_delayed(delayed: DelayedTask) -> bytes:
    """The member's JSON: Go's four fields, then ``unique_key`` and ``keep_result`` when set.

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
    if delayed.keep_result is not None:
        doc["keep_result"] = delayed.keep_result
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
    return DelayedTask(
        id=field(doc, "id", str, ""),
        task=task,
        time=math.floor(moment),
        payload=doc.get("payload"),
        unique_key=field(doc, "unique_key", str, None),
        keep_result=seconds_field(doc, "keep_result"),
    )
