"""What the end-to-end benchmarks share: a runner with one no-op task, timed
from dispatch to the last ack."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any

import attrs
import trio

from taskrunner import TaskContext, TaskRunner


@attrs.frozen
class Rates:
    enqueue: float
    """Tasks dispatched per second (``dispatch_many`` in chunks)."""
    process: float
    """Tasks processed per second, from ``serve`` being ready to the last ack."""


async def run_noop_tasks(
    runner: TaskRunner,
    n: int,
    *,
    chunk: int = 10_000,
    features: bool = False,
    keep_result: bool = False,
    on_ready: Callable[[], object] | None = None,
) -> Rates:
    """Register a ``noop`` task on ``runner``, dispatch ``n`` of them, serve until
    every one is acked, and return the rates.

    With ``features`` the task has a 30 s timeout and takes its context, and one
    no-op middleware wraps every run (the cost of the run's features in use).
    With ``keep_result`` the task keeps each result for 60 s (a result document and
    its notice per run, written with its ack); with both, all of them at once.
    ``on_ready`` is called when ``serve`` is ready, where the processing's timing starts.
    """
    done = trio.Event()
    count = 0

    if features:

        @runner.middleware
        async def passthrough(ctx: TaskContext, call_next: Callable[[], Awaitable[Any]]) -> Any:
            return await call_next()

        @runner.task(name="noop", timeout=30.0, keep_result=60.0 if keep_result else None)
        async def noop_with_context(payload: object, ctx: TaskContext) -> None:
            nonlocal count
            count += 1
            if count == n:
                done.set()

    elif keep_result:

        @runner.task(name="noop", keep_result=60.0)
        async def noop_kept(payload: object) -> None:
            nonlocal count
            count += 1
            if count == n:
                done.set()

    else:

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
        if on_ready is not None:
            on_ready()
        await done.wait()
        while runner.statistics().acked < n:  # noqa: ASYNC110 - the acker has no event to wait on
            await trio.sleep(0.001)
        processed = time.perf_counter()
        nursery.cancel_scope.cancel()
    return Rates(enqueue=n / (enqueued - start), process=n / (processed - ready))


async def run_concurrent_dispatch(runner: TaskRunner, n: int, in_flight: int = 32) -> float:
    """Register a ``noop`` task on ``runner`` (if it has none) and send ``n`` single
    ``dispatch`` calls, ``in_flight`` of them at any time; return dispatches per second.

    Nothing serves: this is the producing side alone (the entries stay queued).
    """
    if "noop" not in runner.tasks:

        @runner.task()
        async def noop(payload: object) -> None:
            pass

    await runner.dispatch("noop", None)  # connect first: not part of the rate
    todo = iter(range(n))

    async def caller() -> None:
        for _ in todo:
            await runner.dispatch("noop", None)

    start = time.perf_counter()
    async with trio.open_nursery() as nursery:
        for _ in range(in_flight):
            nursery.start_soon(caller)
    return n / (time.perf_counter() - start)


async def run_dispatch_while_serving(runner: TaskRunner, n: int) -> float:
    """Serve ``runner`` and, meanwhile, ``await runner.dispatch`` ``n`` no-op tasks one
    after the other; return tasks per second from the first dispatch to the last ack
    (the producer and the consumer in one trio program, as an embedded user runs them).
    """
    done = trio.Event()
    count = 0

    @runner.task()
    async def noop(payload: object) -> None:
        nonlocal count
        count += 1
        if count == n:
            done.set()

    async with trio.open_nursery() as nursery:
        await nursery.start(runner.serve)
        start = time.perf_counter()
        for _ in range(n):
            await runner.dispatch("noop", None)
        await done.wait()
        while runner.statistics().acked < n:  # noqa: ASYNC110 - the acker has no event to wait on
            await trio.sleep(0.001)
        rate = n / (time.perf_counter() - start)
        nursery.cancel_scope.cancel()
    return rate
