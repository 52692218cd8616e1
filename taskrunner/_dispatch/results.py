"""What a kept result gives whoever waits for it: the value, or the error it records.

One rule for every waiter: :meth:`TaskHandle.result <taskrunner.TaskHandle.result>`
(trio) and the producers' handles (``taskrunner.producer``: sync and asyncio),
so a task's outcome reads the same from a runner, a script or a web app.
Pure: no I/O.
"""

from __future__ import annotations

from typing import Any

from taskrunner import _wire
from taskrunner._codec import structure_result
from taskrunner._wire import TaskState
from taskrunner.errors import TaskCancelled, TaskFailed

__all__ = ["outcome_of"]


def outcome_of(task_id: str, raw: bytes, result_type: type[Any] | None) -> Any:
    """The value the kept result document ``raw`` of task ``task_id`` gives its waiter.

    Args:
        task_id: The task.
        raw: Its result document (``taskrunner:<group>:result:<task id>``).
        result_type: Structure the value into this attrs class or dataclass
            (cattrs); ``None`` returns its JSON form.

    Raises:
        TaskFailed: the document records a failure.
        TaskCancelled: it records a cancellation.
        InvalidTaskPayload: the document cannot be read, or its value does not
            fit ``result_type``.
    """
    doc = _wire.decode_result(raw)
    if doc.state is TaskState.FAILED:
        raise TaskFailed(task_id, doc.task, doc.error_type, doc.error)
    if doc.state is TaskState.CANCELLED:
        raise TaskCancelled(task_id, doc.task)
    if result_type is None:
        return doc.value
    return structure_result(doc.value, result_type)
