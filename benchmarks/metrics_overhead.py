"""What do timing metrics cost? End-to-end in-memory throughput, metrics on vs off.

Same harness as ``core_memory.py``: dispatch N no-op tasks in one batched
call, serve one runner on a ``MemoryBackend`` until every one is acked, and
time the processing. No-op tasks are the worst case for the metrics: the
per-run cost (one ``TimingRecorder.record`` call in the worker's ``finally``)
is largest relative to the task itself, and the bulk writer flushes a batch
every second throughout.

"On" is the runner as shipped. "Off" is the same runner whose worker records
into a no-op object with the same ``record`` method, so the hot path does no
timing work at all; the bulk writer still runs (it drains the runner's own,
now empty, recorder once a second), which costs next to nothing, so the
difference measured is the per-run recording plus the writes it causes.
Runs alternate on/off so drift in machine load hits both alike. The ratio
of the best runs (the least disturbed by whatever else the machine does) is
the headline figure (target: on / off >= 0.95, i.e. metrics cost under 5 %
of throughput); the ratio of the medians is printed too. Run-to-run noise on
a shared machine is a few percent either way, far more than the cost
itself, so the script also times ``record`` alone and prints it as a share
of the time one task takes end to end: a steadier estimate of the same cost.

    python benchmarks/metrics_overhead.py [--tasks N] [--workers W] [--repeat R]
"""

from __future__ import annotations

import argparse
import gc
import statistics
import time

import trio

from taskrunner import TaskRunner, TaskRunnerConfig
from taskrunner._fleet.timings import TimingRecorder
from taskrunner.backends.memory import MemoryBackend

TARGET = 0.95


class NoTimings:
    """Stands in for ``TimingRecorder`` on the worker's hot path: records nothing."""

    __slots__ = ()

    def record(self, task_name: str, seconds: float) -> None:
        pass


async def process_rate(n: int, workers: int, *, metrics: bool) -> tuple[float, float]:
    """Tasks per second processed (dispatch excluded), and the samples in the hash."""
    backend = MemoryBackend()
    runner = TaskRunner(
        TaskRunnerConfig(consumer_group="bench", num_workers=workers, batch_size=workers), backend
    )
    if not metrics:
        # Private attribute, on purpose: this is the only switch that removes
        # the hot-path call without changing anything else in the runner.
        runner._worker._timings = NoTimings()  # type: ignore[assignment]
    done = trio.Event()
    count = 0

    @runner.task()
    async def noop(payload: object) -> None:
        nonlocal count
        count += 1
        if count == n:
            done.set()

    await runner.dispatch_many("noop", [None] * n)
    start = time.perf_counter()
    async with trio.open_nursery() as nursery:
        await nursery.start(runner.serve)
        await done.wait()
        while runner.statistics().acked < n:  # noqa: ASYNC110 - the acker has no event to wait on
            await trio.sleep(0.001)
        elapsed = time.perf_counter() - start
        nursery.cancel_scope.cancel()
    # serve() has returned, so the final flush has run: check nothing was lost.
    written = (await backend.read_metrics("bench")).get("noop_count", 0.0)
    return n / elapsed, written


def record_cost_ns(calls: int = 1_000_000) -> float:
    """Nanoseconds per ``TimingRecorder.record`` call (best of 5, loop overhead included)."""
    recorder = TimingRecorder()
    record = recorder.record
    best = float("inf")
    for _ in range(5):
        start = time.perf_counter_ns()
        for _ in range(calls):
            record("noop", 1e-5)
        best = min(best, (time.perf_counter_ns() - start) / calls)
    return best


async def main(n: int, workers: int, repeat: int) -> None:
    on: list[float] = []
    off: list[float] = []
    await process_rate(min(n, 2000), workers, metrics=True)  # warm-up
    for _ in range(repeat):
        for metrics, results in ((True, on), (False, off)):
            gc.collect()
            rate, written = await process_rate(n, workers, metrics=metrics)
            expected = n if metrics else 0
            if written != expected:
                raise SystemExit(
                    f"metrics {metrics}: {written} samples in the hash, not {expected}"
                )
            results.append(rate)
    best = max(on) / max(off)
    median = statistics.median(on) / statistics.median(off)
    per_task_ns = 1e9 / max(on)
    record_ns = record_cost_ns()
    print(f"metrics_overhead: {n} no-op tasks, {workers} workers, {repeat} runs each, alternating")
    print(f"  metrics off:  best {max(off):>9,.0f}  median {statistics.median(off):>9,.0f} tasks/s")
    print(f"  metrics on:   best {max(on):>9,.0f}  median {statistics.median(on):>9,.0f} tasks/s")
    print(f"  ratio on / off (best runs):   {best:.3f}  (target >= {TARGET}: cost under 5 %)")
    print(f"  ratio on / off (medians):     {median:.3f}")
    print(
        f"  record() alone: {record_ns:.0f} ns per run = {100 * record_ns / per_task_ns:.2f} %"
        f" of the {per_task_ns / 1000:.1f} us one task takes end to end"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=20_000)
    parser.add_argument("--workers", type=int, default=32)
    parser.add_argument("--repeat", type=int, default=9)
    args = parser.parse_args()
    trio.run(main, args.tasks, args.workers, args.repeat)
