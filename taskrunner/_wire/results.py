"""The result document, its notice, and the task states (see the package docstring).

Ours alone: a Go worker writes none of these and reads none of them.
"""

from __future__ import annotations

import enum
import math
from typing import Any

import attrs

from taskrunner._wire.encoding import dumps, dumps_value, field, json_object
from taskrunner._wire.locks import UNIQUE_LOCK_PREFIX, unique_lock
from taskrunner._wire.message import MAX_MESSAGE_BYTES
from taskrunner.errors import InvalidTaskPayload, InvalidTaskResult

NOTIFY_TTL = 60.0
"""Longest a result notice lives (and at most the result's own ``keep_result``): long
enough for any waiter between its ``GET`` and its blocking wait, short enough that
the copy of the document it holds costs little."""


class TaskState(enum.StrEnum):
    """Where a task is: the ``state`` of :class:`~taskrunner.TaskInfo`."""

    QUEUED = "queued"
    """In the stream, not delivered to a consumer yet."""
    SCHEDULED = "scheduled"
    """In the delayed set: dispatched with a delay, or waiting for a retry."""
    RUNNING = "running"
    """Delivered and not acknowledged: in flight somewhere in the fleet."""
    SUCCEEDED = "succeeded"
    """Finished: the action returned (kept while ``keep_result`` lasts)."""
    FAILED = "failed"
    """Finished: its last attempt failed (kept while ``keep_result`` lasts)."""
    CANCELLED = "cancelled"
    """Finished: cancelled (kept while ``keep_result`` lasts)."""

    @property
    def final(self) -> bool:
        """Whether the task is done (succeeded, failed or cancelled)."""
        return self in _FINAL


_FINAL = frozenset({TaskState.SUCCEEDED, TaskState.FAILED, TaskState.CANCELLED})


@attrs.frozen(kw_only=True)
class ResultDocument:
    """What a task that keeps results leaves at ``taskrunner:<group>:result:<task id>``."""

    state: TaskState
    """A final state."""
    task: str = ""
    """The task's name ("" when not known: cancelled while queued, by a tool)."""
    value: Any = None
    """The action's return value in its JSON form (succeeded only)."""
    error_type: str = ""
    """The error's type name (failed only)."""
    error: str = ""
    """The error's text (failed only)."""
    attempts: int = 0
    """Attempts the task used."""
    enqueued_at: float | None = None
    started_at: float | None = None
    finished_at: float | None = None
    """Times in the backend's seconds (unix time on Redis)."""


def succeeded(
    task: str,
    value: Any,
    *,
    attempts: int,
    enqueued_at: float | None,
    started_at: float | None,
    finished_at: float,
) -> ResultDocument:
    """The document of a run whose action returned ``value`` (its JSON form)."""
    return ResultDocument(
        state=TaskState.SUCCEEDED,
        task=task,
        value=value,
        attempts=attempts,
        enqueued_at=enqueued_at,
        started_at=started_at,
        finished_at=finished_at,
    )


def failed(
    task: str,
    error_type: str,
    error: str,
    *,
    attempts: int,
    enqueued_at: float | None,
    started_at: float | None,
    finished_at: float,
) -> ResultDocument:
    """The document of a task whose last attempt failed with ``error_type: error``."""
    return ResultDocument(
        state=TaskState.FAILED,
        task=task,
        error_type=error_type,
        error=error,
        attempts=attempts,
        enqueued_at=enqueued_at,
        started_at=started_at,
        finished_at=finished_at,
    )


def cancelled(
    task: str,
    *,
    attempts: int = 0,
    enqueued_at: float | None = None,
    started_at: float | None = None,
    finished_at: float,
) -> ResultDocument:
    """The document of a task that was cancelled."""
    return ResultDocument(
        state=TaskState.CANCELLED,
        task=task,
        attempts=attempts,
        enqueued_at=enqueued_at,
        started_at=started_at,
        finished_at=finished_at,
    )


