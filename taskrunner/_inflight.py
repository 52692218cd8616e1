"""Messages being worked on, when each is due for a refresh, and how to stop each.

The worker adds an entry when an action starts (with the cancel scope of that
run) and removes it when it ends; the refresher asks which entries are due
and, once the backend confirmed a refresh, marks them refreshed. ``due`` only
reads, so a refresh that failed is retried on the next tick. The canceller
(:mod:`taskrunner._serve.canceller`) asks the backend which running entries
were cancelled and :meth:`InFlight.stop` cancels their runs' scopes; the worker
then sees :meth:`InFlight.remove` answer that the stop was requested.
"""

from __future__ import annotations

from collections import defaultdict

import attrs
import trio


@attrs.define
class _Entry:
    consumer: str
    reservation_timeout: float
    refresh_at: float
    scope: trio.CancelScope | None = None
    stop_requested: bool = False


class InFlight:
    """The running messages of one runner, keyed by stream id."""

    def __init__(self) -> None:
        self._entries: dict[str, _Entry] = {}

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, entry_id: object) -> bool:
        return entry_id in self._entries

    def add(
        self,
        entry_id: str,
        consumer: str,
        reservation_timeout: float,
        now: float,
        scope: trio.CancelScope | None = None,
    ) -> None:
        """A run of ``entry_id`` started; ``scope`` is the cancel scope it runs in."""
        self._entries[entry_id] = _Entry(
            consumer, reservation_timeout, now + reservation_timeout, scope
        )

    def remove(self, entry_id: str) -> bool:
        """The run ended; returns whether it was asked to stop (:meth:`stop`)."""
        entry = self._entries.pop(entry_id, None)
        return entry is not None and entry.stop_requested

    def due(self, now: float, slack: float) -> dict[str, list[str]]:
        """Ids due for a refresh by ``now + slack``, grouped by consumer (read-only)."""
        out: dict[str, list[str]] = defaultdict(list)
        horizon = now + slack
        for entry_id, entry in self._entries.items():
            if entry.refresh_at <= horizon:
                out[entry.consumer].append(entry_id)
        return dict(out)

    def refreshed(self, ids: list[str], at: float) -> None:
        """The backend refreshed ``ids`` at ``at``: next refresh one reservation
        timeout later. Ids no longer running are ignored."""
        for entry_id in ids:
            entry = self._entries.get(entry_id)
            if entry is not None:
                entry.refresh_at = at + entry.reservation_timeout

    def running(self) -> list[str]:
        """Ids running now that were not asked to stop yet (what the canceller checks)."""
        return [i for i, entry in self._entries.items() if not entry.stop_requested]

    def stop(self, entry_id: str) -> bool:
        """Cancel the run of ``entry_id`` (its scope); returns whether it was running."""
        entry = self._entries.get(entry_id)
        if entry is None:
            return False
        entry.stop_requested = True
        if entry.scope is not None:
            entry.scope.cancel()
        return True
