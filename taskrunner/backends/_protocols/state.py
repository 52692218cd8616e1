"""The :class:`SharedState` protocol: the small amount of fleet-wide state.

Leases, the delayed set, metrics, heartbeats, locks, the published pool size and the
instance count asked of an autoscaler. See
:mod:`taskrunner.backends._protocols` for the conventions every protocol follows.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from taskrunner._wire import TimingIncrement
from taskrunner.backends._protocols.events import EventBatch
from taskrunner.backends._protocols.queue import DelayedMove


@runtime_checkable
class SharedState(Protocol):
    """Fleet-wide state. Keys follow ``taskrunner._keys`` (the documented layout)."""

    def now(self) -> float:
        """The backend's clock in seconds: unix time on Redis, trio's clock in memory."""
        ...

    def unix_time(self, t: float) -> float:
        """``t``, a time on the backend's clock (:meth:`now`, a stream id's time, a
        delayed score), in unix seconds: what is reported to a user
        (``TaskContext.dispatched_at``, ``TaskInfo``'s times, a dead letter's
        ``dead_at``, a schedule's ``last_fired_at``).

        The identity on Redis (its clock is unix time); in memory, ``t`` plus the
        backend's wall-clock origin (unix seconds at its creation minus trio's
        clock then), so ``unix_time(now())`` is close to ``time.time()`` and, under
        ``MockClock``, exactly as deterministic as trio's clock. Never blocks, no I/O.
        """
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
        self,
        group: str,
        member: bytes,
        run_at: float,
        *,
        task_id: str | None = None,
        events: EventBatch | None = None,
    ) -> None:
        """Add a member (DelayedTask JSON) to the group's delayed set; with ``events``,
        write them to the group's event stream in the same round trip.

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

    # Autoscaling --------------------------------------------------------
    async def publish_desired_instances(self, group: str, count: int, ttl: float) -> None:
        """Publish the instance count the leader asks the autoscaler for (``target_wait``)
        for ``ttl`` seconds, replacing any earlier value (``taskrunner:<group>:desired_instances``;
        ours, a Go worker never reads it)."""
        ...

    async def read_desired_instances(self, group: str) -> int | None:
        """The published instance count, if one is live (a value that is not an
        integer counts as none)."""
        ...

    # Sharding -----------------------------------------------------------
    async def read_shard_count(self, group: str) -> int | None:
        """The shard count recorded for ``group`` (``taskrunner:{<group>}:shards``, in the
        cluster layout whatever the backend's; ours, Go never reads it), or ``None`` when
        none is (a value that is not an integer counts as none)."""
        ...

    async def record_shard_count(self, group: str, count: int) -> None:
        """Record ``count`` as ``group``'s shard count, with no expiry; 1 deletes the
        record (an unsharded group has none)."""
        ...
