"""A FastAPI app dispatches to a trio fleet with the AsyncProducer, and waits for a result.

The producer is made at import time (it connects on first use) and closed by the app's
lifespan; every request's asyncio task dispatches through it. One endpoint queues a
thumbnail and answers at once; the other waits for it (the task keeps its result), and
answers 504 if it takes too long. The requests here go
through httpx's ASGI transport, as a test would send them, and a trio runner in a
thread stands for the worker process.

Start a Redis (or Valkey) server on localhost, then::

    python examples/fastapi_app.py

It connects to ``$REDIS_URL`` (default ``redis://127.0.0.1:6379/0``). To serve the app
for real: ``uvicorn examples.fastapi_app:app``.
"""

import asyncio
import os
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import trio
from fastapi import FastAPI, HTTPException

from taskrunner import TaskRunner, TaskRunnerConfig
from taskrunner.backends.redis import RedisBackend
from taskrunner.producer import AsyncProducer, ResultTimeout

REDIS_URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")

# --8<-- [start:app]
producer = AsyncProducer.from_url(REDIS_URL, consumer_group="images")


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    async with producer:  # closes its connections when the app stops
        yield


app = FastAPI(lifespan=lifespan)


@app.post("/images/{name}/thumbnail")
async def make_thumbnail(name: str, width: int = 128) -> dict[str, Any]:
    handle = await producer.dispatch("thumbnail", {"image": name, "width": width})
    return {"image": name, "task": handle.id}


@app.post("/images/{name}/thumbnail/now")
async def thumbnail_now(name: str, width: int = 64) -> dict[str, Any]:
    handle = await producer.dispatch("thumbnail", {"image": name, "width": width})
    try:
        made = await handle.result(timeout=10)  # the task keeps its result (keep_result)
    except ResultTimeout:
        raise HTTPException(status_code=504, detail=f"thumbnail {handle.id} not ready") from None
    return {"image": name, "task": handle.id, "thumbnail": made["path"]}


# --8<-- [end:app]

made: list[str] = []


async def worker(ready: threading.Event, expected: int) -> None:
    """The trio side: the runner that makes the thumbnails."""
    async with RedisBackend.from_url(REDIS_URL) as backend:
        runner = TaskRunner(TaskRunnerConfig(consumer_group="images"), backend)
        all_made = trio.Event()

        @runner.task(name="thumbnail", keep_result=300)
        async def thumbnail(payload: dict[str, Any]) -> dict[str, str]:
            made.append(f"{payload['image']} at {payload['width']} px")
            if len(made) == expected:
                all_made.set()
            return {"path": f"thumbs/{payload['width']}/{payload['image']}"}

        async with trio.open_nursery() as nursery:
            await nursery.start(runner.serve)
            ready.set()
            await all_made.wait()
            nursery.cancel_scope.cancel()


# --8<-- [start:client]
async def requests() -> None:
    transport = httpx.ASGITransport(app=app)
    async with (
        app.router.lifespan_context(app),  # ASGITransport does not run the lifespan itself
        httpx.AsyncClient(transport=transport, base_url="http://shop") as client,
    ):
        replies = await asyncio.gather(
            *(client.post(f"/images/{name}.png/thumbnail") for name in ("cat", "dog", "owl"))
        )
        waited = await client.post("/images/fox.png/thumbnail/now")
    for reply in replies:
        print(f"HTTP {reply.status_code}: {reply.json()['image']} queued")
    print(f"HTTP {waited.status_code}: {waited.json()['thumbnail']} made")


# --8<-- [end:client]


if __name__ == "__main__":
    ready = threading.Event()
    thread = threading.Thread(target=trio.run, args=(worker, ready, 4))
    thread.start()
    ready.wait()
    asyncio.run(requests())
    thread.join()
    for line in sorted(made):
        print(f"worker: made {line}")
