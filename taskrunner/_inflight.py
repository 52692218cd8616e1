"""Messages being worked on, and when each is due for a refresh.

The worker adds an entry when an action starts and removes it when it ends;
the refresher asks which entries are due and, once the backend confirmed a
refresh, marks them refreshed. ``due`` only reads, so a refresh that failed is
retried on the next tick.

Entries are keyed by queue and stream id (an id is unique only within its
stream). A run that holds a concurrency slot is refreshed twice per
reservation timeout instead of once: its slot is leased for one reservation
timeout and renewed with each refresh, so a renewal always lands with half a
lease to spare, and a crashed runner's slot frees within one.
"""

from __future__ import annotations

from collections import defaultdict

import attrs

from taskrunner.backends import SlotHold

RefreshKey = tuple[str, str | None]
"""(consumer, queue): the ids of one refresh call."""


@attrs.define
class _Entry:
    consumer: str
    period: float
    refresh_at: float
    hold: SlotHold | None


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
        queue: str | None = None,
        hold: SlotHold | None = None,
    ) -> None:
        period = reservation_timeout / 2 if hold is not None else reservation_timeout
        self._entries[queue, entry_id] = _Entry(consumer, period, now + period, hold)

    def remove(self, entry_id: str, *, queue: str | None = None) -> None:
        self._entries.pop((queue, entry_id), None)

    def due(self, now: float, slack: float) -> dict[RefreshKey, list[str]]:
        """Ids due for a refresh by ``now + slack``, grouped by consumer and queue
        (read-only)."""
        out: dict[RefreshKey, list[str]] = defaultdict(list)
        horizon = now + slack
        for (queue, entry_id), entry in self._entries.items():
            if entry.refresh_at <= horizon:
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
