"""The interfaces a backend implements; their docstrings are the spec.

A backend is one object that is a :class:`MessageQueue` (streams with
consumer groups, like Redis streams), a :class:`SharedState` (the small
amount of fleet-wide state: leases, the delayed set, metrics, heartbeats,
locks, the published pool size), a :class:`~taskrunner.backends.Deferral`
(a run that must wait, a retry or a run held back by a limit, back through
the delayed set, atomically), a :class:`~taskrunner.backends.FlowControl`
(pauses, concurrency slots, rate limits), a
:class:`~taskrunner.backends.TaskCatalog` (the tasks serving runners serve,
for producers that send tasks by name), a :class:`Schedules` (the periodic
schedules' fenced fires and state, :mod:`taskrunner.backends._schedules`) and a
:class:`~taskrunner.backends.Tracking` (results, lookup by task id,
cancellation, dead-letter replay: :mod:`taskrunner.backends._tracking`).
That is all a runner needs to serve. The
operator tools (``taskrunner.admin``, the ``stats``, ``top``, ``keys`` and
``flush`` commands) also need an :class:`Inspection`: reads and operations
across the whole store, which both shipped backends implement and a backend
of one's own may leave out. ``taskrunner.testing`` holds the contract suite
every backend must pass.

Every queue method takes the consumer ``group`` first, and a ``queue``
keyword: the backend resolves the two to one stream
(:meth:`MessageQueue.stream_keys`). ``queue=None`` is the backend's own
queue (its ``queue`` setting, ``tasks`` by default), so a runner of one queue
calls every method as before. By default each group has streams of its own
(``taskrunner:<group>:<queue>``); a backend configured with an explicit prefix
gives every group the same ones, and the groups then each receive every entry.

Conventions for every method:

- Times are seconds (float) in the backend's own clock, :meth:`SharedState.now`:
  unix time on Redis, ``trio.current_time()`` in memory, so that trio's
  ``MockClock`` drives an in-memory fleet.
- Failures to reach the store raise :class:`taskrunner.errors.BackendError`
  (or a subclass); backend-native exceptions never escape.
- Cancellation: a call cancelled before it returns may or may not have taken
  effect on the store. Each method says what that leaves behind; all of them
  are safe to repeat.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

import attrs

from taskrunner._keys import KeyLayout, StreamKeys
from taskrunner._wire import TimingIncrement
from taskrunner.backends._catalog import TaskCatalog
from taskrunner.backends._deferral import Deferral
from taskrunner.backends._flow import FlowControl
from taskrunner.backends._inspection import Heartbeat, KeyCounts, KeyInfo, Lease
from taskrunner.backends._schedules import Schedules
from taskrunner.backends._tracking import Tracking


@attrs.frozen(kw_only=True)
class QueueEntry:
    """One stream entry as handed to a consumer."""

    id: str
    """Stream id, ``<milliseconds>-<sequence>``."""
    payload: bytes | None
    """The entry's ``payload`` field, or ``None`` when it has none."""
    delivery_count: int
    """Deliveries so far, this one included (1 on first read)."""
    queue: str | None = None
    """The queue it was read from (backends always set it; ``None`` is the
    default queue, as a ``queue=`` argument)."""


@attrs.frozen(kw_only=True)
class ConsumerInfo:
    name: str
    pending: int
    """Entries delivered to this consumer and not yet acked."""
    idle: float
    """Seconds since the consumer last read, claimed or refreshed."""


@attrs.frozen(kw_only=True)
class GroupInfo:
    name: str
    pending: int
    """Entries delivered to the group and not yet acked."""
    lag: int
    """Entries in the stream not yet delivered to the group. Exact in memory; on
    Redis, when the server cannot say (``XINFO`` reports nil after deletions), it
    is derived from the stream length when deleting on ack, else a lower bound."""
    consumers: tuple[ConsumerInfo, ...] = ()


