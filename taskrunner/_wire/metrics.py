"""The metrics fields: names, the increments a flush writes, and how a hash is read
(see the package docstring for the fields and their units)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

import attrs

from taskrunner import _keys

SCHEDULE_TIMING_NAME = "delayed_tasks_schedule"
"""The reserved timing name under which the scheduler's passes are recorded.

The bulk writer writes them under Go's name (:func:`schedule_fields`); this
short form is also how 0.1.0 named the fields, still read. A task of this name
would share the scheduler's counters, so ``register`` refuses it.
"""


@attrs.frozen
class TimingFields:
    """The three metrics-hash fields of one timing name."""

    sum: str
    """``<name>_sum``: whole milliseconds (what Go reads)."""
    sum_us: str
    """``<name>_sum_us``: the same total in microseconds (ours; Go ignores it)."""
    count: str
    """``<name>_count``: runs."""


def task_fields(task_name: str) -> TimingFields:
    """The fields of a task: ``<task>_sum``, ``<task>_sum_us``, ``<task>_count``."""
    return TimingFields(f"{task_name}_sum", f"{task_name}_sum_us", f"{task_name}_count")


def schedule_timing_name(group: str) -> str:
    """Go's timing name for the scheduler: ``taskrunner:<group>:delayed_tasks_schedule``."""
    return f"{_keys.PREFIX}:{group}:{SCHEDULE_TIMING_NAME}"


def schedule_fields(group: str) -> TimingFields:
    """The scheduler's fields, named as Go names them:
    ``taskrunner:<group>:delayed_tasks_schedule_sum`` (and ``_sum_us``, ``_count``)."""
    return task_fields(schedule_timing_name(group))


_SHORT_SCHEDULE = task_fields(SCHEDULE_TIMING_NAME)
"""0.1.0's scheduler fields (it never wrote ``_sum_us``): read and reset, never written."""


@attrs.frozen(kw_only=True)
class TimingIncrement:
    """One timing name's runs of one flush, for ``SharedState.increment_metrics``."""

    fields: TimingFields
    micros: int
    """Total run time to add, in whole microseconds (>= 0)."""
    count: int
    """Runs to add (>= 1)."""


def timing_increment(fields: TimingFields, sum_ms: float, count: int) -> TimingIncrement | None:
    """What a flush adds for ``count`` runs that took ``sum_ms`` milliseconds in all.

    Returns:
        ``None`` when nothing can be written: no runs, or a sum that is not
        finite (it would poison the hash and fail every later flush). A
        negative sum (a clock that went backwards) counts as 0.
    """
    if count <= 0 or not math.isfinite(sum_ms):
        return None
    return TimingIncrement(fields=fields, micros=round(max(0.0, sum_ms) * 1000.0), count=count)


def add_timing(stored_sum: float | None, stored_us: float | None, micros: int) -> tuple[int, int]:
    """The new ``(_sum, _sum_us)`` after adding ``micros`` (pure; the backends' rule).

    ``stored_sum`` is cut to whole milliseconds (a 0.1.0 float). If
    ``stored_us`` is missing or disagrees with it (``stored_us // 1000 !=
    stored_sum``: a Go worker, a Go reset or 0.1.0 moved ``_sum``), it is
    re-based to ``stored_sum * 1000`` first. The Redis backend runs the same
    rule in Lua (``lua/add_timings.lua``), atomically.
    """
    whole_ms = math.floor(stored_sum) if stored_sum is not None else 0
    if stored_us is None or stored_us // 1000 != whole_ms:
        base_us = whole_ms * 1000
    else:
        base_us = int(stored_us)
    total_us = base_us + micros
    return total_us // 1000, total_us


def read_timing(metrics: Mapping[str, float], fields: TimingFields) -> tuple[float, float]:
    """``(sum_ms, count)`` of one timing name from a metrics hash as read.

    ``_sum_us / 1000`` when it agrees with ``_sum`` (to the millisecond), else
    ``_sum`` itself (a float left by 0.1.0 is taken as it is). Missing fields
    are 0.
    """
    sum_ms = metrics.get(fields.sum, 0.0)
    sum_us = metrics.get(fields.sum_us)
    if sum_us is not None and sum_us // 1000 == sum_ms:
        sum_ms = sum_us / 1000.0
    return sum_ms, metrics.get(fields.count, 0.0)


def task_timing(metrics: Mapping[str, float], task_name: str) -> tuple[float, float]:
    """``(sum_ms, count)`` of a task (see :func:`read_timing`)."""
    return read_timing(metrics, task_fields(task_name))


def schedule_timing(metrics: Mapping[str, float], group: str) -> tuple[float, float]:
    """``(sum_ms, count)`` of the scheduler's passes: Go's fields plus 0.1.0's short ones."""
    go_ms, go_count = read_timing(metrics, schedule_fields(group))
    old_ms, old_count = read_timing(metrics, _SHORT_SCHEDULE)
    return go_ms + old_ms, go_count + old_count


def reset_fields(task_names: Iterable[str], group: str) -> list[str]:
    """Every metrics field a reset sets to 0.

    Each task's ``_sum``, ``_sum_us`` and ``_count``, in the order given
    (duplicates dropped), then the scheduler's under Go's names and 0.1.0's
    short ones. Fields of tasks not given (another deployment's) are left
    alone, as the Go library does.
    """
    names: dict[str, None] = {}
    for fields in [*map(task_fields, task_names), schedule_fields(group)]:
        names.update(dict.fromkeys((fields.sum, fields.sum_us, fields.count)))
    names.update(dict.fromkeys((_SHORT_SCHEDULE.sum, _SHORT_SCHEDULE.count)))
    return list(names)


def task_names_in(metrics: Mapping[str, float], group: str) -> list[str]:
    """Task names with a ``<task>_sum`` or ``<task>_count`` field in a metrics hash,
    sorted, the scheduler's (either name) excluded."""
    names = {field.rpartition("_")[0] for field in metrics if field.endswith(("_sum", "_count"))}
    names.discard(SCHEDULE_TIMING_NAME)
    names.discard(schedule_timing_name(group))
    return sorted(names)
