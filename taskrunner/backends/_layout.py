"""The key layout decisions every backend shares, as pure functions of key names.

What a key *is* follows from its name alone (the documented layout,
docs/redis-key-layout.md), so the memory backend, which keeps its state under the same
names, answers the :class:`~taskrunner.backends.Inspection` protocol exactly as Redis does:

- :func:`group_keys`: the fixed keys of a group and their :class:`KeyKind`;
- :func:`kind_of`: the kind of any key a listing meets (fixed, heartbeat, unique lock),
  in either key layout (:mod:`taskrunner._keys`);
- :func:`scanned_patterns`: the ``SCAN MATCH`` patterns of the keys found by pattern;
- :func:`group_named_by`: the group a key's name contains, if any (how a group that
  never served is still found);
- :func:`group_key_kind`: the kind of any key a walk of the store meets, as a key of
  a group (its results, flow-control keys, every queue's stream, dead letters, ring);
- :func:`queue_key` and :func:`queues_in`: which queue a stream, dead-letter stream or
  ring belongs to, and the queues a listing shows;
- :func:`keys_to_flush`: what a flush deletes of the keys a listing found.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable, Mapping, Sequence

from taskrunner import _keys, _shards, _wire
from taskrunner._keys import KeyLayout, StreamKeys
from taskrunner._workflows.keys import workflow_ends_key, workflow_key
from taskrunner.backends._protocols.inspection import KeyInfo, KeyKind

__all__ = [
    "group_key_kind",
    "group_keys",
    "group_named_by",
    "keys_to_flush",
    "kind_of",
    "queue_key",
    "queues_in",
    "scanned_patterns",
]


def group_keys(keys: StreamKeys, group: str, layout: KeyLayout = "go") -> dict[str, KeyKind]:
    """The fixed key names of ``group`` whose stream keys are ``keys``, in layout order.

    Heartbeats and unique locks (every group's in the go layout, the group's own in
    the cluster layout) and results and their notices (per task): a listing finds
    them by pattern (:func:`kind_of`, :func:`scanned_patterns`).
    """
    fixed = {
        keys.stream: KeyKind.STREAM,
        keys.dead_letter: KeyKind.DEAD_LETTER,
        keys.claim_delay_ring: KeyKind.CLAIM_DELAY_RING,
        _keys.delayed_tasks(group, layout): KeyKind.DELAYED_TASKS,
        _keys.delayed_index(group, layout): KeyKind.DELAYED_INDEX,
        _keys.entry_index(group, layout): KeyKind.ENTRY_INDEX,
        _keys.cancelled(group, layout): KeyKind.STOP_REQUESTS,
        _keys.leader(group, layout): KeyKind.LEADER,
        _keys.worker_tuning_capacity(group, layout): KeyKind.TUNING,
        _keys.desired_instances(group, layout): KeyKind.DESIRED_INSTANCES,
        _keys.metrics(group, layout): KeyKind.METRICS,
        _keys.result_waiters(group, layout): KeyKind.RESULT_WAITERS,
        _keys.events(group, layout): KeyKind.EVENTS,
        workflow_ends_key(group, layout): KeyKind.WORKFLOW_ENDS,
        _keys.catalog(group, layout): KeyKind.CATALOG,
        _keys.schedules(group, layout): KeyKind.SCHEDULES,
        _keys.schedule_specs(group, layout): KeyKind.SCHEDULE_SPECS,
        _keys.paused(group, layout): KeyKind.PAUSED,
    }
    if layout == "cluster":  # a go-layout group is never sharded
        fixed[_shards.shard_count_key(group)] = KeyKind.SHARD_COUNT
    return fixed


HEARTBEAT_PREFIX = _keys.replication("", "go")
"""``taskrunner:replication:``, the head of every heartbeat key of the go layout."""
UNIQUE_LOCK_PATTERN = f"{_wire.UNIQUE_LOCK_PREFIX}*"
"""``SCAN MATCH`` pattern for every unique lock of the go layout."""


def kind_of(
    name: str, fixed: Mapping[str, KeyKind], layout: KeyLayout = "go", group: str | None = None
) -> KeyKind | None:
    """The kind of key ``name``: one of ``fixed`` (:func:`group_keys`), a heartbeat, a
    unique lock, a result, result notice, progress hash or workflow record of ``group``
    (when given; in the cluster
    layout heartbeats and locks are ``group``'s too), or ``None`` (not a key of the
    layout)."""
    if name in fixed:
        return fixed[name]
    if _keys.heartbeat_host(name, layout, group) is not None:
        return KeyKind.HEARTBEAT
    if group is not None:
        if name.startswith(_keys.unique_prefix(group, layout)):
            return KeyKind.UNIQUE_LOCK
        if name.startswith(_keys.result(group, "", layout)):
            return KeyKind.RESULT
        if name.startswith(_keys.notify(group, "", layout)):
            return KeyKind.RESULT_NOTICE
        if name.startswith(_keys.progress(group, "", layout)):
            return KeyKind.PROGRESS
        if name.startswith(workflow_key(group, "", layout)):
            return KeyKind.WORKFLOW
    elif layout == "go" and name.startswith(_wire.UNIQUE_LOCK_PREFIX):
        return KeyKind.UNIQUE_LOCK
    return None


PER_TASK_KINDS = (KeyKind.RESULT, KeyKind.RESULT_NOTICE, KeyKind.PROGRESS, KeyKind.WORKFLOW)
"""The kinds of key there is one of per task (or workflow) of a group (found by pattern)."""


def per_task_patterns(group: str, layout: KeyLayout) -> tuple[tuple[KeyKind, str], ...]:
    """``(kind, SCAN MATCH pattern)`` of the per-task keys of ``group``."""
    return (
        (KeyKind.RESULT, _keys.result_pattern(group, layout)),
        (KeyKind.RESULT_NOTICE, _keys.notify_pattern(group, layout)),
        (KeyKind.PROGRESS, f"{_keys.glob_escape(_keys.progress(group, '', layout))}*"),
        (KeyKind.WORKFLOW, f"{_keys.glob_escape(workflow_key(group, '', layout))}*"),
    )


def scanned_patterns(group: str, layout: KeyLayout) -> tuple[tuple[KeyKind, str], ...]:
    """``(kind, SCAN MATCH pattern)`` of every key of ``group``'s listing found by
    pattern: heartbeats and unique locks (every group's in the go layout), then
    the per-task keys."""
    return (
        (KeyKind.HEARTBEAT, _keys.replication_pattern(layout, group)),
        (KeyKind.UNIQUE_LOCK, _keys.unique_pattern(group, layout)),
        *per_task_patterns(group, layout),
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
    ":result_waiters",
    ":catalog",
    ":schedules",
    ":schedule_specs",
    ":paused",
    ":events",
    ":workflow_ends",
)
_PER_TASK_HEADS = (":result:", ":notify:", ":progress:", ":workflow:")
_TAGGED = re.compile(rf"{_keys.PREFIX}:\{{([^{{}}]+)\}}:.*", re.DOTALL)


def group_named_by(name: str, queue: str, layout: KeyLayout = "go") -> str | None:
    """The group whose name ``name`` contains, if it is a key named after one.

    Cluster layout: every ``taskrunner:{<group>}:...`` key names its group. Go
    layout: those are ``taskrunner:<group>:<queue>`` (the group's stream in the
    default, stream-per-group layout), ``taskrunner:<group>:metrics``,
    ``:delayed_tasks``, ``:worker_tuning_capacity``, ``:desired_instances``,
    ``:catalog``, ``:schedules``, ``:schedule_specs``, ``:delayed_ids``,
    ``:entry_ids``, ``:cancelled``, ``:result_waiters``, ``:paused``, ``:events`` and
    ``:workflow_ends``, a task's ``taskrunner:<group>:result:<task id>``, ``:notify:<task id>`` and
    ``:progress:<task id>``, and a workflow's ``:workflow:<workflow id>`` (task and
    workflow ids hold no colon). The go leader lease is named by a hash of the group, so it names
    none.
    """
    if layout == "cluster":
        match = _TAGGED.fullmatch(name)
        return None if match is None else match.group(1)
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
        # ``taskrunner:unique:<task>:<key>`` of a task named ``progress`` is a lock, not
        # group ``unique``'s progress: a head of NOT_GROUPS rules out the group too.
        if found and group and task_id and ":" not in task_id:
            if not f"{group}:".startswith(NOT_GROUPS):
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


def group_head(group: str, layout: KeyLayout = "go") -> str:
    """``taskrunner:<group>:`` (``taskrunner:{<group>}:`` in the cluster layout), the
    head of every key named after ``group``."""
    return f"{_keys.group_root(group, layout)}:"


def stream_head(keys: StreamKeys) -> str:
    """The head every queue's stream of the group shares (``taskrunner:<group>:`` in
    the stream-per-group layout, ``<prefix>:`` with an explicit prefix)."""
    return keys.stream[: len(keys.stream) - len(keys.queue)]


def ring_head(keys: StreamKeys) -> str:
    """The head every queue's claim-delay ring shares (``ring:<prefix>:metrics:``)."""
    return keys.claim_delay_ring[: len(keys.claim_delay_ring) - len(keys.queue)]


