"""Messages being worked on, and when each is due for a refresh.

The worker adds an entry when an action starts and removes it when it ends;
the refresher asks which entries are due and, once the backend confirmed a
refresh, marks them refreshed. ``due`` only reads, so a refresh that failed is
retried on the next tick. An entry whose run is past its deadline (its
``timeout``) is never due: its attempt has failed, and a thread that cannot
be cancelled must not keep its message from being reclaimed. The entry of a
run with a timeout also holds that run's cancel scope, so another part of the
runner can cancel it by message id (:meth:`InFlight.scope_of`); a run without
a timeout has no scope (entering one per run is too dear for the hot path).
"""

from __future__ import annotations

import math
from collections import defaultdict

import attrs
import trio


@attrs.define
class _Entry:
    consumer: str
    reservation_timeout: float
    refresh_at: float
    deadline: float
    scope: trio.CancelScope | None


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
        *,
        deadline: float = math.inf,
        scope: trio.CancelScope | None = None,
    ) -> None:
        """Track a run started at ``now``; past ``deadline`` it is no longer refreshed."""
        self._entries[entry_id] = _Entry(
            consumer, reservation_timeout, now + reservation_timeout, deadline, scope
        )

    def remove(self, entry_id: str) -> None:
        self._entries.pop(entry_id, None)

    def scope_of(self, entry_id: str) -> trio.CancelScope | None:
        """The cancel scope of the run of ``entry_id``, while it runs."""
        entry = self._entries.get(entry_id)
        return entry.scope if entry is not None else None

    def due(self, now: float, slack: float) -> dict[str, list[str]]:
        """Ids due for a refresh by ``now + slack``, grouped by consumer (read-only);
        runs past their deadline are left out."""
        out: dict[str, list[str]] = defaultdict(list)
        horizon = now + slack
        for entry_id, entry in self._entries.items():
            if entry.refresh_at <= horizon and entry.deadline > now:
                out[entry.consumer].append(entry_id)
        return dict(out)

    def refreshed(self, ids: list[str], at: float) -> None:
        """The backend refreshed ``ids`` at ``at``: next refresh one reservation
        timeout later. Ids no longer running are ignored."""
        for entry_id in ids:
            entry = self._entries.get(entry_id)
            if entry is not None:
                entry.refresh_at = at + entry.reservation_timeout
