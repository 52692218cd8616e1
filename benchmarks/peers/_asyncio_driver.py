"""The three phases (see ``_common``) for the asyncio systems.

A driver supplies a :class:`Peer` (a :class:`BulkPeer` if its system has a bulk
call): how to open fresh clients, enqueue one task (or many), start the worker,
and close it all. Everything here is the same for every peer, so the systems
differ only in those few calls, each of which is the system's documented public
API.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from typing import Any, Protocol, runtime_checkable

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

LINGER = 0.5
"""Seconds the worker runs on after a phase's last task, untimed, to finish its
bookkeeping (acks, results) before it is stopped: taskiq 0.13's receiver, cancelled
while a task's ack is in flight, swallows the cancellation and runs on."""

STOP_LIMIT = 10.0
"""Most seconds a worker may take to stop once cancelled."""

SETTLE = 10.0
"""Most seconds to wait after the last latency task was sent for it to start."""


class Peer(Protocol):
    """One system's calls: all a driver supplies (each its system's public API)."""

    async def open(self, url: str, tally: Tally, concurrency: int) -> None:
        """Create fresh clients, and a worker that runs ``concurrency`` tasks at once and
        whose task's body is ``tally.ran(sent)``."""

    async def enqueue(self, sent: float) -> None:
        """Enqueue one task through the per-task call."""

    async def start_worker(self) -> None:
        """Start the worker in the background, in this event loop."""

    async def close(self) -> None:
        """Stop the worker and close every client."""


@runtime_checkable
class BulkPeer(Peer, Protocol):
    """A peer whose system also has a bulk-enqueue call."""

    async def enqueue_many(self, sent: list[float]) -> None:
        """Enqueue one task per item through the bulk call."""


async def cancel_and_wait(task: asyncio.Task[Any] | None) -> None:
    """Cancel ``task`` and wait until it has ended.

    The cancellation is repeated every half second, for at most
    :data:`STOP_LIMIT` seconds: a worker built on anyio task groups may absorb
    a native ``cancel()`` that lands at an awkward moment and go on running.

    Raises:
        RuntimeError: the task still runs after :data:`STOP_LIMIT` seconds.
    """
    deadline = time.perf_counter() + STOP_LIMIT
    while task is not None and not task.done():
        if time.perf_counter() > deadline:
            raise RuntimeError(f"the worker did not stop within {STOP_LIMIT} s of cancellation")
        task.cancel()
        await asyncio.wait({task}, timeout=0.5)
    if task is not None and not task.cancelled() and (error := task.exception()) is not None:
        raise error


async def enqueue_concurrently(
    enqueue: Callable[[float], Awaitable[None]], n: int, callers: int
) -> None:
    """``n`` calls of ``enqueue(0.0)``, ``callers`` of them in flight at any time."""
    todo = iter(range(n))

    async def caller() -> None:
        for _ in todo:
            await enqueue(0.0)

    await asyncio.gather(*(caller() for _ in range(callers)))


async def throughput_phase(
    peer: Peer, url: str, n: int, callers: int, *, bulk: bool
) -> dict[str, Any]:
    flush(url)
    done = asyncio.Event()
    tally = Tally(n, done.set)
    await peer.open(url, tally, callers)
    try:
        counted = redis_commands(url)
        before = redis_cpu(url)
        start = time.perf_counter()
        if bulk:
            assert isinstance(peer, BulkPeer)
            await peer.enqueue_many([0.0] * n)
        else:
            await enqueue_concurrently(peer.enqueue, n, callers)
        enqueue_seconds = time.perf_counter() - start
        enqueued = redis_cpu(url)
        started = time.perf_counter()
        await peer.start_worker()
        await done.wait()
        processed = redis_cpu(url)
        done_commands = redis_commands(url)
        await asyncio.sleep(LINGER)
        keys = redis_keys(url)
    finally:
        await peer.close()
    cpu = (before, enqueued, processed)
    return throughput(n, enqueue_seconds, started, tally, cpu, (counted, done_commands), keys)


async def latency_phase(
    peer: Peer, url: str, concurrency: int, rate: float, seconds: float
) -> dict[str, float]:
    flush(url)
    count, gap = latency_schedule(rate, seconds)
    done = asyncio.Event()
    tally = Tally(count, done.set)
    await peer.open(url, tally, concurrency)
    sends: list[asyncio.Task[None]] = []
    try:
        await peer.start_worker()
        start = time.perf_counter()
        for i in range(count):
            # Absolute send times: a late wake-up is made up by the next sends,
            # and a slow enqueue call does not hold the next one back.
            delay = start + i * gap - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            sends.append(asyncio.create_task(peer.enqueue(time.perf_counter())))
        dispatch_seconds = time.perf_counter() - start
        await asyncio.gather(*sends)
        with contextlib.suppress(TimeoutError):  # the result says how many started
            await asyncio.wait_for(done.wait(), SETTLE + seconds)
        await asyncio.sleep(LINGER)
    finally:
        await peer.close()
    return latency(tally, count, start, dispatch_seconds)


def main(system: str, peer: Peer, **facts: Any) -> None:
    """Parse the command line, run the phase it names on ``peer`` and print the result.

    Args:
        system: The name in the result.
        facts: What to record about this run besides the phase's numbers.
    """
    args = parse_args(f"{system} driver for the peers benchmark")
    result: dict[str, Any] | None = None
    if args.phase == "latency":
        coroutine = latency_phase(
            peer, args.url, args.concurrency, args.latency_rate, args.latency_seconds
        )
        result = asyncio.run(coroutine)
    elif args.phase == "each" or isinstance(peer, BulkPeer):
        bulk = args.phase == "bulk"
        coroutine = throughput_phase(peer, args.url, args.tasks, args.concurrency, bulk=bulk)
        result = asyncio.run(coroutine)
    emit(system, args.phase, result, facts)
