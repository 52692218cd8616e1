"""What a finished run leaves beside its ack: its result document and index changes.

Theory of operation. A run's ack carries an :class:`~taskrunner.backends.Outcome`
only when there is something to record: the task keeps results (the message's
``keep_result``, else the task's), the entry came from the delayed set (its
message carries the task's ``id``, which the entry index maps to it), or the
run was asked to stop. Everything else is acknowledged plainly, so a task that
keeps no results pays nothing here: :func:`outcome` returns ``None`` after
two attribute reads. The documents are the wire's (:mod:`taskrunner._wire.results`).

Pure: no I/O; the times are given.
"""

from __future__ import annotations

from typing import Any

from taskrunner import _wire
from taskrunner._codec import unstructure_result
from taskrunner._task import Task
from taskrunner._wire import TaskMessage
from taskrunner.backends import Outcome
from taskrunner.errors import InvalidTaskResult, TaskMaxRetryExceeded, TaskRunnerError

__all__ = [
    "cancelled_document",
    "entry_time",
    "failure_document",
    "keep_of",
    "outcome",
    "success_document",
]


ERROR_CHARS = 4000
"""Longest error text a result keeps."""


def _storable(text: str) -> str:
    # An error's text may be huge, or hold lone surrogates (no UTF-8 form).
    if len(text) > ERROR_CHARS:
        text = f"{text[:ERROR_CHARS]}... ({len(text)} characters)"
    if not text.isascii():
        text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text


def keep_of(task: Task | None, message: TaskMessage) -> float | None:
    """How long to keep this message's result: its own ``keep_result``, else its task's."""
    if message.keep_result is not None:
        return message.keep_result
    return task.keep_result if task is not None else None


def entry_time(entry_id: str) -> float:
    """When a stream entry was added: its id's milliseconds, in seconds."""
    return int(entry_id.partition("-")[0]) / 1000


def outcome(
    entry_id: str,
    message: TaskMessage,
    keep: float | None,
    document: bytes | None = None,
    *,
    cancelled: bool = False,
    state: str = "",
) -> Outcome | None:
    """What the ack of ``entry_id`` records, or ``None`` when nothing (a plain ack).

    ``state`` is how the run ended (``succeeded``, ``failed``, ``cancelled``), for a
    step of a workflow, whose finish the ack counts; ``""``: the run is not final.
    """
    extras = message.extras
    task_id = extras.id if extras is not None else ""
    if not task_id and not cancelled:
        if document is None:
            return None
        if keep is not None and (not state or extras is None or extras.workflow is None):
            # A kept result of a task dispatched without an id, no workflow's step: the
            # usual outcome, with nothing else to say.
            return Outcome(
                entry_id=entry_id,
                task_id=entry_id,
                document=document,
                keep=keep,
                notify=_wire.notify_ttl(keep),
            )
    workflow = extras.workflow if extras is not None and state else None
    return Outcome(
        entry_id=entry_id,
        task_id=message.id or entry_id,
        document=document if keep is not None else None,
        keep=keep or 0.0,
        notify=_wire.notify_ttl(keep) if keep is not None else 0.0,
        indexed=bool(message.id),
        cancelled=cancelled,
        workflow=workflow,
        step=(extras.step or "") if workflow is not None and extras is not None else "",
        step_state=state if workflow is not None else "",
    )


def success_document(
    task: Task,
    value: Any,
    *,
    attempts: int,
    enqueued_at: float,
    started_at: float,
    finished_at: float,
) -> bytes:
    """The result of a run whose action returned ``value``.

    Raises:
        InvalidTaskResult: ``value`` cannot be kept as JSON.
    """
    try:
        wire_value = unstructure_result(value)
    except Exception as exc:
        raise InvalidTaskResult(task.name, value, f"{type(exc).__name__}: {exc}") from exc
    try:
        return _wire.encode_succeeded(
            task.name,
            wire_value,
            attempts=attempts,
            enqueued_at=enqueued_at,
            started_at=started_at,
            finished_at=finished_at,
        )
    except InvalidTaskResult as exc:
        # Name the value as the action returned it, not its unstructured form.
        raise InvalidTaskResult(task.name, value, exc.reason) from exc


def failure_document(
    task_name: str,
    error: TaskRunnerError,
    *,
    attempts: int,
    enqueued_at: float,
    started_at: float | None,
    finished_at: float,
) -> bytes:
    """The result of a task that went down the failure path with ``error``: its last
    attempt's exception when it had one (the action's own error), else ``error``."""
    cause: BaseException = error
    if isinstance(error, TaskMaxRetryExceeded) and error.last_error is not None:
        cause = error.last_error
    doc = _wire.failed(
        task_name,
        type(cause).__name__,
        _storable(str(cause)),
        attempts=attempts,
        enqueued_at=enqueued_at,
        started_at=started_at,
        finished_at=finished_at,
    )
    return _wire.encode_result(doc)


def cancelled_document(
    task_name: str,
    *,
    attempts: int,
    enqueued_at: float,
    started_at: float | None,
    finished_at: float,
) -> bytes:
    """The result of a run that was cancelled."""
    doc = _wire.cancelled(
        task_name,
        attempts=attempts,
        enqueued_at=enqueued_at,
        started_at=started_at,
        finished_at=finished_at,
    )
    return _wire.encode_result(doc)
