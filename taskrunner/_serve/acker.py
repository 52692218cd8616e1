"""Batched acknowledgements.

Workers hand finished message ids to :meth:`Acker.ack`, a synchronous append.
One background task sends whatever has accumulated in one backend call; while
that call is in flight, new ids pile up for the next one, so the batch size
grows with load by itself and idle latency stays at one round trip. Unique
locks of finished messages are released only after their ack succeeded: a
crash in between leaves the lock to expire (``unique_for``) rather than
letting a duplicate in while the message could still run again. Likewise
the outcomes of runs of periodic schedules (messages carrying ``schedule``)
are recorded after their ack, in one backend call per flush; a retryable
failure keeps them for the next try, any other drops them (the schedule's
in-flight mark then lapses by its ``in_flight_ttl``). Other messages add
nothing to a flush.

A failed ack is retried with backoff when the failure may pass (a lost
connection: ``BackendError.retryable``). One that retrying cannot fix (the
store refused the request for what it holds) must not block every later ack
behind it: the batch is acked again one message at a time, and only the
messages refused again are dropped, logged (they are delivered again after
``reclaim_delay``, and their locks are left to expire). A lock whose release
fails is never retried either; it expires after ``unique_for``.

A run that leaves something beside its ack (a task that keeps results, an
entry moved from the delayed set, a cancelled run: a "tracked" outcome,
:class:`~taskrunner.backends.Outcome`) is acknowledged with it, atomically,
by :meth:`Tracking.finish <taskrunner.backends.Tracking.finish>`, in the same
single call as the rest of its batch; a batch without them is a plain
``ack``, as it always was.

Shutdown: the loop is cancelled last, after the workers drained, and its
final flush runs shielded with a timeout so nothing finished stays un-acked
unless the backend is unreachable.
"""

from __future__ import annotations

import logging
from collections.abc import Collection

import trio

from taskrunner._backoff import backoff_delay
from taskrunner._config import ConfigHolder
from taskrunner.backends import Backend, Outcome, RunOutcome
from taskrunner.errors import BackendError

log = logging.getLogger(__name__)

FINAL_FLUSH_TIMEOUT = 10.0


class Acker:
    """Batches a runner's acks (see the module docstring).

    Args:
        backend: Where to ack.
        config: The runner's configuration (the group acked in).
    """

    def __init__(self, backend: Backend, config: ConfigHolder) -> None:
        self._backend = backend
        self._config = config
        self._ids: list[str] = []
        # (entry id, (key, token)): each lock is released after its entry's ack
        self._locks: list[tuple[str, tuple[str, str]]] = []
        self._outcomes: list[RunOutcome] = []  # recorded after their entry's ack
        self._tracked: list[Outcome] = []  # recorded with their entry's ack
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
    ) -> None:
        """Queue ``entry_id`` for acknowledgement (with ``tracked``, recorded with the
        ack), ``lock`` for release after it, and a periodic run's ``outcome`` to
        record after it."""
        self._ids.append(entry_id)
        if lock is not None:
            self._locks.append((entry_id, lock))
        if outcome is not None:
            self._outcomes.append(outcome)
        if tracked is not None:
            self._tracked.append(tracked)
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

    async def _send(self, ids: list[str], tracked: list[Outcome]) -> None:
        if tracked:
            await self._backend.finish(self._group, ids, tracked)
        else:
            await self._backend.ack(self._group, ids)

    async def _flush(self) -> None:
        ids, self._ids = self._ids, []
        locks, self._locks = self._locks, []
        outcomes, self._outcomes = self._outcomes, []
        tracked, self._tracked = self._tracked, []
        refused: Collection[str] = ()
        if ids:
            try:
                await self._send(ids, tracked)
            except BackendError as exc:
                if exc.retryable:
                    self._put_back(ids, locks, tracked)  # acks are idempotent: next try
                    self._outcomes[:0] = outcomes
                    raise
                refused = await self._ack_one_by_one(ids, locks, tracked, exc)
            except BaseException:
                self._put_back(ids, locks, tracked)
                self._outcomes[:0] = outcomes
                raise
            else:
                self.acked += len(ids)
        for done, (entry_id, (key, token)) in enumerate(locks):
            if entry_id in refused:
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
        outcomes = [run for run in outcomes if run.message_id not in refused]
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
        ids: list[str],
        locks: list[tuple[str, tuple[str, str]]],
        tracked: list[Outcome],
        error: BackendError,
    ) -> set[str]:
        """Ack ``ids`` one at a time after their batch was refused for good (``error``).

        Returns:
            The ids refused again, dropped.

        Raises:
            BackendError: a retryable failure; the ids not acked yet (with their
                tracked outcomes), and the locks of every id not refused, are back
                in the queue.
        """
        if len(ids) == 1:
            self._drop(ids[0], error)
            return {ids[0]}
        refused: set[str] = set()
        for index, entry_id in enumerate(ids):
            mine = [o for o in tracked if o.entry_id == entry_id]
            try:
                await self._send([entry_id], mine)
            except BackendError as exc:
                if not exc.retryable:
                    refused.add(entry_id)
                    self._drop(entry_id, exc)
                    continue
                left = set(ids[index:])
                self._put_back(
                    ids[index:], locks, [o for o in tracked if o.entry_id in left], refused
                )
                raise
            except BaseException:
                left = set(ids[index:])
                self._put_back(
                    ids[index:], locks, [o for o in tracked if o.entry_id in left], refused
                )
                raise
            self.acked += 1
        return refused

    def _put_back(
        self,
        ids: list[str],
        locks: list[tuple[str, tuple[str, str]]],
        tracked: list[Outcome],
        refused: set[str] | None = None,
    ) -> None:
        self._ids[:0] = ids
        self._locks[:0] = [lock for lock in locks if lock[0] not in refused] if refused else locks
        self._tracked[:0] = tracked

    def _drop(self, entry_id: str, error: BackendError) -> None:
        self.dropped += 1
        log.error(
            "ack of message %s refused (%s); dropping it, since retrying cannot fix that: "
            "it will be delivered again after reclaim_delay",
            entry_id,
            error,
        )
