"""The stream message (Go's ``TaskMessage``): see the package docstring for its bytes."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import attrs

from taskrunner._wire.encoding import dumps, field, json_object, seconds_field
from taskrunner.errors import InvalidTaskPayload

if TYPE_CHECKING:
    from taskrunner._task import Task

MAX_MESSAGE_BYTES = 8 * 1024 * 1024
"""Largest encoded message accepted at dispatch or decoded by a worker."""


@attrs.frozen(kw_only=True)
class TaskMessage:
    """The JSON document in a stream entry's ``payload`` field (Go's ``TaskMessage``).

    Field names and units are the Go library's: ``reservation_timeout`` in
    nanoseconds, ``unique_for`` in seconds. The message id is the stream id
    and is not serialised. Build one with :func:`new_message`.
    """

    task_name: str
    payload: Any = None
    unique: bool = False
    unique_for: int = 0
    unique_key: str = ""
    """The unique lock key's suffix, ``<task>:<key>`` (see the module docstring)."""
    unique_lock_value: str = ""
    reservation_timeout: int = 0
    id: str = ""
    """Ours, optional: the task's id when it is not the entry's stream id (an entry moved
    from the delayed set carries its member's id). Written only when set."""
    keep_result: float | None = None
    """Ours, optional: seconds to keep the task's result for (the task's ``keep_result``).
    Written only when set."""

    @property
    def reservation_timeout_seconds(self) -> float:
        return self.reservation_timeout / 1e9


def reservation_ns(seconds: float) -> int:
    """A reservation timeout as the wire's nanoseconds (Go's ``time.Duration``)."""
    return int(seconds * 1e9)


def unique_for_seconds(seconds: float) -> int:
    """A lock lifetime as the wire's whole seconds, rounded up so a lock never lives shorter."""
    return math.ceil(seconds)


def new_message(
    task: Task,
    payload: Any,
    *,
    unique_key: str = "",
    token: str = "",
    id: str = "",
    keep_result: float | None = None,
) -> TaskMessage:
    """The message that runs ``task`` once.

    Args:
        task: The registered task (its reservation timeout resolved).
        payload: The payload in its wire (JSON-ready) form.
        unique_key: For a unique task, :func:`unique_key_for` of the payload.
        token: For a unique task, the lock's token (random at dispatch).
        id: The task id, when it is not the entry's stream id (moved from the
            delayed set: the member's id).
        keep_result: Seconds to keep the result for; ``None`` (the default)
            takes the task's ``keep_result``.
    """
    keep = task.keep_result if keep_result is None else keep_result
    if not task.unique:
        return TaskMessage(
            task_name=task.name,
            payload=payload,
            reservation_timeout=reservation_ns(task.reservation),
            id=id,
            keep_result=keep,
        )
    return TaskMessage(
        task_name=task.name,
        payload=payload,
        unique=True,
        unique_for=unique_for_seconds(task.unique_for),
        unique_key=unique_key,
        unique_lock_value=token,
        reservation_timeout=reservation_ns(task.reservation),
        id=id,
        keep_result=keep,
    )


def encode_message(message: TaskMessage) -> bytes:
    """The wire JSON of ``message``.

    Raises:
        InvalidTaskPayload: the payload is not JSON-serialisable, or too large.
    """
    doc: dict[str, Any] = {
        "task_name": message.task_name,
        "payload": message.payload,
        "unique": message.unique,
        "unique_for": message.unique_for,
        "unique_key": message.unique_key,
        "unique_lock_value": message.unique_lock_value,
        "reservation_timeout": message.reservation_timeout,
    }
    # Our optional fields, after Go's and only when set: a plain message stays
    # byte for byte what it was.
    if message.id:
        doc["id"] = message.id
    if message.keep_result is not None:
        doc["keep_result"] = message.keep_result
    try:
        data = dumps(doc).encode()
    except (TypeError, ValueError) as exc:
        raise InvalidTaskPayload(
            f"not JSON-serialisable: {exc}", task_name=message.task_name
        ) from exc
    if len(data) > MAX_MESSAGE_BYTES:
        raise InvalidTaskPayload(
            f"encoded message is {len(data)} bytes, over the {MAX_MESSAGE_BYTES}-byte limit",
            task_name=message.task_name,
        )
    return data


def decode_message(raw: bytes | None) -> TaskMessage:
    """Parse a stream entry's ``payload`` field.

    Decoded by hand rather than through cattrs: it runs once per task on the
    hot path, must accept Go's documents (``null`` for empty strings, extra
    fields), and must turn every malformed input into an error naming it.

    Raises:
        InvalidTaskPayload: no field, over :data:`MAX_MESSAGE_BYTES`, invalid JSON,
            or a document that is not a task message.
    """
    if raw is None:
        raise InvalidTaskPayload("stream entry has no 'payload' field")
    if len(raw) > MAX_MESSAGE_BYTES:
        raise InvalidTaskPayload(
            f"entry is {len(raw)} bytes, over the {MAX_MESSAGE_BYTES}-byte limit"
        )
    doc = json_object(raw)
    task_name = doc.get("task_name")
    if not isinstance(task_name, str) or not task_name:
        raise InvalidTaskPayload(
            f"field 'task_name' should be a non-empty string, got {task_name!r}"
        )
    return TaskMessage(
        task_name=task_name,
        payload=doc.get("payload"),
        unique=field(doc, "unique", bool, False),
        unique_for=field(doc, "unique_for", int, 0),
        unique_key=field(doc, "unique_key", str, ""),
        unique_lock_value=field(doc, "unique_lock_value", str, ""),
        reservation_timeout=field(doc, "reservation_timeout", int, 0),
        id=field(doc, "id", str, ""),
        keep_result=seconds_field(doc, "keep_result"),
    )