def encode_result(doc: ResultDocument) -> bytes:
    """The document's JSON: ``state``, then whichever of ``task``, ``value`` (succeeded),
    ``error`` (failed: ``{"type", "message"}``), ``attempts`` and the three times are set.

    Raises:
        InvalidTaskResult: the value is not JSON (a type JSON cannot carry, NaN, a
            cycle), or the document is over :data:`MAX_MESSAGE_BYTES`.
    """
    out: dict[str, Any] = {"state": doc.state.value}
    if doc.task:
        out["task"] = doc.task
    if doc.state is TaskState.SUCCEEDED:
        out["value"] = doc.value
    if doc.state is TaskState.FAILED:
        out["error"] = {"type": doc.error_type, "message": doc.error}
    out["attempts"] = doc.attempts
    for name in ("enqueued_at", "started_at", "finished_at"):
        moment = getattr(doc, name)
        if moment is not None:
            out[name] = moment
    try:
        data = dumps(out).encode()
    except (TypeError, ValueError, RecursionError) as exc:
        raise InvalidTaskResult(doc.task, doc.value, str(exc)) from exc
    if len(data) > MAX_MESSAGE_BYTES:
        raise InvalidTaskResult(
            doc.task, doc.value, f"{len(data)} bytes, over the {MAX_MESSAGE_BYTES}-byte limit"
        )
    return data


_TASK_NAMES: dict[str, str] = {}
"""Task names as JSON strings, as :func:`encode_succeeded` writes them (a few per process)."""
_TASK_NAMES_KEPT = 1024


def encode_succeeded(
    task: str,
    value: Any,
    *,
    attempts: int,
    enqueued_at: float | None,
    started_at: float | None,
    finished_at: float,
) -> bytes:
    """``encode_result(succeeded(...))``, byte for byte, built as text around the
    value's JSON (it runs once per run of a task that keeps results; tests/test_wire.py
    holds the two equal).

    Raises:
        InvalidTaskResult: as :func:`encode_result`.
    """
    # The common case: three float times (one sum is finite only if all three are;
    # a sum that overflows goes the general way, which decides it the same).
    if (
        not task
        or type(enqueued_at) is not float
        or type(started_at) is not float
        or type(finished_at) is not float
        or not math.isfinite(enqueued_at + started_at + finished_at)
    ):
        return _encode_succeeded_generally(
            task, value, attempts, enqueued_at, started_at, finished_at
        )
    try:
        body = dumps_value(value)
    except (TypeError, ValueError, RecursionError) as exc:
        raise InvalidTaskResult(task, value, str(exc)) from exc
    name = _TASK_NAMES.get(task)
    if name is None:
        name = _task_name(task)
    data = (
        f'{{"state":"succeeded","task":{name},"value":{body},"attempts":{int(attempts)},'
        f'"enqueued_at":{enqueued_at!r},"started_at":{started_at!r},'
        f'"finished_at":{finished_at!r}}}'
    ).encode()
    if len(data) > MAX_MESSAGE_BYTES:
        raise InvalidTaskResult(
            task, value, f"{len(data)} bytes, over the {MAX_MESSAGE_BYTES}-byte limit"
        )
    return data


def _task_name(task: str) -> str:
    """``task`` as a JSON string, kept for the next document (a few names per process)."""
    name = dumps(task)
    if len(_TASK_NAMES) < _TASK_NAMES_KEPT:
        _TASK_NAMES[task] = name
    return name


def _encode_succeeded_generally(
    task: str,
    value: Any,
    attempts: int,
    enqueued_at: float | None,
    started_at: float | None,
    finished_at: float,
) -> bytes:
    """:func:`encode_succeeded` when a time is missing, not a float or not finite, or
    the task has no name."""
    times = (enqueued_at, started_at, finished_at)
    if not task or not all(t is None or (type(t) is float and math.isfinite(t)) for t in times):
        return encode_result(
            succeeded(
                task,
                value,
                attempts=attempts,
                enqueued_at=enqueued_at,
                started_at=started_at,
                finished_at=finished_at,
            )
        )
    try:
        body = dumps_value(value)
    except (TypeError, ValueError, RecursionError) as exc:
        raise InvalidTaskResult(task, value, str(exc)) from exc
    name = _TASK_NAMES.get(task) or _task_name(task)
    parts = ['{"state":"succeeded","task":', name, ',"value":', body, ',"attempts":']
    parts.append(str(int(attempts)))
    if enqueued_at is not None:
        parts += (',"enqueued_at":', repr(enqueued_at))
    if started_at is not None:
        parts += (',"started_at":', repr(started_at))
    parts += (',"finished_at":', repr(finished_at), "}")
    data = "".join(parts).encode()
    if len(data) > MAX_MESSAGE_BYTES:
        raise InvalidTaskResult(
            task, value, f"{len(data)} bytes, over the {MAX_MESSAGE_BYTES}-byte limit"
        )
    return data