@attrs.frozen(kw_only=True)
class QueueMetrics:
    """What :meth:`MessageQueue.get_metrics` reports. Claim delays in nanoseconds."""

    queue_size: int
    message_claim_delay_avg: float
    message_claim_delay_std: float
    message_claim_delay_max: float
    message_claim_delay_last: float
    """The newest claim delay recorded (0 when none)."""
    groups: tuple[GroupInfo, ...] = ()


@attrs.frozen(kw_only=True)
class DeadLetter:
    """An entry of the dead-letter stream."""

    id: str
    """Its id in the dead-letter stream."""
    message_id: str
    """The id it had in the main stream."""
    group: str
    payload: bytes | None
    error: str


@attrs.frozen(kw_only=True)
class DelayedMove:
    """One due member of the delayed set and the stream entry it becomes."""

    member: bytes
    """The member exactly as stored (it is removed by value)."""
    message: bytes
    """The ``payload`` field of the entry to add."""
    lock_key: str | None = None
    """For a unique task: the lock to take first; the move is skipped (the member
    stays) while another token holds the lock. A lock already held with
    :attr:`lock_token` (a retry keeping its lock) counts as taken, and gets
    :attr:`lock_ttl` again."""
    lock_token: str = ""
    lock_ttl: float = 0.0
    task_id: str | None = None
    """The member's id (the task's id), when it has one: moving it ends its entry
    in the delayed id index and, if it had one there, maps the task id to the new
    stream entry (the entry index)."""
    queue: str | None = None
    """The queue whose stream the message is added to; ``None``: the default queue."""


