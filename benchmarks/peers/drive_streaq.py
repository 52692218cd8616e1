"""streaq driver: a ``Worker`` used as the producer (``task.enqueue(...)`` awaited per
task, ``Worker.enqueue_many`` in bulk) and another one, with the same task, run with
``run_async``; ``concurrency`` set, every other setting at its default (asyncio without
uvloop, pickle, results kept)."""

from __future__ import annotations

import asyncio
import contextlib
from importlib.metadata import version

from _asyncio_driver import cancel_and_wait, main
from _common import Tally
from streaq import Worker


class Streaq:
    async def open(self, url: str, tally: Tally, concurrency: int) -> None:
        async def noop(sent: float) -> None:
            tally.ran(sent)

        # Two workers, as in a deployment: one that only enqueues, one that runs.
        self.producer = Worker(redis_url=url, concurrency=concurrency)
        self.noop = self.producer.task(name="noop")(noop)
        self.consumer = Worker(redis_url=url, concurrency=concurrency)
        self.consumer.task(name="noop")(noop)
        self.stack = contextlib.AsyncExitStack()
        await self.stack.enter_async_context(self.producer)
        self.running: asyncio.Task[None] | None = None

    async def enqueue(self, sent: float) -> None:
        await self.noop.enqueue(sent)

    async def enqueue_many(self, sent: list[float]) -> None:
        await self.producer.enqueue_many([self.noop.enqueue(s) for s in sent])

    async def start_worker(self) -> None:
        self.running = asyncio.create_task(self.consumer.run_async())

    async def close(self) -> None:
        await cancel_and_wait(self.running)
        await self.stack.aclose()


if __name__ == "__main__":
    main("streaq", Streaq(), loop="asyncio", versions={"streaq": version("streaq")})
