"""The timeouts of the crew's runs: one task that cancels each run past its deadline.

Theory of operation. A run with a ``timeout`` must be cancelled at its deadline.
A cancel scope of its own per run, with that deadline, cost about as much as the
rest of a plain no-op run (entering and leaving it, its deadline registered and
removed: about 10 us on trio 0.35). But every run already runs inside its
worker's long-lived scope (:class:`~taskrunner._serve.crew.Slot`, which
``TaskRunner.cancel`` cancels), so a run with a timeout only writes its
deadline into its slot (:meth:`Slot.time <taskrunner._serve.crew.Slot.time>`),
and one :class:`Watchdog` task per ``serve`` cancels the slot of a run past its
deadline, as a stop does (the run reads which of the two it was from the slot).

The watchdog sleeps until the earliest deadline among the runs it saw at its
last look, and is woken sooner only by a run whose deadline comes before that
(the first run with a timeout after a quiet spell, or one with a shorter
timeout than those running): runs of one task one after another never wake it,
and a run that ends before its deadline costs it nothing (it looks at the slots
again when that deadline comes, finds it gone, and sleeps until the next).

It stops once the crew is closed and its last worker left (:meth:`close`): runs
still time out while ``serve`` drains.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Protocol

import trio


class Timed(Protocol):
    """A worker's slot, as the watchdog sees it (:class:`taskrunner._serve.crew.Slot`)."""

    @property
    def deadline(self) -> float:
        """When the run in the slot times out (``math.inf``: no run, or no timeout)."""
        ...

    def expire(self) -> None:
        """Cancel the run in the slot: it is past its deadline."""
        ...


class Watchdog:
    """Cancels the runs of ``slots`` past their deadlines (see the module docstring).

    Args:
        slots: The live slots, looked at as they are at each look.
    """

    def __init__(self, slots: Iterable[Timed]) -> None:
        self._slots = slots
        self._lot = trio.lowlevel.ParkingLot()
        self._closed = False
        self.wake_at = math.inf
        """When the watchdog looks next (no later than the earliest deadline it saw)."""

    def nudge(self, deadline: float) -> None:
        """A run's ``deadline`` was set: wake the watchdog if it would sleep past it."""
        if deadline < self.wake_at:
            self.wake_at = deadline  # runs with later deadlines do not wake it again
            self._lot.unpark()

    def close(self) -> None:
        """No more runs: :meth:`run` returns."""
        self._closed = True
        self._lot.unpark()

    async def run(self) -> None:
        """Cancel each run past its deadline, until :meth:`close`."""
        while not self._closed:
            now = trio.current_time()
            soonest = math.inf
            for slot in self._slots:
                deadline = slot.deadline
                if deadline <= now:
                    slot.expire()
                elif deadline < soonest:
                    soonest = deadline
            self.wake_at = soonest
            with trio.move_on_at(soonest):
                await self._lot.park()
