"""The unique lock: a message's ``unique_key`` and the lock key it names, as Go builds them
(see the package docstring)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from taskrunner import _keys

if TYPE_CHECKING:
    from taskrunner._task import Task

UNIQUE_LOCK_PREFIX = f"{_keys.PREFIX}:unique:"
"""Every unique lock key starts with this; the rest is the message's ``unique_key``."""


def unique_key_for(task: Task, payload: Any) -> str:
    """The message ``unique_key`` of a unique ``task`` for ``payload``, as Go writes it.

    ``<task>:<key>`` with ``key`` what the task's key function returns for
    ``payload`` (what ``dispatch`` was given; a Go member's payload structured
    as the action receives it), the task name when it returns ``""`` or
    ``None``; just ``<task>`` when the task has no key function.

    Raises:
        InvalidTaskPayload: the key function raised or returned a non-string.
    """
    if task.unique_key is None:
        return task.name
    return f"{task.name}:{task.lock_key_for(payload) or task.name}"


def unique_lock(task_name: str, unique_key: str) -> str:
    """The lock key of a message: ``taskrunner:unique:`` + its ``unique_key``.

    An empty ``unique_key`` is what Go writes for a task without a key
    function, whose lock is ``taskrunner:unique:<task>``.
    """
    return UNIQUE_LOCK_PREFIX + (unique_key or task_name)