def cancelled_head(finished_at: float) -> bytes:
    """A cancelled document up to its task name, for the cancel script to finish.

    The script (``lua/cancel.lua``) knows the task only from the entry or member it
    removes: it appends the name as a JSON string and the closing brace.
    """
    return dumps({"state": TaskState.CANCELLED.value, "finished_at": finished_at})[:-1].encode() + (
        b',"task":'
    )


def _time(doc: dict[str, Any], name: str) -> float | None:
    value = doc.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise InvalidTaskPayload(f"field {name!r} should be seconds, got {value!r}")
    return float(value)


def decode_result(raw: bytes) -> ResultDocument:
    """Parse a result document (ours, or one a producer or tool wrote by the same rules).

    Raises:
        InvalidTaskPayload: not JSON, not an object, an unknown or non-final
            ``state``, or a field of the wrong type.
    """
    doc = json_object(raw)
    state_name = doc.get("state")
    try:
        state = TaskState(state_name) if isinstance(state_name, str) else None
    except ValueError:
        state = None
    if state is None or not state.final:
        raise InvalidTaskPayload(f"field 'state' should be a final state, got {state_name!r}")
    error = doc.get("error")
    error_type = error_message = ""
    if error is not None:
        if not isinstance(error, dict):
            raise InvalidTaskPayload(f"field 'error' should be an object, got {error!r}")
        error_type = field(error, "type", str, "")
        error_message = field(error, "message", str, "")
    return ResultDocument(
        state=state,
        task=field(doc, "task", str, ""),
        value=doc.get("value"),
        error_type=error_type,
        error=error_message,
        attempts=field(doc, "attempts", int, 0),
        enqueued_at=_time(doc, "enqueued_at"),
        started_at=_time(doc, "started_at"),
        finished_at=_time(doc, "finished_at"),
    )


def notify_ttl(keep_result: float) -> float:
    """How long a task's result notice lives: :data:`NOTIFY_TTL`, at most ``keep_result``."""
    return min(NOTIFY_TTL, keep_result)


@attrs.frozen(kw_only=True)
class Removal:
    """What a stream entry or delayed member that a cancel removes leaves to undo."""

    task: str
    """Its task's name ("" when it names none)."""
    lock: tuple[str, str] | None
    """The unique lock it holds, ``(key, token)``, to release."""
    keep_result: float | None
    """How long to keep its cancelled record, when it keeps results."""


def removal_of(raw: bytes | None, lock_prefix: str = UNIQUE_LOCK_PREFIX) -> Removal:
    """What removing the entry ``raw`` (a message) or member ``raw`` leaves to undo.

    The rule ``lua/cancel.lua`` applies, read leniently (an undecodable document
    holds no lock and keeps nothing): the task is ``task_name`` (a message) or
    ``task`` (a member); it holds a lock when it has a non-empty
    ``unique_lock_value`` and ``unique`` is not false, the lock key being
    ``lock_prefix`` (the group's, :func:`taskrunner._keys.unique_prefix`) + its
    ``unique_key`` (or its task's name when that is empty, see
    :func:`~taskrunner._wire.unique_lock`); ``keep_result`` is kept when it is a
    number > 0.
    """
    try:
        doc = json_object(raw or b"")
    except (InvalidTaskPayload, RecursionError):
        return Removal(task="", lock=None, keep_result=None)
    name = doc.get("task_name", doc.get("task"))
    task = name if isinstance(name, str) else ""
    token, key = doc.get("unique_lock_value"), doc.get("unique_key")
    lock = None
    if isinstance(token, str) and token and doc.get("unique") is not False:
        lock = unique_lock(task, key if isinstance(key, str) else "", lock_prefix), token
    keep = doc.get("keep_result")
    if isinstance(keep, int | float) and not isinstance(keep, bool) and 0 < keep < math.inf:
        return Removal(task=task, lock=lock, keep_result=float(keep))
    return Removal(task=task, lock=lock, keep_result=None)
