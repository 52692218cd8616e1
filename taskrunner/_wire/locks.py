"""The unique lock: a message's ``unique_key`` and the lock key it names, as Go builds them
(see the package docstring)."""

from __future__ import annotations

from taskrunner import _keys

UNIQUE_LOCK_PREFIX = _keys.unique_prefix("", "go")
"""Every unique lock key of the go layout starts with this; the rest is the message's
``unique_key``. In the cluster layout the head is the group's,
``taskrunner:{<group>}:unique:`` (:func:`taskrunner._keys.unique_prefix`)."""


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


def unique_lock(task_name: str, unique_key: str, prefix: str = UNIQUE_LOCK_PREFIX) -> str:
    """The lock key of a message: ``prefix`` (:func:`taskrunner._keys.unique_prefix`,
    ``taskrunner:unique:`` in the go layout) + its ``unique_key``.

    An empty ``unique_key`` is what Go writes for a task without a key
    function, whose lock is ``taskrunner:unique:<task>``.
    """
    return prefix + (unique_key or task_name)
