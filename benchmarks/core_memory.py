"""End-to-end no-op throughput on the in-memory backend vs a bare trio nursery.

Two cases, each compared with a bare trio nursery starting the same number of
no-op tasks in the same process, as a ratio:

- **batched**: dispatch N no-op tasks (``dispatch_many``), then serve one runner
  until all are acked; the processing rate (target >= 0.25);
- **one dispatch per task**: serve one runner and, meanwhile, ``await
  runner.dispatch`` N no-op tasks one after the other; the rate from the first
  dispatch to the last ack (target >= 0.3).

    python benchmarks/core_memory.py [--tasks N] [--workers W] [--repeat R]
"""

from __future__ import annotations

import argparse
import statistics
import time

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


async def taskrunner_memory(n: int, workers: int) -> tuple[float, float]:
    backend = MemoryBackend()
    runner = TaskRunner(
        TaskRunnerConfig(consumer_group="bench", num_workers=workers, batch_size=workers), backend
    )
    rates = await run_noop_tasks(runner, n)
    return rates.enqueue, rates.process


async def taskrunner_one_by_one(n: int, workers: int) -> float:
    runner = TaskRunner(
        TaskRunnerConfig(consumer_group="bench", num_workers=workers, batch_size=workers),
        MemoryBackend(),
    )
    return await run_dispatch_while_serving(runner, n)


async def main(n: int, workers: int, repeat: int) -> None:
    bare, enqueue, process, single = [], [], [], []
    for _ in range(repeat):
        bare.append(await bare_trio(n))
        e, p = await taskrunner_memory(n, workers)
        enqueue.append(e)
        process.append(p)
        single.append(await taskrunner_one_by_one(n, workers))
    b, e, p, s = (statistics.median(x) for x in (bare, enqueue, process, single))
    print(f"core_memory: {n} no-op tasks, {workers} workers, median of {repeat} runs")
    print(f"  bare trio nursery:        {b:>10,.0f} tasks/s")
    print(f"  taskrunner enqueue:       {e:>10,.0f} tasks/s (dispatch_many)")
    print(f"  taskrunner process:       {p:>10,.0f} tasks/s")
    print(f"  ratio process / bare trio: {p / b:.3f}  (target >= 0.25)")
    print(f"  one dispatch per task:    {s:>10,.0f} tasks/s (dispatch while serving)")
    print(f"  ratio one-by-one / bare trio: {s / b:.3f}  (target >= 0.3)")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=20_000)
    parser.add_argument("--workers", type=int, default=32)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    trio.run(main, args.tasks, args.workers, args.repeat)
