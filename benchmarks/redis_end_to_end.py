"""End-to-end no-op throughput through RedisBackend on a local server.

One runner process (concurrency 32): dispatch N no-op tasks in batches
(``dispatch_many``), then serve until every one is acked. Reports enqueue and
processing tasks/s, and the same run's ``redis-benchmark -P 16`` XADD rate as
the ceiling, as ratios. Targets: process >= 15,000/s, enqueue >= 100,000/s.

    python benchmarks/redis_end_to_end.py [--tasks N] [--workers W] [--fetchers F] [--features]

``--features``: the no-op task has a 30 s timeout and a context parameter, and one
no-op middleware wraps every run (target: at least 0.8x the plain run). With
``--compare`` both are run, alternating, and the ratio is printed.
``--keep-result``: the plain run and, alternating with it, one whose task keeps every
result (``keep_result=60``: a result document and its notice per run, in the ack's
round trip); the ratio is printed (target: at least 0.7x).
"""

from __future__ import annotations

import argparse
import statistics

import trio
from _harness import run_noop_tasks
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
        enqueue, process, featured, kept = [], [], [], []
        for run in range(args.repeat):
            e, p = trio.run(
                one_run, server.url, args.tasks, args.workers, args.fetchers, run, args.features
            )
            enqueue.append(e)
            process.append(p)
            if args.compare:
                _, f = trio.run(
                    one_run, server.url, args.tasks, args.workers, args.fetchers, run, True
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
    print(f"  enqueue (dispatch_many): {e:>10,.0f} tasks/s   target >= 100,000")
    print(f"  process (serve):         {p:>10,.0f} tasks/s   target >= 15,000")
    if featured:
        f = statistics.median(featured)
        print(f"  process with timeout, context and middleware: {f:>10,.0f} tasks/s")
        print(f"  ratio features / plain: {f / p:.3f}   target >= 0.8")
    if kept:
        k = statistics.median(kept)
        print(f"  process with keep_result on every task: {k:>10,.0f} tasks/s")
        print(f"  ratio keep_result / plain: {k / p:.3f}   target >= 0.7")
    if ceiling:
        print(f"  redis-benchmark -P 16 XADD: {ceiling:>10,.0f} ops/s (ceiling)")
        print(f"  ratio enqueue / ceiling: {e / ceiling:.3f}")
        print(f"  ratio process / ceiling: {p / ceiling:.3f}")


if __name__ == "__main__":
    main()
