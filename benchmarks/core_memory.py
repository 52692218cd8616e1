"""End-to-end no-op throughput on the in-memory backend vs a bare trio nursery.

Each case is compared with a bare trio nursery starting the same number of no-op
tasks in the same process, as a ratio (and its CPU per task, ``time.process_time``,
which a shared machine disturbs less than the rates):

- **batched**: dispatch N no-op tasks (``dispatch_many``), then serve one runner
  until all are acked; the processing rate (target >= 0.25);
- **kept**: the same with the result kept (``keep_result=60``);
- **features on**: the same with a timeout, a context, one middleware and the
  result kept; as a ratio of the plain batched rate (target >= 0.75);
- **one dispatch per task**: serve one runner and, meanwhile, ``await
  runner.dispatch`` N no-op tasks one after the other; the rate from the first
  dispatch to the last ack (target >= 0.25).

Rounds interleave the cases, and the medians are printed, with the spread of
the ratios over the rounds (the noise of the machine).

    python benchmarks/core_memory.py [--tasks N] [--workers W] [--repeat R]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Awaitable, Callable

import trio
from _harness import run_dispatch_while_serving, run_noop_tasks

from taskrunner import TaskRunner, TaskRunnerConfig
from taskrunner.backends.memory import MemoryBackend


async def bare_trio(n: int) -> float:
    async def noop() -> None:
        pass

    start = time.perf_counter()
    async with trio.open_nursery() as nursery:
        for _ in range(n):
            nursery.start_soon(noop)
    return n / (time.perf_counter() - start)


def _runner(workers: int) -> TaskRunner:
    config = TaskRunnerConfig(consumer_group="bench", num_workers=workers, batch_size=workers)
    return TaskRunner(config, MemoryBackend())


async def batched(n: int, workers: int, features: bool, keep_result: bool) -> float:
    rates = await run_noop_tasks(_runner(workers), n, features=features, keep_result=keep_result)
    return rates.process


async def one_by_one(n: int, workers: int) -> float:
    return await run_dispatch_while_serving(_runner(workers), n)


async def timed(n: int, case: Callable[[], Awaitable[float]]) -> tuple[float, float]:
    """``case()``'s rate, and the CPU it used per task in µs (enqueue included)."""
    cpu = time.process_time()
    rate = await case()
    return rate, (time.process_time() - cpu) / n * 1e6


async def main(n: int, workers: int, repeat: int) -> None:
    cases: dict[str, Callable[[], Awaitable[float]]] = {
        "bare": lambda: bare_trio(n),
        "plain": lambda: batched(n, workers, False, False),
        "kept": lambda: batched(n, workers, False, True),
        "features": lambda: batched(n, workers, True, True),
        "one": lambda: one_by_one(n, workers),
    }
    runs: dict[str, list[tuple[float, float]]] = {name: [] for name in cases}
    for _ in range(repeat):
        for name, case in cases.items():
            runs[name].append(await timed(n, case))
    rate = {name: statistics.median(r for r, _ in got) for name, got in runs.items()}
    cpu = {name: statistics.median(c for _, c in got) for name, got in runs.items()}

    def spread(name: str, over: str) -> str:
        ratios = [r / o for (r, _), (o, _) in zip(runs[name], runs[over], strict=True)]
        return f"{min(ratios):.3f}-{max(ratios):.3f}"

    b = rate["bare"]
    print(f"core_memory: {n} no-op tasks, {workers} workers, median of {repeat} rounds")
    print(f"  bare trio nursery:     {b:>10,.0f} tasks/s  {cpu['bare']:5.1f} us CPU/task")
    for name, label in (
        ("plain", "batched, plain"),
        ("kept", "batched, keep_result"),
        ("features", "batched, features on"),
        ("one", "one dispatch per task"),
    ):
        print(
            f"  {label + ':':22} {rate[name]:>10,.0f} tasks/s  {cpu[name]:5.1f} us CPU/task"
            f"  / bare trio {rate[name] / b:.3f} (rounds {spread(name, 'bare')})"
        )
    print(f"  batched plain / bare trio:         {rate['plain'] / b:.3f}  (target >= 0.25)")
    print(f"  one dispatch per task / bare trio: {rate['one'] / b:.3f}  (target >= 0.25)")
    print(
        f"  features on / plain:               {rate['features'] / rate['plain']:.3f}"
        f"  (rounds {spread('features', 'plain')}; target >= 0.75)"
    )
    print(
        f"  keep_result / plain:               {rate['kept'] / rate['plain']:.3f}"
        f"  (rounds {spread('kept', 'plain')})"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=20_000)
    parser.add_argument("--workers", type=int, default=32)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    trio.run(main, args.tasks, args.workers, args.repeat)
