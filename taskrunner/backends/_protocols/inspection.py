"""What the :class:`Inspection` protocol reports: operator reads and operations over the whole
store, and the frozen values they return.

Operator tools (``taskrunner.admin``, the ``stats``, ``top``, ``keys`` and ``flush``
commands, a dashboard) read the store only through this protocol, and get frozen value
objects back: :class:`KeyInfo` and :class:`KeyCounts` for a group's keys,
:class:`Heartbeat` for a live instance, :class:`Lease` for the leader lease. The layout
decisions behind them are pure functions of key names, in :mod:`taskrunner.backends._layout`.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from typing import Protocol, runtime_checkable

import attrs

__all__ = [
    "Heartbeat",
    "Inspection",
    "KeyCounts",
    "KeyInfo",
    "KeyKind",
    "Lease",
    "MessageCounts",
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
    DESIRED_INSTANCES = "desired_instances"
    """The instance count asked of an autoscaler (``taskrunner:<group>:desired_instances``)."""
    METRICS = "metrics"
    """The timing-metrics hash (``taskrunner:<group>:metrics``)."""
    RESULT = "result"
    """A task's kept result (``taskrunner:<group>:result:<task id>``); one per task."""
    RESULT_NOTICE = "result_notice"
    """A task's result notice (``taskrunner:<group>:notify:<task id>``); one per task
    someone waits for."""
    RESULT_WAITERS = "result_waiters"
    """The tasks someone waits for the result of (``taskrunner:<group>:result_waiters``)."""
    PROGRESS = "progress"
    """A running task's last reported progress (``taskrunner:<group>:progress:<task id>``,
    ``ctx.progress``); one per task that reported, for
    :data:`~taskrunner.backends._protocols.events.PROGRESS_TTL` seconds."""
    EVENTS = "events"
    """The group's capped event stream (``taskrunner:<group>:events``,
    ``TaskRunnerConfig(events=True)``)."""
    WORKFLOW = "workflow"
    """A workflow's record (``taskrunner:<group>:workflow:<workflow id>``); one per
    workflow, kept ``keep`` seconds once it is over."""
    WORKFLOW_ENDS = "workflow_ends"
    """How many of the group's workflows ended, by outcome
    (``taskrunner:<group>:workflow_ends``)."""
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
    SHARD_COUNT = "shard_count"
    """A sharded group's recorded shard count (``taskrunner:{<group>}:shards``, cluster
    layout only; absent for one shard)."""
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
    KeyKind.DESIRED_INSTANCES: "instances the fleet needs (for an autoscaler)",
    KeyKind.METRICS: "timing metrics",
    KeyKind.RESULT: "a task's kept result",
    KeyKind.RESULT_NOTICE: "a task's result notice (for waiters)",
    KeyKind.RESULT_WAITERS: "tasks whose results are waited for",
    KeyKind.PROGRESS: "a running task's last progress",
    KeyKind.EVENTS: "event stream (capped)",
    KeyKind.WORKFLOW: "a workflow's record",
    KeyKind.WORKFLOW_ENDS: "workflows ended, by outcome",
    KeyKind.CATALOG: "task catalog (what serving runners serve)",
    KeyKind.SCHEDULES: "periodic schedules' states",
    KeyKind.SCHEDULE_SPECS: "periodic schedules' specs",
    KeyKind.PAUSED: "paused queues and tasks",
    KeyKind.CONCURRENCY: "a task's concurrency slots",
    KeyKind.RATE: "a task's rate-limit log",
    KeyKind.RATE_PACE: "a rate-limited task's next start",
    KeyKind.PARKED: "a paused task's parked runs",
    KeyKind.SHARD_COUNT: "the group's shard count",
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
    KeyKind.DESIRED_INSTANCES: "string",
    KeyKind.METRICS: "hash",
    KeyKind.RESULT: "string",
    KeyKind.RESULT_NOTICE: "list",
    KeyKind.RESULT_WAITERS: "zset",
    KeyKind.PROGRESS: "hash",
    KeyKind.EVENTS: "stream",
    KeyKind.WORKFLOW: "hash",
    KeyKind.WORKFLOW_ENDS: "hash",
    KeyKind.CATALOG: "hash",
    KeyKind.SCHEDULES: "hash",
    KeyKind.SCHEDULE_SPECS: "hash",
    KeyKind.PAUSED: "set",
    KeyKind.CONCURRENCY: "zset",
    KeyKind.RATE: "zset",
    KeyKind.RATE_PACE: "string",
    KeyKind.PARKED: "set",
    KeyKind.SHARD_COUNT: "string",
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
class MessageCounts:
    """How many messages a group (or one shard of a sharded group) holds, by where they
    wait: :meth:`Inspection.count_messages`."""

    queued: int = 0
    """Entries in its queues' streams (``XLEN``: delivered and unacknowledged ones too,
    and acknowledged ones a backend keeps)."""
    delayed: int = 0
    """Members of its delayed set (retries and tasks dispatched for later)."""
    dead: int = 0
    """Entries in its queues' dead-letter streams."""

    def __add__(self, other: MessageCounts) -> MessageCounts:
        return MessageCounts(
            queued=self.queued + other.queued,
            delayed=self.delayed + other.delayed,
            dead=self.dead + other.dead,
        )


