"""``taskrunner schedules --url URL --group G``: a group's periodic schedules.

One row per schedule (:func:`taskrunner.admin.schedules`): name, task, spec,
next fire, last fired tick, last outcome (with the tick that run served) and,
for an ``overlap=False`` schedule, the run in flight. Times are UTC (the
Redis backend's clock is unix time). ``--json`` prints the rows with times as
unix seconds. A ``--group`` the server does not hold is one line on stderr
and exit 1.
"""

from __future__ import annotations

import argparse
import json
from datetime import UTC, datetime
from typing import Any

from taskrunner import admin
from taskrunner.backends.redis import RedisBackend
from taskrunner.cli.base import Command
from taskrunner.cli.groups import require_group
from taskrunner.cli.stats import redis_arguments, run_on_redis

COLUMNS = ("SCHEDULE", "TASK", "SPEC", "NEXT FIRE", "LAST FIRED", "LAST OUTCOME")


def when(moment: float | None) -> str:
    """A time as ``2025-06-02 08:05:00`` (UTC), ``-`` for none."""
    if moment is None:
        return "-"
    return datetime.fromtimestamp(moment, UTC).strftime("%Y-%m-%d %H:%M:%S")


def cells(row: dict[str, Any]) -> tuple[str, ...]:
    """One schedule's cells, in :data:`COLUMNS` order."""
    outcome = row["last_outcome"] or "-"
    if row["last_outcome"] is not None:
        outcome += f" ({when(row['last_outcome_tick'])})"
    if row["in_flight"] is not None:
        outcome += f", running {row['in_flight']}"
    return (
        row["name"],
        row["task"] or "(not declared)",
        row["spec"] or "-",
        when(row["next_fire"]),
        when(row["last_fired"]),
        outcome,
    )


def render(doc: dict[str, Any]) -> str:
    rows = [cells(row) for row in doc["schedules"]]
    if not rows:
        return f"no periodic schedules in group {doc['group']}"
    widths = [max(len(c) for c in column) for column in zip(COLUMNS, *rows, strict=False)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)).rstrip()
             for line in (COLUMNS, *rows)]  # fmt: skip
    return "\n".join(lines)


async def collect(backend: RedisBackend, group: str) -> dict[str, Any]:
    """The ``schedules --json`` document."""
    rows = await admin.schedules(backend, group)
    return {"group": group, "schedules": [row.as_dict() for row in rows]}


def _run(args: argparse.Namespace) -> int:
    async def job(backend: RedisBackend) -> dict[str, Any]:
        await require_group(backend, args.group)
        return await collect(backend, args.group)

    doc, code = run_on_redis("taskrunner schedules", args, job)
    if doc is None:
        return code
    print(json.dumps(doc, indent=2, sort_keys=True) if args.json else render(doc))
    return 0


COMMAND = Command(
    name="schedules",
    help="show a group's periodic schedules: task, spec, next fire, last fired tick and outcome",
    add_arguments=redis_arguments,
    run=_run,
)
