"""The unique lock: a message's ``unique_key`` and the lock key it names, as Go builds them
(see the package docstring)."""

from __future__ import annotations

from taskrunner import _keys

UNIQUE_LOCK_PREFIX = f"{_keys.PREFIX}:unique:"
"""Every unique lock key starts with this; the rest is the message's ``unique_key``."""


def message_unique_key(task_name: str, key: str | None) -> str:
    """The message ``unique_key`` of task ``task_name`` whose lock key is ``key`` (pure).

    ``key`` is the lock key a key function gave (``""`` when it returned ``""`` or
    ``None``, which falls back to the task name as Go's does: ``<task>:<task>``),
    or ``None`` for a task without a key function (just ``<task>``); see
    ``Task.message_unique_key``.
    """
    if key is None:
        return task_name
    return f"{task_name}:{key or task_name}"


def unique_lock(task_name: str, unique_key: str) -> str:
    """The lock key of a message: ``taskrunner:unique:`` + its ``unique_key``.

    An empty ``unique_key`` is what Go writes for a task without a key
    function, whose lock is ``taskrunner:unique:<task>``.
    """
    return UNIQUE_LOCK_PREFIX + (unique_key or task_name)
