"""``taskrunner keys --url URL --group G``: every documented key of a group.

Lists the keys the backend's
:meth:`Inspection.list_keys <taskrunner.backends.Inspection.list_keys>` finds (the
group's fixed keys, plus every heartbeat and unique-lock key), each with its type,
size and TTL, and sets the counts of that listing beside what the key layout's "Key count"
section predicts for one group (G = 1) of Q queues (a stream, ring and dead-letter
stream each; Q is the number of queues the listing shows). Every key the group owns
is listed: every queue's keys, results, the paused set and the flow-control keys of
its tasks (T: per task that uses them). Per-group keys are "at most one":
Redis deletes an empty ZSET, the lease exists only while a leader lives, the
tuning key only while tuning publishes, and the stream, ring and metrics hash
appear with first use. Heartbeats (I) and unique locks (U) are not per group.
A ``--group`` the server does not hold (see :mod:`taskrunner.cli.groups`) is
one line on stderr and exit 1.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from taskrunner.backends import KeyCounts, KeyKind
from taskrunner.backends._layout import queues_in
from taskrunner.backends.redis import RedisBackend
from taskrunner.cli.base import Command
from taskrunner.cli.groups import require_group
from taskrunner.cli.stats import redis_arguments, run_on_redis

EXTRA = "dead-letter streams"
"""Our addition to the original layout (``<prefix>:<queue>:dead``)."""
CATALOGS = "task catalogs"
"""Our addition too (``taskrunner:<group>:catalog``)."""
LAYOUT = (
    # (kind, its category, the "Key count" formula of docs/redis-key-layout.md,
    # what the formula means for one group)
    (KeyKind.STREAM, "streams", "G", "1"),
    (KeyKind.DELAYED_TASKS, "ZSETs", "<= G", "0-1"),
    (KeyKind.DELAYED_INDEX, "delayed id indexes", "<= G", "0-1"),
    (KeyKind.ENTRY_INDEX, "entry indexes", "<= G", "0-1"),
    (KeyKind.STOP_REQUESTS, "stop requests", "<= G", "0-1"),
    (KeyKind.LEADER, "leader keys", "<= G", "0-1"),
    (KeyKind.TUNING, "tuning keys", "<= G", "0-1"),
    (KeyKind.DESIRED_INSTANCES, "desired instance counts", "<= G", "0-1"),
    (KeyKind.METRICS, "metrics hashes", "<= G", "0-1"),
    (KeyKind.CATALOG, CATALOGS, "<= G", "0-1"),
    (KeyKind.SCHEDULES, "schedule states", "<= G", "0-1"),
    (KeyKind.SCHEDULE_SPECS, "schedule specs", "<= G", "0-1"),
    (KeyKind.HEARTBEAT, "replication", "I", "I"),
    (KeyKind.UNIQUE_LOCK, "unique locks", "U", "U"),
    (KeyKind.CLAIM_DELAY_RING, "metric rings", "<= G", "0-1"),
    (KeyKind.DEAD_LETTER, EXTRA, "<= G", "0-1"),
    (KeyKind.RESULT, "results", "R", "R"),
    (KeyKind.RESULT_NOTICE, "result notices", "<= R", "<= R"),
    (KeyKind.PAUSED, "paused sets", "<= G", "0-1"),
    (KeyKind.CONCURRENCY, "concurrency slots", "<= T", "<= T"),
    (KeyKind.RATE, "rate-limit logs", "<= T", "<= T"),
    (KeyKind.RATE_PACE, "rate-limit paces", "<= T", "<= T"),
    (KeyKind.PARKED, "parked sets", "<= T", "<= T"),
)
PER_QUEUE = frozenset({KeyKind.STREAM, KeyKind.CLAIM_DELAY_RING, KeyKind.DEAD_LETTER})
"""The kinds of key there is one of per queue of the group (Q queues: Q, or "<= Q")."""
CATEGORIES = {kind: category for kind, category, _, _ in LAYOUT}
"""The "Key count" category of each kind of key."""
NOTES = {
    "replication": "live instances, every group on this Redis",
    "unique locks": "in-flight unique jobs, every group on this Redis",
    EXTRA: "not in the original library's layout",
    CATALOGS: "not in the original library's layout; Python runners only",
    "delayed id indexes": "ours: lookup and cancel by task id",
    "entry indexes": "ours: lookup and cancel by task id",
    "stop requests": "ours: cancelled running tasks",
    "desired instance counts": "ours: target_wait, for an autoscaler",
    "results": "ours: kept results of this group's tasks",
    "result notices": "ours: for result waiters, at most 60 s each",
    "paused sets": "ours: paused queues and tasks",
    "concurrency slots": "ours: per task with max_concurrency (T)",
    "rate-limit logs": "ours: per task (and key) with a rate_limit",
    "rate-limit paces": "ours: per task (and key) with a rate_limit",
    "parked sets": "ours: per paused task with parked runs",
}


async def collect(backend: RedisBackend, group: str) -> dict[str, Any]:
    """The ``keys --json`` document (see docs/operations.md)."""
    found = await backend.list_keys(group)
    keys = [
        {
            "name": k.name,
            "type": k.type,
            "size": k.size,
            "ttl": k.ttl,
            "purpose": k.purpose,
            "category": CATEGORIES[k.kind],
        }
        for k in found
    ]
    # Counted from the listing itself, so the table always adds up to the keys shown.
    found_counts = KeyCounts.of(k.kind for k in found)
    queues = len(queues_in((k.name for k in found), backend.stream_keys(group), backend.key_layout))
    counts = [
        {
            "category": category,
            "layout": formula,
            "expected": _per_queue(expected, queues) if kind in PER_QUEUE else expected,
            "found": found_counts[kind],
        }
        for kind, category, formula, expected in LAYOUT
    ]
    return {"group": group, "keys": keys, "counts": counts, "total": found_counts.total}


def _per_queue(expected: str, queues: int) -> str:
    """What a per-queue formula means for a group of ``queues`` queues (one: as is)."""
    if queues <= 1:
        return expected
    return str(queues) if expected == "1" else f"0-{queues}"


def _ttl(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}s"


def render(doc: dict[str, Any]) -> str:
    keys = doc["keys"]
    width = max([len(k["name"]) for k in keys] + [4])
    lines = [f"{'KEY':<{width}}  {'TYPE':<6}  {'SIZE':>8}  {'TTL':>8}  PURPOSE"]
    for k in keys:
        lines.append(
            f"{k['name']:<{width}}  {k['type']:<6}  {k['size']:>8}  {_ttl(k['ttl']):>8}  "
            f"{k['purpose']}"
        )
    if not keys:
        lines.append("(no keys)")
    lines.append("")
    lines.append(f"Key count for group {doc['group']} (docs/redis-key-layout.md, G = 1):")
    lines.append(f"  {'CATEGORY':<20} {'LAYOUT':<7} {'EXPECTED':>8} {'FOUND':>6}")
    for c in doc["counts"]:
        note = NOTES.get(c["category"], "")
        lines.append(
            f"  {c['category']:<20} {c['layout']:<7} {c['expected']:>8} {c['found']:>6}"
            + (f"  ({note})" if note else "")
        )
    lines.append(f"  {'total':<20} {'':<7} {'':>8} {doc['total']:>6}")
    return "\n".join(lines)


def _arguments(parser: argparse.ArgumentParser) -> None:
    redis_arguments(parser)


def _run(args: argparse.Namespace) -> int:
    async def job(backend: RedisBackend) -> dict[str, Any]:
        await require_group(backend, args.group)
        return await collect(backend, args.group)

    doc, code = run_on_redis("taskrunner keys", args, job)
    if doc is None:
        return code
    print(json.dumps(doc, indent=2, sort_keys=True) if args.json else render(doc))
    return 0


COMMAND = Command(
    name="keys",
    help="list a group's Redis keys (type, size, TTL) against the key layout's counts",
    add_arguments=_arguments,
    run=_run,
)
