"""arq driver: ``create_pool`` and ``enqueue_job`` per task (arq has no bulk call), and a
``Worker`` with ``max_jobs`` set to the concurrency, every other setting at its default
(among them ``poll_delay`` 0.5 s and results kept for an hour)."""

from __future__ import annotations

import asyncio
from importlib.metadata import version
from typing import Any

from _asyncio_driver import cancel_and_wait, main
from _common import Tally
from arq import create_pool
from arq.connections import ArqRedis, RedisSettings
from arq.worker import Worker, func


class Arq:
    async def open(self, url: str, tally: Tally, concurrency: int) -> None:
        async def noop(ctx: dict[str, Any], sent: float) -> None:
            tally.ran(sent)

        settings = RedisSettings.from_dsn(url)
        self.pool: ArqRedis = await create_pool(settings)
        self.worker = Worker(
            functions=[func(noop, name="noop")], redis_settings=settings, max_jobs=concurrency
        )
        self.running: asyncio.Task[None] | None = None

    async def enqueue(self, sent: float) -> None:
        await self.pool.enqueue_job("noop", sent)

    async def start_worker(self) -> None:
        self.running = asyncio.create_task(self.worker.async_run())

    async def close(self) -> None:
        await cancel_and_wait(self.running)
        await self.worker.close()
        await self.pool.aclose()


if __name__ == "__main__":
    main("arq", Arq(), loop="asyncio", versions={"arq": version("arq"), "redis": version("redis")})
