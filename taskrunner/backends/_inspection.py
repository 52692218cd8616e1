"""What the :class:`~taskrunner.backends.Inspection` protocol reports, and the layout
decisions every backend shares.

Theory of operation: operator tools (``taskrunner.admin``, the ``stats``, ``top``,
``keys`` and ``flush`` commands, a dashboard) read the store only through the
inspection protocol, and get frozen value objects back: :class:`KeyInfo` and
:class:`KeyCounts` for a group's keys, :class:`Heartbeat` for a live instance,
:class:`Lease` for the leader lease. What a key *is* follows from its name alone
(the documented layout, docs/redis-key-layout.md), so the decisions are pure
functions of names here, and the memory backend, which keeps its state under the
same names, answers exactly as Redis does:

- :func:`group_keys`: the fixed keys of a group and their :class:`KeyKind`;
- :func:`kind_of`: the kind of any key a listing meets (fixed, heartbeat, unique lock);
- :func:`group_named_by`: the group a key's name contains, if any (how a group that
  never served is still found);
- :func:`keys_to_flush`: what a flush deletes of the keys a listing found.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Iterable, Mapping, Sequence

import attrs

from taskrunner import _keys, _wire
from taskrunner._keys import KeyLayout, StreamKeys

__all__ = [
    "Heartbeat",
    "KeyCounts",
    "KeyInfo",
    "KeyKind",
    "Lease",
    "group_keys",
    "group_named_by",
    "keys_to_flush",
    "kind_of",
]


class KeyKind(enum.StrEnum):
    """What a key is for, in the order a listing reports them (the key layout's order)."""

    STREAM = "stream"
    """The group's stream (``<prefix>:<queue>``), with its consumer groups."""
    DEAD_LETTER = "dead_letter"
    """Its dead-letter stream (``<prefix>:<queue>:dead``)."""
    CLAIM_DELAY_RING = "claim_delay_ring"
    """Its claim-delay ring (``ring:<prefix>:metrics:<queue>``)."""
    DELAYED_TASKS = "delayed_tasks"
    """The group's delayed set (``taskrunner:<group>:delayed_tasks``)."""
    DELAYED_INDEX = "delayed_index"
    """Its members by task id (``taskrunner:<group>:delayed_ids``)."""
    ENTRY_INDEX = "entry_index"
    """The stream entries of tasks moved from the delayed set (``taskrunner:<group>:entry_ids``)."""
    STOP_REQUESTS = "stop_requests"
    """Running entries asked to stop (``taskrunner:<group>:cancelled``)."""
    LEADER = "leader"
    """The group's leader lease (``taskrunner:leader:<base32(sha1(group))>``)."""
    TUNING = "tuning"
    """The published pool capacity (``taskrunner:<group>:worker_tuning_capacity``)."""
    METRICS = "metrics"
    """The timing-metrics hash (``taskrunner:<group>:metrics``)."""
    RESULT = "result"
    """A task's kept result (``taskrunner:<group>:result:<task id>``); one per task."""
    RESULT_NOTICE = "result_notice"
    """A task's result notice (``taskrunner:<group>:notify:<task id>``); one per task."""
    CATALOG = "catalog"
    """The tasks the group's serving runners serve (``taskrunner:<group>:catalog``)."""
    SCHEDULES = "schedules"
    """The periodic schedules' states (``taskrunner:<group>:schedules``)."""
    SCHEDULE_SPECS = "schedule_specs"
    """The periodic schedules' published specs (``taskrunner:<group>:schedule_specs``)."""
    HEARTBEAT = "heartbeat"
    """An instance's heartbeat (``taskrunner:replication:<host>``); not per group."""
    UNIQUE_LOCK = "unique_lock"
    """A unique job's lock (``taskrunner:unique:...``); not per group."""


PURPOSES: Mapping[KeyKind, str] = {
    KeyKind.STREAM: "main stream (+ consumer group state)",
    KeyKind.DEAD_LETTER: "dead-letter stream",
    KeyKind.CLAIM_DELAY_RING: "claim-delay ring (newest 1000, ns)",
    KeyKind.DELAYED_TASKS: "delayed tasks (score = run-at)",
    KeyKind.DELAYED_INDEX: "delayed tasks by task id",
    KeyKind.ENTRY_INDEX: "stream entries of moved delayed tasks",
    KeyKind.STOP_REQUESTS: "running tasks asked to stop",
    KeyKind.LEADER: "leader lease",
    KeyKind.TUNING: "published pool capacity",
    KeyKind.METRICS: "timing metrics",
    KeyKind.RESULT: "a task's kept result",
    KeyKind.RESULT_NOTICE: "a task's result notice (for waiters)",
    KeyKind.CATALOG: "task catalog (what serving runners serve)",
    KeyKind.SCHEDULES: "periodic schedules' states",
    KeyKind.SCHEDULE_SPECS: "periodic schedules' specs",
    KeyKind.HEARTBEAT: "instance heartbeat",
    KeyKind.UNIQUE_LOCK: "unique-job lock",
}
"""One line per kind, as ``taskrunner keys`` prints it."""

REDIS_TYPES: Mapping[KeyKind, str] = {
    KeyKind.STREAM: "stream",
    KeyKind.DEAD_LETTER: "stream",
    KeyKind.CLAIM_DELAY_RING: "list",
    KeyKind.DELAYED_TASKS: "zset",
    KeyKind.DELAYED_INDEX: "hash",
    KeyKind.ENTRY_INDEX: "hash",
    KeyKind.STOP_REQUESTS: "zset",
    KeyKind.LEADER: "string",
    KeyKind.TUNING: "string",
    KeyKind.METRICS: "hash",
    KeyKind.RESULT: "string",
    KeyKind.RESULT_NOTICE: "list",
    KeyKind.CATALOG: "hash",
    KeyKind.SCHEDULES: "hash",
    KeyKind.SCHEDULE_SPECS: "hash",
    KeyKind.HEARTBEAT: "string",
    KeyKind.UNIQUE_LOCK: "string",
}
"""The Redis type each kind of key has (what ``TYPE`` answers when nobody misused it)."""

_ORDER = {kind: index for index, kind in enumerate(KeyKind)}


@attrs.frozen(kw_only=True)
class KeyInfo:
    """One key as found on the store."""

    name: str
    kind: KeyKind
    type: str
    """``stream``, ``zset``, ``string``, ``hash`` or ``list`` (Redis's ``TYPE``)."""
    size: int
    """Entries (stream, zset, hash, list) or bytes (string)."""
    ttl: float | None
    """Seconds left, or ``None`` when the key does not expire."""

    @property
    def purpose(self) -> str:
        """What the key is for, from the key layout."""
        return PURPOSES[self.kind]

    @property
    def order(self) -> tuple[int, str]:
        """Where the key goes in a listing: by kind, then by name."""
        return _ORDER[self.kind], self.name


@attrs.frozen(kw_only=True)
class KeyCounts:
    """How many keys of each kind a group has on the store (see :class:`KeyKind`).

    ``heartbeat`` and ``unique_lock`` count every group's in the go layout (those keys
    are not per group there), the group's own in the cluster layout; ``result`` and ``result_notice`` are one per task of the group; every
    other count is 0 or 1.
    """

    stream: int = 0
    dead_letter: int = 0
    claim_delay_ring: int = 0
    delayed_tasks: int = 0
    delayed_index: int = 0
    entry_index: int = 0
    stop_requests: int = 0
    leader: int = 0
    tuning: int = 0
    metrics: int = 0
    result: int = 0
    result_notice: int = 0
    catalog: int = 0
    schedules: int = 0
    schedule_specs: int = 0
    heartbeat: int = 0
    unique_lock: int = 0

    @classmethod
    def of(cls, kinds: Iterable[KeyKind]) -> KeyCounts:
        """The counts of the kinds of some keys (``KeyCounts.of(k.kind for k in listing)``)."""
        counts = dict.fromkeys(KeyKind, 0)
        for kind in kinds:
            counts[kind] += 1
        return cls(**{kind.value: n for kind, n in counts.items()})

    def __getitem__(self, kind: KeyKind) -> int:
        count: int = getattr(self, kind.value)
        return count

    @property
    def total(self) -> int:
        return sum(self[kind] for kind in KeyKind)


@attrs.frozen(kw_only=True)
class Heartbeat:
    """One live instance, from its heartbeat key."""

    host: str
    """The instance's ``host`` (its key is ``taskrunner:replication:<host>``)."""
    instance_id: str
    """The id of the instance that holds the key."""
    ttl: float | None
    """Seconds until the key expires unless renewed (``None``: it never does, set by hand)."""


@attrs.frozen(kw_only=True)
class Lease:
    """A group's leader lease, as held now."""

    owner: str
    """The leader's instance id."""
    ttl: float | None
    """Seconds until it expires unless renewed (``None``: it never does, set by hand)."""


def group_keys(keys: StreamKeys, group: str, layout: KeyLayout = "go") -> dict[str, KeyKind]:
    """The fixed key names of ``group`` whose stream keys are ``keys``, in layout order.

    Heartbeats and unique locks (every group's in the go layout, the group's own in
    the cluster layout) and results and their notices (per task): a listing finds
    them by pattern (:func:`kind_of`, :func:`scanned_patterns`).
    """
    return {
        keys.stream: KeyKind.STREAM,
        keys.dead_letter: KeyKind.DEAD_LETTER,
        keys.claim_delay_ring: KeyKind.CLAIM_DELAY_RING,
        _keys.delayed_tasks(group, layout): KeyKind.DELAYED_TASKS,
        _keys.delayed_index(group, layout): KeyKind.DELAYED_INDEX,
        _keys.entry_index(group, layout): KeyKind.ENTRY_INDEX,
        _keys.cancelled(group, layout): KeyKind.STOP_REQUESTS,
        _keys.leader(group, layout): KeyKind.LEADER,
        _keys.worker_tuning_capacity(group, layout): KeyKind.TUNING,
        _keys.metrics(group, layout): KeyKind.METRICS,
        _keys.catalog(group, layout): KeyKind.CATALOG,
        _keys.schedules(group, layout): KeyKind.SCHEDULES,
        _keys.schedule_specs(group, layout): KeyKind.SCHEDULE_SPECS,
    }


HEARTBEAT_PREFIX = _keys.replication("", "go")
"""``taskrunner:replication:``, the head of every heartbeat key of the go layout."""
UNIQUE_LOCK_PATTERN = f"{_wire.UNIQUE_LOCK_PREFIX}*"
"""``SCAN MATCH`` pattern for every unique lock of the go layout."""


def kind_of(
    name: str, fixed: Mapping[str, KeyKind], layout: KeyLayout = "go", group: str | None = None
) -> KeyKind | None:
    """The kind of key ``name``: one of ``fixed`` (:func:`group_keys`), a heartbeat, a
    unique lock, a result or result notice of ``group`` (when given; in the cluster
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
    elif layout == "go" and name.startswith(_wire.UNIQUE_LOCK_PREFIX):
        return KeyKind.UNIQUE_LOCK
    return None


PER_TASK_KINDS = (KeyKind.RESULT, KeyKind.RESULT_NOTICE)
"""The kinds of key there is one of per task of a group (found by pattern)."""


def per_task_patterns(group: str, layout: KeyLayout) -> tuple[tuple[KeyKind, str], ...]:
    """``(kind, SCAN MATCH pattern)`` of the per-task keys of ``group``."""
    return (
        (KeyKind.RESULT, _keys.result_pattern(group, layout)),
        (KeyKind.RESULT_NOTICE, _keys.notify_pattern(group, layout)),
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
    ":delayed_ids",
    ":entry_ids",
    ":cancelled",
    ":catalog",
    ":schedules",
    ":schedule_specs",
)
_PER_TASK_HEADS = (":result:", ":notify:")
_TAGGED = re.compile(rf"{_keys.PREFIX}:\{{([^{{}}]+)\}}:.*", re.DOTALL)


def group_named_by(name: str, queue: str, layout: KeyLayout = "go") -> str | None:
    """The group whose name ``name`` contains, if it is a key named after one.

    Cluster layout: every ``taskrunner:{<group>}:...`` key names its group. Go
    layout: those are ``taskrunner:<group>:<queue>`` (the group's stream in the
    default, stream-per-group layout), ``taskrunner:<group>:metrics``,
    ``:delayed_tasks``, ``:worker_tuning_capacity``, ``:catalog``, ``:schedules``,
    ``:schedule_specs``, ``:delayed_ids``, ``:entry_ids`` and ``:cancelled``, and a
    task's ``taskrunner:<group>:result:<task id>`` and ``:notify:<task id>`` (task
    ids hold no colon). The go leader lease is named by a hash of the group, so it
    names none.
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
