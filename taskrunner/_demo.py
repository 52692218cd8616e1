"""``taskrunner demo``: a three-runner fleet on one backend, with live progress.

Theory of operation. :func:`run_demo` opens a backend (``BACKENDS`` maps the
``--backend`` choice to an opener, so another backend slots in without
touching the rest), creates three runners in one consumer group with
different hosts, plus a producer that only dispatches, and registers the demo
tasks on all of them. The runners serve in one nursery while the producer
dispatches the planned mix in rounds (``dispatch_many`` for bulk, ``dispatch``
one by one for the flaky task). The main task then polls the runners'
``statistics()`` until every dispatched message has reached a final outcome
(completed, dead-lettered or handled) or ``--timeout`` passes, growing the
smallest pool with ``resize`` halfway; a monitor task redraws the progress
display meanwhile. Finally every runner is shut down
gracefully and the summary is printed from the same statistics.

Everything runs on real time: this is a demo of the real thing, not a test.
Retries arrive after ``reclaim_delay``, so the demo uses a short one.
"""

from __future__ import annotations

import collections
import functools
import json
import logging
import random
import shutil
import signal
import threading
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager, contextmanager
from typing import Any, TextIO

import attrs
import trio

from taskrunner._config import TaskRunnerConfig
from taskrunner._runner import RunnerStatistics, TaskRunner
from taskrunner._task import Task
from taskrunner.backends import Backend
from taskrunner.backends.memory import MemoryBackend

log = logging.getLogger("taskrunner.demo")

GROUP = "demo"
RUNNER_CAPACITIES = (4, 8, 16)
"""Initial pool capacity of each runner; the first grows to 16 halfway through."""
FLAKY_FAILURE_RATE = 0.3
RESERVATION_TIMEOUT = 0.2
"""Kept below the runners' ``reclaim_delay``, as ``register`` requires."""
POLL_INTERVAL = 0.01
SUMMARY_COLUMNS = tuple(
    "capacity fetched reclaimed completed failed retried dead_lettered handled acked".split()
)
EXIT_OK, EXIT_STALLED, EXIT_INTERRUPTED = 0, 1, 130


@attrs.frozen(kw_only=True)
class DemoOptions:
    """What ``taskrunner demo`` was asked to do (validated by the CLI)."""

    tasks: int = 600
    """How many tasks to dispatch in all."""
    timeout: float = 60.0
    """Seconds after which an unfinished demo counts as stalled."""
    backend: str = "memory"
    """A key of :data:`BACKENDS`."""
    seed: int | None = None
    """Seed for the flaky task's failures (``None``: different every run)."""


BackendOpener = Callable[[DemoOptions], AbstractAsyncContextManager[Backend]]


@asynccontextmanager
async def _open_memory_backend(options: DemoOptions) -> AsyncIterator[Backend]:
    async with MemoryBackend(prefix="taskrunner-demo") as backend:
        yield backend


BACKENDS: dict[str, BackendOpener] = {"memory": _open_memory_backend}
"""``--backend`` choices: name -> opener of a backend shared by the whole demo fleet."""


# The tasks -----------------------------------------------------------------
@attrs.frozen(kw_only=True)
class Order:
    """The typed payload of the ``order`` task: structured by cattrs on the worker."""

    order_id: int
    sku: str
    quantity: int


class SimulatedFailure(Exception):
    """Raised on purpose by the ``flaky`` task."""


