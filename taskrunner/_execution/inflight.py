"""Messages being worked on, when each is due for a refresh, and how to stop each.

The worker adds an entry when an action starts and removes it when it ends;
the refresher asks which entries are due and, once the backend confirmed a
refresh, marks them refreshed. ``due`` only reads, so a refresh that failed is
retried on the next tick. An entry whose run is past its deadline (its
``timeout``) is never due: its attempt has failed, and a thread that cannot
be cancelled must not keep its message from being reclaimed. The entry of a
run with a timeout also holds that run's cancel scope, so another part of the
runner can cancel it by message id (:meth:`InFlight.scope_of`); a run without
a timeout has no scope (entering one per run is too dear for the hot path).

Entries are keyed by queue and stream id (an id is unique only within its
stream). A run that holds a concurrency slot is refreshed twice per
reservation timeout instead of once: its slot is leased for one reservation
timeout and renewed with each refresh, so a renewal always lands with half a
lease to spare, and a crashed runner's slot frees within one.

Stopping (``TaskRunner.cancel``): the canceller (:mod:`taskrunner._serve.canceller`)
asks the backend which of :meth:`InFlight.running` were asked to stop, and
:meth:`InFlight.stop` marks each and cancels its run's scope, if it has one. A
run without a scope (or a thread, which no scope stops) runs on, and the worker
learns from :meth:`InFlight.remove` that it was asked to stop: its outcome is
then discarded and it is acknowledged as cancelled.
"""

from __future__ import annotations

import math
from collections import defaultdict

import attrs
import trio

from taskrunner.backends import SlotHold

RefreshKey = tuple[str, str | None]
"""(consumer, queue): the ids of one refresh call."""


@attrs.define
class _Entry:
    consumer: str
    period: float
    refresh_at: float
    hold: SlotHold | None
    deadline: float
    scope: trio.CancelScope | None
    stop_requested: bool = False


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
        scope: trio.CancelScope | None = None,
        queue: str | None = None,
        hold: SlotHold | None = None,
    ) -> None:
        """Track a run of ``queue`` started at ``now``; past ``deadline`` it is no
        longer refreshed. A run that holds a slot (``hold``) is refreshed twice as
        often."""
        period = reservation_timeout / 2 if hold is not None else reservation_timeout
        self._entries[queue, entry_id] = _Entry(
            consumer, period, now + period, hold, deadline, scope
        )

    def remove(self, entry_id: str, *, queue: str | None = None) -> bool:
        """The run ended; returns whether it was asked to stop (:meth:`stop`)."""
        entry = self._entries.pop((queue, entry_id), None)
        return entry is not None and entry.stop_requested

    def stop_requested(self, entry_id: str, *, queue: str | None = None) -> bool:
        """Whether the run of ``entry_id`` (of ``queue``, still tracked) was asked to stop."""
        entry = self._entries.get((queue, entry_id))
        return entry is not None and entry.stop_requested

    def scope_of(self, entry_id: str, *, queue: str | None = None) -> trio.CancelScope | None:
        """The cancel scope of the run of ``entry_id`` (of ``queue``), while it runs."""
        entry = self._entries.get((queue, entry_id))
        return entry.scope if entry is not None else None

    def due(self, now: float, slack: float) -> dict[RefreshKey, list[str]]:
        """Ids due for a refresh by ``now + slack``, grouped by consumer and queue
        (read-only); runs past their deadline are left out."""
        out: dict[RefreshKey, list[str]] = defaultdict(list)
        horizon = now + slack
        for (queue, entry_id), entry in self._entries.items():
            if entry.refresh_at <= horizon and entry.deadline > now:
                out[entry.consumer, queue].append(entry_id)
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
        return [i for (_, i), entry in self._entries.items() if not entry.stop_requested]

    def stop(self, entry_id: str) -> bool:
        """Ask the run of ``entry_id`` (of whichever queue) to stop: cancel its scope,
        if it has one.

        Returns:
            Whether it was running.
        """
        found = [entry for (_, i), entry in self._entries.items() if i == entry_id]
        for entry in found:
            entry.stop_requested = True
            if entry.scope is not None:
                entry.scope.cancel()
        return bool(found)
