"""Messages being worked on, when each is due for a refresh, and how to stop each.

The worker adds an entry when an action starts and removes it when it ends;
the refresher asks which entries are due and, once the backend confirmed a
refresh, marks them refreshed. ``due`` only reads, so a refresh that failed is
retried on the next tick. An entry whose run is past its deadline (its
``timeout``), or *settled* (a thread whose outcome was decided, by its return
or a stop, and which is still tracked until the worker is done with it), is
never due: its attempt has failed, and a thread that cannot be cancelled must
not keep its message from being reclaimed. Its concurrency slot, though, is
still in use until the thread returns: :meth:`InFlight.lingering` lists those
runs, whose slots the refresher keeps renewing (``max_concurrency`` holds
while such a thread runs on). The entry of a run also holds the worker slot
it runs in (:class:`Stoppable`), so another part of the runner can stop it by
message id.

Entries are keyed by queue and stream id (an id is unique only within its
stream). A run that holds a concurrency slot is refreshed twice per
reservation timeout instead of once: its slot is leased for one reservation
timeout and renewed with each refresh, so a renewal always lands with half a
lease to spare, and a crashed runner's slot frees within one.

Stopping (``TaskRunner.cancel``): the canceller (:mod:`taskrunner._serve.canceller`)
asks the backend which of :meth:`InFlight.running` were asked to stop, and
:meth:`InFlight.stop` marks each and stops its slot (cancels the worker's
scope). A thread, which no scope stops, is left to run on: its run is
acknowledged as cancelled at once and its outcome discarded. A settled entry
has no slot to stop any more.
"""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Protocol

import attrs

from taskrunner.backends import SlotHold

RefreshKey = tuple[str, str | None]
"""(consumer, queue): the ids of one refresh call."""


class Stoppable(Protocol):
    """Where a run runs: what stops it (:class:`taskrunner._serve.crew.Slot`)."""

    def stop(self) -> None:
        """Cancel the run (its worker's cancel scope); called once, while it runs."""


@attrs.define
class _Entry:
    consumer: str
    period: float
    refresh_at: float
    hold: SlotHold | None
    deadline: float
    slot: Stoppable | None
    stop_requested: bool = False
    settled: bool = False


class InFlight:
    """The running messages of one runner, keyed by queue and stream id."""

    def __init__(self) -> None:
        self._entries: dict[tuple[str | None, str], _Entry] = {}

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, entry_id: object) -> bool:
        return any(key[1] == entry_id for key in self._entries)

    def add(
        self,
        entry_id: str,
        consumer: str,
        reservation_timeout: float,
        now: float,
        *,
        deadline: float = math.inf,
        slot: Stoppable | None = None,
        queue: str | None = None,
        hold: SlotHold | None = None,
    ) -> None:
        """Track a run of ``queue`` started at ``now``, in ``slot``; past ``deadline``
        its message is no longer refreshed. A run that holds a concurrency slot
        (``hold``) is refreshed twice as often."""
        period = reservation_timeout / 2 if hold is not None else reservation_timeout
        self._entries[queue, entry_id] = _Entry(
            consumer, period, now + period, hold, deadline, slot
        )

    def remove(self, entry_id: str, *, queue: str | None = None) -> bool:
        """The run ended; returns whether it was asked to stop (:meth:`stop`)."""
        entry = self._entries.pop((queue, entry_id), None)
        return entry is not None and entry.stop_requested

    def stop_requested(self, entry_id: str, *, queue: str | None = None) -> bool:
        """Whether the run of ``entry_id`` (of ``queue``, still tracked) was asked to stop."""
        entry = self._entries.get((queue, entry_id))
        return entry is not None and entry.stop_requested

    def settle(self, entry_id: str, *, queue: str | None = None) -> None:
        """The outcome of the run of ``entry_id`` (a thread, tracked until the worker
        removes it) is decided: its message is no longer refreshed, nor its slot
        stopped; a concurrency slot it holds is still renewed (:meth:`lingering`)."""
        entry = self._entries.get((queue, entry_id))
        if entry is not None:
            entry.settled = True
            entry.slot = None

    def due(self, now: float, slack: float) -> dict[RefreshKey, list[str]]:
        """Ids due for a refresh by ``now + slack``, grouped by consumer and queue
        (read-only); runs past their deadline are left out."""
        out: dict[RefreshKey, list[str]] = defaultdict(list)
        horizon = now + slack
        for (queue, entry_id), entry in self._entries.items():
            if entry.refresh_at <= horizon and entry.deadline > now and not entry.settled:
                out[entry.consumer, queue].append(entry_id)
        return dict(out)

    def lingering(self, now: float, slack: float) -> dict[str | None, list[str]]:
        """Ids, by queue, of runs that hold a concurrency slot due for renewal by
        ``now + slack`` whose message is no longer refreshed (past their deadline,
        or settled): a thread still running holds its slot until it returns."""
        out: dict[str | None, list[str]] = defaultdict(list)
        horizon = now + slack
        for (queue, entry_id), entry in self._entries.items():
            if (
                entry.hold is not None
                and entry.refresh_at <= horizon
                and (entry.deadline <= now or entry.settled)
            ):
                out[queue].append(entry_id)
        return dict(out)

    def holds(self, ids: list[str], *, queue: str | None = None) -> list[SlotHold]:
        """The concurrency slots held by the runs of ``ids`` (of ``queue``)."""
        found = (self._entries.get((queue, entry_id)) for entry_id in ids)
        return [entry.hold for entry in found if entry is not None and entry.hold is not None]

    def refreshed(self, ids: list[str], at: float, *, queue: str | None = None) -> None:
        """The backend refreshed ``ids`` at ``at``: next refresh one period later.
        Ids no longer running are ignored."""
        for entry_id in ids:
            entry = self._entries.get((queue, entry_id))
            if entry is not None:
                entry.refresh_at = at + entry.period

    def running(self) -> list[str]:
        """Ids running now that were not asked to stop yet (what the canceller checks)."""
        return [
            i
            for (_, i), entry in self._entries.items()
            if not entry.stop_requested and not entry.settled
        ]

    def stop(self, entry_id: str) -> bool:
        """Ask the run of ``entry_id`` (of whichever queue) to stop: stop its slot
        (cancel its worker's scope), unless it is settled.

        Returns:
            Whether it was running.
        """
        found = [entry for (_, i), entry in self._entries.items() if i == entry_id]
        for entry in found:
            entry.stop_requested = True
            slot, entry.slot = entry.slot, None  # stopped once
            if slot is not None:
                slot.stop()
        return bool(found)
