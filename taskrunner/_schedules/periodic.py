"""Periodic schedules: what one is, the document it is published as, and the tick a run serves.

Theory of operation. A :class:`Schedule` is declared in code on every
instance (``runner.add_schedule`` or ``@runner.periodic``): a name, the task
it runs with a fixed payload, and when (``cron`` in a ``timezone``, or
``every`` seconds), with what to do about missed ticks (``catch_up``) and
overlapping runs (``overlap``). Its ticks are the pure arithmetic of
:mod:`taskrunner._schedules.ticks`. The leader fires it (:mod:`taskrunner._serve.periodic`);
each fire is a stream message carrying the optional wire fields ``schedule``
and ``tick``, so the run knows which tick it serves: the worker puts them in
its :class:`~taskrunner.TaskContext` (``ctx.schedule``, ``ctx.tick``).

Each instance publishes its schedules' :func:`spec_document` in the store
(the published spec is what ``taskrunner schedules`` and ``admin.schedules``
show, and how two instances declaring one name differently are told apart:
:func:`same_spec`).
"""

from __future__ import annotations

import json
import math
from datetime import UTC, timedelta, tzinfo
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import attrs

from taskrunner._config import is_utf8_text
from taskrunner._schedules.ticks import CATCH_UPS, CatchUp, Cron, Interval, Timetable

__all__ = [
    "DEFAULT_IN_FLIGHT_TTL",
    "Schedule",
    "spec_document",
]

DEFAULT_IN_FLIGHT_TTL = 3600.0
"""How long a run of an ``overlap=False`` schedule counts as in flight at most."""
MIN_EVERY = 1.0
"""The shortest ``every`` (seconds), as fine as a cron expression with seconds."""


def _name(instance: Any, attribute: attrs.Attribute[Any], value: str) -> None:
    if not isinstance(value, str) or not value or any(c.isspace() for c in value):
        raise ValueError(
            f"Schedule.{attribute.name} must be a non-empty string without spaces, got {value!r}"
        )
    if not is_utf8_text(value):  # it names fields in the store
        raise ValueError(f"Schedule.{attribute.name} must be valid UTF-8 text, got {value!r}")


def _as_seconds(value: Any) -> Any:
    if isinstance(value, timedelta):
        return value.total_seconds()
    if isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    return value


def _every(instance: Any, attribute: attrs.Attribute[Any], value: float | None) -> None:
    if value is None:
        return
    if not isinstance(value, float) or not MIN_EVERY <= value < math.inf:
        raise ValueError(
            f"Schedule.every must be seconds (or a timedelta) >= {MIN_EVERY:g}, got {value!r}"
        )


def _catch_up(instance: Any, attribute: attrs.Attribute[Any], value: str) -> None:
    if value not in CATCH_UPS:
        raise ValueError(f"Schedule.catch_up must be one of {', '.join(CATCH_UPS)}, got {value!r}")


def _ttl(instance: Any, attribute: attrs.Attribute[Any], value: float) -> None:
    if not isinstance(value, float) or not 0 < value < math.inf:
        raise ValueError(f"Schedule.{attribute.name} must be seconds > 0, got {value!r}")


def _zone(name: str) -> tzinfo:
    if name == "UTC":
        return UTC  # cronsim skips its DST handling for this one object
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise ValueError(f"Schedule.timezone must be an IANA time zone, got {name!r}") from None


