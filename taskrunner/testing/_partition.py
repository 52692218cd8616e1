"""A backend wrapper whose link can be cut, for partition and crash tests.

Theory of operation. :class:`PartitionedBackend` implements
:class:`~taskrunner.backends.Backend` by delegating every call to the backend
behind it, through a link that :attr:`~PartitionedBackend.cut` breaks: a call
made while the link is cut is never sent
(:class:`~taskrunner.errors.BackendError` with ``maybe_applied`` false), and a
call in flight when it is cut loses its reply (a ``BackendError`` that may
have been applied), exactly as a lost connection would. Every call is a trio
checkpoint first, as a network round trip would be. The two clock-and-name
methods, :meth:`~PartitionedBackend.now` and
:meth:`~PartitionedBackend.stream_keys`, do no I/O and always answer. The
operator reads of :class:`~taskrunner.backends.Inspection` go through the same
link, when the backend behind it implements them.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from functools import partial
from typing import TypeVar

import trio

from taskrunner._dispatch.guards import require_inspection
from taskrunner._flow.limits import Paused, RateLimit
from taskrunner._keys import KeyLayout, StreamKeys
from taskrunner._wire import CatalogDocument, TimingIncrement
from taskrunner.backends import (
    Admission,
    Backend,
    Cancellation,
    DeadLetter,
    DelayedMove,
    EventBatch,
    FireResult,
    GroupInfo,
    Heartbeat,
    Inspection,
    KeyCounts,
    KeyInfo,
    Lease,
    MessageCounts,
    Outcome,
    ParkOutcome,
    QueueEntry,
    QueueMetrics,
    Replay,
    Replayed,
    RunOutcome,
    ScheduleRecords,
    ScheduleState,
    SlotHold,
    TaskSnapshot,
    TickFire,
)
from taskrunner.errors import BackendError

__all__ = ["PartitionedBackend"]

T = TypeVar("T")


class PartitionedBackend(Backend, Inspection):
    """A backend seen through a link that can be cut.

    While :attr:`cut` is true every call raises
    :class:`~taskrunner.errors.BackendError`, as a lost connection would (a
    call in flight when the link is cut loses its reply). Several runners can
    share one backend, each through its own link, to simulate a network
    partition or a crashed process deterministically under ``MockClock``::

        link = PartitionedBackend(backend)
        runner = TaskRunner(config, link)
        ...
        link.cut = True   # the runner can no longer reach the store

    Args:
        backend: The backend behind the link.
    """

    def __init__(self, backend: Backend) -> None:
        self.backend = backend
        """The backend behind the link (a test may call it directly)."""
        self.cut = False
        """Whether the link is cut now."""

    @property
    def delete_on_ack(self) -> bool:
        """Whether the backend behind the link deletes entries on ack."""
        return bool(getattr(self.backend, "delete_on_ack", False))

    async def _through(self, name: str, call: Callable[[], Awaitable[T]]) -> T:
        await trio.lowlevel.checkpoint()
        if self.cut:
            raise BackendError(f"partitioned: {name} not sent", maybe_applied=False)
        result = await call()
        if self.cut:  # the reply is lost on the way back
            raise BackendError(f"partitioned: no reply to {name}")
        return result

    # No I/O: always answered ----------------------------------------------------
    def now(self) -> float:
        return self.backend.now()

    def unix_time(self, t: float) -> float:
        return self.backend.unix_time(t)

    def stream_keys(self, group: str, queue: str | None = None) -> StreamKeys:
        return self.backend.stream_keys(group, queue)

    @property
    def key_layout(self) -> KeyLayout:
        return self.backend.key_layout

    @property
    def cluster(self) -> bool:
        return self.backend.cluster

    def use_key_layout(self, key_layout: KeyLayout | None) -> KeyLayout:
        return self.backend.use_key_layout(key_layout)

    # MessageQueue ----------------------------------------------------------------
    async def add(
        self,
        group: str,
        payloads: Sequence[bytes],
        *,
        queue: str | None = None,
        events: EventBatch | None = None,
    ) -> list[str]:
        return await self._through(
            "add", partial(self.backend.add, group, payloads, queue=queue, events=events)
        )

    async def read(
        self, group: str, consumer: str, count: int, block: float, *, queue: str | None = None
    ) -> list[QueueEntry]:
        return await self._through(
            "read", partial(self.backend.read, group, consumer, count, block, queue=queue)
        )

    async def read_many(
        self,
        group: str,
        consumer: str,
        queues: Sequence[str],
        quotas: Sequence[int],
        total: int,
        block: float,
    ) -> list[QueueEntry]:
        return await self._through(
            "read_many",
            partial(self.backend.read_many, group, consumer, queues, quotas, total, block),
        )

    async def ack(
        self,
        group: str,
        ids: Sequence[str],
        *,
        queue: str | None = None,
        events: EventBatch | None = None,
    ) -> int:
        return await self._through(
            "ack", partial(self.backend.ack, group, ids, queue=queue, events=events)
        )

    async def claim_stale(
        self, group: str, consumer: str, min_idle: float, count: int, *, queue: str | None = None
    ) -> list[QueueEntry]:
        return await self._through(
            "claim_stale",
            partial(self.backend.claim_stale, group, consumer, min_idle, count, queue=queue),
        )

    async def refresh(
        self, group: str, consumer: str, ids: Sequence[str], *, queue: str | None = None
    ) -> list[str]:
        return await self._through(
            "refresh", partial(self.backend.refresh, group, consumer, ids, queue=queue)
        )

    async def length(self, group: str, *, queue: str | None = None) -> int:
        return await self._through("length", partial(self.backend.length, group, queue=queue))

    async def stream_groups(self, group: str, *, queue: str | None = None) -> list[str]:
        return await self._through(
            "stream_groups", partial(self.backend.stream_groups, group, queue=queue)
        )

    async def group_info(self, group: str, *, queue: str | None = None) -> GroupInfo:
        return await self._through(
            "group_info", partial(self.backend.group_info, group, queue=queue)
        )

    async def delete_consumer(self, group: str, consumer: str, *, queue: str | None = None) -> int:
        return await self._through(
            "delete_consumer", partial(self.backend.delete_consumer, group, consumer, queue=queue)
        )

    async def delete_idle_consumer(
        self, group: str, consumer: str, min_idle: float, *, queue: str | None = None
    ) -> bool:
        return await self._through(
            "delete_idle_consumer",
            partial(self.backend.delete_idle_consumer, group, consumer, min_idle, queue=queue),
        )

    async def get_metrics(self, group: str, *, queue: str | None = None) -> QueueMetrics:
        return await self._through(
            "get_metrics", partial(self.backend.get_metrics, group, queue=queue)
        )

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
        return await self._through(
            "dead_letter",
            partial(
                self.backend.dead_letter,
                group,
                message_id,
                payload,
                error,
                queue=queue,
                task_id=task_id,
            ),
        )

    async def dead_letters(
        self,
        group: str,
        count: int = 100,
        *,
        after: str | None = None,
        queue: str | None = None,
    ) -> list[DeadLetter]:
        return await self._through(
            "dead_letters",
            partial(self.backend.dead_letters, group, count, after=after, queue=queue),
        )

    # SharedState -----------------------------------------------------------------
    async def acquire_lease(self, group: str, owner: str, ttl: float) -> bool:
        return await self._through(
            "acquire_lease", partial(self.backend.acquire_lease, group, owner, ttl)
        )

    async def renew_lease(self, group: str, owner: str, ttl: float) -> bool:
        return await self._through(
            "renew_lease", partial(self.backend.renew_lease, group, owner, ttl)
        )

    async def resign_lease(self, group: str, owner: str) -> bool:
        return await self._through("resign_lease", partial(self.backend.resign_lease, group, owner))

    async def lease_owner(self, group: str) -> str | None:
        return await self._through("lease_owner", partial(self.backend.lease_owner, group))

    async def add_delayed(
        self,
        group: str,
        member: bytes,
        run_at: float,
        *,
        task_id: str | None = None,
        events: EventBatch | None = None,
    ) -> None:
        await self._through(
            "add_delayed",
            partial(
                self.backend.add_delayed, group, member, run_at, task_id=task_id, events=events
            ),
        )

    async def due_delayed(
        self, group: str, until: float, limit: int, offset: int = 0
    ) -> list[bytes]:
        return await self._through(
            "due_delayed", partial(self.backend.due_delayed, group, until, limit, offset)
        )

    async def next_delayed_at(self, group: str) -> float | None:
        return await self._through("next_delayed_at", partial(self.backend.next_delayed_at, group))

    async def move_delayed(self, group: str, moves: Sequence[DelayedMove]) -> int:
        return await self._through("move_delayed", partial(self.backend.move_delayed, group, moves))

    async def increment_metrics(self, group: str, increments: Sequence[TimingIncrement]) -> None:
        await self._through(
            "increment_metrics", partial(self.backend.increment_metrics, group, increments)
        )

    async def read_metrics(self, group: str) -> dict[str, float]:
        return await self._through("read_metrics", partial(self.backend.read_metrics, group))

    async def reset_metrics(self, group: str, fields: Sequence[str]) -> None:
        await self._through("reset_metrics", partial(self.backend.reset_metrics, group, fields))

    async def heartbeat(
        self, host: str, instance_id: str, ttl: float, *, group: str | None = None
    ) -> str | None:
        return await self._through(
            "heartbeat", partial(self.backend.heartbeat, host, instance_id, ttl, group=group)
        )

    async def heartbeat_holder(
        self, host: str, *, group: str | None = None
    ) -> tuple[str, float] | None:
        return await self._through(
            "heartbeat_holder", partial(self.backend.heartbeat_holder, host, group=group)
        )

    async def remove_heartbeat(
        self, host: str, instance_id: str, *, group: str | None = None
    ) -> None:
        await self._through(
            "remove_heartbeat",
            partial(self.backend.remove_heartbeat, host, instance_id, group=group),
        )

    async def count_heartbeats(self, *, group: str | None = None) -> int:
        return await self._through(
            "count_heartbeats", partial(self.backend.count_heartbeats, group=group)
        )

    async def acquire_lock(self, key: str, token: str, ttl: float) -> bool:
        return await self._through(
            "acquire_lock", partial(self.backend.acquire_lock, key, token, ttl)
        )

    async def release_lock(self, key: str, token: str) -> bool:
        return await self._through("release_lock", partial(self.backend.release_lock, key, token))

    async def publish_tuning(self, group: str, capacity: int, ttl: float) -> None:
        await self._through(
            "publish_tuning", partial(self.backend.publish_tuning, group, capacity, ttl)
        )

    async def read_tuning(self, group: str) -> int | None:
        return await self._through("read_tuning", partial(self.backend.read_tuning, group))

    async def publish_desired_instances(self, group: str, count: int, ttl: float) -> None:
        await self._through(
            "publish_desired_instances",
            partial(self.backend.publish_desired_instances, group, count, ttl),
        )

    async def read_desired_instances(self, group: str) -> int | None:
        return await self._through(
            "read_desired_instances", partial(self.backend.read_desired_instances, group)
        )

    async def read_shard_count(self, group: str) -> int | None:
        return await self._through(
            "read_shard_count", partial(self.backend.read_shard_count, group)
        )

    async def record_shard_count(self, group: str, count: int) -> None:
        await self._through(
            "record_shard_count", partial(self.backend.record_shard_count, group, count)
        )

    # Deferral ----------------------------------------------------------------------
    async def defer(
        self,
        group: str,
        entry_id: str,
        member: bytes,
        run_at: float,
        *,
        queue: str | None = None,
        task_id: str | None = None,
    ) -> bool:
        return await self._through(
            "defer",
            partial(
                self.backend.defer, group, entry_id, member, run_at, queue=queue, task_id=task_id
            ),
        )

    # FlowControl -------------------------------------------------------------------
    async def admit(
        self,
        group: str,
        task: str,
        holder: str,
        *,
        max_concurrency: int | None = None,
        lease: float = 0.0,
        rate: RateLimit | None = None,
        rate_key: str = "",
    ) -> Admission:
        return await self._through(
            "admit",
            partial(
                self.backend.admit,
                group,
                task,
                holder,
                max_concurrency=max_concurrency,
                lease=lease,
                rate=rate,
                rate_key=rate_key,
            ),
        )

    async def renew_slots(self, group: str, holds: Sequence[SlotHold]) -> list[SlotHold]:
        return await self._through("renew_slots", partial(self.backend.renew_slots, group, holds))

    async def release_slots(self, group: str, holds: Sequence[SlotHold]) -> None:
        await self._through("release_slots", partial(self.backend.release_slots, group, holds))

    async def paused(self, group: str) -> Paused:
        return await self._through("paused", partial(self.backend.paused, group))

    async def pause(self, group: str, *, queue: str | None = None, task: str | None = None) -> bool:
        return await self._through(
            "pause", partial(self.backend.pause, group, queue=queue, task=task)
        )

    async def resume(
        self, group: str, *, queue: str | None = None, task: str | None = None
    ) -> bool:
        return await self._through(
            "resume", partial(self.backend.resume, group, queue=queue, task=task)
        )

    async def park(
        self,
        group: str,
        entry_id: str,
        member: bytes,
        run_at: float,
        task: str,
        *,
        queue: str | None = None,
        task_id: str | None = None,
    ) -> ParkOutcome:
        return await self._through(
            "park",
            partial(
                self.backend.park,
                group,
                entry_id,
                member,
                run_at,
                task,
                queue=queue,
                task_id=task_id,
            ),
        )

    # TaskCatalog -------------------------------------------------------------------
    async def publish_catalog(self, group: str, document: CatalogDocument, ttl: float) -> None:
        await self._through(
            "publish_catalog", partial(self.backend.publish_catalog, group, document, ttl)
        )

    async def remove_catalog(self, group: str, host: str) -> None:
        await self._through("remove_catalog", partial(self.backend.remove_catalog, group, host))

    async def read_catalog(self, group: str) -> list[CatalogDocument]:
        return await self._through("read_catalog", partial(self.backend.read_catalog, group))

    # Schedules ---------------------------------------------------------------------
    async def publish_schedule_specs(self, group: str, specs: Mapping[str, bytes]) -> None:
        await self._through(
            "publish_schedule_specs", partial(self.backend.publish_schedule_specs, group, specs)
        )

    async def start_schedules(
        self, group: str, owner: str, names: Sequence[str], baseline: float
    ) -> dict[str, ScheduleState] | None:
        return await self._through(
            "start_schedules",
            partial(self.backend.start_schedules, group, owner, names, baseline),
        )

    async def fire_ticks(
        self, group: str, owner: str, fires: Sequence[TickFire]
    ) -> list[FireResult]:
        return await self._through(
            "fire_ticks", partial(self.backend.fire_ticks, group, owner, fires)
        )

    async def add_tick(self, group: str, fire: TickFire) -> str | None:
        return await self._through("add_tick", partial(self.backend.add_tick, group, fire))

    async def record_run_outcomes(self, group: str, outcomes: Sequence[RunOutcome]) -> None:
        await self._through(
            "record_run_outcomes", partial(self.backend.record_run_outcomes, group, outcomes)
        )

    async def read_schedules(self, group: str) -> ScheduleRecords:
        return await self._through("read_schedules", partial(self.backend.read_schedules, group))

    # Tracking ----------------------------------------------------------------------
    async def finish(
        self,
        group: str,
        ids: Sequence[str],
        outcomes: Sequence[Outcome],
        *,
        queue: str | None = None,
        events: EventBatch | None = None,
    ) -> int:
        return await self._through(
            "finish",
            partial(self.backend.finish, group, ids, outcomes, queue=queue, events=events),
        )

    async def wait_result(self, group: str, task_id: str, block: float) -> bytes | None:
        return await self._through(
            "wait_result", partial(self.backend.wait_result, group, task_id, block)
        )

    async def lookup(
        self, group: str, task_id: str, *, queues: Sequence[str] | None = None
    ) -> TaskSnapshot | None:
        return await self._through(
            "lookup", partial(self.backend.lookup, group, task_id, queues=queues)
        )

    async def cancel(
        self, group: str, task_id: str, *, queues: Sequence[str] | None = None
    ) -> Cancellation:
        return await self._through(
            "cancel", partial(self.backend.cancel, group, task_id, queues=queues)
        )

    async def cancel_requested(self, group: str, entry_ids: Sequence[str]) -> list[str]:
        return await self._through(
            "cancel_requested", partial(self.backend.cancel_requested, group, entry_ids)
        )

    async def find_dead_letters(
        self, group: str, ids: Sequence[str], *, queue: str | None = None
    ) -> list[DeadLetter]:
        return await self._through(
            "find_dead_letters", partial(self.backend.find_dead_letters, group, ids, queue=queue)
        )

    async def replay_dead_letters(
        self, group: str, replays: Sequence[Replay], *, queue: str | None = None
    ) -> list[Replayed]:
        return await self._through(
            "replay_dead_letters",
            partial(self.backend.replay_dead_letters, group, replays, queue=queue),
        )

    async def purge_dead_letters(
        self, group: str, ids: Sequence[str] | None = None, *, queue: str | None = None
    ) -> int:
        return await self._through(
            "purge_dead_letters", partial(self.backend.purge_dead_letters, group, ids, queue=queue)
        )

    # Inspection --------------------------------------------------------------------
    def _inspection(self) -> Inspection:
        return require_inspection(self.backend, "PartitionedBackend's inspection")

    async def ping(self) -> float:
        return await self._through("ping", self._inspection().ping)

    async def list_groups(self) -> list[str]:
        return await self._through("list_groups", self._inspection().list_groups)

    async def list_keys(self, group: str) -> list[KeyInfo]:
        return await self._through("list_keys", partial(self._inspection().list_keys, group))

    async def count_keys(self, group: str) -> KeyCounts:
        return await self._through("count_keys", partial(self._inspection().count_keys, group))

    async def list_queues(self, group: str) -> list[str]:
        return await self._through("list_queues", partial(self._inspection().list_queues, group))

    async def count_messages(self, group: str, queues: Iterable[str | None]) -> MessageCounts:
        return await self._through(
            "count_messages", partial(self._inspection().count_messages, group, list(queues))
        )

    async def list_heartbeats(self) -> list[Heartbeat]:
        return await self._through("list_heartbeats", self._inspection().list_heartbeats)

    async def read_lease(self, group: str) -> Lease | None:
        return await self._through("read_lease", partial(self._inspection().read_lease, group))

    async def flush_group(self, group: str, *, heartbeats: bool) -> list[str]:
        return await self._through(
            "flush_group", partial(self._inspection().flush_group, group, heartbeats=heartbeats)
        )

    # Backend -----------------------------------------------------------------------
    async def aclose(self) -> None:
        await self._through("aclose", self.backend.aclose)
