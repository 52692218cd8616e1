"""``taskrunner stats --url URL --group G``: a fleet's state as seen from Redis.

Theory of operation: the operator commands (``stats``, ``keys``, ``flush``)
need no user code, only the Redis URL and the names that make up the keys
(``--group``, ``--prefix``, ``--queue``). They open a
:class:`~taskrunner.backends.redis.RedisBackend` for one command's worth of
reads and close it. Everything that can fail on the way (a URL that does not
parse, a server that does not answer, a ``--group`` the server does not hold:
see :mod:`taskrunner.cli.groups`) is one line on stderr and exit 1.

``stats`` reads, in this order: the timing-metrics hash, the published
tuning capacity and desired instance count, the heartbeats and the leader
lease (through the backend's :class:`~taskrunner.backends.Inspection`:
``SCAN``, never ``KEYS``), the queue metrics (``XLEN``, the claim-delay ring,
``XINFO``), and what is paused (``taskrunner pause``/``resume``: the group's
paused set).
:class:`~taskrunner.Stats` needs a pool capacity that only a live process
knows; from outside we take the leader's published tuning capacity when one
is live, else ``--workers`` (default 32, the ``num_workers`` default), and
say which (``workers_source``). The task names are those found in the
metrics hash (``<task>_sum``/``_count`` fields,
:func:`taskrunner._wire.task_names_in`, as ``top`` reads them), since no
registry is loaded.

The ``--json`` document is the stable interface (see docs/operations.md);
the human-readable layout may change.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import trio

from taskrunner import _wire, admin
from taskrunner._fleet.shard_counts import queue_sizes, read_shard_counts, shard_queues
from taskrunner._fleet.stats import Stats, compute_stats
from taskrunner._flow.limits import Paused
from taskrunner._keys import KEY_LAYOUTS
from taskrunner.backends import QueueMetrics
from taskrunner.backends.redis import RedisBackend
from taskrunner.cli.base import DEFAULT_WORKERS, Command, fail, paused_text, positive_int
from taskrunner.cli.groups import UnknownGroup, require_group
from taskrunner.errors import BackendError

T = TypeVar("T")

TIMEOUT = 30.0
"""Longest a read-only operator command may take."""


# Shared by stats, keys and flush ------------------------------------------------


def key_layout_argument(parser: argparse.ArgumentParser) -> None:
    """``--key-layout go|cluster`` (default: the backend's choice)."""
    parser.add_argument(
        "--key-layout",
        choices=KEY_LAYOUTS,
        default=None,
        help="how the group's keys are named, as TaskRunnerConfig.key_layout "
        "(default: cluster on a Redis Cluster, else go)",
    )


def redis_arguments(
    parser: argparse.ArgumentParser, *, json_option: bool = True, every_queue: bool = False
) -> None:
    """``--url``, ``--group``, ``--prefix``, ``--queue``, ``--key-layout`` (and
    ``--json``); with ``every_queue``, ``--queue`` names one queue of the group and
    defaults to ``None`` (every queue), the backend being made with its own queue
    (``tasks``)."""
    parser.add_argument(
        "--url", required=True, help="Redis URL, e.g. redis://localhost:6379/0 (required)"
    )
    parser.add_argument(
        "--group", required=True, help="the consumer group (consumer_group) (required)"
    )
    parser.add_argument(
        "--prefix",
        default=None,
        help="stream prefix, as given to RedisBackend "
        "(default: taskrunner:<group>, the group's own stream)",
    )
    if every_queue:
        parser.add_argument(
            "--queue",
            default=None,
            help="one queue of the group (default: every queue of the group: the "
            "backend's own, the catalog's, the paused ones and those with keys)",
        )
    else:
        parser.add_argument(
            "--queue",
            default="tasks",
            help="stream name, as given to RedisBackend (default: %(default)s)",
        )
    key_layout_argument(parser)
    if json_option:
        parser.add_argument(
            "--json", action="store_true", help="print one JSON document (stable keys)"
        )


def run_on_redis(
    prog: str, args: argparse.Namespace, job: Callable[[RedisBackend], Awaitable[T]]
) -> tuple[T | None, int]:
    """Run ``job(backend)`` under ``trio.run`` on a backend built from ``args``.

    Returns:
        ``(result, 0)``, or ``(None, 1)`` after one line on stderr when the URL
        is invalid, the server cannot be reached, it takes too long, or ``job``
        raised :class:`~taskrunner.cli.groups.UnknownGroup`.
    """
    try:
        backend = RedisBackend.from_url(
            args.url,
            prefix=args.prefix,
            queue=args.queue or "tasks",
            key_layout=getattr(args, "key_layout", None),
        )
    except ValueError as exc:
        return None, fail(prog, f"invalid --url: {exc}")

    async def main() -> T:
        try:
            with trio.fail_after(TIMEOUT):
                return await job(backend)
        finally:
            with trio.move_on_after(5, shield=True):
                await backend.aclose()

    try:
        return trio.run(main), 0
    except BackendError as exc:
        return None, fail(prog, f"Redis at {args.url}: {exc}")
    except trio.TooSlowError:
        return None, fail(prog, f"Redis at {args.url} did not answer within {TIMEOUT:g}s")
    except UnknownGroup as exc:
        return None, fail(prog, str(exc))


# stats ------------------------------------------------------------------------------


async def instances(backend: RedisBackend) -> list[dict[str, Any]]:
    """Live heartbeat keys: ``[{"host", "instance_id", "ttl"}]`` sorted by host."""
    return [
        {"host": beat.host, "instance_id": beat.instance_id, "ttl": beat.ttl}
        for beat in await backend.list_heartbeats()
    ]


def _task_document(metrics: dict[str, float], name: str, stats: Stats) -> dict[str, Any]:
    total_ms, runs = _wire.task_timing(metrics, name)
    return {
        "runs": int(runs),
        "total_ms": total_ms,
        "avg_ms": stats.per_task_timing.get(name, 0.0),
    }


async def collect(backend: RedisBackend, group: str, workers_option: int | None) -> dict[str, Any]:
    """The ``stats --json`` document (see docs/operations.md for every key)."""
    metrics = await backend.read_metrics(group)
    names = _wire.task_names_in(metrics, group)
    published = await backend.read_tuning(group)
    desired = await backend.read_desired_instances(group)
    live = await instances(backend)
    lease = await backend.read_lease(group)
    queue = await backend.get_metrics(group)
    paused = await backend.paused(group)
    own = backend.stream_keys(group).queue
    every = {own: queue}
    # A sharded group's entries are in its shards too: each queue's count is the sum.
    shards = (await admin.shards_of(backend, group)).count
    found = [*await admin.queues(backend, group), *await shard_queues(backend, group, shards)]
    for name in dict.fromkeys(found):
        if name != own:
            every[name] = await backend.get_metrics(group, queue=name)
    sizes = await queue_sizes(backend, group, shards, {n: m.queue_size for n, m in every.items()})
    per_shard = await read_shard_counts(backend, group, shards, list(every))

    if published is not None:
        workers, source = published, "published"
    elif workers_option is not None:
        workers, source = workers_option, "option"
    else:
        workers, source = DEFAULT_WORKERS, "default"
    replication = max(1, len(live))
    stats = compute_stats(
        metrics=metrics,
        group=group,
        task_names=names,
        queue_len=sizes[own],
        workers=workers,
        replication=replication,
    )
    leader = None
    owner = lease.owner if lease is not None else None
    if lease is not None:
        host = next((i["host"] for i in live if i["instance_id"] == owner), None)
        leader = {"instance_id": owner, "host": host, "ttl": lease.ttl}
    for instance in live:
        instance["leader"] = instance["instance_id"] == owner
    return {
        "group": group,
        "stream": backend.stream_keys(group).stream,
        "leader": leader,
        "instances": live,
        "replication": replication,
        "tuning_capacity": published,
        "desired_instances": desired,
        "workers": workers,
        "workers_source": source,
        "paused": {"queues": sorted(paused.queues), "tasks": sorted(paused.tasks)},
        "tasks": {name: _task_document(metrics, name, stats) for name in names},
        "timing": {
            "avg_timing_ms": stats.avg_timing,
            "avg_schedule_timing_ms": stats.avg_schedule_timing,
            "schedule_passes": int(_wire.schedule_timing(metrics, group)[1]),
            "predicted_wait_time_ms": stats.predicted_wait_time,
            "tps": stats.tps,
        },
        "queues": {
            name: {"size": sizes[name], "claim_delay_ms": _delays_ms(m)}
            for name, m in every.items()
        },
        "shard_count": shards,
        "shards": [row.document() for row in per_shard],
        "queue": {
            "size": sizes[own],
            "claim_delay_ms": _delays_ms(queue),
            "groups": [
                {
                    "name": g.name,
                    "pending": g.pending,
                    "lag": g.lag,
                    "consumers": [
                        {"name": c.name, "pending": c.pending, "idle": c.idle} for c in g.consumers
                    ],
                }
                for g in queue.groups
            ],
        },
    }


def _delays_ms(metrics: QueueMetrics) -> dict[str, float]:
    ns_to_ms = 1e-6
    return {
        "avg": metrics.message_claim_delay_avg * ns_to_ms,
        "std": metrics.message_claim_delay_std * ns_to_ms,
        "max": metrics.message_claim_delay_max * ns_to_ms,
        "last": metrics.message_claim_delay_last * ns_to_ms,
    }


def _seconds(value: float | None) -> str:
    return "no expiry" if value is None else f"{value:.1f}s"


def render(doc: dict[str, Any]) -> str:
    """The human-readable form of a ``stats`` document."""
    lines = [f"group {doc['group']} on stream {doc['stream']}"]
    leader = doc["leader"]
    if leader is None:
        lines.append("leader:    none (no lease held)")
    else:
        where = f" on host {leader['host']}" if leader["host"] else ""
        lines.append(
            f"leader:    {leader['instance_id']}{where}, lease {_seconds(leader['ttl'])} left"
        )
    live = doc["instances"]
    lines.append(f"instances: {len(live)} live (heartbeat keys; every group on this Redis)")
    for i in live:
        mark = "  (leader)" if i["leader"] else ""
        lines.append(f"  {i['host']:<32} {i['instance_id']}  expires in {_seconds(i['ttl'])}{mark}")
    published = doc["tuning_capacity"]
    tuning = "none published" if published is None else f"published capacity {published}"
    lines.append(f"tuning:    {tuning}")
    desired = doc["desired_instances"]
    lines.append(
        "autoscale: none published (target_wait off)"
        if desired is None
        else f"autoscale: {desired} instance(s) desired, {len(live)} live"
    )
    why = {
        "published": "the published tuning capacity",
        "option": "--workers",
        "default": "--workers default; no capacity published",
    }[doc["workers_source"]]
    workers, replication = doc["workers"], doc["replication"]
    lines.append(f"workers:   {workers} per instance ({why}), replication {replication}")
    paused = doc["paused"]
    lines.append(
        "paused:    "
        + paused_text(Paused(queues=frozenset(paused["queues"]), tasks=frozenset(paused["tasks"])))
    )
    lines.append("")
    lines.append(f"  {'TASK':<24} {'RUNS':>10} {'AVG MS':>12}")
    for name, task in doc["tasks"].items():
        lines.append(f"  {name:<24} {task['runs']:>10} {task['avg_ms']:>12.3f}")
    if not doc["tasks"]:
        lines.append("  (no timings recorded)")
    t = doc["timing"]
    lines.append(
        f"avg {t['avg_timing_ms']:.3f} ms, predicted wait {t['predicted_wait_time_ms']:.1f} ms, "
        f"tps {t['tps']:.1f}, scheduler pass {t['avg_schedule_timing_ms']:.3f} ms "
        f"({t['schedule_passes']} passes)"
    )
    q = doc["queue"]
    d = q["claim_delay_ms"]
    lines.append("")
    lines.append(
        f"queue:     {q['size']} entries; claim delay avg {d['avg']:.1f} ms, std {d['std']:.1f}, "
        f"max {d['max']:.1f}, last {d['last']:.1f}"
    )
    for g in q["groups"]:
        lines.append(f"  group {g['name']}: pending {g['pending']}, lag {g['lag']}")
        for c in g["consumers"]:
            lines.append(f"    {c['name']:<40} pending {c['pending']:>6}  idle {c['idle']:.1f}s")
    lines.extend(shards_text(doc["shards"]))
    if len(doc["queues"]) > 1:
        lines.append("every queue of the group:")
        for name, each in doc["queues"].items():
            d = each["claim_delay_ms"]
            lines.append(
                f"  {name:<24} {each['size']:>8} entries; claim delay avg {d['avg']:.1f} ms, "
                f"max {d['max']:.1f}, last {d['last']:.1f}"
            )
    return "\n".join(lines)


def shards_text(rows: list[dict[str, Any]]) -> list[str]:
    """The lines of a sharded group's per-shard counts (none for an unsharded group)."""
    if not rows:
        return []
    lines = [f"shards:    {len(rows)} (queued, delayed and dead messages of each)"]
    lines.append(f"  {'SHARD':>5} {'QUEUED':>10} {'DELAYED':>10} {'DEAD':>8}  TAG")
    for row in rows:
        lines.append(
            f"  {row['shard']:>5} {row['queued']:>10} {row['delayed']:>10} {row['dead']:>8}"
            f"  {row['tag']}"
        )
    return lines


def _arguments(parser: argparse.ArgumentParser) -> None:
    redis_arguments(parser)
    parser.add_argument(
        "--workers",
        type=positive_int,
        metavar="N",
        help=f"pool capacity per instance for the estimates when no tuning capacity is "
        f"published (default: {DEFAULT_WORKERS})",
    )


def _run(args: argparse.Namespace) -> int:
    async def job(backend: RedisBackend) -> dict[str, Any]:
        await require_group(backend, args.group)
        return await collect(backend, args.group, args.workers)

    doc, code = run_on_redis("taskrunner stats", args, job)
    if doc is None:
        return code
    print(json.dumps(doc, indent=2, sort_keys=True) if args.json else render(doc))
    return 0


COMMAND = Command(
    name="stats",
    help="show a group's timing statistics, queue, leader and live instances",
    add_arguments=_arguments,
    run=_run,
)
