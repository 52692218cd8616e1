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

Shutdown: the loop is cancelled last, after the workers drained, and its
final flush runs shielded with a timeout so nothing finished stays un-acked
unless the backend is unreachable.
"""

from __future__ import annotations

import logging
from collections.abc import Collection

import trio

from taskrunner._config import ConfigHolder
from taskrunner._execution.backoff import backoff_delay
from taskrunner.backends import Backend, Outcome, RunOutcome
from taskrunner.errors import BackendError

log = logging.getLogger(__name__)

FINAL_FLUSH_TIMEOUT = 10.0

Entry = tuple[str | None, str]
"""(queue, stream id): an entry to ack."""


class Acker:
    """Batches a runner's acks (see the module docstring).

    Args:
        backend: Where to ack.
        config: The runner's configuration (the group acked in).
    """

    def __init__(self, backend: Backend, config: ConfigHolder) -> None:
        self._backend = backend
        self._config = config
        self._ids: list[Entry] = []
        # (entry, (key, token)): each lock is released after its entry's ack
        self._locks: list[tuple[Entry, tuple[str, str]]] = []
        self._outcomes: list[RunOutcome] = []  # recorded after their entry's ack
        self._tracked: list[tuple[Entry, Outcome]] = []  # recorded with their entry's ack
        self._wake = trio.Event()
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
    ) -> None:
        """Queue ``entry_id`` (of ``queue``) for acknowledgement (with ``tracked``,
        recorded with the ack), ``lock`` for release after it, and a periodic run's
        ``outcome`` to record after it."""
        entry = (queue, entry_id)
        self._ids.append(entry)
        if lock is not None:
            self._locks.append((entry, lock))
        if outcome is not None:
            self._outcomes.append(outcome)
        if tracked is not None:
            self._tracked.append((entry, tracked))
        self._wake.set()

    @property
    def backlog(self) -> int:
        return len(self._ids)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Send acks until cancelled, then flush what is left (shielded, bounded)."""
        task_status.started()
        failures = 0
        try:
            while True:
                await self._wake.wait()
                self._wake = trio.Event()
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
                    self._wake.set()
                    await trio.sleep(delay)
        finally:
            with trio.CancelScope(shield=True) as scope:
                scope.deadline = trio.current_time() + FINAL_FLUSH_TIMEOUT
                try:
                    while self._ids or self._locks or self._outcomes or self._tracked:
                        await self._flush()
                except BackendError as exc:
                    log.error("final ack flush failed (%s)", exc)
            if self._ids:
                log.error(
                    "%d finished message(s) left un-acked at shutdown; they will be "
                    "delivered again after reclaim_delay",
                    len(self._ids),
                )

    async def _send(self, queue: str | None, ids: list[Entry], tracked: list[Outcome]) -> None:
        """Ack ``ids`` (all of ``queue``), with their tracked outcomes if any."""
        plain = [entry_id for _, entry_id in ids]
        if tracked:
            await self._backend.finish(self._group, plain, tracked, queue=queue)
        else:
            await self._backend.ack(self._group, plain, queue=queue)

    async def _flush(self) -> None:
        entries, self._ids = self._ids, []
        locks, self._locks = self._locks, []
        outcomes, self._outcomes = self._outcomes, []
        tracked, self._tracked = self._tracked, []
        refused: set[Entry] = set()
        queues = list(dict.fromkeys(queue for queue, _ in entries))  # first seen first
        for at, queue in enumerate(queues):
            ids = [entry for entry in entries if entry[0] == queue]
            try:
                await self._send(queue, ids, [o for e, o in tracked if e[0] == queue])
            except BackendError as exc:
                if exc.retryable:  # acks are idempotent: this queue and the rest, next try
                    later = [e for e in entries if e[0] in queues[at:]]
                    self._put_back(later, locks, tracked, refused)
                    self._outcomes[:0] = outcomes
                    raise
                await self._ack_one_by_one(ids, entries, locks, tracked, queues[at:], exc, refused)
            except BaseException:
                later = [e for e in entries if e[0] in queues[at:]]
                self._put_back(later, locks, tracked, refused)
                self._outcomes[:0] = outcomes
                raise
            else:
                self.acked += len(ids)
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
        queues_left: list[str | None],
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
        log.error(
            "ack of message %s refused (%s); dropping it, since retrying cannot fix that: "
            "it will be delivered again after reclaim_delay",
            entry[1],
            error,
        )