@attrs.frozen(kw_only=True)
class KeyCounts:
    """How many keys of each kind a group has on the store (see :class:`KeyKind`).

    ``heartbeat`` and ``unique_lock`` count every group's in the go layout (those keys
    are not per group there), the group's own in the cluster layout; ``result`` and
    ``result_notice`` are one per task of the group, ``progress`` one per task that
    reported progress lately, ``workflow`` one per workflow; ``stream``, ``dead_letter`` and
    ``claim_delay_ring`` one per queue; ``concurrency``, ``rate``, ``rate_pace`` and
    ``parked`` one per task (and rate key) that uses them; every other count is 0 or 1.
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
    desired_instances: int = 0
    metrics: int = 0
    result: int = 0
    result_notice: int = 0
    result_waiters: int = 0
    progress: int = 0
    events: int = 0
    workflow: int = 0
    workflow_ends: int = 0
    catalog: int = 0
    schedules: int = 0
    schedule_specs: int = 0
    paused: int = 0
    concurrency: int = 0
    rate: int = 0
    rate_pace: int = 0
    parked: int = 0
    shard_count: int = 0
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


@runtime_checkable
class Inspection(Protocol):
    """Operator reads and operations over the whole store, for tools, not for serving.

    ``taskrunner.admin`` and the operator commands use only this (never a
    client of the store), so they work on any backend that implements it;
    a backend that does not still serves tasks. The values returned are
    frozen snapshots (:mod:`taskrunner.backends._protocols.inspection`).

    Cost: the listings walk the store's key space. On Redis that is ``SCAN``
    (never ``KEYS``, so the server is never blocked), in pages, and then one
    pipelined round trip for the keys found, whatever their number: cheap
    enough for a refresh every few seconds, not for the per-task path.

    Keys that expire (or are deleted) while a listing runs: a key that is
    gone by the time it is read is left out, never reported with made-up
    values; a key added meanwhile may or may not be listed. Names are
    reported as text, bytes that are not UTF-8 escaped.
    """

    async def ping(self) -> float:
        """One round trip to the store.

        Returns:
            The seconds it took (trio's clock).

        Raises:
            BackendError: The store cannot be reached.
        """
        ...

    async def list_groups(self) -> list[str]:
        """Every consumer group on the store, sorted.

        A group is on the store when a stream has a consumer group of that
        name (every group that ever read), or when a key is named after it
        (see :func:`~taskrunner.backends._layout.group_named_by`): its own
        stream in the default layout, its metrics hash, delayed set or
        published tuning capacity (a group that has delayed tasks waiting but
        never served, or whose stream was flushed but not its metrics). The
        leader lease is named by a hash, so it names no group.

        Cost: two walks of the key space (the streams, then the names under
        ``taskrunner:``) and one round trip for the groups of every stream.
        """
        ...

    async def list_keys(self, group: str) -> list[KeyInfo]:
        """Every key of the layout that exists now for ``group``, with its type,
        size and TTL: the group's fixed keys, its tasks' kept results and result
        notices, then every heartbeat and unique lock (not per group: every
        group's), each kind in the order of
        :class:`~taskrunner.backends._protocols.inspection.KeyKind`, the keys found by
        pattern by name.

        Cost: four pattern walks (results, notices, heartbeats, unique locks)
        and one round trip for every key found.
        """
        ...

    async def count_keys(self, group: str) -> KeyCounts:
        """How many keys of each kind :meth:`list_keys` would list now; on a
        store nobody changes meanwhile, ``KeyCounts.of(await list_keys(group))``.

        Cost: the same four walks, then one round trip for the fixed keys only:
        nothing is read per result, notice, heartbeat or unique lock.
        """
        ...

    async def list_queues(self, group: str) -> list[str]:
        """Every queue of ``group`` with a key on the store: a stream, a dead-letter
        stream or a claim-delay ring (with an explicit prefix, shared by several
        groups, a stream counts when ``group`` reads it); the backend's own queue
        first (listed even without keys), then the others by name.

        So a queue that has messages is found even when no runner serves it (the
        task catalog names only the queues of tasks that serving runners declare).

        Cost: two walks of the key space (the streams and the rings under the
        group's heads), plus, with an explicit prefix, one round trip.
        """
        ...

    async def count_messages(self, group: str, queues: Iterable[str | None]) -> MessageCounts:
        """The messages ``group`` holds on ``queues`` (``None``: the backend's own) and in
        its delayed set. A shard of a sharded group is named as the group of its tag
        (docs/sharding.md): its keys are all in its slot.

        Cost: one round trip (``XLEN`` of each queue's stream and dead-letter stream,
        ``ZCARD`` of the delayed set), whatever the lengths.
        """
        ...

    async def list_heartbeats(self) -> list[Heartbeat]:
        """Every live instance (heartbeat key) of every group, sorted by host,
        with the instance id it holds and its seconds left (in the cluster layout,
        one entry per group an instance of a host serves).

        Cost: one pattern walk and one round trip for every key found.
        """
        ...

    async def read_lease(self, group: str) -> Lease | None:
        """The group's leader lease, owner and seconds left, read together in one
        round trip; ``None`` when nobody holds it."""
        ...

    async def flush_group(self, group: str, *, heartbeats: bool) -> list[str]:
        """Delete every key of ``group`` and the consumer group itself.

        The group is destroyed on its stream (``XGROUP DESTROY``: its pending
        entries and cursor go). When other consumer groups read the same stream
        (an explicit shared prefix), the stream, the dead-letter stream and the
        claim-delay ring are kept for them; otherwise they are deleted too, with
        the group's delayed set and its id indexes, stop requests, lease, tuning
        value, desired instance count, metrics hash, catalog, schedules, paused set,
        flow-control keys, event stream, its tasks' results, notices and progress, its
        workflows' records and (cluster layout) its recorded shard count (the shards'
        own keys are flushed by ``taskrunner.admin.flush``). Other groups' keys are
        never touched. Unique locks and (with ``heartbeats``) heartbeat keys: in the go
        layout they are not per group, and every one is deleted; in the cluster layout
        the group's own are.

        Returns:
            The names deleted (those :meth:`list_keys` found, less those kept),
            in its order.

        Cancellation: some of the keys may have been deleted; a repeat deletes
        the rest.
        """
        ...
