"""How many deliveries an entry may have, decided before it is decoded.

Theory of operation. A worker decodes an entry, structures its payload and
runs the action, and an entry can make any of these kill the whole process
(a C extension that segfaults, the OOM killer), not just raise. A dead
process acks nothing: the entry is reclaimed by another worker after
``reclaim_delay``, kills it too, and so on through the fleet. Exceptions are
caught and sent down the failure path, but a dead process catches nothing,
so the bound has to come first, from what the stream gives for free: the
delivery count.

On a first delivery nothing is looked at, so the hot path pays nothing. On a
redelivery the raw entry is searched, without decoding it, for
``"task_name": "<name>"`` (anywhere, whitespace allowed, since the Go library
and this one order the fields differently). The entry may be delivered as
many times as that task has attempts; if several registered names appear
(one may sit inside the payload), the most generous of them. If none does,
:data:`UNIDENTIFIED_DELIVERY_LIMIT`. An entry delivered more often goes to
the failure path without being decoded or run again.

Such an entry may be a periodic schedule's run, whose schedule waits for its
outcome (``overlap=False``): :func:`scheduled_run_in` finds the ``schedule``,
``tick`` and ``id`` fields the same way, without decoding, so its failure is
recorded for the schedule.

Pure: no I/O, table-tested in ``tests/test_poison.py``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping

import attrs

from taskrunner._task import Task

UNIDENTIFIED_DELIVERY_LIMIT = 3
"""Deliveries allowed to an entry that names no registered task (it cannot be
decoded, or names another application's task): enough for a worker to die
once or twice for unrelated reasons, few enough that an entry which kills
every process that decodes it stops after three deaths."""

_TASK_NAME = re.compile(rb'"task_name"\s*:\s*"((?:[^"\\]|\\.)*)"')
_SCHEDULE = re.compile(rb'"schedule"\s*:\s*"((?:[^"\\]|\\.)*)"')
_ID = re.compile(rb'"id"\s*:\s*"((?:[^"\\]|\\.)*)"')
_WORKFLOW = re.compile(rb'"workflow"\s*:\s*"((?:[^"\\]|\\.)*)"')
_STEP = re.compile(rb'"step"\s*:\s*"((?:[^"\\]|\\.)*)"')
_TICK = re.compile(rb'"tick"\s*:\s*(-?[0-9]+(?:\.[0-9]+)?(?:[eE][-+]?[0-9]+)?)')


def _strings(pattern: re.Pattern[bytes], raw: bytes) -> list[str]:
    out = []
    for match in pattern.finditer(raw):
        try:
            value = json.loads(b'"' + match.group(1) + b'"')
        except ValueError:
            continue
        out.append(value)
    return out


def task_names_in(raw: bytes) -> list[str]:
    """Every ``"task_name": "..."`` string value found in ``raw``, in order, decoded.

    Values that are not valid JSON strings (a bad escape, invalid UTF-8) are
    skipped.
    """
    return _strings(_TASK_NAME, raw)


@attrs.frozen(kw_only=True)
class ScheduledRun:
    """The periodic schedule's tick an entry serves, found without decoding it."""

    schedule: str
    tick: float
    task_id: str | None
    """The message's ``id`` (a retried run's first entry), if it has one."""


def scheduled_run_in(raw: bytes | None) -> ScheduledRun | None:
    """The ``schedule``, ``tick`` and ``id`` of an entry that is not decoded (pure).

    Our messages write these fields after the payload, so the last occurrence of
    each is the message's own (the payload may hold keys of the same names).

    Returns:
        ``None`` unless both a schedule name and a tick are found.
    """
    if not raw or b'"schedule"' not in raw:
        return None
    schedules = _strings(_SCHEDULE, raw)
    ticks = _TICK.findall(raw)
    if not schedules or not ticks:
        return None
    ids = _strings(_ID, raw)
    return ScheduledRun(
        schedule=schedules[-1], tick=float(ticks[-1]), task_id=ids[-1] if ids else None
    )


@attrs.frozen(kw_only=True)
class WorkflowStep:
    """The workflow step an undecoded entry runs (see :func:`workflow_step_in`)."""

    workflow: str
    step: str
    task_id: str | None = None


def workflow_step_in(raw: bytes | None) -> WorkflowStep | None:
    """The ``workflow``, ``step`` and ``id`` of an entry that is not decoded (pure), so
    its failure is still counted in its workflow (which would wait for it otherwise).
    The last occurrence of each is the message's own, as for :func:`scheduled_run_in`.

    Returns:
        ``None`` unless both a workflow and a step are found.
    """
    if not raw or b'"workflow"' not in raw:
        return None
    workflows = _strings(_WORKFLOW, raw)
    steps = _strings(_STEP, raw)
    if not workflows or not steps:
        return None
    ids = _strings(_ID, raw)
    return WorkflowStep(workflow=workflows[-1], step=steps[-1], task_id=ids[-1] if ids else None)


@attrs.frozen(kw_only=True)
class DeliveryLimit:
    """How often an entry may be delivered, and why."""

    limit: int
    """Deliveries allowed, the first one included."""
    task_name: str | None
    """The registered task the limit comes from; ``None`` when the entry names none."""


def delivery_limit(raw: bytes | None, tasks: Mapping[str, Task]) -> DeliveryLimit:
    """The delivery limit of an entry whose ``payload`` field is ``raw`` (pure).

    Args:
        raw: The entry's ``payload`` field as read, ``None`` when it has none.
        tasks: The registered tasks by name.

    Returns:
        The attempts of the registered task the entry names (the largest, when
        it names several), else :data:`UNIDENTIFIED_DELIVERY_LIMIT`.
    """
    best: Task | None = None
    for name in task_names_in(raw or b""):
        task = tasks.get(name)
        if task is not None and (best is None or task.attempts > best.attempts):
            best = task
    if best is None:
        return DeliveryLimit(limit=UNIDENTIFIED_DELIVERY_LIMIT, task_name=None)
    return DeliveryLimit(limit=best.attempts, task_name=best.name)