@runtime_checkable
class MessageQueue(Protocol):
    """Streams read by consumer groups, with a pending list per consumer.

    Delivery is at-least-once: an entry read but never acked is delivered again
    (to any consumer of the group) once :meth:`claim_stale` finds it idle.
    """

    @property
    def key_layout(self) -> KeyLayout:
        """How this backend names its keys, ``"go"`` or ``"cluster"`` (see
        :mod:`taskrunner._keys`); every client of the backend (runner, producer,
        admin) builds the keys it hands over (unique locks) by it.

        Raises:
            KeyLayoutError: ``"go"`` was asked for and the server is a Redis Cluster.
        """
        ...

    @property
    def cluster(self) -> bool:
        """Whether the server is a Redis Cluster (false for :class:`MemoryBackend` and a
        standalone server)."""
        ...

    def use_key_layout(self, key_layout: KeyLayout | None) -> KeyLayout:
        """Ask for ``key_layout`` (``None``: the backend's choice) and return the one in
        use; what a runner does with its ``TaskRunnerConfig.key_layout``.

        Raises:
            KeyLayoutError: an unknown layout, ``"go"`` on a cluster, or another
                layout than the backend was given.
        """
        ...

    def stream_keys(self, group: str, queue: str | None = None) -> StreamKeys:
        """The stream (and its dead-letter stream and claim-delay ring) that
        ``group`` reads on ``queue`` (``None``: the backend's own queue, whose
        name is the result's ``queue``): the one place a backend decides it.
        Pure and cached; two groups share a stream exactly when their keys are
        equal.

        Raises:
            ValueError: the group cannot be given a stream (see
                :func:`taskrunner._keys.stream_keys`).
        """
        ...

    async def add(
        self, group: str, payloads: Sequence[bytes], *, queue: str | None = None
    ) -> list[str]:
        """Append one entry per payload (field ``payload``) to the group's stream, in order.

        Returns:
            Their ids, in order.

        Cancellation: some prefix of the entries may have been added.
        """
        ...

    async def read(
        self, group: str, consumer: str, count: int, block: float, *, queue: str | None = None
    ) -> list[QueueEntry]:
        """Deliver up to ``count`` entries the group has never delivered.

        Creates the group (starting at the beginning of the stream) if it does
        not exist. Waits up to ``block`` seconds for entries when there are none
        (``0``: do not wait). Each entry returned is now pending for
        ``consumer`` with delivery count 1. The backend also records each
        entry's claim delay (now minus its add time) in its ring.

        Cancellation: entries may have been delivered without being returned;
        they stay pending for ``consumer`` until acked or claimed.
        """
        ...

    async def read_many(
        self,
        group: str,
        consumer: str,
        queues: Sequence[str],
        quotas: Sequence[int],
        total: int,
        block: float,
    ) -> list[QueueEntry]:
        """Deliver up to ``total`` new entries from several queues, in one round trip.

        First up to ``quotas[i]`` entries from each ``queues[i]``, in order
        (``quotas`` is as long as ``queues``); then, while fewer than ``total``
        were delivered, more from each queue in order, so a queue listed
        earlier fills what is left first (all quotas 0: strict priority). The
        entries come back in that order, each tagged with its queue, and are
        pending for ``consumer`` with delivery count 1, as from :meth:`read`;
        claim delays are recorded per queue. Groups are created as by
        :meth:`read`.

        When no queue has an entry, waits up to ``block`` seconds for entries
        on the first ``m = min(len(queues), total)`` queues and returns as soon
        as some arrive (on Redis, as soon as the first lands): at most
        ``total // m`` from each queue waited on, so never more than ``total``.

        Cancellation: as for :meth:`read`.
        """
        ...

    async def ack(self, group: str, ids: Sequence[str], *, queue: str | None = None) -> int:
        """Acknowledge entries: drop them from the pending list (and delete them
        from the stream when the backend deletes on ack).

        Idempotent: unknown or already-acked ids are ignored.

        Returns:
            How many were pending and are now acked.
        """
        ...

    async def claim_stale(
        self, group: str, consumer: str, min_idle: float, count: int, *, queue: str | None = None
    ) -> list[QueueEntry]:
        """Take over up to ``count`` entries pending (in any consumer of the
        group) for at least ``min_idle`` seconds, oldest id first.

        Each returned entry's delivery count has grown by one and its idle time
        is reset. Pending ids whose entry was deleted from the stream are
        dropped from the pending list and not returned.

        Cancellation: entries may have moved to ``consumer`` without being
        returned; they will be found again after another ``min_idle``.
        """
        ...

    async def refresh(
        self, group: str, consumer: str, ids: Sequence[str], *, queue: str | None = None
    ) -> list[str]:
        """Reset the idle time of pending ids and assign them to ``consumer``,
        without changing delivery counts, so they are not claimed while running.

        Ids not pending are ignored; pending ids whose entry was deleted from the
        stream are dropped from the pending list and not returned (as ``XCLAIM``
        does on Redis >= 7). One round trip for all ids.

        Returns:
            The ids that were pending.
        """
        ...

    async def length(self, group: str, *, queue: str | None = None) -> int:
        """Entries in the group's stream of ``queue`` (acked entries count until deleted)."""
        ...

    async def stream_groups(self, group: str, *, queue: str | None = None) -> list[str]:
        """Names of every consumer group that reads ``group``'s stream, sorted
        (``group`` itself included once it exists; none when the stream does not)."""
        ...

    async def group_info(self, group: str, *, queue: str | None = None) -> GroupInfo:
        """Pending count, lag and per-consumer pending/idle of one group (empty
        if it does not exist)."""
        ...

    async def delete_consumer(self, group: str, consumer: str, *, queue: str | None = None) -> int:
        """Remove a consumer from the group, unconditionally: its pending
        entries are dropped from the pending list (claim them first to keep
        them). For tools and tests; the runner uses :meth:`delete_idle_consumer`.

        Returns:
            How many pending entries it had.
        """
        ...

    async def delete_idle_consumer(
        self, group: str, consumer: str, min_idle: float, *, queue: str | None = None
    ) -> bool:
        """Remove a consumer only if it has nothing pending and has been idle
        for at least ``min_idle`` seconds, checked and done in one atomic step
        (a read by that consumer can never fall between the check and the
        delete, so no pending entry is ever dropped).

        Returns:
            Whether it was removed (``False`` for an unknown group or consumer).

        Cancellation: the consumer may have been removed; a repeat returns ``False``.
        """
        ...

    async def get_metrics(self, group: str, *, queue: str | None = None) -> QueueMetrics:
        """The group's stream: its size, claim-delay statistics over the newest
        1,000 deliveries, and the pending/lag/consumers of every group reading it."""
        ...

    async def dead_letter(
        self,
        group: str,
        message_id: str,
        payload: bytes | None,
        error: str,
        *,
        queue: str | None = None,
    ) -> str:
        """Append a failed entry to the group's dead-letter stream.

        Returns:
            Its id in the dead-letter stream.

        Cancellation: the entry may have been added; a repeat adds it twice.
        """
        ...

    async def dead_letters(
        self,
        group: str,
        count: int = 100,
        *,
        after: str | None = None,
        queue: str | None = None,
    ) -> list[DeadLetter]:
        """The oldest ``count`` entries of the group's dead-letter stream (shared,
        like the stream, with the other groups that read it); with ``after``, the
        oldest ones whose id comes after it (to read the stream page by page)."""
        ...


