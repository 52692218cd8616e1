"""Dramatiq driver: a ``RedisBroker``, ``actor.send(...)`` per task from 32 threads
(Dramatiq has no bulk call: a ``group`` sends one message after another), and a
``dramatiq.Worker`` with ``worker_threads`` set to the concurrency, started in this
process (what ``dramatiq --processes 1 --threads 32`` runs), every other setting at
its default (JSON, the default middleware, no result backend: nothing is kept).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from importlib.metadata import version
from typing import Any

import dramatiq
from _thread_driver import SharedTally, main
from dramatiq.brokers.redis import RedisBroker


class DramatiqPeer:
    def open(self, url: str, tally: SharedTally, concurrency: int) -> None:
        self.broker = RedisBroker(url=url)
        self.concurrency = concurrency

        @dramatiq.actor(actor_name="noop", broker=self.broker)
        def noop(sent: float) -> None:
            tally.ran(sent)

        self.noop = noop

    def enqueue(self, sent: float) -> None:
        self.noop.send(sent)

    def serve(self, during: Callable[[], None]) -> None:
        worker = dramatiq.Worker(self.broker, worker_threads=self.concurrency)
        worker.start()
        try:
            during()
        finally:
            worker.stop()

    def close(self) -> None:
        self.broker.close()


def make_peer(args: argparse.Namespace) -> tuple[DramatiqPeer, dict[str, Any]]:
    return DramatiqPeer(), {}


if __name__ == "__main__":
    versions = {name: version(name) for name in ("dramatiq", "redis")}
    main("dramatiq", make_peer, loop="threads", versions=versions)
