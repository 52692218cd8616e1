"""The :class:`Deferral` protocol: putting a pending entry back through the delayed set.

A run that must wait (for a concurrency slot or a rate limit, issue 18; a
retry with backoff, issue 13) leaves the stream and waits in the group's
delayed set, from which the scheduler moves it back when due
(:meth:`~taskrunner.backends.SharedState.move_delayed`). Leaving the stream
and entering the set must be one step: a process that dies in between must
neither lose the run (acked, never added) nor run it twice (added, still
pending, reclaimed and run, then moved and run again).
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

__all__ = ["Deferral"]


@runtime_checkable
class Deferral(Protocol):
    """Acking a pending entry and adding its delayed member, atomically."""

    async def defer(
        self, group: str, entry_id: str, member: bytes, run_at: float, *, queue: str | None = None
    ) -> bool:
        """Ack ``entry_id`` (pending in ``group`` on ``queue``'s stream, deleting it
        from the stream when the backend deletes on ack) and add ``member`` to the
        group's delayed set with run-at time ``run_at``, atomically.

        Returns:
            ``True`` when both happened; ``False`` when the entry was no longer
            pending (acked, or its group gone), and then nothing was added.

        Cancellation: both may have happened or neither; a repeat answers
        ``False`` when they did, and adds nothing.
        """
        ...
