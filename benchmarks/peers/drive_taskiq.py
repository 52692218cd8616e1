"""taskiq driver: taskiq-redis's ``RedisStreamBroker`` (no result backend, the default),
``task.kiq(...)`` per task (taskiq has no bulk call), and the worker run in this process
with ``taskiq.api.run_receiver_task``, ``max_async_tasks`` set to the concurrency and
every other setting at its default."""

from __future__ import annotations

import asyncio
from importlib.metadata import version

from _asyncio_driver import cancel_and_wait, main
from _common import Tally
from taskiq.api import run_receiver_task
from taskiq_redis import RedisStreamBroker


class Taskiq:
    async def open(self, url: str, tally: Tally, concurrency: int) -> None:
        self.broker = RedisStreamBroker(url)

        @self.broker.task(task_name="noop")
        async def noop(sent: float) -> None:
            tally.ran(sent)

        self.noop = noop
        self.concurrency = concurrency
        # Declares the consumer group (at "$"), so it must come before the first enqueue.
        await self.broker.startup()
        self.running: asyncio.Task[None] | None = None

    async def enqueue(self, sent: float) -> None:
        await self.noop.kiq(sent)

    async def start_worker(self) -> None:
        self.running = asyncio.create_task(
            run_receiver_task(self.broker, max_async_tasks=self.concurrency)
        )

    async def close(self) -> None:
        await cancel_and_wait(self.running)
        await self.broker.shutdown()


if __name__ == "__main__":
    versions = {name: version(name) for name in ("taskiq", "taskiq-redis", "redis")}
    main("taskiq", Taskiq(), loop="asyncio", versions=versions)
