"""The :class:`Deferral` protocol: hand a pending entry back to the delayed set.

A failed attempt that will be retried after a backoff leaves the stream and
waits in the group's delayed set, as a new member carrying what the next
attempt needs. Acking the entry and adding the member must be one step: a
process that dies between them would lose the task (acked, not added) or run
it twice (added, still pending, so also reclaimed).
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable


@runtime_checkable
class Deferral(Protocol):
    """Moving a pending entry to the delayed set, atomically."""

    async def defer(self, group: str, entry_id: str, member: bytes, run_at: float) -> bool:
        """Ack the pending entry ``entry_id`` of ``group`` and add ``member`` to the
        group's delayed set with run-at time ``run_at``, in one atomic step.

        The ack is the same as :meth:`MessageQueue.ack
        <taskrunner.backends.MessageQueue.ack>`'s: the entry leaves the group's
        pending list, and is deleted from the stream when the backend deletes
        on ack.

        Returns:
            True if the entry was pending and the member was added; False if
            the entry was no longer pending (acked, or gone with its consumer),
            and then nothing was added.

        Cancellation: the step may or may not have happened, as a whole; a
        repeat returns False (the entry is no longer pending) and adds nothing.
        """
        ...
