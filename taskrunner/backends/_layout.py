"""The key layout decisions every backend shares, as pure functions of key names.

What a key *is* follows from its name alone (the documented layout,
docs/redis-key-layout.md), so the memory backend, which keeps its state under the same
names, answers the :class:`~taskrunner.backends.Inspection` protocol exactly as Redis does:

- :func:`group_keys`: the fixed keys of a group and their :class:`KeyKind`;
- :func:`kind_of`: the kind of any key a listing meets (fixed, heartbeat, unique lock);
- :func:`group_named_by`: the group a key's name contains, if any (how a group that
  never served is still found);
- :func:`group_key_kind`: the kind of any key a walk of the store meets, as a key of
  a group (its results, flow-control keys, every queue's stream, dead letters, ring);
- :func:`queue_key` and :func:`queues_in`: which queue a stream, dead-letter stream or
  ring belongs to, and the queues a listing shows;
- :func:`keys_to_flush`: what a flush deletes of the keys a listing found.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence

from taskrunner import _keys, _wire
from taskrunner._keys import StreamKeys
from taskrunner.backends._protocols.inspection import KeyInfo, KeyKind

__all__ = [
    "group_key_kind",
    "group_keys",
    "group_named_by",
    "keys_to_flush",
    "kind_of",
    "queue_key",
    "queues_in",
]


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
        _keys.paused(group): KeyKind.PAUSED,
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
    ":paused",
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


FLOW_KINDS = (
    ("rate_pace:", KeyKind.RATE_PACE),
    ("rate:", KeyKind.RATE),
    ("concurrency:", KeyKind.CONCURRENCY),
    ("parked:", KeyKind.PARKED),
)
"""The heads of a group's per-task flow-control keys after ``taskrunner:<group>:``,
``rate_pace:`` before ``rate:`` (whose head it is not, but which is tried in order)."""


def group_head(group: str) -> str:
    """``taskrunner:<group>:``, the head of every key named after ``group``."""
    return f"{_keys.PREFIX}:{group}:"


def stream_head(keys: StreamKeys) -> str:
    """The head every queue's stream of the group shares (``taskrunner:<group>:`` in
    the stream-per-group layout, ``<prefix>:`` with an explicit prefix)."""
    return keys.stream[: len(keys.stream) - len(keys.queue)]


def ring_head(keys: StreamKeys) -> str:
    """The head every queue's claim-delay ring shares (``ring:<prefix>:metrics:``)."""
    return keys.claim_delay_ring[: len(keys.claim_delay_ring) - len(keys.queue)]


def _queue_named(text: str) -> str | None:
    """``text`` if it can be the queue of a key of the layout, else ``None``: a
    non-empty name without spaces or ``:`` (``TaskRunnerConfig``'s rule, which sits in
    a layer above the backends), not one of the group's own key names."""
    if not text or ":" in text or any(c.isspace() for c in text):
        return None
    if text in _keys._GROUP_KEY_NAMES or text.startswith(_keys._GROUP_KEY_HEADS):
        return None
    return text


def queue_key(name: str, keys: StreamKeys) -> tuple[KeyKind, str] | None:
    """``(kind, queue)`` when ``name`` is the stream, dead-letter stream or claim-delay
    ring of one of the group's queues (given its own queue's ``keys``), else ``None``
    (pure). A name of a stream kind counts only if it holds a stream (the caller
    checks the type: ``<prefix>:<word>`` may be another key)."""
    ring = ring_head(keys)
    if name.startswith(ring):
        queue = _queue_named(name[len(ring) :])
        return None if queue is None else (KeyKind.CLAIM_DELAY_RING, queue)
    head = stream_head(keys)
    if not name.startswith(head):
        return None
    rest = name[len(head) :]
    dead = rest.endswith(":dead")
    queue = _queue_named(rest[: -len(":dead")] if dead else rest)
    if queue is None:
        return None
    return (KeyKind.DEAD_LETTER if dead else KeyKind.STREAM), queue


def group_key_kind(name: str, group: str, keys: StreamKeys) -> KeyKind | None:
    """The kind of any key ``name`` a walk of the store meets, as a key of ``group``
    (whose own queue's stream keys are ``keys``), or ``None`` when it is none of the
    group's (pure): a fixed key, a heartbeat or unique lock (every group's), a
    task's result or notice, a task's flow-control key, or a queue's stream,
    dead-letter stream or ring."""
    kind = kind_of(name, group_keys(keys, group), group)
    if kind is not None:
        return kind
    head = group_head(group)
    if name.startswith(head):
        rest = name[len(head) :]
        for flow_head, flow_kind in FLOW_KINDS:
            if rest.startswith(flow_head) and len(rest) > len(flow_head):
                return flow_kind
    found = queue_key(name, keys)
    return None if found is None else found[0]


def queues_in(names: Iterable[str], own: StreamKeys) -> list[str]:
    """The queues whose stream, dead-letter stream or ring is among ``names`` (keys of
    the group whose own queue's keys are ``own``), the group's own first, then by
    name (pure)."""
    found = {own.queue}
    for name in names:
        hit = queue_key(name, own)
        if hit is not None:
            found.add(hit[1])
    return [own.queue, *sorted(found - {own.queue})]


_STREAM_KINDS = frozenset({KeyKind.STREAM, KeyKind.DEAD_LETTER, KeyKind.CLAIM_DELAY_RING})


def keys_to_flush(
    keys: Sequence[KeyInfo],
    *,
    stream_shared: bool = False,
    heartbeats: bool,
    shared_names: Collection[str] = (),
) -> list[str]:
    """The names a flush of a group deletes, of the keys its listing found, in order.

    Args:
        keys: The group's listing (``Inspection.list_keys``).
        stream_shared: Other consumer groups read every one of the group's streams:
            every stream, dead-letter stream and claim-delay ring is kept for them.
        heartbeats: Delete the heartbeat keys too.
        shared_names: The streams, dead-letter streams and rings of the queues other
            consumer groups read too: kept for them.
    """
    kept = set(_STREAM_KINDS) if stream_shared else set()
    if not heartbeats:
        kept.add(KeyKind.HEARTBEAT)
    return [key.name for key in keys if key.kind not in kept and key.name not in shared_names]