class DemoTasks:
    """The demo's actions; one instance is shared by every runner."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.orders = 0
        self.items = 0

    async def fast(self, payload: dict[str, int]) -> int:
        return payload["n"] * 2

    async def slow(self, payload: dict[str, int]) -> None:
        await trio.sleep(self.rng.uniform(0.002, 0.010))

    async def flaky(self, payload: dict[str, int]) -> None:
        await trio.sleep(0.001)
        if self.rng.random() < FLAKY_FAILURE_RATE:
            raise SimulatedFailure(f"flaky #{payload['n']} failed on purpose")

    async def order(self, payload: Order) -> None:
        if not isinstance(payload, Order):  # the typed-payload contract, checked live
            raise TypeError(f"expected an Order, got {payload!r}")
        self.orders += 1
        self.items += payload.quantity

    def register_on(self, runner: TaskRunner) -> None:
        common: dict[str, Any] = {"reservation_timeout": RESERVATION_TIMEOUT}
        runner.register(Task(name="fast", action=self.fast, **common))
        runner.register(Task(name="slow", action=self.slow, **common))
        runner.register(Task(name="flaky", action=self.flaky, max_retry=3, **common))
        runner.register(Task(name="order", action=self.order, **common))


def plan(total: int) -> dict[str, int]:
    """How many runs of each task make up ``total``."""
    counts = {"slow": total // 4, "flaky": total // 5, "order": total * 3 // 20}
    counts["fast"] = total - sum(counts.values())
    return counts


def _config(host: str, capacity: int) -> TaskRunnerConfig:
    return TaskRunnerConfig(
        consumer_group=GROUP,
        host=host,
        num_workers=capacity,
        batch_size=16,
        block_duration=0.05,
        reclaim_delay=0.5,  # a failed attempt is retried this long after it failed
        reclaim_interval=0.1,
        shutdown_grace=5.0,
    )


async def _dispatch_all(producer: TaskRunner, counts: dict[str, int], state: _RunState) -> None:
    """Dispatch the planned runs in ten rounds, counting them in ``state.sent``."""
    rounds = 10
    for r in range(rounds):
        for name, total in counts.items():
            numbers = range(total * r // rounds, total * (r + 1) // rounds)
            if name == "flaky":
                for n in numbers:  # one by one, as an application would
                    await producer.dispatch("flaky", {"n": n})
            elif name == "order":
                orders = [
                    Order(order_id=n, sku=f"SKU-{n % 7}", quantity=1 + n % 3) for n in numbers
                ]
                await producer.dispatch_many("order", orders)
            else:
                await producer.dispatch_many(name, [{"n": n} for n in numbers])
            state.sent += len(numbers)
        await trio.sleep(0.02)


# Progress ------------------------------------------------------------------
def _outcomes(stats: Sequence[RunnerStatistics]) -> int:
    return sum(s.completed + s.dead_lettered + s.handled for s in stats)


class Progress:
    """Renders progress to ``out``: redrawn in place on a terminal, else plain lines."""

    BAR = 32

    def __init__(self, out: TextIO, total: int, hosts: Sequence[str], *, live: bool) -> None:
        self.out = out
        self.total = total
        self.hosts = hosts
        self.live = live
        self._drawn = 0
        self._samples: collections.deque[tuple[float, int]] = collections.deque()

    def _rate(self, now: float, processed: int) -> float:
        self._samples.append((now, processed))
        while len(self._samples) > 2 and now - self._samples[0][0] > 1.0:
            self._samples.popleft()
        t0, p0 = self._samples[0]
        return (processed - p0) / (now - t0) if now > t0 else 0.0

    def erase(self) -> None:
        """Remove the live block (before a log line is written under it)."""
        if self._drawn:
            self.out.write(f"\x1b[{self._drawn}F\x1b[J")
            self.out.flush()
            self._drawn = 0

    def draw(
        self, now: float, elapsed: float, sent: int, stats: Sequence[RunnerStatistics]
    ) -> None:
        done = _outcomes(stats)
        rate = self._rate(now, sum(s.completed + s.failed for s in stats))
        failed = sum(s.failed for s in stats)
        retried = sum(s.retried for s in stats)
        dead = sum(s.dead_lettered for s in stats)
        if not self.live:
            runners = " ".join(
                f"{h}={s.completed}/cap{s.capacity}" for h, s in zip(self.hosts, stats, strict=True)
            )
            print(
                f"progress: {done}/{self.total} outcomes, {sent} dispatched, "
                f"{rate:.0f} processed/s, failed {failed}, retried {retried}, "
                f"dead-lettered {dead}, runners {runners}",
                file=self.out,
                flush=True,
            )
            return
        filled = self.BAR * done // max(1, self.total)
        lines = [
            f"[{'#' * filled}{'-' * (self.BAR - filled)}] {done}/{self.total} "
            f"({100 * done // max(1, self.total)}%)  {rate:7.0f} processed/s  {elapsed:5.1f}s",
            f"  dispatched {sent}   failed attempts {failed}   retried {retried}   "
            f"dead-lettered {dead}",
        ]
        lines += [
            f"  {h:<8} capacity {s.capacity:>3}  running {s.running:>3}  completed {s.completed:>5}"
            f"  reclaimed {s.reclaimed:>3}"
            for h, s in zip(self.hosts, stats, strict=True)
        ]
        # A wrapped line would throw off the cursor movement of the next redraw.
        width = shutil.get_terminal_size().columns - 1
        self.erase()
        self.out.write("\n".join(line[:width] for line in lines) + "\n")
        self.out.flush()
        self._drawn = len(lines)


class _LogFilter(logging.Filter):
    """Keeps log lines from tearing the live display, and hides deliberate failures.

    The flaky task's failures are expected and already counted on screen, so
    their warnings (with tracebacks) are dropped unless the level is DEBUG.
    """

    def __init__(self, progress: Progress, *, show_simulated: bool) -> None:
        super().__init__()
        self.progress = progress
        self.show_simulated = show_simulated

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if isinstance(exc, SimulatedFailure) and not self.show_simulated:
            return False
        self.progress.erase()
        return True


@contextmanager
def _filtered_logs(progress: Progress) -> Iterator[None]:
    log_filter = _LogFilter(progress, show_simulated=log.isEnabledFor(logging.DEBUG))
    handlers = list(logging.getLogger().handlers)
    for handler in handlers:
        handler.addFilter(log_filter)
    try:
        yield
    finally:
        for handler in handlers:
            handler.removeFilter(log_filter)


# The run ---------------------------------------------------------------------
@attrs.define
class _RunState:
    sent: int = 0
    """Tasks dispatched so far."""
    interrupted: bool = False
    elapsed: float = 0.0
    """Seconds from the first dispatch to the last outcome (or to the stop)."""


def _snapshot(runners: Sequence[TaskRunner]) -> list[RunnerStatistics]:
    return [r.statistics() for r in runners]


async def _watch_signals(
    state: _RunState, stop: trio.CancelScope, runners: Sequence[TaskRunner]
) -> None:
    """First Ctrl-C (or SIGTERM): stop waiting and shut down gracefully; second: now."""
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async for _ in signals:
            if not state.interrupted:
                state.interrupted = True
                stop.cancel()
            else:
                for runner in runners:
                    runner.shutdown(grace=0)


async def _monitor(progress: Progress, runners: Sequence[TaskRunner], state: _RunState) -> None:
    start = trio.current_time()
    interval = 0.1 if progress.live else 0.5
    while True:
        now = trio.current_time()
        progress.draw(now, now - start, state.sent, _snapshot(runners))
        await trio.sleep(interval)


async def _wait_outcomes(runners: Sequence[TaskRunner], total: int) -> None:
    grown = False
    while (done := _outcomes(_snapshot(runners))) < total:
        if not grown and done * 2 >= total:
            runners[0].resize(max(RUNNER_CAPACITIES))  # a pool grows while it runs
            grown = True
        await trio.sleep(POLL_INTERVAL)


async def _drive(
    options: DemoOptions,
    producer: TaskRunner,
    runners: Sequence[TaskRunner],
    progress: Progress,
    state: _RunState,
    stop: trio.CancelScope,
) -> None:
    """Dispatch, then wait for every outcome, the timeout, or ``stop`` (a signal)."""
    start = trio.current_time()
    async with trio.open_nursery() as side:
        side.start_soon(_monitor, progress, runners, state)
        with stop, trio.move_on_after(options.timeout):
            await _dispatch_all(producer, plan(options.tasks), state)
            await _wait_outcomes(runners, options.tasks)
        state.elapsed = trio.current_time() - start
        side.cancel_scope.cancel()
    now = trio.current_time()
    progress.draw(now, now - start, state.sent, _snapshot(runners))


async def _summary(
    out: TextIO,
    backend: Backend,
    runners: Sequence[TaskRunner],
    options: DemoOptions,
    state: _RunState,
    tasks: DemoTasks,
) -> None:
    say = functools.partial(print, file=out)
    stats = _snapshot(runners)
    rows = [(r.config.host, attrs.asdict(s)) for r, s in zip(runners, stats, strict=True)]
    rows.append(("total", {c: sum(values[c] for _, values in rows) for c in SUMMARY_COLUMNS}))
    totals = rows[-1][1]
    widths = {c: max(len(c), *(len(str(v[c])) for _, v in rows)) for c in SUMMARY_COLUMNS}
    host_width = max(len(host) for host, _ in rows)
    say("\nsummary")
    say(f"  {'runner':<{host_width}}", *(f"{c:>{widths[c]}}" for c in SUMMARY_COLUMNS))
    for host, values in rows:
        say(
            f"  {host:<{host_width}}",
            *(f"{values[c]:>{widths[c]}}" for c in SUMMARY_COLUMNS),
        )
    done = _outcomes(stats)
    rate = done / state.elapsed if state.elapsed > 0 else 0.0
    info = await backend.group_info(GROUP)
    say(f"dispatched: {state.sent} of {options.tasks}")
    say(
        f"outcomes: {done} of {options.tasks} (completed {totals['completed']}, "
        f"dead-lettered {totals['dead_lettered']}, handled {totals['handled']})"
    )
    say(
        f"attempts: {totals['completed'] + totals['failed']} "
        f"({totals['failed']} failed, {totals['retried']} retried after reclaim)"
    )
    say(f"typed payloads: {tasks.orders} Order objects, {tasks.items} items")
    say(f"elapsed: {state.elapsed:.2f}s, throughput {rate:.0f} tasks/s")
    say(f"queue left: {await backend.length()} entries, {info.pending} pending")
    dead = await backend.dead_letters(count=1000)
    say(f"dead letters: {len(dead)}")
    for letter in dead[:10]:
        say(f"  {letter.message_id} ({_task_of(letter.payload)}): {letter.error}")
    if len(dead) > 10:
        say(f"  ... and {len(dead) - 10} more")


def _task_of(payload: bytes | None) -> str:
    try:
        return str(json.loads(payload or b"")["task_name"])
    except (ValueError, KeyError, TypeError):
        return "?"


async def run_demo(
    options: DemoOptions, out: TextIO, err: TextIO, *, live: bool | None = None
) -> int:
    """Run the demo, printing to ``out``.

    Args:
        options: What to run.
        out: Where progress and the summary go.
        err: Where the line explaining a non-zero exit goes.
        live: Redraw progress in place; default: when ``out`` is a terminal.

    Returns:
        The exit code: 0 when every task reached a final outcome, 1 when the
        demo stalled past ``options.timeout``, 130 when interrupted.
    """
    if live is None:
        live = out.isatty()
    counts = plan(options.tasks)
    tasks = DemoTasks(random.Random(options.seed))
    hosts = [f"demo-{i}" for i in range(1, len(RUNNER_CAPACITIES) + 1)]
    state = _RunState()
    async with BACKENDS[options.backend](options) as backend:
        producer = TaskRunner(_config("demo-producer", 1), backend)
        runners = [
            TaskRunner(_config(h, c), backend)
            for h, c in zip(hosts, RUNNER_CAPACITIES, strict=True)
        ]
        for runner in [producer, *runners]:
            tasks.register_on(runner)
        mix = ", ".join(f"{n} {name}" for name, n in counts.items())
        print(
            f"taskrunner demo: {options.tasks} tasks ({mix}) on {len(runners)} runners "
            f"in group {GROUP!r}, {options.backend} backend\n"
            f"  'flaky' fails {FLAKY_FAILURE_RATE:.0%} of its attempts on purpose: max_retry=3, "
            f"each retry after reclaim_delay={runners[0].config.reclaim_delay:g}s",
            file=out,
            flush=True,
        )
        progress = Progress(out, options.tasks, hosts, live=live)
        stop = trio.CancelScope()
        with _filtered_logs(progress):
            async with trio.open_nursery() as outer:
                if threading.current_thread() is threading.main_thread():
                    outer.start_soon(_watch_signals, state, stop, runners)
                async with trio.open_nursery() as fleet:
                    for runner in runners:
                        await fleet.start(runner.serve)
                    await _drive(options, producer, runners, progress, state, stop)
                    stalled = (
                        not state.interrupted and _outcomes(_snapshot(runners)) < options.tasks
                    )
                    for runner in runners:
                        # Graceful: running tasks finish and every finished one is acked.
                        # A stalled fleet is stopped at once: its tasks stay pending.
                        runner.shutdown(grace=0 if stalled else None)
                outer.cancel_scope.cancel()
        await _summary(out, backend, runners, options, state, tasks)
    done = _outcomes(_snapshot(runners))
    if state.interrupted:
        print(f"interrupted: {done} of {options.tasks} tasks reached a final outcome", file=err)
        return EXIT_INTERRUPTED
    if done < options.tasks:
        print(
            f"STALLED: only {done} of {options.tasks} tasks reached a final outcome within "
            f"--timeout {options.timeout:g}s",
            file=err,
        )
        return EXIT_STALLED
    print(f"OK: all {options.tasks} tasks reached a final outcome", file=out)
    return EXIT_OK
