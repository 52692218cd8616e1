"""What ``taskrunner.admin.schedules`` and ``taskrunner schedules`` show: one row per
schedule of a group, from what the store holds.

Theory of operation. Every serving instance publishes its schedules' spec
documents, and the leader keeps each schedule's state (watermark, last fire,
in-flight mark, last outcome) in the store (:mod:`taskrunner.backends._protocols.schedules`).
:func:`schedule_rows` joins the two (pure): the spec gives the task and when;
the next fire is the schedule's first tick after its watermark (after ``now``
when it has none yet), computed from the published spec with the same tick
arithmetic the leader uses, so it may lie in the past while no leader fires
(the fleet is down). A state with no published spec (a schedule removed from
code, or a spec that does not parse) is shown without a task or a next fire.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs

from taskrunner._schedules.periodic import Schedule, describe, read_spec
from taskrunner.backends import ScheduleRecords

__all__ = ["ScheduleRow", "schedule_rows"]


@attrs.frozen(kw_only=True)
class ScheduleRow:
    """One schedule of a group, as the store describes it. Ticks (``next_fire``,
    ``last_fired``, ``last_outcome_tick``) are the timetable's instants on the
    backend's clock (unix seconds on Redis; on ``MemoryBackend``, trio's clock, the
    one its schedules are computed on); ``last_fired_at`` is unix seconds on every
    backend."""

    name: str
    task: str | None
    """The task it runs, from the published spec (``None`` without one)."""
    spec: str | None
    """When: ``cron */5 * * * * (UTC)`` or ``every 30s`` (``None`` without a spec)."""
    catch_up: str | None
    overlap: bool | None
    next_fire: float | None
    """The first tick after the watermark (``None`` without a spec, or past the
    schedule's last tick)."""
    last_fired: float | None
    """The newest tick fired."""
    last_fired_at: float | None
    """When it was fired, in unix seconds (the backend's
    :meth:`~taskrunner.backends.SharedState.unix_time`)."""
    last_outcome: str | None
    """``"succeeded"`` or ``"failed"``: the newest finished run's outcome."""
    last_outcome_tick: float | None
    """The tick that run served."""
    in_flight: str | None
    """``overlap=False``: the stream id of the run in flight now, if any."""
    declared_by: str | None
    """The host that published the spec shown."""

    def as_dict(self) -> dict[str, Any]:
        return attrs.asdict(self)


def _timetable_of(name: str, doc: dict[str, Any]) -> Schedule | None:
    try:
        return Schedule(
            name=name,
            task=str(doc.get("task")),
            cron=doc.get("cron"),
            every=doc.get("every"),
            timezone=doc.get("timezone") or "UTC",
        )
    except (ValueError, TypeError):
        return None


def _same(t: float) -> float:
    return t


def schedule_rows(
    records: ScheduleRecords, now: float, *, unix_time: Callable[[float], float] = _same
) -> list[ScheduleRow]:
    """One row per schedule that has a published spec or a state, sorted by name (pure).

    Args:
        records: What the store holds of the group's schedules.
        now: The backend's clock now (a next fire without a watermark, an
            in-flight mark's expiry).
        unix_time: The backend's clock to unix seconds, for ``last_fired_at``.
    """
    rows = []
    for name in sorted(set(records.specs) | set(records.states)):
        raw = records.specs.get(name)
        doc = read_spec(raw) if raw is not None else None
        state = records.states.get(name)
        schedule = _timetable_of(name, doc) if doc is not None else None
        next_fire = None
        if schedule is not None:
            after = state.tick if state is not None and state.tick is not None else now
            next_fire = schedule.timetable.next_after(after)
        rows.append(
            ScheduleRow(
                name=name,
                task=schedule.task if schedule is not None else None,
                spec=(
                    describe(schedule.cron, schedule.every, schedule.timezone)
                    if schedule is not None
                    else None
                ),
                catch_up=doc.get("catch_up") if doc is not None else None,
                overlap=doc.get("overlap") if doc is not None else None,
                next_fire=next_fire,
                last_fired=state.fired if state is not None else None,
                last_fired_at=(
                    unix_time(state.fired_at)
                    if state is not None and state.fired_at is not None
                    else None
                ),
                last_outcome=state.outcome if state is not None else None,
                last_outcome_tick=state.outcome_tick if state is not None else None,
                in_flight=state.in_flight(now) if state is not None else None,
                declared_by=doc.get("host") if doc is not None else None,
            )
        )
    return rows
