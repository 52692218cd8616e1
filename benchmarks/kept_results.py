"""Plain, kept-result and features-on runs on Redis in one run, with their costs per task.

One server; each round runs the three workloads in turn (the order rotating from
round to round, so the machine's noise falls on all of them alike), each in this
process against a flushed server: 20,000 no-op tasks enqueued with
``dispatch_many`` and processed by one runner (concurrency 32), as
``redis_end_to_end.py`` does.

- ``plain``: the no-op task;
- ``keep``: the same with ``keep_result=60`` (a result document per run, written
  with its ack; nobody waits for it);
- ``features``: a 30 s timeout, a ``TaskContext`` parameter, one no-op
  middleware and ``keep_result=60``.

Per workload it reports the median processing rate and its ratio to plain, the
server's CPU per task (``INFO cpu`` ``used_cpu_user + used_cpu_sys`` over the
enqueue and the processing, over N), the commands' own time per task from ``INFO
commandstats`` (``usec`` deltas, the rest of the server's CPU being its network
I/O and event loop), and this process's CPU per task (``time.process_time`` over
the processing, so the enqueue is left out). The plain run's bulk enqueue is set
against the same run's ``redis-benchmark -P 16`` XADD rate. Targets (issue 29):
``keep`` Redis CPU at most 1.5x plain's and its rate at least 0.8x; ``features``
at least 0.75x; bulk enqueue at least 0.5 of the XADD ceiling.

    python benchmarks/kept_results.py [--tasks N] [--rounds R] [--commands]

``--commands`` prints the commandstats breakdown per workload too. The kept
results' later expiry (one key deletion each, by the server's expire cycle) is
not counted: the server is flushed after every run.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections import defaultdict

import redis
import trio
from _harness import run_noop_tasks
from redis_connection import find_redis_benchmark, redis_benchmark

from taskrunner import TaskRunner, TaskRunnerConfig
from taskrunner.backends.redis import RedisBackend
from taskrunner.testing import running_server

WORKLOADS = ("plain", "keep", "features")
TARGETS = {"keep": 0.8, "features": 0.75}


def redis_cpu(client: redis.Redis) -> float:
    """The server's CPU seconds so far (``used_cpu_user + used_cpu_sys``)."""
    cpu = client.info("cpu")
    return float(cpu["used_cpu_user"]) + float(cpu["used_cpu_sys"])


def command_usec(client: redis.Redis) -> dict[str, float]:
    """Each command's total ``usec`` so far (``INFO commandstats``)."""
    stats = client.info("commandstats")
    return {name.removeprefix("cmdstat_"): float(row["usec"]) for name, row in stats.items()}


async def one_run(url: str, n: int, workload: str, run: int) -> tuple[float, float, float]:
    """Enqueue and process ``n`` tasks of ``workload``; returns (enqueue/s, process/s,
    this process's CPU seconds over the processing)."""
    backend = RedisBackend.from_url(url, queue=f"kept{run}{workload}")
    runner = TaskRunner(
        TaskRunnerConfig(consumer_group="bench", num_workers=32, batch_size=32), backend
    )
    cpu_at: list[float] = []
    # process_time from serve being ready: the harness times the same span.
    started = time.process_time()
    rates = await run_noop_tasks(
        runner,
        n,
        features=workload == "features",
        keep_result=workload != "plain",
        on_ready=lambda: cpu_at.append(time.process_time()),
    )
    cpu = time.process_time() - (cpu_at[0] if cpu_at else started)
    assert await backend.length("bench") == 0, "entries left in the stream"
    await backend.aclose()
    return rates.enqueue, rates.process, cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--commands", action="store_true", help="commandstats per workload")
    args = parser.parse_args()
    n = args.tasks
    rate: dict[str, list[float]] = defaultdict(list)
    enqueue: list[float] = []
    server_us: dict[str, list[float]] = defaultdict(list)
    python_us: dict[str, list[float]] = defaultdict(list)
    commands: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    with running_server() as server:
        client = redis.Redis.from_url(server.url)
        for run in range(args.rounds):
            order = WORKLOADS[run % 3 :] + WORKLOADS[: run % 3]
            for workload in order:
                client.flushall()
                cpu, usec = redis_cpu(client), command_usec(client)
                e, p, py = trio.run(one_run, server.url, n, workload, run)
                server_us[workload].append((redis_cpu(client) - cpu) / n * 1e6)
                after = command_usec(client)
                for name, total in after.items():
                    if name not in ("info", "flushall"):
                        commands[workload][name].append((total - usec.get(name, 0.0)) / n)
                rate[workload].append(p)
                python_us[workload].append(py / n * 1e6)
                if workload == "plain":
                    enqueue.append(e)
        client.flushall()
        tool = find_redis_benchmark()
        ceiling = None
        if tool:
            xadd = ["xadd", "ceiling", "*", "payload", "x"]
            ceiling = redis_benchmark(
                tool, server.port, 200_000, "-P", "16", *xadd, row=" ".join(xadd)
            )
    med = statistics.median
    plain_rate, plain_cpu = med(rate["plain"]), med(server_us["plain"])
    print(f"kept_results: {n} no-op tasks, 32 workers, {server.kind}, median of {args.rounds}")
    print(f"  {'workload':<10}{'process/s':>12}{'ratio':>8}{'Redis us':>10}{'x plain':>9}"
          f"{'Python us':>11}  spread of process/s")  # fmt: skip
    for workload in WORKLOADS:
        r, c = med(rate[workload]), med(server_us[workload])
        spread = f"{min(rate[workload]):,.0f}-{max(rate[workload]):,.0f}"
        target = TARGETS.get(workload)
        mark = f"  target >= {target}" if target else ""
        print(
            f"  {workload:<10}{r:>12,.0f}{r / plain_rate:>8.3f}{c:>10.2f}{c / plain_cpu:>9.2f}"
            f"{med(python_us[workload]):>11.1f}  {spread}{mark}"
        )
    print("  target: keep Redis CPU <= 1.5x plain's")
    if args.commands:
        for workload in WORKLOADS:
            rows = {name: med(v) for name, v in commands[workload].items()}
            shown = sorted(((t, name) for name, t in rows.items() if t >= 0.01), reverse=True)
            total = sum(rows.values())
            listing = ", ".join(f"{name} {t:.2f}" for t, name in shown)
            print(f"  commands' own us per task, {workload} (total {total:.2f}): {listing}")
    e = med(enqueue)
    print(f"  bulk enqueue (dispatch_many): {e:,.0f} tasks/s (spread {min(enqueue):,.0f}-"
          f"{max(enqueue):,.0f})")  # fmt: skip
    if ceiling:
        print(f"  redis-benchmark -P 16 XADD: {ceiling:,.0f} ops/s; ratio {e / ceiling:.3f}"
              "   target >= 0.5")  # fmt: skip


if __name__ == "__main__":
    main()
