"""End-to-end no-op throughput through RedisBackend on a local server.

One runner process (concurrency 32): dispatch N no-op tasks in batches
(``dispatch_many``), then serve until every one is acked. Reports enqueue and
processing tasks/s, the server's CPU per task (``used_cpu_user + used_cpu_sys``
from ``INFO`` before and after the enqueue-and-process run, over N), the rate of
N single ``dispatch`` calls with 32 in flight, and the same run's
``redis-benchmark -P 16`` XADD rate as the ceiling, as ratios. Targets (issue
17): process >= 60,000/s, concurrent dispatch >= 50,000/s, bulk enqueue >= 0.35
of the XADD ceiling, Redis CPU <= 4 us per task.

    python benchmarks/redis_end_to_end.py [--tasks N] [--workers W] [--fetchers F] [--features]

``--features``: the no-op task has a 30 s timeout and a context parameter, and one
no-op middleware wraps every run. With ``--compare`` the plain run and, alternating
with it, one with all of those and the result kept (``keep_result=60``) are run, and
the ratio is printed (target: at least 0.7x the plain run).
``--keep-result``: the plain run and, alternating with it, one whose task keeps every
result (``keep_result=60``: a result document and its notice per run, in the ack's
round trip); the ratio is printed (target: at least 0.7x).
"""

from __future__ import annotations

import argparse
import statistics

import redis
import trio
from _harness import run_concurrent_dispatch, run_noop_tasks
from redis_connection import find_redis_benchmark, redis_benchmark

from taskrunner import TaskRunner, TaskRunnerConfig
from taskrunner.backends.redis import RedisBackend
from taskrunner.testing import running_server


async def one_run(
    url: str,
    n: int,
    workers: int,
    fetchers: int,
    run: int,
    features: bool = False,
    keep_result: bool = False,
) -> tuple[float, float]:
    tag = ("f" if features else "") + ("k" if keep_result else "")
    backend = RedisBackend.from_url(url, queue=f"bench{run}{tag}")
    runner = TaskRunner(
        TaskRunnerConfig(
            consumer_group="bench",
            num_workers=workers,
            batch_size=workers,
            num_fetchers=fetchers,
        ),
        backend,
    )
    rates = await run_noop_tasks(runner, n, features=features, keep_result=keep_result)
    assert await backend.length("bench") == 0, "entries left in the stream"
    await backend.aclose()
    return rates.enqueue, rates.process


async def dispatch_run(url: str, n: int, run: int) -> float:
    """``n`` single dispatches, 32 in flight, on a fresh stream (deleted afterwards)."""
    backend = RedisBackend.from_url(url, queue=f"dispatch{run}")
    runner = TaskRunner(TaskRunnerConfig(consumer_group="bench"), backend)
    rate = await run_concurrent_dispatch(runner, n, in_flight=32)
    await backend.aclose()
    return rate


def redis_cpu(client: redis.Redis) -> float:
    """The server's CPU seconds so far (``used_cpu_user + used_cpu_sys``)."""
    cpu = client.info("cpu")
    return float(cpu["used_cpu_user"]) + float(cpu["used_cpu_sys"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=20_000)
    parser.add_argument("--workers", type=int, default=32)
    parser.add_argument("--fetchers", type=int, default=1)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--features", action="store_true", help="timeout, context, middleware")
    parser.add_argument("--compare", action="store_true", help="plain and --features, alternating")
    parser.add_argument(
        "--keep-result", action="store_true", help="plain and keep_result=60, alternating"
    )
    args = parser.parse_args()
    with running_server() as server:
        client = redis.Redis.from_url(server.url)
        enqueue, process, featured, kept, cpu, dispatched = [], [], [], [], [], []
        for run in range(args.repeat):
            before = redis_cpu(client)
            e, p = trio.run(
                one_run, server.url, args.tasks, args.workers, args.fetchers, run, args.features
            )
            cpu.append((redis_cpu(client) - before) / args.tasks * 1e6)
            enqueue.append(e)
            process.append(p)
            dispatched.append(trio.run(dispatch_run, server.url, args.tasks, run))
            client.delete(f"taskrunner:bench:dispatch{run}")
            if args.compare:
                _, f = trio.run(
                    one_run, server.url, args.tasks, args.workers, args.fetchers, run, True, True
                )
                featured.append(f)
            if args.keep_result:
                _, k = trio.run(
                    one_run, server.url, args.tasks, args.workers, args.fetchers, run, False, True
                )
                kept.append(k)
        tool = find_redis_benchmark()
        ceiling = None
        if tool:
            xadd = ["xadd", "ceiling", "*", "payload", "x"]
            ceiling = redis_benchmark(
                tool, server.port, 200_000, "-P", "16", *xadd, row=" ".join(xadd)
            )
    e, p = statistics.median(enqueue), statistics.median(process)
    print(
        f"redis_end_to_end: {args.tasks} no-op tasks, {args.workers} workers, "
        f"{args.fetchers} fetcher(s), {server.kind}, median of {args.repeat}"
        + (" (timeout, context, middleware)" if args.features else "")
    )
    d = statistics.median(dispatched)
    print(f"  enqueue (dispatch_many): {e:>10,.0f} tasks/s")
    print(f"  process (serve):         {p:>10,.0f} tasks/s   target >= 60,000")
    print(f"  dispatch, 32 in flight:  {d:>10,.0f} tasks/s   target >= 50,000")
    print(f"  Redis CPU per task:      {statistics.median(cpu):>10.2f} us      target <= 4")
    if featured:
        f = statistics.median(featured)
        print(f"  process with timeout, context, middleware, result: {f:>10,.0f} tasks/s")
        print(f"  ratio features / plain: {f / p:.3f}   target >= 0.7")
    if kept:
        k = statistics.median(kept)
        print(f"  process with keep_result on every task: {k:>10,.0f} tasks/s")
        print(f"  ratio keep_result / plain: {k / p:.3f}   target >= 0.7")
    if ceiling:
        print(f"  redis-benchmark -P 16 XADD: {ceiling:>10,.0f} ops/s (ceiling)")
        print(f"  ratio enqueue / ceiling: {e / ceiling:.3f}   target >= 0.35")
        print(f"  ratio process / ceiling: {p / ceiling:.3f}")


if __name__ == "__main__":
    main()
