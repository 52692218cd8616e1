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
from collections.abc import Collection, Iterable, Mapping, Sequence

import attrs

from taskrunner import _keys, _wire
from taskrunner._config import queue_name_problem
from taskrunner._keys import StreamKeys

__all__ = [
    "Heartbeat",
    "KeyCounts",
    "KeyInfo",
    "KeyKind",
    "Lease",
    "group_key_kind",
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
    PAUSED = "paused"
    """The group's paused queues and tasks (``taskrunner:<group>:paused``)."""
    CONCURRENCY = "concurrency"
    """A task's leased concurrency slots (``taskrunner:<group>:concurrency:<task>``)."""
    RATE = "rate"
    """A task's rate-limit log (``taskrunner:<group>:rate:<task>[:<key>]``)."""
    RATE_PACE = "rate_pace"
    """When a rate-limited task's next refused run comes back
    (``taskrunner:<group>:rate_pace:<task>[:<key>]``)."""
    PARKED = "parked"
    """A paused task's parked delayed members (``taskrunner:<group>:parked:<task>``)."""
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
    KeyKind.PAUSED: "paused queues and tasks",
    KeyKind.CONCURRENCY: "a task's concurrency slots",
    KeyKind.RATE: "a task's rate-limit log",
    KeyKind.RATE_PACE: "a rate-limited task's next start",
    KeyKind.PARKED: "a paused task's parked runs",
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
    KeyKind.PAUSED: "set",
    KeyKind.CONCURRENCY: "zset",
    KeyKind.RATE: "zset",
    KeyKind.RATE_PACE: "string",
    KeyKind.PARKED: "set",
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

    ``heartbeat`` and ``unique_lock`` count every group's (those keys are not per
    group); ``result`` and ``result_notice`` are one per task of the group;
    ``stream``, ``dead_letter`` and ``claim_delay_ring`` one per queue;
    ``concurrency``, ``rate``, ``rate_pace`` and ``parked`` one per task (and rate
    key) that uses them; every other count is 0 or 1.
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
    paused: int = 0
    concurrency: int = 0
    rate: int = 0
    rate_pace: int = 0
    parked: int = 0
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
    ``:worker_tuning_capacity``, ``:catalog``, ``:schedules``, ``:schedule_specs``,
    ``:delayed_ids``, ``:entry_ids`` and ``:cancelled``, and a task's
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
    """``text`` if it can be the queue of a key of the layout, else ``None``."""
    if queue_name_problem(text) is not None:
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
