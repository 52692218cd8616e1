"""The dashboard mounted in your own ASGI app, next to your routes.

``taskrunner.dashboard.create_app(backend)`` is a Starlette app: mount it under a
path of yours. Starlette runs a mounted app's lifespan only for the outer app, so
the outer lifespan runs the dashboard's sampler (the charts' history) itself.
Here a runner serves a few tasks on a MemoryBackend, and the pages and their
``/api/`` twins are requested through httpx's ASGI transport (in a real
deployment: hypercorn's trio worker, as ``taskrunner dashboard`` does).

Run: ``python examples/dashboard_mount.py`` (needs the ``dashboard`` extra and httpx).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx
import trio
from starlette.applications import Starlette
from starlette.responses import PlainTextResponse
from starlette.routing import Mount, Route

from taskrunner import TaskRunner, TaskRunnerConfig
from taskrunner.backends.memory import MemoryBackend
from taskrunner.dashboard import create_app

backend = MemoryBackend()
runner = TaskRunner(TaskRunnerConfig(consumer_group="shop", host="web-1"), backend)


@runner.task("send_receipt")
async def send_receipt(order: int) -> None:
    await trio.sleep(0.01)


dashboard = create_app(backend)  # read-only: no allow_actions


@asynccontextmanager
async def lifespan(app: Starlette) -> AsyncIterator[None]:
    async with trio.open_nursery() as nursery:
        nursery.start_soon(dashboard.state.sampler.run)
        yield
        nursery.cancel_scope.cancel()


async def home(request: object) -> PlainTextResponse:
    return PlainTextResponse("the shop")


app = Starlette(
    routes=[Route("/", home), Mount("/ops/taskrunner", app=dashboard)], lifespan=lifespan
)


async def main() -> None:
    async with trio.open_nursery() as nursery:
        await nursery.start(runner.serve)
        for order in range(3):
            await runner.dispatch("send_receipt", order)
        await trio.sleep(2)  # the runs, and the timings flushed

        transport = httpx.ASGITransport(app=app)  # the outer app, dashboard mounted
        async with httpx.AsyncClient(transport=transport, base_url="http://shop") as http:
            print("home:", (await http.get("/")).text)
            fleet = (await http.get("/ops/taskrunner/api/")).json()
            print("groups:", [g["name"] for g in fleet["groups"]])
            group = (await http.get("/ops/taskrunner/api/groups/shop")).json()
            for instance in group["instances"]:
                print(
                    f"instance {instance['host']}: leader {instance['leader']}, "
                    f"serves {', '.join(instance['tasks'])}"
                )
            for task in group["timing"]["tasks"]:
                print(f"task {task['name']}: {task['runs']} runs")
            page = await http.get("/ops/taskrunner/groups/shop")
            mounted = 'href="/ops/taskrunner/groups/shop/dead"' in page.text
            print(f"group page: HTTP {page.status_code}, links under the mount: {mounted}")
            refused = await http.post("/ops/taskrunner/groups/shop/dead/purge")
            print("a POST to an action while read-only:", refused.status_code)
        nursery.cancel_scope.cancel()


if __name__ == "__main__":
    trio.run(main)
