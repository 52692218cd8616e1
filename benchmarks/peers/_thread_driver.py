"""The three phases (see ``_common``) for the systems whose API is synchronous:
Celery and Dramatiq.

The same phases as ``_asyncio_driver``, with threads where that one has tasks:
32 threads call the per-task enqueue at once, and the latency phase hands each
send to a pool of threads at its absolute send time. A driver supplies a
:class:`Peer`: how to open fresh clients, enqueue one task, run the worker while
the phase goes on, and close it all, each through the system's public API.

A Celery prefork pool runs the tasks in child processes, so the tally lives in
shared memory (:class:`SharedTally`), created before the worker forks; the
task's body is the same one call as everywhere else. ``perf_counter`` is the
system-wide monotonic clock on Linux, so times taken in a child compare with the
driver's.
"""

from __future__ import annotations

import argparse
import multiprocessing
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Protocol

from _common import (
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
"""Seconds the worker runs on after a phase's last task, untimed, as in the other drivers."""

SETTLE = 10.0
"""Most seconds to wait after the last latency task was sent for it to start."""

DONE_LIMIT = 600.0
"""Most seconds a throughput phase waits for its last task: then the worker is stopped
and the phase fails (below ``run.py``'s ``--timeout``, so that a prefork pool's children
are stopped by their worker rather than left behind by a killed driver)."""


class SharedTally:
    """The same count as ``_common.Tally``, kept in shared memory so that the runs of
    forked worker processes add to it; ``done`` is set at the ``expected``-th run.

    Args:
        expected: How many runs complete the phase.
    """

    def __init__(self, expected: int) -> None:
        context = multiprocessing.get_context("fork")
        self.expected = expected
        self.done = context.Event()
        self._lock = context.Lock()
        self._count = context.RawValue("q", 0)
        self._first = context.RawValue("d", 0.0)
        self._last = context.RawValue("d", 0.0)
        self._timed = context.RawValue("q", 0)
        self._sent = context.RawArray("d", expected)
        self._lag = context.RawArray("d", expected)

    def ran(self, sent: float) -> None:
        """The task body: one call at the start of every run (``sent`` 0 for no timing)."""
        now = time.perf_counter()
        with self._lock:
            if sent and self._timed.value < self.expected:
                self._sent[self._timed.value] = sent
                self._lag[self._timed.value] = now - sent
                self._timed.value += 1
            self._count.value += 1
            count = self._count.value
            if count == 1:
                self._first.value = now
            if count == self.expected:
                self._last.value = now
                self.done.set()

    @property
    def count(self) -> int:
        return int(self._count.value)

    @property
    def first(self) -> float:
        return float(self._first.value)

    @property
    def last(self) -> float:
        return float(self._last.value)

    @property
    def latencies(self) -> list[tuple[float, float]]:
        """``(sent, started - sent)`` for each task that carried a send time."""
        timed = self._timed.value
        return list(zip(self._sent[:timed], self._lag[:timed], strict=True))


class Peer(Protocol):
    """One system's calls: all a driver supplies (each its system's public API)."""

    def open(self, url: str, tally: SharedTally, concurrency: int) -> None:
        """Create fresh clients, and a worker that runs ``concurrency`` tasks at once and
        whose task's body is ``tally.ran(sent)``."""

    def enqueue(self, sent: float) -> None:
        """Enqueue one task through the per-task call; called from many threads at once."""

    def serve(self, during: Callable[[], None]) -> None:
        """Start the worker, call ``during`` in another thread once it is ready to
        take tasks, and stop the worker once ``during`` has returned (or raised)."""

    def close(self) -> None:
        """Close every client."""


def beside(serve: Callable[[], None], during: Callable[[], None], stop: Callable[[], None]) -> None:
    """Run ``serve`` in this thread and ``during`` in another; ``stop`` once ``during``
    ends, which must make ``serve`` return. ``during``'s error is raised here.

    For a worker that must run in the main thread (Celery's installs signal handlers
    there), with the phase's own work beside it.
    """
    errors: list[BaseException] = []

    def side() -> None:
        try:
            during()
        except BaseException as exc:  # raised again in the serving thread
            errors.append(exc)
        finally:
            stop()

    thread = threading.Thread(target=side, name="phase", daemon=True)
    thread.start()
    serve()
    thread.join()
    if errors:
        raise errors[0]


def enqueue_concurrently(enqueue: Callable[[float], None], n: int, callers: int) -> None:
    """``n`` calls of ``enqueue(0.0)``, from ``callers`` threads at once."""
    todo = iter(range(n))  # a range iterator hands out each number once, under the GIL

    def caller() -> None:
        for _ in todo:
            enqueue(0.0)

    with ThreadPoolExecutor(callers, thread_name_prefix="enqueue") as pool:
        for future in [pool.submit(caller) for _ in range(callers)]:
            future.result()


def throughput_phase(peer: Peer, url: str, n: int, callers: int) -> dict[str, Any]:
    flush(url)
    tally = SharedTally(n)
    peer.open(url, tally, callers)
    readings: dict[str, Any] = {}
    try:
        counted = redis_commands(url)
        before = redis_cpu(url)
        start = time.perf_counter()
        enqueue_concurrently(peer.enqueue, n, callers)
        enqueue_seconds = time.perf_counter() - start
        enqueued = redis_cpu(url)

        def during() -> None:
            if not tally.done.wait(DONE_LIMIT):
                raise RuntimeError(f"{tally.count} of {n} tasks ran within {DONE_LIMIT} s")
            readings["processed"] = redis_cpu(url)
            readings["commands"] = redis_commands(url)
            time.sleep(LINGER)

        started = time.perf_counter()
        peer.serve(during)
        keys = redis_keys(url)
    finally:
        peer.close()
    cpu = (before, enqueued, readings["processed"])
    return throughput(
        n, enqueue_seconds, started, tally, cpu, (counted, readings["commands"]), keys
    )


def latency_phase(
    peer: Peer, url: str, concurrency: int, rate: float, seconds: float
) -> dict[str, float]:
    flush(url)
    count, gap = latency_schedule(rate, seconds)
    tally = SharedTally(count)
    peer.open(url, tally, concurrency)
    timing: dict[str, float] = {}

    def during() -> None:
        sends: list[Future[None]] = []
        with ThreadPoolExecutor(concurrency, thread_name_prefix="send") as pool:
            start = time.perf_counter()
            for i in range(count):
                # Absolute send times, as in _asyncio_driver.latency_phase.
                delay = start + i * gap - time.perf_counter()
                if delay > 0:
                    time.sleep(delay)
                sends.append(pool.submit(peer.enqueue, time.perf_counter()))
            timing.update(start=start, dispatch_seconds=time.perf_counter() - start)
            for send in sends:
                send.result()
        tally.done.wait(SETTLE + seconds)  # the result says how many started
        time.sleep(LINGER)

    try:
        peer.serve(during)
    finally:
        peer.close()
    return latency(tally, count, timing["start"], timing["dispatch_seconds"])


def main(
    system: str,
    make_peer: Callable[[argparse.Namespace], tuple[Peer, dict[str, Any]]],
    options: Callable[[argparse.ArgumentParser], object] | None = None,
    **facts: Any,
) -> None:
    """Parse the command line, run the phase it names on a peer and print the result.

    The bulk phase has no result: neither Celery nor Dramatiq has a bulk-enqueue call
    (their groups send one message after another).

    Args:
        system: The name in the result.
        make_peer: The peer for the parsed command line, and what to record of its
            settings.
        options: Adds the driver's own options to the command line.
        facts: What to record about this run besides the phase's numbers.
    """
    args = parse_args(f"{system} driver for the peers benchmark", options)
    peer, settings = make_peer(args)
    result: dict[str, Any] | None = None
    if args.phase == "latency":
        result = latency_phase(
            peer, args.url, args.concurrency, args.latency_rate, args.latency_seconds
        )
    elif args.phase == "each":
        result = throughput_phase(peer, args.url, args.tasks, args.concurrency)
    emit(system, args.phase, result, {**facts, **settings})
