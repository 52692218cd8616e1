"""Start latency: the time from ``dispatch`` to the action starting, at a steady rate.

One runner serves (concurrency 32) while the same trio program dispatches no-op
tasks at a steady rate: every millisecond the tasks due by then are sent, each
with its own ``dispatch`` call (concurrently), carrying the ``perf_counter()``
read just before the call. The action records how long ago that was. The first
half second of each rate is left out (connections, the group, warm-up).
Reports p50, p99 and the worst, per rate. Target (issue 17): p99 <= 1 ms at
10,000 tasks/s.

    python benchmarks/start_latency.py [--rates 200,1000,10000] [--seconds 3]
"""

from __future__ import annotations

import argparse
import math
import time

import trio

from taskrunner import TaskRunner, TaskRunnerConfig
from taskrunner.backends.redis import RedisBackend
from taskrunner.testing import running_server

WARMUP = 0.5
TICK = 0.001


def percentile(values: list[float], q: float) -> float:
    """The nearest-rank ``q``-th percentile of ``values`` (sorted here)."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)]


async def one_rate(url: str, rate: float, seconds: float, run: int) -> list[float]:
    backend = RedisBackend.from_url(url, queue=f"latency{run}")
    runner = TaskRunner(TaskRunnerConfig(consumer_group="bench", num_workers=32), backend)
    lags: list[float] = []
    total = round(rate * seconds)
    started = 0
    done = trio.Event()

    @runner.task()
    async def noop(sent: float) -> None:
        nonlocal started
        lags.append(time.perf_counter() - sent)
        started += 1
        if started == total:
            done.set()

    async def send() -> None:
        await runner.dispatch("noop", time.perf_counter())

    async with trio.open_nursery() as nursery:
        await nursery.start(runner.serve)
        await runner.dispatch("noop", time.perf_counter())  # connect; not counted
        lags.clear()
        started = 0
        begin = time.perf_counter()
        sent = 0
        async with trio.open_nursery() as senders:
            while sent < total:
                due = min(total, math.floor((time.perf_counter() - begin) * rate) + 1)
                for _ in range(due - sent):
                    senders.start_soon(send)
                sent = due
                await trio.sleep(TICK)
        with trio.move_on_after(10):
            await done.wait()
        nursery.cancel_scope.cancel()
    await backend.aclose()
    skip = round(rate * WARMUP)
    return lags[skip:]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rates", default="200,1000,10000", help="tasks/s, comma-separated")
    parser.add_argument("--seconds", type=float, default=3.0)
    args = parser.parse_args()
    rates = [float(r) for r in args.rates.split(",")]
    with running_server() as server:
        print(f"start_latency: dispatch to start, one runner (32 workers), {server.kind}")
        for run, rate in enumerate(rates):
            lags = trio.run(one_rate, server.url, rate, args.seconds, run)
            print(
                f"  {rate:>8,.0f} tasks/s: p50 {percentile(lags, 50) * 1e3:6.3f} ms  "
                f"p99 {percentile(lags, 99) * 1e3:6.3f} ms  max {max(lags) * 1e3:7.3f} ms  "
                f"({len(lags)} counted)" + ("   target p99 <= 1 ms" if rate >= 10_000 else "")
            )


if __name__ == "__main__":
    main()