@runtime_checkable
class SharedState(Protocol):
    """Fleet-wide state. Keys follow ``taskrunner._keys`` (the documented layout)."""

    def now(self) -> float:
        """The backend's clock in seconds: unix time on Redis, trio's clock in memory."""
        ...

    # Leader lease -------------------------------------------------------
    async def acquire_lease(self, group: str, owner: str, ttl: float) -> bool:
        """Take the group's lease for ``owner`` if nobody holds it (``SET NX PX``)."""
        ...

    async def renew_lease(self, group: str, owner: str, ttl: float) -> bool:
        """Extend the lease to ``ttl`` from now, only if ``owner`` holds it."""
        ...

    async def resign_lease(self, group: str, owner: str) -> bool:
        """Release the lease, only if ``owner`` holds it."""
        ...

    async def lease_owner(self, group: str) -> str | None:
        """Who holds the group's lease, if anyone."""
        ...

    # Delayed set --------------------------------------------------------
    async def add_delayed(
        self, group: str, member: bytes, run_at: float, *, task_id: str | None = None
    ) -> None:
        """Add a member (DelayedTask JSON) to the group's delayed set.

        With ``task_id`` (the member's id), also index it under that id
        (``taskrunner:<group>:delayed_ids``), in the same atomic step, so
        :meth:`Tracking.lookup <taskrunner.backends.Tracking.lookup>` and
        :meth:`~taskrunner.backends.Tracking.cancel` find it.

        Cancellation: the member (and its index entry) may have been added; a
        repeat is harmless.
        """
        ...

    async def due_delayed(
        self, group: str, until: float, limit: int, offset: int = 0
    ) -> list[bytes]:
        """Up to ``limit`` members whose run-at time is ``<= until``, earliest first,
        skipping the first ``offset`` of them."""
        ...

    async def next_delayed_at(self, group: str) -> float | None:
        """The earliest run-at time in the group's delayed set, if any."""
        ...

    async def move_delayed(self, group: str, moves: Sequence[DelayedMove]) -> int:
        """Atomically, for each move: if the member is still in the set and its
        lock (if any) can be taken (it is free, or held with the move's own
        token, whose lifetime then starts again), remove the member and add its
        message to the stream of the move's queue; for a move with a ``task_id``
        that the delayed id index holds, replace that index entry by one of the
        entry index (task id -> the new stream id). A process that dies mid-call
        moves all or none.

        Returns:
            How many members were moved.
        """
        ...

    # Timing metrics hash ------------------------------------------------
    async def increment_metrics(self, group: str, increments: Sequence[TimingIncrement]) -> None:
        """Add timings to the group's metrics hash, in one round trip.

        For each increment, atomically, with ``ms``, ``us`` and ``n`` its
        fields' values (a missing field is 0): cut ``ms`` to a whole number
        (a float left by taskrunner 0.1.0); if ``us // 1000 != ms`` (someone
        else changed ``ms``: a Go worker, a Go leader's reset), set ``us`` to
        ``ms * 1000``; then add ``micros`` to ``us``, set ``ms`` to
        ``us // 1000`` and add ``count`` to ``n``. Every field holds an
        integer afterwards. :func:`taskrunner._wire.add_timing` is the rule.

        Cancellation: some or all of the increments may have been applied; a
        repeat counts them again.
        """
        ...

    async def read_metrics(self, group: str) -> dict[str, float]:
        """Every numeric field of the group's metrics hash (others are skipped)."""
        ...

    async def reset_metrics(self, group: str, fields: Sequence[str]) -> None:
        """Set the given fields of the metrics hash to 0."""
        ...

    # Replication heartbeats ---------------------------------------------
    # ``group`` names the instance's consumer group. The go layout ignores it (a
    # heartbeat is every group's, ``taskrunner:replication:<host>``); the cluster
    # layout needs it for writes (``taskrunner:{<group>}:replication:<host>``, in the
    # group's slot) and counts one group's with it, every group's without.
    async def heartbeat(
        self, host: str, instance_id: str, ttl: float, *, group: str | None = None
    ) -> str | None:
        """Set the host's heartbeat key to ``instance_id`` with a lifetime of
        ``ttl``, unless it holds another instance's id: atomically, so two
        instances of one host never both believe they hold it.

        Returns:
            ``None`` when the key was set (or renewed); else the id it holds,
            and the key is left alone.

        Raises:
            ValueError: the cluster layout and no ``group``.

        Cancellation: the key may have been set; a repeat renews it.
        """
        ...

    async def heartbeat_holder(
        self, host: str, *, group: str | None = None
    ) -> tuple[str, float] | None:
        """The instance id in the host's heartbeat key and its seconds left, or
        ``None`` when there is no live key. A holder that renews its key shows
        as seconds left going up again."""
        ...

    async def remove_heartbeat(
        self, host: str, instance_id: str, *, group: str | None = None
    ) -> None:
        """Delete this instance's heartbeat key, only if it still holds ``instance_id``."""
        ...

    async def count_heartbeats(self, *, group: str | None = None) -> int:
        """Live heartbeat keys: every instance of every group (go layout, or no
        ``group``), or ``group``'s instances (cluster layout)."""
        ...

    # Unique locks -------------------------------------------------------
    async def acquire_lock(self, key: str, token: str, ttl: float) -> bool:
        """Take a lock that expires after ``ttl`` unless released (``SET NX PX``)."""
        ...

    async def release_lock(self, key: str, token: str) -> bool:
        """Delete the lock only if it holds ``token`` (compare-and-delete)."""
        ...

    # Worker tuning ------------------------------------------------------
    async def publish_tuning(self, group: str, capacity: int, ttl: float) -> None:
        """Publish the leader's chosen pool capacity for ``ttl`` seconds."""
        ...

    async def read_tuning(self, group: str) -> int | None:
        """The published capacity, if one is live."""
        ...


