"""Celery driver: a ``Celery`` app with the Redis broker and the Redis result backend,
``task.delay(...)`` per task from 32 threads (Celery has no bulk call: a ``group``
sends one message after another), and the worker run in this process with
``app.Worker(pool_cls=..., concurrency=...).start()``, as ``celery worker`` does;
``--pool prefork`` (Celery's default, one child process per slot) or ``--pool threads``,
every other setting at its default (JSON, results kept for a day, prefetch multiplier 4,
acknowledged on receipt).

The worker runs in the main thread, where it installs its signal handlers; the phase
runs beside it from the moment Celery's ``worker_ready`` signal fires, and a SIGTERM
(Celery's warm shutdown) stops it.
"""

from __future__ import annotations

import argparse
import os
import signal
import threading
from collections.abc import Callable
from importlib.metadata import version
from typing import Any

from _thread_driver import SharedTally, beside, main
from celery import Celery
from celery.signals import worker_ready

READY_LIMIT = 120.0
"""Most seconds the worker may take to start (a prefork pool forks every child first)."""


class CeleryPeer:
    def __init__(self, pool: str) -> None:
        self.pool = pool

    def open(self, url: str, tally: SharedTally, concurrency: int) -> None:
        self.app = Celery("peers", broker=url, backend=url, set_as_current=True)
        # Only silences a deprecation warning: retrying at start-up is the default.
        self.app.conf.broker_connection_retry_on_startup = True
        self.concurrency = concurrency

        @self.app.task(name="noop")
        def noop(sent: float) -> None:
            tally.ran(sent)

        self.noop = noop

    def enqueue(self, sent: float) -> None:
        self.noop.delay(sent)

    def serve(self, during: Callable[[], None]) -> None:
        worker = self.app.Worker(
            pool_cls=self.pool,
            concurrency=self.concurrency,
            loglevel="WARNING",
            quiet=True,
            redirect_stdouts=False,  # the driver's result is its last line of output
        )
        ready = threading.Event()

        def on_ready(**_: Any) -> None:
            ready.set()

        def phase() -> None:
            if not ready.wait(READY_LIMIT):
                raise RuntimeError(f"the Celery worker was not ready within {READY_LIMIT} s")
            during()

        worker_ready.connect(on_ready, weak=False)
        try:
            beside(worker.start, phase, lambda: os.kill(os.getpid(), signal.SIGTERM))
        finally:
            worker_ready.disconnect(on_ready)

    def close(self) -> None:
        self.app.close()


def options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--pool", choices=("prefork", "threads"), default="prefork")


def make_peer(args: argparse.Namespace) -> tuple[CeleryPeer, dict[str, Any]]:
    # The tasks run in the pool's child processes or threads; the driver's own calls
    # (enqueueing, the phase) in threads of the worker's process.
    return CeleryPeer(args.pool), {"pool": args.pool, "loop": args.pool}


if __name__ == "__main__":
    versions = {name: version(name) for name in ("celery", "kombu", "redis")}
    main("celery", make_peer, options, versions=versions)