def _queue_named(text: str, layout: KeyLayout = "go") -> str | None:
    """``text`` if it can be the queue of a key of the layout, else ``None``: a
    non-empty name without spaces or ``:`` (``TaskRunnerConfig``'s rule, which sits in
    a layer above the backends), not one of the group's own key names."""
    if not text or ":" in text or any(c.isspace() for c in text):
        return None
    if text in _keys._GROUP_KEY_NAMES or text.startswith(_keys._GROUP_KEY_HEADS):
        return None
    if layout == "cluster" and text in _keys._CLUSTER_KEY_NAMES:  # the lease, shard count
        return None
    return text


def queue_key(name: str, keys: StreamKeys, layout: KeyLayout = "go") -> tuple[KeyKind, str] | None:
    """``(kind, queue)`` when ``name`` is the stream, dead-letter stream or claim-delay
    ring of one of the group's queues (given its own queue's ``keys``), else ``None``
    (pure). A name of a stream kind counts only if it holds a stream (the caller
    checks the type: ``<prefix>:<word>`` may be another key)."""
    ring = ring_head(keys)
    if name.startswith(ring):
        queue = _queue_named(name[len(ring) :], layout)
        return None if queue is None else (KeyKind.CLAIM_DELAY_RING, queue)
    head = stream_head(keys)
    if not name.startswith(head):
        return None
    rest = name[len(head) :]
    dead = rest.endswith(":dead")
    queue = _queue_named(rest[: -len(":dead")] if dead else rest, layout)
    if queue is None:
        return None
    return (KeyKind.DEAD_LETTER if dead else KeyKind.STREAM), queue


