"""The :class:`MessageQueue` protocol: streams read by consumer groups, and its values.

Every queue method takes the consumer ``group`` first, and a ``queue`` keyword: the backend
resolves the two to one stream (:meth:`MessageQueue.stream_keys`). See
:mod:`taskrunner.backends._protocols` for the conventions every protocol follows.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

import attrs

from taskrunner._keys import KeyLayout, StreamKeys
from taskrunner.backends._protocols.events import EventBatch


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
    group: str | None = None
    """The shard it was read in, by its tag (set by the runner's fetcher of a sharded
    group, :mod:`taskrunner._serve.shard_fetch`); ``None``: the runner's group."""
    inputs: tuple[bytes, bytes] | None = None
    """A workflow step's inputs carried in its entry, when its one parent's finish
    queued it (a chain's next step; Redis: the entry's optional ``step_parent`` and
    ``step_result`` fields): the parent's header (JSON: its step id, its policy, and
    whether this step has a payload of its own) and its result document. The worker
    then reads nothing before the run. ``None``: inputs, if any, are read."""


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
    """The id it had in the main stream: the last entry's, after a retry through the
    delayed set (each attempt re-queued is a new entry)."""
    group: str
    payload: bytes | None
    error: str
    task_id: str | None = None
    """The task's id, the same across its retries (what ``dispatch`` returned): the
    optional ``task_id`` field; ``None`` for a letter written without one (before 0.3,
    or an entry whose task id was not known)."""


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
        self,
        group: str,
        payloads: Sequence[bytes],
        *,
        queue: str | None = None,
        events: EventBatch | None = None,
    ) -> list[str]:
        """Append one entry per payload (field ``payload``) to the group's stream, in order.

        With ``events`` (one ``dispatched`` event per payload), also write them to the
        group's event stream in the same round trip, each event without a task id
        taking its entry's id (see :mod:`taskrunner.backends._protocols.events`).

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

    async def ack(
        self,
        group: str,
        ids: Sequence[str],
        *,
        queue: str | None = None,
        events: EventBatch | None = None,
    ) -> int:
        """Acknowledge entries: drop them from the pending list (and delete them
        from the stream when the backend deletes on ack); with ``events``, write them
        to the group's event stream in the same round trip.

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
        task_id: str | None = None,
    ) -> str:
        """Append a failed entry to the group's dead-letter stream, with the task's
        id (``task_id``) when it is known.

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
