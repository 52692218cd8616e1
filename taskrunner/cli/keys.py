"""``taskrunner keys --url URL --group G``: every documented key of a group.

Lists the keys the backend's
:meth:`Inspection.list_keys <taskrunner.backends.Inspection.list_keys>` finds (the
group's fixed keys, plus every heartbeat and unique-lock key), each with its type,
size and TTL, and sets the counts of that listing beside what the key layout's "Key count"
section predicts for one group (G = 1) of Q queues (a stream, ring and dead-letter
stream each; Q is the number of queues the listing shows). Every key the group owns
is listed: every queue's keys, results, the paused set and the flow-control keys of
its tasks (T: per task that uses them), its tasks' progress, its event stream, its
workflows' records (W: per workflow) and its shard count. Per-group keys are "at most one":
Redis deletes an empty ZSET, the lease exists only while a leader lives, the
tuning key only while tuning publishes, and the stream, ring and metrics hash
appear with first use. Heartbeats (I) and unique locks (U) are not per group.
A sharded group's listing (docs/sharding.md) holds every shard's keys too, each
naming its shard: the layout's counts are the group's own keys', and a table counts
each shard's. A ``--group`` the server does not hold (see :mod:`taskrunner.cli.groups`) is
one line on stderr and exit 1.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from taskrunner import _keys, _shards, admin
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
    (KeyKind.RESULT_WAITERS, "result waiters", "<= G", "0-1"),
    (KeyKind.PROGRESS, "progress hashes", "P", "P"),
    (KeyKind.EVENTS, "event streams", "<= G", "0-1"),
    (KeyKind.WORKFLOW, "workflow records", "W", "W"),
    (KeyKind.WORKFLOW_ENDS, "workflow end counts", "<= G", "0-1"),
    (KeyKind.PAUSED, "paused sets", "<= G", "0-1"),
    (KeyKind.CONCURRENCY, "concurrency slots", "<= T", "<= T"),
    (KeyKind.RATE, "rate-limit logs", "<= T", "<= T"),
    (KeyKind.RATE_PACE, "rate-limit paces", "<= T", "<= T"),
    (KeyKind.PARKED, "parked sets", "<= T", "<= T"),
    (KeyKind.SHARD_COUNT, "shard counts", "<= G", "0-1"),
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
    "progress hashes": "ours: per task that reported progress (P), 24 h each",
    "event streams": "ours: with TaskRunnerConfig(events=True)",
    "workflow records": "ours: per workflow (W), kept `keep` once over",
    "shard counts": "ours: cluster layout, a sharded group only",
    "workflow end counts": "ours: workflows ended, by outcome",
}


async def collect(backend: RedisBackend, group: str) -> dict[str, Any]:
    """The ``keys --json`` document (see docs/operations.md): for a sharded group (its
    recorded shard count, ``admin.shards_of``) every shard's keys too, each key naming
    its shard, and a count per shard."""
    found = await admin.list_keys(backend, group)
    router = await admin.shards_of(backend, group)
    tags = _shard_tags(group, router.count)
    shard_of = {k.name: tags.get(_keys.hash_tag(k.name)) for k in found}
    keys = [
        {
            "name": k.name,
            "type": k.type,
            "size": k.size,
            "ttl": k.ttl,
            "purpose": k.purpose,
            "category": CATEGORIES[k.kind],
            "shard": shard_of[k.name],
        }
        for k in found
    ]
    # The layout's counts are the group's own keys' (all of them when unsharded),
    # counted from the listing itself, so the table always adds up to the keys shown.
    own = [k for k in found if shard_of[k.name] is None]
    found_counts = KeyCounts.of(k.kind for k in own)
    queues = len(queues_in((k.name for k in own), backend.stream_keys(group), backend.key_layout))
    counts = [
        {
            "category": category,
            "layout": formula,
            "expected": _per_queue(expected, queues) if kind in PER_QUEUE else expected,
            "found": found_counts[kind],
        }
        for kind, category, formula, expected in LAYOUT
    ]
    shards = []
    for tag, index in tags.items():
        mine = KeyCounts.of(k.kind for k in found if shard_of[k.name] == index)
        shards.append(
            {
                "shard": index,
                "tag": tag,
                "total": mine.total,
                "counts": {c: mine[kind] for kind, c, _, _ in LAYOUT if mine[kind]},
            }
        )
    return {
        "group": group,
        "keys": keys,
        "counts": counts,
        "total": len(keys),
        "shard_count": router.count,
        "shards": shards,
    }


def _shard_tags(group: str, count: int) -> dict[str, int]:
    """Each shard's hash tag with its number (none when unsharded)."""
    if count <= 1:
        return {}
    return {_shards.shard_tag(group, i, count): i for i in range(count)}


def _per_queue(expected: str, queues: int) -> str:
    """What a per-queue formula means for a group of ``queues`` queues (one: as is)."""
    if queues <= 1:
        return expected
    return str(queues) if expected == "1" else f"0-{queues}"


def _ttl(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}s"


def render(doc: dict[str, Any]) -> str:
    keys, sharded = doc["keys"], bool(doc.get("shards"))
    width = max([len(k["name"]) for k in keys] + [4])
    shard_column = "SHARD  " if sharded else ""
    lines = [f"{shard_column}{'KEY':<{width}}  {'TYPE':<6}  {'SIZE':>8}  {'TTL':>8}  PURPOSE"]
    for k in keys:
        shard = f"{'-' if k['shard'] is None else k['shard']:>5}  " if sharded else ""
        lines.append(
            f"{shard}{k['name']:<{width}}  {k['type']:<6}  {k['size']:>8}  "
            f"{_ttl(k['ttl']):>8}  {k['purpose']}"
        )
    if not keys:
        lines.append("(no keys)")
    lines.append("")
    whose = "the group's own keys, " if sharded else ""
    lines.append(f"Key count for group {doc['group']} ({whose}docs/redis-key-layout.md, G = 1):")
    lines.append(f"  {'CATEGORY':<20} {'LAYOUT':<7} {'EXPECTED':>8} {'FOUND':>6}")
    for c in doc["counts"]:
        note = NOTES.get(c["category"], "")
        lines.append(
            f"  {c['category']:<20} {c['layout']:<7} {c['expected']:>8} {c['found']:>6}"
            + (f"  ({note})" if note else "")
        )
    own = sum(c["found"] for c in doc["counts"])
    lines.append(f"  {'total':<20} {'':<7} {'':>8} {own:>6}")
    if sharded:
        lines += _render_shards(doc)
    return "\n".join(lines)


def _render_shards(doc: dict[str, Any]) -> list[str]:
    """The per-shard counts of a sharded group's listing."""
    width = max(len(row["tag"]) for row in doc["shards"])
    lines = [
        "",
        f"Keys in each of the {doc['shard_count']} shards (docs/sharding.md), "
        f"{doc['total']} keys in all:",
        f"  {'SHARD':>5}  {'TAG':<{width}}  {'KEYS':>6}  CATEGORIES",
    ]
    for row in doc["shards"]:
        kinds = ", ".join(f"{category} {n}" for category, n in row["counts"].items())
        lines.append(f"  {row['shard']:>5}  {row['tag']:<{width}}  {row['total']:>6}  {kinds}")
    return lines


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
