"""Tick arithmetic for periodic schedules: when a schedule is due, and which ticks run.

Theory of operation (the leader's service that acts on it is
:mod:`taskrunner._serve.periodic`). A schedule's *ticks* are instants, unix
seconds in the backend's clock (trio's clock on the in-memory backend), and
every instance computes the same ones from the schedule alone, with no shared
state:

- :class:`Interval` (``every=``): the multiples of ``every`` since the epoch,
  ``k * every``. Two instances started at different moments agree, and the
  ticks never drift, however late a fire was.
- :class:`Cron` (``cron=``, ``timezone=``): the instants the expression
  matches in the zone, as `cronsim <https://github.com/cuu508/cronsim>`_
  evaluates it. cronsim follows Debian's cron, DST transitions included, and
  so do we. A job with a fixed minute and hour (``"30 2 * * *"``) whose local
  time does not exist (the spring-forward gap) runs at the first minute after
  the gap (02:30 in Europe/Berlin on the last Sunday of March runs at 03:00
  CEST); one whose local time repeats (the fall-back hour) runs once, at the
  first of the two (02:30 CEST, not 02:30 CET). A job with a ``*`` in the
  minute or hour field (``"*/15 * * * *"``) is "scheduled normally": it runs
  on the wall-clock times that exist, so in the repeated hour it runs on both
  passes (02:00, 02:15 ... CEST, then 02:00 CET again). Two local times that
  map to one instant are one tick (``"0,30 2 * * *"`` fires once at 03:00 on
  the spring-forward day). Ticks are always strictly increasing:
  :meth:`Cron.next_after` never returns an instant at or before its argument.

:func:`due_ticks` decides, at ``now``, which ticks after the schedule's
*watermark* (the newest tick already handled, kept in the store) fire. A tick
less than ``grace`` seconds overdue is *on time* and always fires: a leader
handover or a short pause delays it, and the exactly-once promise covers it.
Older ticks were *missed* (the fleet was down or leaderless), and the
catch-up policy decides: ``"latest"`` runs one run for them (none when an on
time tick runs anyway), ``"none"`` runs none, ``"all"`` runs each, the newest
:data:`MAX_CATCH_UP` at most.

Pure: no I/O, no clock; table-tested in ``tests/test_ticks.py``.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from datetime import UTC, datetime, tzinfo
from typing import Literal, Protocol

import attrs
from cronsim import CronSim, CronSimError

__all__ = [
    "CATCH_UPS",
    "MAX_CATCH_UP",
    "CatchUp",
    "Cron",
    "Due",
    "Interval",
    "Timetable",
    "due_ticks",
]

CatchUp = Literal["latest", "none", "all"]
"""What a schedule does with the ticks it missed (see the module docstring)."""
CATCH_UPS: tuple[CatchUp, ...] = ("latest", "none", "all")

MAX_CATCH_UP = 100
"""Most missed ticks ``catch_up="all"`` runs (the newest ones)."""
COUNT_CAP = 1_000
"""Missed ticks are counted (for the log) up to this many."""
_WINDOW = 60.0
"""The first window :func:`_newest` looks back over; it grows eightfold until it has enough."""


class Timetable(Protocol):
    """When a schedule ticks: instants in the backend's clock, strictly increasing."""

    def next_after(self, moment: float) -> float | None:
        """The first tick strictly after ``moment``, or ``None`` if there is none
        (a cron expression that matches nothing in the next 50 years)."""
        ...

    def between(self, after: float, until: float) -> Iterator[float]:
        """The ticks in ``(after, until]``, ascending."""
        ...


@attrs.frozen
class Interval:
    """Ticks on the multiples of ``every`` seconds since the epoch."""

    every: float

    def _index_after(self, moment: float) -> int:
        # The first k with k * every > moment, exact despite floor()'s rounding:
        # the tick is computed as k * every everywhere, so compare that product.
        k = math.floor(moment / self.every) + 1
        while k * self.every <= moment:
            k += 1
        while (k - 1) * self.every > moment:
            k -= 1
        return k

    def next_after(self, moment: float) -> float:
        return self._index_after(moment) * self.every

    def between(self, after: float, until: float) -> Iterator[float]:
        k = self._index_after(after)
        while k * self.every <= until:
            yield k * self.every
            k += 1

    def newest(self, after: float, until: float, count: int) -> list[float]:
        """The newest ``count`` ticks in ``(after, until]``, ascending (arithmetic, no loop
        over the ticks skipped)."""
        first, last = self._index_after(after), self._index_after(until) - 1
        return [k * self.every for k in range(max(first, last - count + 1), last + 1)]

    def count(self, after: float, until: float) -> int:
        """How many ticks fall in ``(after, until]``."""
        return max(0, self._index_after(until) - self._index_after(after))


