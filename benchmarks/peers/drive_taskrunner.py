"""taskrunner driver: this checkout's ``TaskRunner`` on ``RedisBackend.from_url``,
``dispatch`` per task, ``dispatch_many`` in bulk, and ``serve`` in the same process;
``num_workers`` set to the concurrency, every other setting at its default. With
``--keep-result SECONDS`` the task keeps its result (``keep_result``), the work the
peers that store results do by default.

The phases are those of ``_asyncio_driver``, written for trio; only the public
API is used.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import trio
from _common import (
    Tally,
    emit,
    flush,
    latency,
    latency_schedule,
    parse_args,
    redis_commands,
    redis_cpu,
    redis_keys,
    throughput,
)

import taskrunner
from taskrunner import TaskRunner, TaskRunnerConfig
from taskrunner.backends.redis import RedisBackend

LINGER = 0.5
"""Seconds the runner serves on after a phase's last task, untimed (as the peers do)."""

SETTLE = 10.0
"""Most seconds to wait after the last latency task was sent for it to start."""


def open_runner(
    url: str, tally: Tally, concurrency: int, keep_result: float | None
) -> tuple[TaskRunner, RedisBackend]:
    backend = RedisBackend.from_url(url)
    runner = TaskRunner(TaskRunnerConfig(consumer_group="peers", num_workers=concurrency), backend)

    @runner.task("noop", keep_result=keep_result)
    async def noop(sent: float) -> None:
        tally.ran(sent)

    return runner, backend


async def dispatch_concurrently(runner: TaskRunner, n: int, callers: int) -> None:
    """``n`` single dispatches, ``callers`` of them in flight at any time."""
    todo = iter(range(n))

    async def caller() -> None:
        for _ in todo:
            await runner.dispatch("noop", 0.0)

    async with trio.open_nursery() as nursery:
        for _ in range(callers):
            nursery.start_soon(caller)


async def throughput_phase(
    url: str, n: int, concurrency: int, keep_result: float | None, *, bulk: bool
) -> dict[str, Any]:
    flush(url)
    done = trio.Event()
    tally = Tally(n, done.set)
    runner, backend = open_runner(url, tally, concurrency, keep_result)
    try:
        counted = redis_commands(url)
        before = redis_cpu(url)
        start = time.perf_counter()
        if bulk:
            await runner.dispatch_many("noop", [0.0] * n)
        else:
            await dispatch_concurrently(runner, n, concurrency)
        enqueue_seconds = time.perf_counter() - start
        enqueued = redis_cpu(url)
        async with trio.open_nursery() as nursery:
            started = time.perf_counter()
            await nursery.start(runner.serve)
            await done.wait()
            processed = redis_cpu(url)
            done_commands = redis_commands(url)
            await trio.sleep(LINGER)
            nursery.cancel_scope.cancel()
        keys = redis_keys(url)
    finally:
        await backend.aclose()
    cpu = (before, enqueued, processed)
    return throughput(n, enqueue_seconds, started, tally, cpu, (counted, done_commands), keys)


async def latency_phase(
    url: str, concurrency: int, keep_result: float | None, rate: float, seconds: float
) -> dict[str, float]:
    flush(url)
    count, gap = latency_schedule(rate, seconds)
    done = trio.Event()
    tally = Tally(count, done.set)
    runner, backend = open_runner(url, tally, concurrency, keep_result)
    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(runner.serve)
            async with trio.open_nursery() as sends:
                start = time.perf_counter()
                clock = trio.current_time()
                for i in range(count):
                    # Absolute send times, as in _asyncio_driver.latency_phase.
                    await trio.sleep_until(clock + i * gap)
                    sends.start_soon(runner.dispatch, "noop", time.perf_counter())
                dispatch_seconds = time.perf_counter() - start
            with trio.move_on_after(SETTLE + seconds):  # the result says how many started
                await done.wait()
            await trio.sleep(LINGER)
            nursery.cancel_scope.cancel()
    finally:
        await backend.aclose()
    return latency(tally, count, start, dispatch_seconds)


def options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--keep-result",
        type=float,
        default=None,
        help="the task's keep_result in seconds (default: none kept, the library's default)",
    )


def main() -> None:
    args = parse_args("taskrunner driver for the peers benchmark", options)
    keep = args.keep_result
    result: dict[str, Any]
    if args.phase == "latency":
        result = trio.run(
            latency_phase, args.url, args.concurrency, keep, args.latency_rate, args.latency_seconds
        )
    else:
        bulk = args.phase == "bulk"
        result = trio.run(
            lambda: throughput_phase(args.url, args.tasks, args.concurrency, keep, bulk=bulk)
        )
    versions = {"taskrunner": taskrunner.__version__, "trio": trio.__version__}
    facts = {"loop": "trio", "versions": versions, "keep_result": keep}
    emit("taskrunner", args.phase, result, facts)


if __name__ == "__main__":
    main()
