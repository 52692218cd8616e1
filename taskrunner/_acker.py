"""Batched acknowledgements.

Workers hand finished message ids to :meth:`Acker.ack`, a synchronous append.
One background task sends whatever has accumulated in one backend call; while
that call is in flight, new ids pile up for the next one, so the batch size
grows with load by itself and idle latency stays at one round trip. Unique
locks of finished messages are released only after their ack succeeded: a
crash in between leaves the lock to expire (``unique_for``) rather than
letting a duplicate in while the message could still run again.

Shutdown: the loop is cancelled last, after the workers drained, and its
final flush runs shielded with a timeout so nothing finished stays un-acked
unless the backend is unreachable.
"""

from __future__ import annotations

import logging

import trio

from taskrunner._backoff import backoff_delay
from taskrunner.backends import Backend
from taskrunner.errors import BackendError

log = logging.getLogger("taskrunner.acker")

FINAL_FLUSH_TIMEOUT = 10.0


class Acker:
    def __init__(self, backend: Backend, group: str) -> None:
        self._backend = backend
        self._group = group
        self._ids: list[str] = []
        self._locks: list[tuple[str, str]] = []  # (key, token), released after the ack
        self._wake = trio.Event()
        self.acked = 0

    def ack(self, entry_id: str, lock: tuple[str, str] | None = None) -> None:
        """Queue ``entry_id`` for acknowledgement (and ``lock`` for release after it)."""
        self._ids.append(entry_id)
        if lock is not None:
            self._locks.append(lock)
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
                    while self._ids or self._locks:
                        await self._flush()
                except BackendError as exc:
                    log.error("final ack flush failed (%s)", exc)
            if self._ids:
                log.error(
                    "%d finished message(s) left un-acked at shutdown; they will be "
                    "delivered again after reclaim_delay",
                    len(self._ids),
                )

    async def _flush(self) -> None:
        ids, self._ids = self._ids, []
        locks, self._locks = self._locks, []
        try:
            if ids:
                await self._backend.ack(self._group, ids)
        except BaseException:
            # Acks are idempotent: put them back for the next try.
            self._ids[:0] = ids
            self._locks[:0] = locks
            raise
        self.acked += len(ids)
        for done, (key, token) in enumerate(locks):
            try:
                await self._backend.release_lock(key, token)
            except BackendError as exc:
                log.warning("could not release unique lock %s (%s); it expires by itself", key, exc)
            except BaseException:
                # Cancelled (shutdown): the final flush releases the rest.
                self._locks[:0] = locks[done:]
                raise
