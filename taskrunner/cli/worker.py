"""``taskrunner worker app.tasks:runner``: serve a user's runner in this process.

Theory of operation: the runner object (and so its backend and tasks) comes
from the user's module; the command line only overrides ``num_workers`` /
``num_fetchers`` through :meth:`TaskRunner.configure`. Before serving, the
backend is asked for one cheap reply (its inspection's ``ping``: ``PING`` on
Redis), so a wrong URL or a server that is down is one line on stderr and
exit 1, not a retry loop that logs forever. Then, in one nursery under ``trio.run``:

- a signal watcher (``SIGINT``/``SIGTERM``): the first signal asks the runner
  for a graceful shutdown (:meth:`TaskRunner.shutdown`: stop fetching, let
  running tasks finish within ``shutdown_grace``, ack, flush timings, resign);
  a second one cuts the grace to zero (unfinished tasks stay pending and are
  reclaimed elsewhere);
- a leadership watcher that logs promotions and demotions;
- the Prometheus endpoint when ``--metrics-port`` is given;
- ``serve`` itself, whose return ends the nursery and the process (exit 0).

A signal that arrives before ``serve`` has started is remembered, and
``serve`` is then not started at all.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import socket
import sys
from functools import partial
from typing import Any, TextIO

import trio

from taskrunner._dispatch.guards import implements_inspection
from taskrunner._runner import TaskRunner
from taskrunner.cli.base import Command, MissingExtra, fail, import_extra, positive_int
from taskrunner.cli.imports import ImportTargetError, load_runner
from taskrunner.errors import BackendError, DuplicateHost, SharedStreamError

log = logging.getLogger(__name__)

PROG = "taskrunner worker"
CONNECT_TIMEOUT = 10.0
"""How long the start-up connectivity check may take."""


def port_number(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a port number, got {text!r}") from None
    if not 1 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"must be a port number in 1..65535, got {value}")
    return value


def _arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "runner",
        metavar="MODULE:RUNNER",
        help="the TaskRunner to serve, as 'package.module:attribute' (e.g. app.tasks:runner)",
    )
    parser.add_argument(
        "--workers",
        type=positive_int,
        metavar="N",
        help="worker-pool capacity (overrides the runner's num_workers)",
    )
    parser.add_argument(
        "--fetchers",
        type=positive_int,
        metavar="N",
        help="concurrent fetchers (overrides the runner's num_fetchers)",
    )
    parser.add_argument(
        "--metrics-port",
        type=port_number,
        metavar="PORT",
        help="serve Prometheus metrics on this port (default: no endpoint)",
    )
    parser.add_argument(
        "--metrics-host",
        default="127.0.0.1",
        metavar="HOST",
        help="address the metrics endpoint binds to (default: %(default)s)",
    )
    parser.set_defaults(default_log_level="info")


def _run(args: argparse.Namespace) -> int:
    try:
        runner = load_runner(args.runner)
    except ImportTargetError as exc:
        log.debug("import failed", exc_info=exc.__cause__ or exc)
        return fail(PROG, str(exc))
    changes: dict[str, Any] = {}
    if args.workers is not None:
        changes["num_workers"] = args.workers
    if args.fetchers is not None:
        changes["num_fetchers"] = args.fetchers
    if changes:
        try:
            runner.configure(**changes)
        except (ValueError, TypeError) as exc:
            return fail(PROG, f"invalid configuration: {exc}")
    return trio.run(serve_worker, runner, args.metrics_port, args.metrics_host, sys.stderr)


async def check_backend(runner: TaskRunner) -> None:
    """One cheap round trip to the runner's backend: its
    :meth:`~taskrunner.backends.Inspection.ping`, or for a backend without an
    inspection, the length of the group's stream.

    Raises:
        BackendError: the backend cannot be reached (or did not answer in
            :data:`CONNECT_TIMEOUT`).
    """
    backend = runner.backend
    with trio.move_on_after(CONNECT_TIMEOUT) as scope:
        if implements_inspection(backend):
            await backend.ping()
        else:  # a backend of one's own may serve without the operator reads
            await backend.length(runner.config.consumer_group)
    if scope.cancelled_caught:
        raise BackendError(f"no answer within {CONNECT_TIMEOUT:g}s")


async def _log_leadership(runner: TaskRunner) -> None:
    group = runner.config.consumer_group
    leading = runner.is_leader
    while True:
        now_leading = await runner.wait_leadership_changed()
        if now_leading == leading:
            continue
        leading = now_leading
        if leading:
            log.info("this instance (%s) became leader of group %s", runner.instance_id, group)
        else:
            log.info("this instance (%s) lost leadership of group %s", runner.instance_id, group)


class _Stopper:
    """Turns signals into shutdown requests (see the module docstring)."""

    def __init__(self, runner: TaskRunner) -> None:
        self.runner = runner
        self.requested = False

    async def watch(self, receiver: Any) -> None:
        async for signum in receiver:
            name = signal.Signals(signum).name
            if not self.requested:
                self.requested = True
                log.warning(
                    "%s received: shutting down gracefully (up to %.1fs for running tasks; "
                    "signal again to stop now)",
                    name,
                    self.runner.config.shutdown_grace,
                )
                self.runner.shutdown()
            else:
                log.warning("%s received again: stopping now; unfinished tasks stay pending", name)
                self.runner.shutdown(grace=0)


async def serve_worker(
    runner: TaskRunner,
    metrics_port: int | None = None,
    metrics_host: str = "127.0.0.1",
    stderr: TextIO | None = None,
) -> int:
    """Serve ``runner`` until a signal (or :meth:`TaskRunner.shutdown`); the exit code.

    Returns 0 once ``serve`` returned, 1 (after one line on ``stderr``) when
    the backend is unreachable, the metrics endpoint cannot start, or ``serve``
    refuses to run (another live instance has this host; the stream is shared
    with other groups while deleting on ack).
    """
    err = stderr if stderr is not None else sys.stderr
    stopper = _Stopper(runner)
    try:
        with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as receiver:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(stopper.watch, receiver)
                try:
                    await check_backend(runner)
                except BackendError as exc:
                    nursery.cancel_scope.cancel()
                    return fail(PROG, f"cannot reach the backend ({runner.backend!r}): {exc}", err)
                cfg = runner.config
                log.info(
                    "worker pid %d on %s: instance %s, group %s, host %s, stream %s",
                    os.getpid(),
                    socket.gethostname(),
                    runner.instance_id,
                    cfg.consumer_group,
                    cfg.host,
                    runner.backend.stream_keys(cfg.consumer_group).stream,
                )
                nursery.start_soon(_log_leadership, runner)
                if metrics_port is not None:
                    try:
                        import_extra("prometheus_client", "prometheus")
                        from taskrunner.prometheus import serve_metrics

                        await nursery.start(
                            partial(serve_metrics, runner, metrics_port, host=metrics_host)
                        )
                    except (MissingExtra, OSError) as exc:
                        nursery.cancel_scope.cancel()
                        return fail(
                            PROG,
                            f"cannot serve metrics on {metrics_host}:{metrics_port}: {exc}",
                            err,
                        )
                    log.info(
                        "Prometheus metrics on http://%s:%d/metrics", metrics_host, metrics_port
                    )
                # No await between this check and serve's first line: a signal is
                # either seen here or delivered to a serving runner.
                if not stopper.requested:
                    try:
                        await runner.serve()
                    except (DuplicateHost, SharedStreamError) as exc:
                        nursery.cancel_scope.cancel()
                        return fail(PROG, str(exc), err)
                nursery.cancel_scope.cancel()
    finally:
        with trio.move_on_after(5, shield=True):
            await runner.backend.aclose()
    log.info("worker pid %d exited cleanly", os.getpid())
    return 0


COMMAND = Command(
    name="worker",
    help="serve a TaskRunner from your code ('module:attribute') until SIGINT/SIGTERM",
    add_arguments=_arguments,
    run=_run,
)
