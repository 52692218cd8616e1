"""A serving sharded group: its processing rate, and its balance over a cluster's masters.

Issue 27 asks, of a group of 16 shards: on one standalone server, processing with 16
shards is at least 0.9x of one shard; on a 3-master cluster each master serves
33 % +- 8 % of the group's commands (``INFO commandstats``), and Redis CPU per task on
the busiest master is at most 0.4x of the same fleet with one shard (all on one master).

Each round is one runner in this process (``TaskRunnerConfig(shards=1 or 16)``,
concurrency 32, as ``benchmarks/redis_end_to_end.py`` runs it) on a fresh group:
``--tasks`` no-op tasks dispatched with ``dispatch_many`` beforehand, then ``serve``
drains them (``run_noop_tasks`` of ``benchmarks/_harness.py``). The processing rate is
from ``serve`` being ready to the last ack; the rate to 99 % acked (without the drain's
tail) and the runner's CPU per task are printed beside it. The cluster's figures (each master's
command calls and CPU, ``CONFIG RESETSTAT`` first) cover the whole round: dispatch,
serving and the runner's shutdown. Rounds alternate 1 and 16 shards (1 16, 16 1, ...),
on the standalone server and then on the cluster, as ``benchmarks/ab.py`` does.

    python benchmarks/sharded.py [--tasks 20000] [--rounds 2] [--server auto]
"""

from __future__ import annotations

import argparse
import statistics
import time
import uuid
from typing import Any

import attrs
import redis
import trio
from _harness import run_noop_tasks

from taskrunner import TaskRunner, TaskRunnerConfig
from taskrunner.backends.redis import RedisBackend
from taskrunner.testing import running_cluster, running_server
from taskrunner.testing._cluster import slot_ranges

CONCURRENCY = 32


@attrs.frozen
class Round:
    rate: float
    """Tasks processed per second, from ``serve`` being ready to the last ack."""
    bulk_rate: float
    """The same up to the ack of 99 % of the tasks (the rate without the drain's tail)."""
    runner_cpu: float
    """This process's CPU seconds per task, from ``serve`` being ready to its end."""


async def serve_round(url: str, n: int, shards: int) -> Round:
    """Dispatch ``n`` no-op tasks to a fresh group of ``shards`` shards at ``url`` and
    serve them with one runner."""
    config = TaskRunnerConfig(
        consumer_group=f"bench-{uuid.uuid4().hex[:6]}",
        shards=shards,
        num_workers=CONCURRENCY,
        batch_size=CONCURRENCY,
    )
    ready = trio.Event()
    marks: dict[str, float] = {}

    def on_ready() -> None:
        marks.update(cpu=time.process_time(), ready=time.perf_counter())
        ready.set()

    async def watch_bulk(runner: TaskRunner) -> None:
        await ready.wait()
        while runner.statistics().acked < 0.99 * n:  # noqa: ASYNC110 - no event for acks
            await trio.sleep(0.005)
        marks["bulk"] = time.perf_counter()

    async with RedisBackend.from_url(url) as backend:
        runner = TaskRunner(config, backend)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(watch_bulk, runner)
            rates = await run_noop_tasks(runner, n, on_ready=on_ready)
        runner_cpu = (time.process_time() - marks["cpu"]) / n
    return Round(rates.process, 0.99 * n / (marks["bulk"] - marks["ready"]), runner_cpu)


def _cpu(info: dict[str, Any]) -> float:
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


def _calls(stats: dict[str, str]) -> int:
    total = 0
    for name, row in stats.items():
        if name.startswith("cmdstat_"):
            fields = dict(kv.split("=", 1) for kv in row.split(","))
            total += int(fields["calls"])
    return total