def group_key_kind(
    name: str, group: str, keys: StreamKeys, layout: KeyLayout = "go"
) -> KeyKind | None:
    """The kind of any key ``name`` a walk of the store meets, as a key of ``group``
    (whose own queue's stream keys are ``keys``), or ``None`` when it is none of the
    group's (pure): a fixed key, a heartbeat or unique lock (every group's in the go
    layout), a task's result or notice, a task's flow-control key, or a queue's
    stream, dead-letter stream or ring."""
    kind = kind_of(name, group_keys(keys, group, layout), layout, group)
    if kind is not None:
        return kind
    head = group_head(group, layout)
    if name.startswith(head):
        rest = name[len(head) :]
        for flow_head, flow_kind in FLOW_KINDS:
            if rest.startswith(flow_head) and len(rest) > len(flow_head):
                return flow_kind
    found = queue_key(name, keys, layout)
    return None if found is None else found[0]


def queues_in(names: Iterable[str], own: StreamKeys, layout: KeyLayout = "go") -> list[str]:
    """The queues whose stream, dead-letter stream or ring is among ``names`` (keys of
    the group whose own queue's keys are ``own``), the group's own first, then by
    name (pure)."""
    found = {own.queue}
    for name in names:
        hit = queue_key(name, own, layout)
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
