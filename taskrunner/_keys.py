"""Every key name, built in one place (see docs/redis-key-layout.md).

Pure functions, no I/O. The in-memory backend uses the same names for its
shared state, so both backends can be inspected the same way. The metrics
fields and the message's ``unique_key`` follow the Go library's documents, so
they are built in :mod:`taskrunner._wire`.

Two layouts (:data:`KeyLayout`). ``"go"`` is the Go library's: the group's
keys are under ``taskrunner:<group>:``, the leader lease is
``taskrunner:leader:<base32(sha1(group))>``, and unique locks and heartbeats
are every group's (``taskrunner:unique:*``, ``taskrunner:replication:*``).
Those land in unrelated hash slots, which a Redis Cluster refuses in one
script. ``"cluster"`` puts every key of a group under the hash tag
``{<group>}`` (``taskrunner:{<group>}:...``, the lease, locks and heartbeats
included), so all of them live in one slot and every script touches one
slot. The backend holds the layout (``backend.key_layout``); every function
here that names a group's key takes it (``"go"`` when not given: every caller in
the package passes its backend's).

A consumer group may read several queues, each its own stream
(:func:`stream_keys` of each queue name). The flow-control keys (pauses,
concurrency slots, rate limits, parked tasks) are the group's, under its root,
and ours alone: the Go library has none of them.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import re
from typing import Literal, get_args

import attrs

KeyLayout = Literal["go", "cluster"]
"""The key layouts: ``"go"`` (the Go library's) and ``"cluster"`` (one hash tag per group)."""
KEY_LAYOUTS: tuple[KeyLayout, ...] = get_args(KeyLayout)

PREFIX = "taskrunner"


class KeyLayoutError(ValueError):
    """A key layout that cannot be used: unknown, or ``"go"`` on a Redis Cluster."""


def resolve_layout(requested: object, *, cluster: bool) -> KeyLayout:
    """The layout to use: ``requested``, or the backend's choice when it is ``None``
    (``"cluster"`` on a Redis Cluster, ``"go"`` on a standalone server).

    Raises:
        KeyLayoutError: ``requested`` is not ``None``, ``"go"`` or ``"cluster"``;
            or it is ``"go"`` on a cluster, whose keys cannot share a slot.
    """
    if requested is None:
        return "cluster" if cluster else "go"
    if requested not in KEY_LAYOUTS:
        raise KeyLayoutError(f"key_layout must be 'go', 'cluster' or None, got {requested!r}")
    if requested == "go" and cluster:
        raise KeyLayoutError(
            "key_layout='go' cannot run on a Redis Cluster: the Go library's keys of one "
            "group (its streams, delayed set, leader lease, unique locks) hash to different "
            "slots, and its scripts touch them together; use key_layout='cluster'"
        )
    return "go" if requested == "go" else "cluster"


def group_problem(group: object) -> str | None:
    """Why ``group`` cannot name a consumer group in the keys, or ``None``: a ``{`` or
    ``}`` would change (or break) the hash tag of the cluster layout."""
    if isinstance(group, str) and ("{" in group or "}" in group):
        return "must not contain '{' or '}' (the cluster layout's hash tag is {<group>})"
    return None


def check_group(group: str) -> None:
    """Refuse a group name the keys cannot carry (see :func:`group_problem`).

    Raises:
        ValueError: ``group`` holds ``{`` or ``}``.
    """
    problem = group_problem(group)
    if problem is not None:
        raise ValueError(f"consumer_group {problem}, got {group!r}")


def group_root(group: str, layout: KeyLayout = "go") -> str:
    """The head of a group's keys: ``taskrunner:<group>`` (go) or
    ``taskrunner:{<group>}`` (cluster).

    Raises:
        ValueError: ``group`` holds ``{`` or ``}``.
    """
    check_group(group)
    return f"{PREFIX}:{{{group}}}" if layout == "cluster" else f"{PREFIX}:{group}"


def hash_tag(key: str) -> str:
    """The part of ``key`` a Redis Cluster hashes: the text between its first ``{``
    and the next ``}`` when that is not empty, else the whole key."""
    start = key.find("{")
    if start >= 0:
        end = key.find("}", start + 1)
        if end > start + 1:
            return key[start + 1 : end]
    return key


def stream(prefix: str, queue: str) -> str:
    """The main message stream: ``<prefix>:<queue>``."""
    return f"{prefix}:{queue}"


def dead_letter(prefix: str, queue: str) -> str:
    """The dead-letter stream: ``<prefix>:<queue>:dead``."""
    return f"{prefix}:{queue}:dead"


def claim_delay_ring(prefix: str, queue: str) -> str:
    """The claim-delay ring: ``ring:<prefix>:metrics:<queue>``."""
    return f"ring:{prefix}:metrics:{queue}"


@attrs.frozen
class StreamKeys:
    """The three keys of one queue: what a backend resolves a group (and a queue) to."""

    stream: str
    """The main message stream, ``<prefix>:<queue>``."""
    dead_letter: str
    """Its dead-letter stream, ``<prefix>:<queue>:dead``."""
    claim_delay_ring: str
    """Its claim-delay ring, ``ring:<prefix>:metrics:<queue>``."""
    queue: str = ""
    """The queue's name (the ``<queue>`` of the three keys)."""


_GROUP_KEY_NAMES = (
    "delayed_tasks",
    "metrics",
    "worker_tuning_capacity",
    "desired_instances",
    "delayed_ids",
    "entry_ids",
    "cancelled",
    "result_waiters",
    "catalog",
    "paused",
    "schedules",
    "schedule_specs",
    "events",
    "workflow_ends",
)
_GROUP_KEY_HEADS = (
    "result:",
    "notify:",
    "progress:",
    "concurrency:",
    "rate:",
    "rate_pace:",
    "parked:",
)
"""Heads of the per-task keys under the group's root (a queue may not start so)."""
_CLUSTER_KEY_NAMES = ("leader", "shards")
"""Cluster layout: the group's own lease, and its recorded shard count (a queue may not
be named so there)."""
_SHARED_KEY_NAMES = ("leader", "replication", "unique")
"""Go layout: the heads of the keys under ``taskrunner:`` that are no group's. In the
cluster layout they are the group's own, so a queue may not be named so."""


def stream_keys(prefix: str | None, group: str, queue: str, layout: KeyLayout = "go") -> StreamKeys:
    """The stream keys that ``group`` reads on ``queue``.

    ``prefix=None`` (the backends' default) means the group's root
    (:func:`group_root`, ``taskrunner:<group>`` or ``taskrunner:{<group>}``):
    each consumer group gets a stream of its own, so two applications with
    different groups never read (and dead-letter) each other's tasks. An
    explicit prefix is used as it is, so groups configured with the same one
    share a stream (e.g. ``prefix="taskrunner", queue="tasks"`` to share one with
    a Go fleet). In the cluster layout an explicit prefix must carry the group's
    hash tag (e.g. ``"shop:{billing}"`` for group ``billing``), so the stream
    shares the slot of the group's other keys.

    Raises:
        ValueError: with ``prefix=None``, a group or queue name that would make
            the stream collide with another documented key (go layout: group
            ``leader``, ``replication`` or ``unique``; both: queue
            ``delayed_tasks``, ``metrics``, ``worker_tuning_capacity``,
            ``desired_instances``, ``catalog``, ``paused``, ``schedules``,
            ``schedule_specs``, ``delayed_ids``, ``entry_ids``, ``cancelled`` or
            ``events``, ``result_waiters``, ``workflow_ends``, or one starting with
            ``result:``, ``notify:``, ``progress:``, ``concurrency:``, ``rate:``,
            ``rate_pace:`` or ``parked:``; cluster layout: also ``leader``, ``shards`` and ones
            starting with ``replication:`` or ``unique:``); a group holding ``{`` or
            ``}``; in the cluster layout, an explicit prefix without the group's
            hash tag.
    """
    if prefix is None:
        root = group_root(group, layout)
        if layout == "go" and group in _SHARED_KEY_NAMES:
            raise ValueError(
                f"consumer group {group!r} would put its stream among the "
                f"{PREFIX}:{group}:* keys; choose another group or pass a prefix"
            )
        taken = queue in _GROUP_KEY_NAMES or queue.startswith(_GROUP_KEY_HEADS)
        if layout == "cluster":
            taken = (
                taken
                or queue in _CLUSTER_KEY_NAMES
                or queue.startswith(("replication:", "unique:"))
            )
        if taken:
            raise ValueError(
                f"queue {queue!r} would collide with the key {root}:{queue}; "
                "choose another queue name"
            )
        prefix = root
    elif layout == "cluster":
        check_group(group)
        if hash_tag(stream(prefix, queue)) != group:
            raise ValueError(
                f"prefix {prefix!r} puts the stream outside the hash slot of group {group!r} "
                f"(key_layout='cluster'); use a prefix holding '{{{group}}}', "
                f"e.g. '{PREFIX}:{{{group}}}'"
            )
    return StreamKeys(
        stream=stream(prefix, queue),
        dead_letter=dead_letter(prefix, queue),
        claim_delay_ring=claim_delay_ring(prefix, queue),
        queue=queue,
    )


def delayed_tasks(group: str, layout: KeyLayout = "go") -> str:
    """The delayed-task ZSET: ``<root>:delayed_tasks``."""
    return f"{group_root(group, layout)}:delayed_tasks"


def events(group: str, layout: KeyLayout = "go") -> str:
    """The group's capped event stream (``TaskRunnerConfig(events=True)``)."""
    return f"{group_root(group, layout)}:events"


def progress(group: str, task_id: str, layout: KeyLayout = "go") -> str:
    """A task's last reported progress (a hash: ``fraction``, ``note``, ``at``)."""
    return f"{group_root(group, layout)}:progress:{task_id}"


def metrics(group: str, layout: KeyLayout = "go") -> str:
    """The timing-metrics hash: ``<root>:metrics``."""
    return f"{group_root(group, layout)}:metrics"


def worker_tuning_capacity(group: str, layout: KeyLayout = "go") -> str:
    """The published pool capacity: ``<root>:worker_tuning_capacity``."""
    return f"{group_root(group, layout)}:worker_tuning_capacity"


def desired_instances(group: str, layout: KeyLayout = "go") -> str:
    """The instance count the leader asks the autoscaler for (``target_wait``; ours, Go
    never reads it): ``<root>:desired_instances``."""
    return f"{group_root(group, layout)}:desired_instances"


def catalog(group: str, layout: KeyLayout = "go") -> str:
    """The task catalog, the tasks the group's serving runners serve:
    ``<root>:catalog`` (a hash, one document per host)."""
    return f"{group_root(group, layout)}:catalog"


def schedules(group: str, layout: KeyLayout = "go") -> str:
    """The periodic schedules' states (hash): ``<root>:schedules``."""
    return f"{group_root(group, layout)}:schedules"


def schedule_specs(group: str, layout: KeyLayout = "go") -> str:
    """The periodic schedules' published specs (hash): ``<root>:schedule_specs``."""
    return f"{group_root(group, layout)}:schedule_specs"


def paused(group: str, layout: KeyLayout = "go") -> str:
    """The group's paused queues and tasks, a set: ``<root>:paused``."""
    return f"{group_root(group, layout)}:paused"


def concurrency(group: str, task: str, layout: KeyLayout = "go") -> str:
    """A task's leased concurrency slots, a sorted set of holders scored by lease
    expiry: ``<root>:concurrency:<task>``."""
    return f"{group_root(group, layout)}:concurrency:{task}"


def rate(group: str, task: str, key: str = "", layout: KeyLayout = "go") -> str:
    """A task's rate-limit log, a sorted set of starts scored by start time:
    ``<root>:rate:<task>``, or ``...:rate:<task>:<key>`` per key."""
    head = f"{group_root(group, layout)}:rate:{task}"
    return f"{head}:{key}" if key else head


def rate_pace(group: str, task: str, key: str = "", layout: KeyLayout = "go") -> str:
    """When the next run refused by a rate limit is told to come back, a string:
    ``<root>:rate_pace:<task>`` (or ``...:<task>:<key>``)."""
    head = f"{group_root(group, layout)}:rate_pace:{task}"
    return f"{head}:{key}" if key else head


def parked(group: str, task: str, layout: KeyLayout = "go") -> str:
    """The delayed members parked while ``task`` is paused, a set:
    ``<root>:parked:<task>``."""
    return f"{group_root(group, layout)}:parked:{task}"


FLOW_FAMILIES = ("concurrency", "rate", "rate_pace", "parked")
"""The per-task key families of a group: ``<root>:<family>:*``."""


def flow_pattern(group: str, family: str, layout: KeyLayout = "go") -> str:
    """``SCAN MATCH`` pattern of one family of a group's flow-control keys (the
    group's name escaped, so a ``*`` or ``[`` in it matches only itself)."""
    return f"{glob_escape(f'{group_root(group, layout)}:{family}:')}*"


def glob_escape(text: str) -> str:
    """``text`` with the glob characters of ``SCAN MATCH`` escaped."""
    return "".join(f"\\{c}" if c in "*?[]\\" else c for c in text)


# Memoized: the lease is renewed, and knocked on by each follower, several times a
# ttl, and the go layout's name costs a SHA-1 and a base32 encoding each time. A pure
# function of two strings, so a cache cannot go stale; the bound keeps it small for a
# process that serves many groups.
@functools.lru_cache(maxsize=256)
def leader(group: str, layout: KeyLayout = "go") -> str:
    """The leader lease: ``taskrunner:leader:<base32(sha1(group))>`` (go; standard
    base32 alphabet with ``=`` padding, as Go's ``base32.StdEncoding``), or
    ``taskrunner:{<group>}:leader`` (cluster)."""
    if layout == "cluster":
        return f"{group_root(group, layout)}:leader"
    digest = hashlib.sha1(group.encode()).digest()
    return f"{PREFIX}:leader:{base64.b32encode(digest).decode()}"


def replication(host: str, layout: KeyLayout = "go", group: str | None = None) -> str:
    """An instance heartbeat: ``taskrunner:replication:<host>`` (go: every group's), or
    ``taskrunner:{<group>}:replication:<host>`` (cluster: the group's).

    Raises:
        ValueError: the cluster layout without a group.
    """
    if layout == "cluster":
        if group is None:
            raise ValueError("a heartbeat key needs its group in key_layout='cluster'")
        return f"{group_root(group, layout)}:replication:{host}"
    return f"{PREFIX}:replication:{host}"


def replication_pattern(layout: KeyLayout, group: str | None = None) -> str:
    """``SCAN MATCH`` pattern of the heartbeat keys: every one on the database (go, or
    cluster without a group: every group's), or one group's (cluster)."""
    if layout == "go":
        return f"{PREFIX}:replication:*"
    if group is None:
        return f"{PREFIX}:{{*}}:replication:*"
    return f"{glob_escape(replication('', layout, group))}*"


_CLUSTER_HEARTBEAT = re.compile(rf"{PREFIX}:\{{[^{{}}]+\}}:replication:(.*)", re.DOTALL)


def heartbeat_host(name: str, layout: KeyLayout, group: str | None = None) -> str | None:
    """The host of heartbeat key ``name``, or ``None`` when ``name`` is none (of
    ``group``, when given, in the cluster layout); :func:`replication_pattern`'s match."""
    if layout == "go" or group is not None:
        head = replication("", layout, group)
        return name[len(head) :] if name.startswith(head) else None
    match = _CLUSTER_HEARTBEAT.fullmatch(name)
    return None if match is None else match.group(1)


REPLICATION_PATTERN = replication_pattern("go")
"""``SCAN MATCH`` pattern for every heartbeat key of the go layout."""


def unique_prefix(group: str, layout: KeyLayout = "go") -> str:
    """The head of every unique lock key (the rest is the message's ``unique_key``):
    ``taskrunner:unique:`` (go: every group's, as Go releases them), or
    ``taskrunner:{<group>}:unique:`` (cluster: the group's)."""
    if layout == "cluster":
        return f"{group_root(group, layout)}:unique:"
    return f"{PREFIX}:unique:"


def unique_pattern(group: str, layout: KeyLayout = "go") -> str:
    """``SCAN MATCH`` pattern of the unique locks a group may hold (go: every group's)."""
    return f"{glob_escape(unique_prefix(group, layout))}*"


# Results, lookup and cancellation (issue 14) ------------------------------------------


def delayed_index(group: str, layout: KeyLayout = "go") -> str:
    """The delayed members by task id: ``<root>:delayed_ids`` (a hash
    task id -> member, so lookup and cancel find a member without a scan)."""
    return f"{group_root(group, layout)}:delayed_ids"


def entry_index(group: str, layout: KeyLayout = "go") -> str:
    """The stream entry of each task moved from the delayed set:
    ``<root>:entry_ids`` (a hash task id -> stream id)."""
    return f"{group_root(group, layout)}:entry_ids"


def cancelled(group: str, layout: KeyLayout = "go") -> str:
    """The running entries asked to stop: ``<root>:cancelled`` (a sorted
    set of stream ids scored by the time of the request)."""
    return f"{group_root(group, layout)}:cancelled"


def result(group: str, task_id: str, layout: KeyLayout = "go") -> str:
    """A task's kept result document: ``<root>:result:<task id>``."""
    return f"{group_root(group, layout)}:result:{task_id}"


def notify(group: str, task_id: str, layout: KeyLayout = "go") -> str:
    """A task's result notice, which waiters block on: ``<root>:notify:<task id>``."""
    return f"{group_root(group, layout)}:notify:{task_id}"


def result_waiters(group: str, layout: KeyLayout = "go") -> str:
    """The tasks someone waits for the result of: ``<root>:result_waiters`` (a sorted
    set of task ids scored by the server time in ms until which a waiter waits); a
    finish pushes a task's result notice only while it is there."""
    return f"{group_root(group, layout)}:result_waiters"


def result_pattern(group: str, layout: KeyLayout = "go") -> str:
    """``SCAN MATCH`` pattern for every kept result of ``group``."""
    return f"{glob_escape(result(group, '', layout))}*"


def notify_pattern(group: str, layout: KeyLayout = "go") -> str:
    """``SCAN MATCH`` pattern for every result notice of ``group``."""
    return f"{glob_escape(notify(group, '', layout))}*"