@attrs.frozen
class Cron:
    """Ticks where a cron expression matches, in a time zone (see the module docstring).

    Raises:
        ValueError: the expression is not one cronsim accepts (5 fields, or 6
            with seconds first).
    """

    expression: str
    zone: tzinfo = UTC

    def __attrs_post_init__(self) -> None:
        try:
            CronSim(self.expression, datetime.now(self.zone))
        except CronSimError as exc:
            raise ValueError(f"cron {self.expression!r} is not a cron expression: {exc}") from None

    def _iterate(self, moment: float) -> Iterator[float]:
        # cronsim may yield an instant before ``moment`` when started inside a
        # repeated (fall-back) hour: it works on local wall time there. Such an
        # instant was a tick already, so skipping it keeps ticks increasing.
        last = moment
        try:
            for match in CronSim(self.expression, datetime.fromtimestamp(moment, self.zone)):
                tick = match.timestamp()
                if tick > last:
                    last = tick
                    yield tick
        except StopIteration:  # cronsim gives up after 50 years without a match
            return

    def next_after(self, moment: float) -> float | None:
        return next(self._iterate(moment), None)

    def between(self, after: float, until: float) -> Iterator[float]:
        for tick in self._iterate(after):
            if tick > until:
                return
            yield tick


@attrs.frozen
class Due:
    """What :func:`due_ticks` decided."""

    fire: tuple[float, ...]
    """The ticks to fire now, ascending."""
    missed: int
    """Missed ticks not fired (counted up to :data:`COUNT_CAP`)."""


def _newest(timetable: Timetable, after: float, until: float, count: int) -> list[float]:
    """The newest ``count`` ticks in ``(after, until]``, ascending.

    Looks back over a window that grows until it holds ``count`` ticks or
    reaches ``after``, so a long outage of a frequent schedule never walks
    every tick since the watermark.
    """
    if isinstance(timetable, Interval):
        return timetable.newest(after, until, count)
    window = _WINDOW
    while True:
        start = max(after, until - window)
        found = list(timetable.between(start, until))
        if len(found) >= count or start == after:
            return found[-count:] if count else []
        window *= 8


def _count(timetable: Timetable, after: float, until: float) -> int:
    if isinstance(timetable, Interval):
        return min(COUNT_CAP, timetable.count(after, until))
    counted = 0
    for _ in timetable.between(after, until):
        counted += 1
        if counted >= COUNT_CAP:
            break
    return counted


def due_ticks(
    timetable: Timetable,
    watermark: float,
    now: float,
    *,
    catch_up: CatchUp,
    grace: float,
    limit: int = MAX_CATCH_UP,
) -> Due:
    """Which ticks after ``watermark`` fire at ``now`` (pure).

    Args:
        timetable: The schedule's ticks.
        watermark: The newest tick already handled (or the instant the
            schedule was first seen): only later ticks are considered.
        now: The backend's clock now; no tick after it fires (never early).
        catch_up: What to do with missed ticks (see the module docstring).
        grace: A tick less overdue than this is on time.
        limit: Most missed ticks ``"all"`` fires.
    """
    if now <= watermark:
        return Due(fire=(), missed=0)
    edge = max(watermark, now - grace)  # ticks after it are on time
    on_time = list(timetable.between(edge, now))
    if edge <= watermark:
        return Due(fire=tuple(on_time), missed=0)
    if catch_up == "all":
        late = _newest(timetable, watermark, edge, limit)
    elif catch_up == "latest" and not on_time:
        late = _newest(timetable, watermark, edge, 1)
    else:
        late = []
    missed = max(0, _count(timetable, watermark, edge) - len(late))
    return Due(fire=tuple(late + on_time), missed=missed)
