"""What the end-to-end benchmarks share: a runner with one no-op task, timed
from dispatch to the last ack."""

from __future__ import annotations

import time

import attrs
import trio

from taskrunner import TaskRunner


@attrs.frozen
class Rates:
    enqueue: float
    """Tasks dispatched per second (``dispatch_many`` in chunks)."""
    process: float
    """Tasks processed per second, from ``serve`` being ready to the last ack."""


async def run_noop_tasks(runner: TaskRunner, n: int, *, chunk: int = 10_000) -> Rates:
    """Register a ``noop`` task on ``runner``, dispatch ``n`` of them, serve until
    every one is acked, and return the rates."""
    done = trio.Event()
    count = 0

    @runner.task()
    async def noop(payload: object) -> None:
        nonlocal count
        count += 1
        if count == n:
            done.set()

    payloads = [None] * n
    start = time.perf_counter()
    for at in range(0, n, chunk):
        await runner.dispatch_many("noop", payloads[at : at + chunk])
    enqueued = time.perf_counter()
    async with trio.open_nursery() as nursery:
        await nursery.start(runner.serve)
        ready = time.perf_counter()
        await done.wait()
        while runner.statistics().acked < n:  # noqa: ASYNC110 - the acker has no event to wait on
            await trio.sleep(0.001)
        processed = time.perf_counter()
        nursery.cancel_scope.cancel()
    return Rates(enqueue=n / (enqueued - start), process=n / (processed - ready))
