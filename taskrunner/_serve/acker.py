"""Batched acknowledgements.

Workers hand finished message ids to :meth:`Acker.ack`, a synchronous append.
One background task sends whatever has accumulated in one backend call (one
per queue, when messages of several queues finished); while that call is in
flight, new ids pile up for the next one, so the batch size grows with load
by itself and idle latency stays at one round trip. Unique
locks of finished messages are released only after their ack succeeded: a
crash in between leaves the lock to expire (``unique_for``) rather than
letting a duplicate in while the message could still run again. Likewise
the outcomes of runs of periodic schedules (messages carrying ``schedule``)
are recorded after their ack, in one backend call per flush; a retryable
failure keeps them for the next try, any other drops them (the schedule's
in-flight mark then lapses by its ``in_flight_ttl``). Other messages add
nothing to a flush.

A run that leaves something beside its ack (a task that keeps results, an
entry moved from the delayed set, a cancelled run: a "tracked" outcome,
:class:`~taskrunner.backends.Outcome`) is acknowledged with it, atomically,
by :meth:`Tracking.finish <taskrunner.backends.Tracking.finish>`, in the same
single call as the rest of its queue's batch; a batch without them is a plain
``ack``, as it always was.

A failed ack is retried with backoff when the failure may pass (a lost
connection: ``BackendError.retryable``). One that retrying cannot fix (the
store refused the request for what it holds) must not block every later ack
behind it: the batch is acked again one message at a time, and only the
messages refused again are dropped, logged (they are delivered again after
``reclaim_delay``, and their locks are left to expire). A lock whose release
fails is never retried either; it expires after ``unique_for``.

Until its ack lands, a finished run's message stays in the runner's
:class:`~taskrunner._execution.inflight.InFlight`, so the refresher keeps it
from being reclaimed however long the ack takes (``TRYAGAIN`` through a slot
migration, a failover): :meth:`Acker.ack` marks it acking, and the flush drops
it once its ack landed, or was dropped (it is then delivered again, as it was).

Shutdown: the loop is cancelled last, after the workers drained, and its
final flush runs shielded with a timeout so nothing finished stays un-acked
unless the backend is unreachable.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Iterable

import trio

from taskrunner._config import ConfigHolder
from taskrunner._execution.backoff import backoff_delay
from taskrunner._execution.inflight import InFlight
from taskrunner._execution.progress import Reports
from taskrunner._serve.shard_acks import Entry, Stream, running_by_group, send_in_shard
from taskrunner.backends import (
    Backend,
    EventBatch,
    Outcome,
    ProgressUpdate,
    RunOutcome,
)
from taskrunner.errors import BackendError

log = logging.getLogger(__name__)

FINAL_FLUSH_TIMEOUT = 10.0

AT_ONCE_RUNNING = 4
"""Runs running at once up to which an ack with nothing beside it lands at once, in the
worker's step, on a backend that can (:meth:`Acker.ack`). One ``await dispatch`` at a
time keeps one to four workers busy or woken (the fetcher wakes another while the last
one's step is still to come), and a flush would carry one or two acks for a step of
the acker's own; a batch keeps the pool busy, and its flushes carry many."""


class Acker:
    """Batches a runner's acks (see the module docstring).

    Args:
        backend: Where to ack.
        config: The runner's configuration (the group acked in).
        inflight: The runner's running messages: each acked one is kept there, and
            refreshed, until its ack lands (a table of its own when not given).
        reports: The runner's buffered progress and events, written with each flush's
            first call (see :mod:`taskrunner._execution.progress`).
    """

    def __init__(
        self,
        backend: Backend,
        config: ConfigHolder,
        inflight: InFlight | None = None,
        reports: Reports | None = None,
    ) -> None:
        self._backend = backend
        self._config = config
        self._inflight = inflight if inflight is not None else InFlight()
        self.reports = Reports() if reports is None else reports
        """Whose buffered reports and events each flush writes with its first call."""
        self._ids: list[Entry] = []
        # (entry, (key, token)): each lock is released after its entry's ack
        self._locks: list[tuple[Entry, tuple[str, str]]] = []
        self._outcomes: list[RunOutcome] = []  # recorded after their entry's ack
        self._tracked: list[tuple[Entry, Outcome]] = []  # recorded with their entry's ack
        # The loop's task while it is parked, nothing queued; the first ack wakes it.
        # (Not an Event, which cost one made per flush, nor a ParkingLot, whose dict and
        # wake-up generator cost as much again: trio's own reschedule of the one task.)
        self._parked: trio.lowlevel.Task | None = None
        # A backend whose ack can land in the caller's step (in memory: see ack), else
        # None. Read from its class: a proxy's __getattr__ must not lend it its inner
        # backend's, which would skip the proxy's own ack.
        at_once = getattr(type(backend), "ack_at_once", None)
        self._at_once: Callable[..., int | None] | None = (
            None if at_once is None else at_once.__get__(backend)
        )
        self.running: Callable[[], int] | None = None
        """How many runs are running (the crew's count, set by
        :func:`taskrunner._serve.worker.run` while it serves): an ack lands at once
        only while they are at most :data:`AT_ONCE_RUNNING`, since one that many other
        runs' acks would join soon costs less in their flush. ``None`` (no crew):
        whenever the rest allows."""
        self.acked = 0
        self.dropped = 0

    @property
    def _group(self) -> str:
        return self._config.current.consumer_group

    def ack(
        self,
        entry_id: str,
        lock: tuple[str, str] | None = None,
        outcome: RunOutcome | None = None,
        tracked: Outcome | None = None,
        *,
        queue: str | None = None,
        group: str | None = None,
        ended: bool = False,
    ) -> None:
        """Queue ``entry_id`` (of ``queue``, read in ``group``: ``None`` is the runner's
        group, else the shard it was read in) for acknowledgement (with ``tracked``,
        recorded with the ack), ``lock`` for release after it, and a periodic run's
        ``outcome`` to record after it.

        ``ended``: the run's in-flight entry was ended (:meth:`InFlight.end
        <taskrunner._execution.inflight.InFlight.end>`) and nothing releases it later
        (the worker's hot path). It is then not marked acking: an ended entry is
        refreshed until its ack lands and dropped then whatever that mark says, which
        only tells a later :meth:`~taskrunner._execution.inflight.InFlight.release`
        (there is none) to keep it."""
        if (
            self._parked is not None  # idle: nothing queued, no flush under way
            and self._at_once is not None
            and lock is None
            and outcome is None
            and tracked is None
            and not self.reports.holds_anything
            and (self.running is None or self.running() <= AT_ONCE_RUNNING)
            and self._acked_at_once(entry_id, queue, group)
        ):
            return
        entry = ((group, queue), entry_id)
        self._ids.append(entry)
        if not ended:
            # (The runner's own table without a call: every acked run's path.)
            inflight = self._inflight if group is None else self._inflight.of(group)
            inflight.acking(entry_id, queue)
        if lock is not None:
            self._locks.append((entry, lock))
        if outcome is not None:
            self._outcomes.append(outcome)
        if tracked is not None:
            self._tracked.append((entry, tracked))
        if self._parked is not None:
            parked, self._parked = self._parked, None  # woken once: later acks find None
            trio.lowlevel.reschedule(parked)

    def _acked_at_once(self, entry_id: str, queue: str | None, group: str | None) -> bool:
        """Ack ``entry_id`` now, in the caller's step, if the backend can (a flush of
        one with nothing else to send, as :meth:`_flush_simple` would send it a pass
        later, without waking the loop for it): whether it did."""
        assert self._at_once is not None
        try:
            if self._at_once(self._group if group is None else group, (entry_id,), queue) is None:
                return False
        except Exception:  # (a malformed id): the loop's flush decides, as it always did
            return False
        self.acked += 1
        inflight = self._inflight if group is None else self._inflight.of(group)
        inflight.acked_ids(queue, (entry_id,))
        return True

    @property
    def _queued(self) -> bool:
        """Whether anything waits to be sent (after a failed flush, perhaps no id)."""
        return bool(self._ids or self._locks or self._outcomes or self._tracked)

    @property
    def backlog(self) -> int:
        return len(self._ids)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Send acks until cancelled, then flush what is left (shielded, bounded)."""
        task_status.started()
        failures = 0
        try:
            while True:
                if not self._queued:
                    self._parked = trio.lowlevel.current_task()
                    await trio.lowlevel.wait_task_rescheduled(self._unparked)
                else:  # more came during the last flush: one pass, so that still more join
                    await trio.lowlevel.checkpoint()
                try:
                    await self._flush()
                    failures = 0
                except BackendError as exc:
                    failures += 1
                    delay = backoff_delay(failures)
                    log.warning(
                        "ack of %d message(s) failed (%s); retrying in %.2fs",
                        len(self._ids),
                        exc,
                        delay,
                    )
                    await trio.sleep(delay)
        finally:
            with trio.CancelScope(shield=True) as scope:
                scope.deadline = trio.current_time() + FINAL_FLUSH_TIMEOUT
                try:
                    while self._queued:
                        await self._flush()
                except BackendError as exc:
                    log.error("final ack flush failed (%s)", exc)
            # Given up: no longer kept from reclaim (a later serve must not refresh them).
            self._acked(self._ids)
            if self._ids:
                log.error(
                    "%d finished message(s) left un-acked at shutdown; they will be "
                    "delivered again after reclaim_delay",
                    len(self._ids),
                )

    def _unparked(self, _: object) -> trio.lowlevel.Abort:
        """Cancelled while parked (shutdown): no longer there to wake."""
        self._parked = None
        return trio.lowlevel.Abort.SUCCEEDED

    async def _send(
        self,
        stream: Stream,
        ids: list[Entry],
        tracked: list[Outcome],
        events: EventBatch | None = None,
    ) -> None:
        """Ack ``ids`` (all of ``stream``), with their tracked outcomes if any, and
        ``events`` in the same call."""
        plain = [entry_id for _, entry_id in ids]
        shard, queue = stream
        group = self._group
        if shard is not None:  # a sharded group's entry: acked in its shard
            group = shard
            if events is not None:
                await send_in_shard(
                    self._backend, self._group, shard, queue, plain, tracked, events,
                    self._config.current.shards,
                )  # fmt: skip
                return
        if events is not None:
            if tracked:
                await self._backend.finish(group, plain, tracked, queue=queue, events=events)
            else:
                await self._backend.ack(group, plain, queue=queue, events=events)
        elif tracked:
            await self._backend.finish(group, plain, tracked, queue=queue)
        else:
            await self._backend.ack(group, plain, queue=queue)

    def _acked(self, entries: Iterable[Entry]) -> None:
        """The acks of ``entries`` landed, or were given up (:meth:`InFlight.acked`)."""
        for group, keys in running_by_group(entries).items():
            self._inflight.of(group).acked(keys)

    def _take_reports(self) -> EventBatch | None:
        """What the reports buffer holds, for the flush's first call (``None``: nothing)."""
        if not self.reports.holds_anything:
            return None
        progress, events = self.reports.take_for_ack()
        updates = tuple(ProgressUpdate(task_id=t, progress=p) for t, p in progress.items())
        maxlen = self._config.current.events_maxlen
        return EventBatch(events=tuple(events), maxlen=maxlen, progress=updates)

    def _put_back_reports(self, batch: EventBatch) -> None:
        progress = {u.task_id: u.progress for u in batch.progress}
        self.reports.put_back_for_ack(progress, list(batch.events))

    async def _flush(self) -> None:
        entries, self._ids = self._ids, []
        if not (self._locks or self._outcomes):
            stream: Stream = entries[0][0] if entries else (None, None)
            if all(entry[0] == stream for entry in entries):
                # The common case: one queue's batch, with no lock to release after it.
                tracked_only, self._tracked = self._tracked, []
                await self._flush_simple(stream, entries, tracked_only)
                return
        locks, self._locks = self._locks, []
        outcomes, self._outcomes = self._outcomes, []
        tracked, self._tracked = self._tracked, []
        batch = self._take_reports() if entries else None  # with the flush's first call
        refused: set[Entry] = set()
        queues = list(dict.fromkeys(queue for queue, _ in entries))  # first seen first
        for at, queue in enumerate(queues):
            ids = [entry for entry in entries if entry[0] == queue]
            try:
                await self._send(queue, ids, [o for e, o in tracked if e[0] == queue], batch)
            except BackendError as exc:
                if batch is not None:  # not known to be written: with the next flush
                    self._put_back_reports(batch)
                    batch = None
                if exc.retryable:  # acks are idempotent: this queue and the rest, next try
                    later = [e for e in entries if e[0] in queues[at:]]
                    self._put_back(later, locks, tracked, refused)
                    self._outcomes[:0] = outcomes
                    raise
                await self._ack_one_by_one(ids, entries, locks, tracked, queues[at:], exc, refused)
            except BaseException:
                if batch is not None:
                    self._put_back_reports(batch)
                later = [e for e in entries if e[0] in queues[at:]]
                self._put_back(later, locks, tracked, refused)
                self._outcomes[:0] = outcomes
                raise
            else:
                self.acked += len(ids)
                self._acked(ids)
                batch = None
        for done, (entry, (key, token)) in enumerate(locks):
            if entry in refused:
                continue  # not acked, so it may run again: its lock expires by itself
            try:
                await self._backend.release_lock(key, token)
            except BackendError as exc:
                log.warning("could not release unique lock %r (%s); it expires by itself", key, exc)
            except BaseException:
                # Cancelled (shutdown): the final flush releases the rest.
                self._locks[:0] = locks[done:]
                self._outcomes[:0] = outcomes
                raise
        refused_ids = {entry_id for _, entry_id in refused}
        outcomes = [run for run in outcomes if run.message_id not in refused_ids]
        if outcomes:
            await self._record(outcomes)

    async def _flush_simple(
        self, stream: Stream, entries: list[Entry], tracked: list[tuple[Entry, Outcome]]
    ) -> None:
        """:meth:`_flush` of ``entries`` of one ``stream`` (group and queue) with no
        lock or periodic outcome beside them (their tracked outcomes, if any, are
        recorded with them): one backend call, and none of the bookkeeping of the
        general case."""
        if not entries:
            return
        batch = self._take_reports()  # with the call: one test when nothing is buffered
        try:
            await self._send(stream, entries, [o for _, o in tracked], batch)
        except BackendError as exc:
            if batch is not None:  # not known to be written: with the next flush
                self._put_back_reports(batch)
            if exc.retryable:  # acks are idempotent: all of them, next try
                self._put_back(entries, [], tracked)
                raise
            await self._ack_one_by_one(entries, entries, [], tracked, [stream], exc, set())
        except BaseException:
            if batch is not None:
                self._put_back_reports(batch)
            self._put_back(entries, [], tracked)
            raise
        else:
            self.acked += len(entries)
            # One stream's entries: its table's keys directly, none of _acked's grouping.
            group, queue = stream
            inflight = self._inflight if group is None else self._inflight.of(group)
            inflight.acked_ids(queue, [entry_id for _, entry_id in entries])

    async def _record(self, outcomes: list[RunOutcome]) -> None:
        """Record periodic runs' outcomes (their entries are acked)."""
        try:
            await self._backend.record_run_outcomes(self._group, outcomes)
        except BackendError as exc:
            if exc.retryable:
                self._outcomes[:0] = outcomes
                raise
            log.warning(
                "could not record the outcome of %d periodic run(s) (%s); their "
                "in-flight marks lapse by themselves",
                len(outcomes),
                exc,
            )
        except BaseException:
            self._outcomes[:0] = outcomes
            raise

    async def _ack_one_by_one(
        self,
        ids: list[Entry],
        entries: list[Entry],
        locks: list[tuple[Entry, tuple[str, str]]],
        tracked: list[tuple[Entry, Outcome]],
        queues_left: list[Stream],
        error: BackendError,
        refused: set[Entry],
    ) -> None:
        """Ack ``ids`` (of one queue) one at a time after their batch was refused for
        good (``error``); the entries refused again are dropped and added to
        ``refused``.

        Raises:
            BackendError: a retryable failure; the entries not acked yet (this
                queue's and those of ``queues_left`` after it), and the locks of
                every entry not refused, are back in the queue.
        """
        if len(ids) == 1:
            self._drop(ids[0], error)
            refused.add(ids[0])
            return
        for index, entry in enumerate(ids):
            try:
                await self._send(entry[0], [entry], [o for e, o in tracked if e == entry])
            except BackendError as exc:
                if not exc.retryable:
                    refused.add(entry)
                    self._drop(entry, exc)
                    continue
                later = [e for e in entries if e[0] in queues_left[1:]]
                self._put_back(ids[index:] + later, locks, tracked, refused)
                raise
            except BaseException:
                later = [e for e in entries if e[0] in queues_left[1:]]
                self._put_back(ids[index:] + later, locks, tracked, refused)
                raise
            self.acked += 1
            self._acked((entry,))

    def _put_back(
        self,
        entries: list[Entry],
        locks: list[tuple[Entry, tuple[str, str]]],
        tracked: list[tuple[Entry, Outcome]],
        refused: Collection[Entry] = (),
    ) -> None:
        """Put ``entries`` back for the next flush, with their locks (unless refused)
        and their tracked outcomes."""
        back = set(entries)
        self._ids[:0] = entries
        self._locks[:0] = [lock for lock in locks if lock[0] not in refused]
        self._tracked[:0] = [(e, o) for e, o in tracked if e in back]

    def _drop(self, entry: Entry, error: BackendError) -> None:
        self.dropped += 1
        self._acked((entry,))  # given up: to be reclaimed, as before
        log.error(
            "ack of message %s refused (%s); dropping it, since retrying cannot fix that: "
            "it will be delivered again after reclaim_delay",
            entry[1],
            error,
        )
