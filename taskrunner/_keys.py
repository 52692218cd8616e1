"""Every key name, built in one place (see docs/redis-key-layout.md).

Pure functions, no I/O. The in-memory backend uses the same names for its
shared state, so both backends can be inspected the same way. Unique-lock keys
(``taskrunner:unique:`` + the message's ``unique_key``) and the metrics fields
follow the Go library's documents, so they are built in :mod:`taskrunner._wire`.

A consumer group may read several queues, each its own stream
(:func:`stream_keys` of each queue name). The flow-control keys (pauses,
concurrency slots, rate limits, parked tasks) are the group's, under
``taskrunner:<group>:``, and ours alone: the Go library has none of them.
"""

from __future__ import annotations

import base64
import hashlib

import attrs

PREFIX = "taskrunner"


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
    "catalog",
    "paused",
    "schedules",
    "schedule_specs",
)
_GROUP_KEY_HEADS = ("result:", "notify:", "concurrency:", "rate:", "rate_pace:", "parked:")
"""Heads of the per-task keys under ``taskrunner:<group>:`` (a queue may not start so)."""
_SHARED_KEY_NAMES = ("leader", "replication", "unique")


def stream_keys(prefix: str | None, group: str, queue: str) -> StreamKeys:
    """The stream keys that ``group`` reads on ``queue``.

    ``prefix=None`` (the backends' default) means ``taskrunner:<group>``: each
    consumer group gets a stream of its own, so two applications with different
    groups never read (and dead-letter) each other's tasks. An explicit prefix
    is used as it is, so groups configured with the same one share a stream
    (e.g. ``prefix="taskrunner", queue="tasks"`` to share one with a Go fleet).

    Raises:
        ValueError: with ``prefix=None``, a group or queue name that would make
            the stream collide with another documented key (group ``leader``,
            ``replication`` or ``unique``; queue ``delayed_tasks``, ``metrics``,
            ``worker_tuning_capacity``, ``desired_instances``, ``catalog``, ``paused``,
            ``schedules``, ``schedule_specs``, ``delayed_ids``, ``entry_ids`` or ``cancelled``, or
            one starting with ``result:``, ``notify:``, ``concurrency:``, ``rate:``,
            ``rate_pace:`` or ``parked:``).
    """
    if prefix is None:
        if group in _SHARED_KEY_NAMES:
            raise ValueError(
                f"consumer group {group!r} would put its stream among the "
                f"{PREFIX}:{group}:* keys; choose another group or pass a prefix"
            )
        if queue in _GROUP_KEY_NAMES or queue.startswith(_GROUP_KEY_HEADS):
            raise ValueError(
                f"queue {queue!r} would collide with the key {PREFIX}:{group}:{queue}; "
                "choose another queue name"
            )
        prefix = f"{PREFIX}:{group}"
    return StreamKeys(
        stream=stream(prefix, queue),
        dead_letter=dead_letter(prefix, queue),
        claim_delay_ring=claim_delay_ring(prefix, queue),
        queue=queue,
    )


def delayed_tasks(group: str) -> str:
    """The delayed-task ZSET: ``taskrunner:<group>:delayed_tasks``."""
    return f"{PREFIX}:{group}:delayed_tasks"


def metrics(group: str) -> str:
    """The timing-metrics hash: ``taskrunner:<group>:metrics``."""
    return f"{PREFIX}:{group}:metrics"


def worker_tuning_capacity(group: str) -> str:
    """The published pool capacity: ``taskrunner:<group>:worker_tuning_capacity``."""
    return f"{PREFIX}:{group}:worker_tuning_capacity"


def desired_instances(group: str) -> str:
    """The instance count the leader asks the autoscaler for (``target_wait``; ours, Go
    never reads it): ``taskrunner:<group>:desired_instances``."""
    return f"{PREFIX}:{group}:desired_instances"


def catalog(group: str) -> str:
    """The task catalog, the tasks the group's serving runners serve:
    ``taskrunner:<group>:catalog`` (a hash, one document per host)."""
    return f"{PREFIX}:{group}:catalog"


def schedules(group: str) -> str:
    """The periodic schedules' states (hash): ``taskrunner:<group>:schedules``."""
    return f"{PREFIX}:{group}:schedules"


def schedule_specs(group: str) -> str:
    """The periodic schedules' published specs (hash): ``taskrunner:<group>:schedule_specs``."""
    return f"{PREFIX}:{group}:schedule_specs"


