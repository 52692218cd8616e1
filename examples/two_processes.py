"""Two processes, one Redis: a worker that serves and a producer that dispatches.

Start a Redis (or Valkey) server on localhost first, then::

    python examples/two_processes.py worker      # terminal 1: serves until Ctrl-C
    python examples/two_processes.py produce 5   # terminal 2: dispatches 5 tasks

Both connect to ``$REDIS_URL`` (default ``redis://127.0.0.1:6379/0``). Start as
many workers as you like: they share the work.
"""

import os
import signal
import sys

import trio

from taskrunner import TaskRunner, TaskRunnerConfig
from taskrunner.backends.redis import RedisBackend

# --8<-- [start:runner]
REDIS_URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")


def make_runner(backend: RedisBackend) -> TaskRunner:
    """The same runner in every process: dispatching needs the task registered too."""
    runner = TaskRunner(TaskRunnerConfig(consumer_group="thumbnails"), backend)

    @runner.task(name="make_thumbnail", max_retry=3)
    async def make_thumbnail(payload: dict[str, str]) -> None:
        await trio.sleep(0.1)  # stands for the real work
        print(f"thumbnail for {payload['image']}")

    return runner


# --8<-- [end:runner]


# --8<-- [start:worker]
async def worker() -> None:
    async with RedisBackend.from_url(REDIS_URL) as backend:
        runner = make_runner(backend)
        with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
            async with trio.open_nursery() as nursery:
                await nursery.start(runner.serve)
                print("worker: serving, Ctrl-C to stop")
                async for _ in signals:
                    runner.shutdown()  # serve returns once running tasks finished and are acked
                    break
    print(f"worker: stopped after {runner.statistics().completed} task(s)")


# --8<-- [end:worker]


# --8<-- [start:produce]
async def produce(count: int) -> None:
    async with RedisBackend.from_url(REDIS_URL) as backend:
        runner = make_runner(backend)  # never serves: it only dispatches
        images = [{"image": f"img-{i}.png"} for i in range(count)]
        ids = await runner.dispatch_many("make_thumbnail", images)
    print(f"produced {len(ids)} task(s)")


# --8<-- [end:produce]


if __name__ == "__main__":
    match sys.argv[1:]:
        case ["worker"]:
            trio.run(worker)
        case ["produce", count]:
            trio.run(produce, int(count))
        case _:
            sys.exit(f"usage: {sys.argv[0]} worker | produce COUNT")