def standalone_round(url: str, n: int, shards: int) -> tuple[Round, float, float]:
    """``(the round, the server's CPU s per task, the server's commands per task)``."""
    client = redis.Redis.from_url(url)
    client.config_resetstat()
    before = _cpu(client.info("cpu"))
    served = trio.run(serve_round, url, n, shards)
    server_cpu = (_cpu(client.info("cpu")) - before) / n
    calls = sum(row["calls"] for row in client.info("commandstats").values())
    return served, server_cpu, calls / n


def cluster_round(cluster: Any, n: int, shards: int) -> tuple[float, list[float], list[float]]:
    """``(processing rate, each master's share of the commands, each master's CPU s per
    task)`` of one round on ``cluster``."""
    masters = [cluster.master_of_slot(lo) for lo, _ in slot_ranges(3)]
    for master in masters:
        master.command("CONFIG", "RESETSTAT")
    cpu_before = [_cpu(master.info("cpu")) for master in masters]
    rate = trio.run(serve_round, cluster.url, n, shards).rate
    calls = [_calls(master.info("commandstats")) for master in masters]
    cpu = [_cpu(master.info("cpu")) - b for master, b in zip(masters, cpu_before, strict=True)]
    return rate, [c / sum(calls) for c in calls], [c / n for c in cpu]


def _order(run: int) -> tuple[int, int]:
    return (1, 16) if run % 2 == 0 else (16, 1)


def _ratio(rounds: dict[int, list[float]]) -> float:
    """The median with 16 shards over the median with 1."""
    return statistics.median(rounds[16]) / statistics.median(rounds[1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=2, help="rounds of each")
    parser.add_argument("--server", default="auto", help="auto, redis, valkey or a path")
    args = parser.parse_args()
    n = args.tasks
    print(
        f"{n} no-op tasks per round, one runner (concurrency {CONCURRENCY}), {args.rounds} rounds"
    )
    standalone: dict[int, list[Round]] = {1: [], 16: []}
    with running_server(args.server) as server:
        for run in range(args.rounds):
            for shards in _order(run):
                served, server_cpu, calls = standalone_round(server.url, n, shards)
                standalone[shards].append(served)
                print(
                    f"standalone shards={shards:2}: {served.rate:7,.0f} tasks/s "
                    f"({served.bulk_rate:7,.0f} to 99 %), runner CPU "
                    f"{served.runner_cpu * 1e6:5.1f} us/task, Redis CPU "
                    f"{server_cpu * 1e6:5.2f} us/task, {calls:4.2f} commands/task"
                )
    shares: list[list[float]] = []
    busiest: dict[int, list[float]] = {1: [], 16: []}
    with running_cluster(args.server, masters=3, replicas=0) as cluster:
        for run in range(args.rounds):
            for shards in _order(run):
                rate, share, per_task = cluster_round(cluster, n, shards)
                # With one shard one master does all the work; with 16, the busiest
                # master's CPU over all of the group's tasks is compared with it.
                busiest[shards].append(max(per_task))
                if shards == 16:
                    shares.append(share)
                print(
                    f"cluster    shards={shards:2}: {rate:7,.0f} tasks/s, commands per master "
                    + " ".join(f"{s:5.1%}" for s in share)
                    + ", Redis CPU us/task per master "
                    + " ".join(f"{c * 1e6:5.2f}" for c in per_task)
                )
    worst = max(abs(s - 1 / 3) for share in shares for s in share)
    rate, bulk, cpu = (
        _ratio({k: [getattr(r, field) for r in rs] for k, rs in standalone.items()})
        for field in ("rate", "bulk_rate", "runner_cpu")
    )
    print(
        f"{cluster.kind}, shards=16 / shards=1: standalone processing {rate:.3f} (>= 0.9), "
        f"to 99 % {bulk:.3f}, runner CPU per task {cpu:.3f}; cluster: largest distance of "
        f"a master's share from 33.3 % {worst:.1%} (<= 8 %), busiest master's Redis CPU "
        f"per task {_ratio(busiest):.2f} (<= 0.4)"
    )


if __name__ == "__main__":
    main()
