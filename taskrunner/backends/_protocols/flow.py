"""The :class:`FlowControl` protocol: fleet-wide pauses, concurrency slots and rate limits.

Theory of operation. Flow control is state shared by a consumer group's whole
fleet, kept in the group's own keys (``taskrunner._keys``: ``paused``,
``concurrency:<task>``, ``rate:<task>[:<key>]``, ``rate_pace:...``,
``parked:<task>``):

- *Pauses* are a set of ``queue:<name>`` and ``task:<name>`` members, which
  every runner reads about once a second (:meth:`FlowControl.paused`). A
  paused queue is not read. A paused task's runs are *parked*: moved to the
  delayed set far in the future and indexed by task (:meth:`FlowControl.park`),
  so that :meth:`FlowControl.resume` makes them all due at once.
- *Concurrency slots* are leases: a sorted set of holders scored by when
  their lease expires. A run takes one before it starts (:meth:`FlowControl.admit`),
  its runner renews it while it runs (:meth:`FlowControl.renew_slots`, with
  the message's refresh) and gives it back when it ends
  (:meth:`FlowControl.release_slots`). A crashed runner's slot is taken back
  when its lease expires.
- *Rate limits* are sliding logs: a sorted set of the starts of the last
  window, scored by start time. A start is admitted while fewer than the
  limit are in the window ending now, so no window of that length ever holds
  more. A run refused is told when to come back, paced one interval after
  the previous refused run, so a backlog flows at the limit's rate.

Time in the slots and logs is the store's (the Redis server's ``TIME``, trio's
clock in memory), never the callers', so runners with skewed clocks still
share one limit.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from typing import Protocol, runtime_checkable

import attrs

from taskrunner._flow.limits import Paused, RateLimit

__all__ = ["Admission", "FlowControl", "LimitedBy", "ParkOutcome", "SlotHold"]


class LimitedBy(enum.StrEnum):
    """What kept a run from starting."""

    CONCURRENCY = "concurrency"
    """Every concurrency slot of the task is held."""
    RATE = "rate"
    """The task's (or key's) rate limit is reached for now."""


@attrs.frozen(kw_only=True)
class Admission:
    """The answer of :meth:`FlowControl.admit`."""

    admitted: bool
    """Whether the run may start now (its slot taken, its start logged)."""
    limited_by: LimitedBy | None = None
    """Why not, when not admitted."""
    retry_after: float = 0.0
    """Seconds until the run should be tried again, when refused by a rate limit
    (its place in the limit's pace); 0 when refused a concurrency slot (nobody
    knows when one frees) or admitted."""


@attrs.frozen(kw_only=True)
class SlotHold:
    """A concurrency slot held by one run."""

    task: str
    holder: str
    """The run's holder id (:func:`taskrunner._flow.limits.holder_id`)."""
    lease: float
    """Seconds each take or renewal keeps the slot."""


class ParkOutcome(enum.Enum):
    """The answer of :meth:`FlowControl.park`."""

    PARKED = "parked"
    """The entry was acked and its member parked."""
    NOT_PAUSED = "not_paused"
    """The task is not paused (any more): nothing was done; run it."""
    NOT_PENDING = "not_pending"
    """The entry was no longer pending: nothing was done."""


@runtime_checkable
class FlowControl(Protocol):
    """A group's pauses, concurrency slots and rate limits (see the module docstring)."""

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
        """Admit one start of ``task`` by ``holder``, or say why not, in one atomic step.

        With ``max_concurrency``: expired leases are dropped first; the run
        needs a slot, i.e. fewer than ``max_concurrency`` holders (a holder
        that holds one already keeps it). With ``rate``: starts older than
        ``rate.per`` are dropped first; the run needs fewer than ``rate.limit``
        starts in the log of ``task`` (of ``rate_key``, when not ``""``). Only
        when every limit given admits it is anything recorded: the slot is
        taken for ``lease`` seconds and the start logged now. When refused by
        the rate limit, :attr:`Admission.retry_after` is when the oldest start
        leaves the window if that is less than one ``rate.interval`` away (the
        run's turn is now: it came a hair early); otherwise the run's place in
        the pace: the first run refused comes back when the oldest start leaves,
        and each one refused after it one ``rate.interval`` later.

        Cancellation: the run may have been admitted (a slot taken that expires
        after ``lease``; a start logged).
        """
        ...

    async def renew_slots(self, group: str, holds: Sequence[SlotHold]) -> list[SlotHold]:
        """Extend each hold's lease to its ``lease`` from now, in one round trip.

        Returns:
            The holds that were no longer held (their lease had expired and
            was dropped): those runs are over their task's limit now.

        Cancellation: some leases may have been extended; a repeat is harmless.
        """
        ...

    async def release_slots(self, group: str, holds: Sequence[SlotHold]) -> None:
        """Give the slots back (holds no longer held are ignored), in one round trip."""
        ...

    async def paused(self, group: str) -> Paused:
        """What is paused in the group now."""
        ...

    async def pause(self, group: str, *, queue: str | None = None, task: str | None = None) -> bool:
        """Pause one queue or one task (exactly one of the two) for the whole group.

        Returns:
            Whether it was not paused before.

        Raises:
            ValueError: neither or both of ``queue`` and ``task`` given.
        """
        ...

    async def resume(
        self, group: str, *, queue: str | None = None, task: str | None = None
    ) -> bool:
        """Resume one queue or one task (exactly one of the two).

        Resuming a task also makes every run parked for it due now, in the
        same atomic step (so a run is never parked after its task's resume).

        Returns:
            Whether it was paused.

        Raises:
            ValueError: neither or both of ``queue`` and ``task`` given.

        Cancellation: the resume may have happened, all of it or none.
        """
        ...

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
        """Park a run of a paused task, atomically: if ``task`` is paused and the
        entry pending, ack it (as :meth:`~taskrunner.backends.Deferral.defer`)
        and add ``member`` to the delayed set at ``run_at`` (far ahead), indexed
        under ``task`` for :meth:`resume` and, with ``task_id``, under that id as
        ``defer`` indexes a member (so lookup and cancel find the parked run).

        Cancellation: the run may have been parked; a repeat answers
        :attr:`ParkOutcome.NOT_PENDING` then.
        """
        ...
