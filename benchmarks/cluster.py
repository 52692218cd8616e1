"""One group on a Redis Cluster against the same fleet on a standalone server.

A group lives in one slot, so on one master: its throughput should be the
standalone server's, less what the cluster client's routing costs. This script
starts a standalone server and a cluster (3 masters, no replicas, so neither side
pays for replication) of the same binary, and alternates them round by round
(S C, C S, S C, ...), in one process, as ``benchmarks/ab.py`` does for two
checkouts: on a shared machine two separate runs are not comparable. Each round
dispatches ``--tasks`` no-op tasks and serves them with one runner (32 workers,
``run_noop_tasks``, as ``redis_end_to_end.py`` does). Prints each round and the
ratio of the medians of the processing rates (cluster / standalone; issue 25 asks
for at least 0.9).

    python benchmarks/cluster.py [--tasks 10000] [--rounds 4] [--server auto]
"""

from __future__ import annotations

import argparse
import os
import statistics

import trio
from _harness import run_noop_tasks

from taskrunner import TaskRunner, TaskRunnerConfig
from taskrunner.backends.redis import RedisBackend
from taskrunner.testing import running_cluster, running_server


async def one_round(url: str, n: int, run: int, *, cluster: bool) -> float:
    """Processing rate (tasks/s) of ``n`` no-op tasks on the server at ``url``."""
    backend = RedisBackend.from_url(url, queue=f"bench{run}")
    runner = TaskRunner(
        TaskRunnerConfig(consumer_group="bench", num_workers=32, batch_size=32), backend
    )
    async with backend:
        assert await backend.detect_cluster() is cluster
        rates = await run_noop_tasks(runner, n)
        assert await backend.length("bench") == 0, "entries left in the stream"
    return rates.process


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=4, help="rounds of each")
    parser.add_argument("--server", default="auto", help="auto, redis, valkey or a path")
    args = parser.parse_args()
    with (
        running_server(args.server) as server,
        running_cluster(args.server, masters=3, replicas=0) as cluster,
    ):
        print(f"{cluster.kind}: {args.tasks} no-op tasks per round, {args.rounds} rounds each")
        rates: dict[str, list[float]] = {"standalone": [], "cluster": []}
        for run in range(args.rounds):
            order = ["standalone", "cluster"] if run % 2 == 0 else ["cluster", "standalone"]
            for kind in order:
                url = cluster.url if kind == "cluster" else server.url
                rate = trio.run(
                    lambda u=url, k=kind, r=run: one_round(u, args.tasks, r, cluster=k == "cluster")
                )
                rates[kind].append(rate)
                print(f"round {run + 1} {kind:>10}: {rate:9,.0f} tasks/s")
        load = os.getloadavg()
        medians = {kind: statistics.median(values) for kind, values in rates.items()}
        print(
            f"median: standalone {medians['standalone']:,.0f}, cluster "
            f"{medians['cluster']:,.0f} tasks/s; cluster / standalone = "
            f"{medians['cluster'] / medians['standalone']:.3f} "
            f"(load average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f} on {os.cpu_count()} cores)"
        )


if __name__ == "__main__":
    main()
