"""saq driver: ``Queue.from_url`` and ``Queue.enqueue`` per task (saq has no bulk enqueue;
``map`` and ``batch`` enqueue one by one and wait for the results), and a ``Worker``
with ``concurrency`` set, every other setting at its default."""

from __future__ import annotations

import asyncio
from importlib.metadata import version
from typing import Any

from _asyncio_driver import cancel_and_wait, main
from _common import Tally
from saq import Queue, Worker


class Saq:
    async def open(self, url: str, tally: Tally, concurrency: int) -> None:
        async def noop(ctx: dict[str, Any], *, sent: float) -> None:
            tally.ran(sent)

        self.queue = Queue.from_url(url)
        await self.queue.connect()
        self.worker = Worker(self.queue, functions=[("noop", noop)], concurrency=concurrency)
        self.running: asyncio.Task[None] | None = None

    async def enqueue(self, sent: float) -> None:
        await self.queue.enqueue("noop", sent=sent)

    async def start_worker(self) -> None:
        self.running = asyncio.create_task(self.worker.start())

    async def close(self) -> None:
        if self.running is not None:
            await self.worker.stop()
            await cancel_and_wait(self.running)
        await self.queue.disconnect()


if __name__ == "__main__":
    main("saq", Saq(), loop="asyncio", versions={"saq": version("saq"), "redis": version("redis")})
