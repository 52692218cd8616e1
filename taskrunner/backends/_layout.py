"""The key layout decisions every backend shares, as pure functions of key names.

What a key *is* follows from its name alone (the documented layout,
docs/redis-key-layout.md), so the memory backend, which keeps its state under the same
names, answers the :class:`~taskrunner.backends.Inspection` protocol exactly as Redis does:

- :func:`group_keys`: the fixed keys of a group and their :class:`KeyKind`;
- :func:`kind_of`: the kind of any key a listing meets (fixed, heartbeat, unique lock);
- :func:`group_named_by`: the group a key's name contains, if any (how a group that
  never served is still found);
- :func:`keys_to_flush`: what a flush deletes of the keys a listing found.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from taskrunner import _keys, _wire
from taskrunner._keys import StreamKeys
from taskrunner.backends._protocols.inspection import KeyInfo, KeyKind

__all__ = ["group_keys", "group_named_by", "keys_to_flush", "kind_of"]


def group_keys(keys: StreamKeys, group: str) -> dict[str, KeyKind]:
    """The fixed key names of ``group`` whose stream keys are ``keys``, in layout order.

    Heartbeats and unique locks are not per group, and results and their notices
    are per task: a listing finds them by pattern (:func:`kind_of`).
    """
    return {
        keys.stream: KeyKind.STREAM,
        keys.dead_letter: KeyKind.DEAD_LETTER,
        keys.claim_delay_ring: KeyKind.CLAIM_DELAY_RING,
        _keys.delayed_tasks(group): KeyKind.DELAYED_TASKS,
        _keys.delayed_index(group): KeyKind.DELAYED_INDEX,
        _keys.entry_index(group): KeyKind.ENTRY_INDEX,
        _keys.cancelled(group): KeyKind.STOP_REQUESTS,
        _keys.leader(group): KeyKind.LEADER,
        _keys.worker_tuning_capacity(group): KeyKind.TUNING,
        _keys.desired_instances(group): KeyKind.DESIRED_INSTANCES,
        _keys.metrics(group): KeyKind.METRICS,
        _keys.catalog(group): KeyKind.CATALOG,
        _keys.schedules(group): KeyKind.SCHEDULES,
        _keys.schedule_specs(group): KeyKind.SCHEDULE_SPECS,
    }


HEARTBEAT_PREFIX = _keys.replication("")
"""``taskrunner:replication:``, the head of every heartbeat key."""
UNIQUE_LOCK_PATTERN = f"{_wire.UNIQUE_LOCK_PREFIX}*"
"""``SCAN MATCH`` pattern for every unique lock."""


def kind_of(name: str, fixed: Mapping[str, KeyKind], group: str | None = None) -> KeyKind | None:
    """The kind of key ``name``: one of ``fixed`` (:func:`group_keys`), a heartbeat, a
    unique lock, a result or result notice of ``group`` (when given), or ``None``
    (not a key of the layout)."""
    if name in fixed:
        return fixed[name]
    if name.startswith(HEARTBEAT_PREFIX):
        return KeyKind.HEARTBEAT
    if name.startswith(_wire.UNIQUE_LOCK_PREFIX):
        return KeyKind.UNIQUE_LOCK
    if group is not None:
        if name.startswith(_keys.result(group, "")):
            return KeyKind.RESULT
        if name.startswith(_keys.notify(group, "")):
            return KeyKind.RESULT_NOTICE
    return None


PER_TASK_KINDS = (KeyKind.RESULT, KeyKind.RESULT_NOTICE)
"""The kinds of key there is one of per task of a group (found by pattern)."""


def per_task_patterns(group: str) -> tuple[tuple[KeyKind, str], ...]:
    """``(kind, SCAN MATCH pattern)`` of the per-task keys of ``group``."""
    return (
        (KeyKind.RESULT, _keys.result_pattern(group)),
        (KeyKind.RESULT_NOTICE, _keys.notify_pattern(group)),
    )


NOT_GROUPS = ("unique:", "replication:", "leader:")
"""Heads of the names under ``taskrunner:`` that belong to no group (a unique lock's
key may well end in ``:metrics``)."""

_GROUP_TAILS = (
    ":metrics",
    ":delayed_tasks",
    ":worker_tuning_capacity",
    ":desired_instances",
    ":delayed_ids",
    ":entry_ids",
    ":cancelled",
    ":catalog",
    ":schedules",
    ":schedule_specs",
)
_PER_TASK_HEADS = (":result:", ":notify:")


def group_named_by(name: str, queue: str) -> str | None:
    """The group whose name ``name`` contains, if it is a key named after one.

    Those are ``taskrunner:<group>:<queue>`` (the group's stream in the default,
    stream-per-group layout), ``taskrunner:<group>:metrics``, ``:delayed_tasks``,
    ``:worker_tuning_capacity``, ``:desired_instances``, ``:catalog``, ``:schedules``,
    ``:schedule_specs``, ``:delayed_ids``, ``:entry_ids`` and ``:cancelled``, and a task's
    ``taskrunner:<group>:result:<task id>`` and ``:notify:<task id>`` (task ids
    hold no colon). The leader lease is named by a hash of the group, so it names
    none.
    """
    head = f"{_keys.PREFIX}:"
    if not name.startswith(head):
        return None
    for tail in (f":{queue}", *_GROUP_TAILS):
        if name.endswith(tail):
            group = name[len(head) : len(name) - len(tail)]
            if group and not group.startswith(NOT_GROUPS):
                return group
    for middle in _PER_TASK_HEADS:
        group, found, task_id = name[len(head) :].rpartition(middle)
        if found and group and task_id and ":" not in task_id and not group.startswith(NOT_GROUPS):
            return group
    return None


_STREAM_KINDS = frozenset({KeyKind.STREAM, KeyKind.DEAD_LETTER, KeyKind.CLAIM_DELAY_RING})


def keys_to_flush(keys: Sequence[KeyInfo], *, stream_shared: bool, heartbeats: bool) -> list[str]:
    """The names a flush of a group deletes, of the keys its listing found, in order.

    Args:
        keys: The group's listing (``Inspection.list_keys``).
        stream_shared: Other consumer groups read the group's stream: its stream,
            dead-letter stream and claim-delay ring are kept for them.
        heartbeats: Delete the heartbeat keys too.
    """
    kept = set(_STREAM_KINDS) if stream_shared else set()
    if not heartbeats:
        kept.add(KeyKind.HEARTBEAT)
    return [key.name for key in keys if key.kind not in kept]
