"""The :class:`Deferral` protocol: hand a pending entry back to the delayed set.

A run that must wait leaves the stream and waits in the group's delayed set,
as a new member carrying what its next delivery needs: a failed attempt that
will be retried after a backoff (issue 13), or a run held back by a
concurrency slot or a rate limit (issue 18). The scheduler moves it back when
due (:meth:`~taskrunner.backends.SharedState.move_delayed`). Acking the entry
and adding the member must be one step: a process that dies between them
would lose the task (acked, not added) or run it twice (added, still pending,
so also reclaimed).
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable


@runtime_checkable
class Deferral(Protocol):
    """Moving a pending entry to the delayed set, atomically."""

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
        """Ack the pending entry ``entry_id`` of ``group`` on ``queue``'s stream and
        add ``member`` to the group's delayed set with run-at time ``run_at``, in
        one atomic step.

        With ``task_id`` (the task's id, which the member carries as its ``id``),
        the member is also indexed under it in the delayed id index, as
        :meth:`~taskrunner.backends.SharedState.add_delayed` does, and the entry
        index forgets the task if it mapped it to ``entry_id``: lookup and cancel
        find the retry waiting in the delayed set.

        The ack is the same as :meth:`MessageQueue.ack
        <taskrunner.backends.MessageQueue.ack>`'s: the entry leaves the group's
        pending list, and is deleted from the stream when the backend deletes
        on ack. ``queue=None`` is the backend's own queue.

        Returns:
            True if the entry was pending and the member was added; False if
            the entry was no longer pending (acked, or gone with its consumer
            or its group), and then nothing was added.

        Cancellation: the step may or may not have happened, as a whole; a
        repeat returns False (the entry is no longer pending) and adds nothing.
        """
        ...