@runtime_checkable
class Backend(
    MessageQueue,
    SharedState,
    Deferral,
    FlowControl,
    TaskCatalog,
    Schedules,
    Tracking,
    Protocol,
):
    """What a :class:`taskrunner.TaskRunner` needs: a queue, shared state, the step
    that re-queues a waiting run (:class:`Deferral`), flow control, the task
    catalog it publishes what it serves in, the periodic schedules' state
    (:class:`~taskrunner.backends.Schedules`), and the tracking of tasks by id."""

    async def aclose(self) -> None:
        """Release connections. Idempotent."""
        ...


@runtime_checkable
class Inspection(Protocol):
    """Operator reads and operations over the whole store, for tools, not for serving.

    ``taskrunner.admin`` and the operator commands use only this (never a
    client of the store), so they work on any backend that implements it;
    a backend that does not still serves tasks. The values returned are
    frozen snapshots (:mod:`taskrunner.backends._inspection`).

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
        (see :func:`~taskrunner.backends._inspection.group_named_by`): its own
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
        :class:`~taskrunner.backends._inspection.KeyKind`, the keys found by
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
        value, metrics hash, and its tasks' results and notices. Other groups'
        keys are never touched. Unique locks and (with ``heartbeats``)
        heartbeat keys: in the go layout they are not per group, and every one is
        deleted; in the cluster layout the group's own are.

        Returns:
            The names deleted (those :meth:`list_keys` found, less those kept),
            in its order.

        Cancellation: some of the keys may have been deleted; a repeat deletes
        the rest.
        """
        ...
