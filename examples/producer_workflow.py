"""A plain script starts a workflow with the sync Producer; a trio runner runs its steps.

``producer.step`` builds a step as ``runner.step`` does, ``chain`` (or ``group``,
``chord``, ``Workflow``) composes them, and ``producer.dispatch_workflow`` writes the
workflow's record and queues its first step in one call, returning its id, which
``producer.workflow(id)`` follows (its ``result``, ``status``, ``cancel``). The worker
side (here in a thread, so the example runs by itself) is an ordinary trio runner of the
same consumer group, which follows the workflow by that id.

Start a Redis (or Valkey) server on localhost, then::

    python examples/producer_workflow.py

It connects to ``$REDIS_URL`` (default ``redis://127.0.0.1:6379/0``).
"""

import os
import queue
import threading
from typing import Any

import trio

from taskrunner import TaskRunner, TaskRunnerConfig
from taskrunner.backends.redis import RedisBackend
from taskrunner.producer import Producer

REDIS_URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
ready = threading.Event()
started: queue.Queue[str] = queue.Queue()
"""The id of the workflow the script below starts, for the worker to follow."""
ran: list[str] = []


async def worker() -> None:
    """The trio side: the runner that serves the steps and follows the workflow by its id."""
    async with RedisBackend.from_url(REDIS_URL) as backend:
        runner = TaskRunner(TaskRunnerConfig(consumer_group="shop"), backend)

        @runner.task(name="resize", keep_result=60)
        async def resize(payload: dict[str, Any]) -> str:
            ran.append(f"resized image {payload['id']}")
            return f"{payload['id']}-small.png"

        @runner.task(name="upload", keep_result=60)
        async def upload(path: str) -> str:  # no payload of its own: its parent's result
            ran.append(f"uploaded {path}")
            return f"https://cdn.example/{path}"

        async with trio.open_nursery() as nursery:
            await nursery.start(runner.serve)
            ready.set()
            workflow_id = await trio.to_thread.run_sync(started.get)
            url = await runner.get_workflow(workflow_id).result(timeout=30)  # the last step's
            ran.append(f"workflow result: {url}")
            nursery.cancel_scope.cancel()


def main() -> None:
    # --8<-- [start:workflow]
    from taskrunner import chain

    with Producer.from_url(REDIS_URL, consumer_group="shop") as producer:
        workflow_id = producer.dispatch_workflow(
            chain(producer.step("resize", {"id": 7}), producer.step("upload"))
        )
    # --8<-- [end:workflow]
    print(f"started workflow {workflow_id}")
    started.put(workflow_id)
    # --8<-- [start:follow]
    with Producer.from_url(REDIS_URL, consumer_group="shop") as producer:
        wf = producer.workflow(workflow_id)  # result(timeout), status(), cancel()
        print(f"producer: workflow result: {wf.result(timeout=30)}")
    # --8<-- [end:follow]


if __name__ == "__main__":
    thread = threading.Thread(target=trio.run, args=(worker,))
    thread.start()
    ready.wait()
    main()
    thread.join()  # the worker stops once the workflow ended
    for line in ran:
        print(f"worker: {line}")