def paused(group: str) -> str:
    """The group's paused queues and tasks, a set: ``taskrunner:<group>:paused``."""
    return f"{PREFIX}:{group}:paused"


def concurrency(group: str, task: str) -> str:
    """A task's leased concurrency slots, a sorted set of holders scored by lease
    expiry: ``taskrunner:<group>:concurrency:<task>``."""
    return f"{PREFIX}:{group}:concurrency:{task}"


def rate(group: str, task: str, key: str = "") -> str:
    """A task's rate-limit log, a sorted set of starts scored by start time:
    ``taskrunner:<group>:rate:<task>``, or ``...:rate:<task>:<key>`` per key."""
    return f"{PREFIX}:{group}:rate:{task}:{key}" if key else f"{PREFIX}:{group}:rate:{task}"


def rate_pace(group: str, task: str, key: str = "") -> str:
    """When the next run refused by a rate limit is told to come back, a string:
    ``taskrunner:<group>:rate_pace:<task>`` (or ``...:<task>:<key>``)."""
    if key:
        return f"{PREFIX}:{group}:rate_pace:{task}:{key}"
    return f"{PREFIX}:{group}:rate_pace:{task}"


def parked(group: str, task: str) -> str:
    """The delayed members parked while ``task`` is paused, a set:
    ``taskrunner:<group>:parked:<task>``."""
    return f"{PREFIX}:{group}:parked:{task}"


FLOW_FAMILIES = ("concurrency", "rate", "rate_pace", "parked")
"""The per-task key families of a group: ``taskrunner:<group>:<family>:*``."""


def flow_pattern(group: str, family: str) -> str:
    """``SCAN MATCH`` pattern of one family of a group's flow-control keys (the
    group's name escaped, so a ``*`` or ``[`` in it matches only itself)."""
    return f"{glob_escape(f'{PREFIX}:{group}:{family}:')}*"


def glob_escape(text: str) -> str:
    """``text`` with the glob characters of ``SCAN MATCH`` escaped."""
    return "".join(f"\\{c}" if c in "*?[]\\" else c for c in text)


def leader(group: str) -> str:
    """The leader lease: ``taskrunner:leader:<base32(sha1(group))>``.

    Standard base32 alphabet with ``=`` padding, as Go's ``base32.StdEncoding``.
    """
    digest = hashlib.sha1(group.encode()).digest()
    return f"{PREFIX}:leader:{base64.b32encode(digest).decode()}"


def replication(host: str) -> str:
    """An instance heartbeat: ``taskrunner:replication:<host>``."""
    return f"{PREFIX}:replication:{host}"


REPLICATION_PATTERN = f"{PREFIX}:replication:*"
"""``SCAN MATCH`` pattern for every heartbeat key."""


# Results, lookup and cancellation (issue 14) ------------------------------------------


def delayed_index(group: str) -> str:
    """The delayed members by task id: ``taskrunner:<group>:delayed_ids`` (a hash
    task id -> member, so lookup and cancel find a member without a scan)."""
    return f"{PREFIX}:{group}:delayed_ids"


def entry_index(group: str) -> str:
    """The stream entry of each task moved from the delayed set:
    ``taskrunner:<group>:entry_ids`` (a hash task id -> stream id)."""
    return f"{PREFIX}:{group}:entry_ids"


def cancelled(group: str) -> str:
    """The running entries asked to stop: ``taskrunner:<group>:cancelled`` (a sorted
    set of stream ids scored by the time of the request)."""
    return f"{PREFIX}:{group}:cancelled"


def result(group: str, task_id: str) -> str:
    """A task's kept result document: ``taskrunner:<group>:result:<task id>``."""
    return f"{PREFIX}:{group}:result:{task_id}"


def notify(group: str, task_id: str) -> str:
    """A task's result notice, which waiters block on: ``taskrunner:<group>:notify:<task id>``."""
    return f"{PREFIX}:{group}:notify:{task_id}"


def _glob_escaped(text: str) -> str:
    # A group may hold glob characters; SCAN MATCH must take them literally.
    return "".join(f"\\{c}" if c in "*?[]\\" else c for c in text)


def result_pattern(group: str) -> str:
    """``SCAN MATCH`` pattern for every kept result of ``group``."""
    return f"{PREFIX}:{_glob_escaped(group)}:result:*"


def notify_pattern(group: str) -> str:
    """``SCAN MATCH`` pattern for every result notice of ``group``."""
    return f"{PREFIX}:{_glob_escaped(group)}:notify:*"