@attrs.frozen(kw_only=True)
class Schedule:
    """A periodic schedule: run ``task`` with ``payload`` on every tick.

    Exactly one of ``cron`` and ``every`` is given. Declare it on every
    instance; the leader fires it (see the "Periodic tasks" page of the docs).

    Raises:
        ValueError: a field is invalid (the message names it and the value).
    """

    name: str = attrs.field(validator=_name)
    """Unique within the group: the store keeps the schedule's state under it."""
    task: str = attrs.field(validator=_name)
    """The task each tick runs."""
    cron: str | None = None
    """A cron expression (5 fields, or 6 with seconds first), evaluated in ``timezone``."""
    every: float | None = attrs.field(default=None, converter=_as_seconds, validator=_every)
    """Seconds (or a timedelta) between ticks, which fall on its multiples since the epoch."""
    timezone: str = "UTC"
    """The IANA zone ``cron`` is read in (``"Europe/Berlin"``); ignored by ``every``."""
    payload: Any = None
    """The payload of every run (encoded for the task when the schedule is added)."""
    catch_up: CatchUp = attrs.field(default="latest", validator=_catch_up)
    """Missed ticks (the fleet was down): ``"latest"`` runs once, for the most recent;
    ``"none"`` runs none; ``"all"`` runs each (the newest 100 at most)."""
    overlap: bool = True
    """``False``: skip a tick while the previous run is still queued or running."""
    in_flight_ttl: float = attrs.field(
        default=DEFAULT_IN_FLIGHT_TTL, converter=_as_seconds, validator=_ttl
    )
    """With ``overlap=False``: a run counts as in flight until its outcome is recorded,
    or this long at most (a safety net for an outcome that is never recorded)."""
    workflow: Any = attrs.field(default=None, eq=False, repr=False)
    """A workflow schedule's workflow (a ``Workflow``, chain, group, chord or step, or
    a callable returning one): each tick starts it once (``task`` is then the built-in
    ``taskrunner.scheduled_workflow``, see :mod:`taskrunner._schedules.workflows`)."""
    timetable: Timetable = attrs.field(init=False, eq=False, repr=False)
    """The schedule's ticks (:mod:`taskrunner._schedules.ticks`)."""

    @timetable.default
    def _timetable(self) -> Timetable:
        if self.workflow is not None and not self.overlap:
            raise ValueError(
                f"Schedule {self.name!r} starts a workflow: overlap=False is for task "
                "schedules (a workflow's run is its start), got overlap=False"
            )
        if self.workflow is not None and self.payload is not None:
            raise ValueError(
                f"Schedule {self.name!r} starts a workflow: give payloads to its steps, "
                f"got payload={self.payload!r}"
            )
        if (self.cron is None) == (self.every is None):
            raise ValueError(
                f"Schedule {self.name!r} needs exactly one of cron and every, "
                f"got cron={self.cron!r}, every={self.every!r}"
            )
        if self.every is not None:
            return Interval(self.every)
        if not isinstance(self.cron, str):
            raise ValueError(f"Schedule.cron must be a cron expression, got {self.cron!r}")
        try:
            return Cron(self.cron, _zone(self.timezone))
        except ValueError as exc:
            raise ValueError(f"Schedule.{exc}") from None

    def describe(self) -> str:
        """The spec as one line: ``cron */5 * * * * (UTC)`` or ``every 30s``."""
        return describe(self.cron, self.every, self.timezone)


def describe(cron: str | None, every: float | None, timezone: str) -> str:
    """A spec as one line (see :meth:`Schedule.describe`)."""
    if every is not None:
        return f"every {every:g}s"
    return f"cron {cron} ({timezone})"


def spec_fields(schedule: Schedule) -> dict[str, Any]:
    """What a schedule is, as compared between instances (no payload: the task's
    codec decides its form, and a payload may be large)."""
    return {
        "task": schedule.task,
        "cron": schedule.cron,
        "every": schedule.every,
        "timezone": schedule.timezone,
        "catch_up": schedule.catch_up,
        "overlap": schedule.overlap,
    }


def spec_document(schedule: Schedule, *, instance_id: str, host: str, at: float) -> bytes:
    """The JSON an instance publishes for ``schedule``: its :func:`spec_fields`, and who
    published it (``by``: the instance id, ``host``) and when (``at``, the backend's clock)."""
    doc = {**spec_fields(schedule), "by": instance_id, "host": host, "at": at}
    return json.dumps(doc, separators=(",", ":"), sort_keys=True).encode()


def read_spec(raw: bytes) -> dict[str, Any] | None:
    """A published spec document, or ``None`` when it is not one (written by hand)."""
    try:
        doc = json.loads(raw)
    except ValueError:
        return None
    return doc if isinstance(doc, dict) else None


def same_spec(schedule: Schedule, doc: dict[str, Any]) -> bool:
    """Whether a published document declares ``schedule`` as it is declared here."""
    return all(doc.get(key) == value for key, value in spec_fields(schedule).items())
