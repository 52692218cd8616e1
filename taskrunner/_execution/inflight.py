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

Acknowledgements. A run's message stays tracked after its attempt ended,
until its ack lands: an ack can wait longer than ``reclaim_delay`` (a slot
migration answering ``TRYAGAIN`` for seconds, a failover, a slow server), and
a message left unrefreshed meanwhile is reclaimed by another instance, which
runs it twice (or, for a task with no retries, dead-letters it after it ran).
:meth:`InFlight.end` marks an async run's attempt over (nothing to stop, no
deadline, its concurrency slot given back, out of :meth:`InFlight.running`),
the acker marks the entry :meth:`~InFlight.acking` when it queues its ack and
drops it once the ack landed or was given up (:meth:`~InFlight.acked`), and
the worker :meth:`~InFlight.release` s it when it is done with the run: gone
at once when no ack was queued (the run was left pending, for reclaim), else
kept until the ack lands. An entry whose ack is queued is refreshed, settled
or past its deadline: its outcome is decided and acknowledged, so it must not
run again. The hot path's run stays in the table from its start to its ack:
one entry, never removed and added again.

Entries are keyed by queue and stream id (an id is unique only within its
stream); the runs of a sharded group's shards are in a table per shard
(:meth:`InFlight.of`). A run that holds a concurrency slot is refreshed twice per
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
from collections.abc import Iterable
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
    acking: bool = False
    """Its ack is queued and has not landed: refreshed, whatever else holds."""
    released: bool = False
    """The worker is done with the run: kept only until its ack lands."""


class InFlight:
    """The running messages of one runner, keyed by queue and stream id."""

    def __init__(self) -> None:
        self._entries: dict[tuple[str | None, str], _Entry] = {}
        self._shards: dict[str, InFlight] = {}

    def __len__(self) -> int:
        """Runs being worked on (not those only waiting for their ack to land), the
        shards' included."""
        own = sum(not entry.released for entry in self._entries.values())
        return own + sum(len(table) for table in self._shards.values())

    def of(self, group: str | None) -> InFlight:
        """The table of the runs read in ``group``: ``None`` (the runner's group) is
        this one, a shard's tag one of its own (two shards can hand out the same
        stream id, so their runs never share a table)."""
        if group is None:
            return self
        table = self._shards.get(group)
        if table is None:
            table = self._shards[group] = InFlight()
        return table

    def tables(self) -> list[tuple[str | None, InFlight]]:
        """This table (``None``) and each shard's (by its tag), for the refresher and
        the canceller, which call the backend per group."""
        return [(None, self), *self._shards.items()]

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
        (``hold``) is refreshed twice as often. A message tracked already (by the
        gate, while it was admitted) is replaced, but keeps its next refresh when
        that comes sooner: the time since its last refresh still counts."""
        period = reservation_timeout / 2 if hold is not None else reservation_timeout
        refresh_at = now + period
        key = (queue, entry_id)
        tracked = self._entries.get(key)
        if tracked is not None:
            refresh_at = min(refresh_at, tracked.refresh_at)
        self._entries[key] = _Entry(consumer, period, refresh_at, hold, deadline, slot)

    def remove(self, entry_id: str, *, queue: str | None = None) -> bool:
        """The run ended; returns whether it was asked to stop (:meth:`stop`)."""
        entry = self._entries.pop((queue, entry_id), None)
        return entry is not None and entry.stop_requested

    def end(self, entry_id: str, *, queue: str | None = None) -> bool:
        """The attempt of the async run of ``entry_id`` is over and the worker is done
        with it but for its outcome: nothing to stop any more, no deadline, no
        concurrency slot held (the worker gives it back). Still refreshed, until its
        ack lands (:meth:`acked`) or the worker finds none was queued
        (:meth:`release`). Returns whether it was asked to stop (:meth:`stop`)."""
        entry = self._entries.get((queue, entry_id))
        if entry is None:
            return False
        entry.released = True
        entry.slot = None
        entry.hold = None
        entry.deadline = math.inf
        return entry.stop_requested

    def acking(self, entry_id: str, queue: str | None) -> None:
        """The ack of ``entry_id`` (of ``queue``) is queued: its message is refreshed
        until :meth:`acked` (an entry not tracked is ignored)."""
        entry = self._entries.get((queue, entry_id))
        if entry is not None:
            entry.acking = True

    def acked(self, keys: Iterable[tuple[str | None, str]]) -> None:
        """The acks of ``keys`` ((queue, id) pairs) landed, or were given up: those the
        worker is done with go; a thread still running stays, no longer refreshed."""
        entries = self._entries
        for key in keys:
            entry = entries.get(key)
            if entry is not None:
                if entry.released:
                    del entries[key]
                else:
                    entry.acking = False

    def acked_ids(self, queue: str | None, ids: Iterable[str]) -> None:
        """:meth:`acked` for ``ids``, all of ``queue`` (the acker's one-stream flush)."""
        entries = self._entries
        for entry_id in ids:
            key = (queue, entry_id)
            entry = entries.get(key)
            if entry is not None:
                if entry.released:
                    del entries[key]
                else:
                    entry.acking = False

    def release(self, entry_id: str, *, queue: str | None = None) -> None:
        """The worker is done with the run of ``entry_id``, outcome included: it goes
        now when no ack of it is queued (it was left pending, to be reclaimed), else
        once that ack lands. Its concurrency slot is the worker's to give back."""
        key = (queue, entry_id)
        entry = self._entries.get(key)
        if entry is None:
            return
        if not entry.acking:
            del self._entries[key]
            return
        entry.released = True
        entry.slot = None
        entry.hold = None
        entry.deadline = math.inf

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
        (read-only); runs past their deadline, or settled, are left out unless their
        ack is queued."""
        out: dict[RefreshKey, list[str]] = defaultdict(list)
        horizon = now + slack
        for (queue, entry_id), entry in self._entries.items():
            if entry.refresh_at <= horizon and (
                entry.acking or (entry.deadline > now and not entry.settled)
            ):
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
            if not (entry.stop_requested or entry.settled or entry.released)
        ]

    def stop(self, entry_id: str) -> bool:
        """Ask the run of ``entry_id`` (of whichever queue) to stop: stop its slot
        (cancel its worker's scope), unless it is settled; a run that ended (only its
        ack awaited) is left alone.

        Returns:
            Whether it was running.
        """
        found = [
            entry for (_, i), entry in self._entries.items() if i == entry_id and not entry.released
        ]
        for entry in found:
            entry.stop_requested = True
            slot, entry.slot = entry.slot, None  # stopped once
            if slot is not None:
                slot.stop()
        return bool(found)
