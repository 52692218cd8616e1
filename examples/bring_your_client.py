"""RedisBackend on a redis-py client you already have.

Start a Redis (or Valkey) server on localhost first, then run
``python examples/bring_your_client.py``; it connects to ``$REDIS_URL``
(default ``redis://127.0.0.1:6379/0``) and finishes by itself.
"""

import os

import redis
import trio

from taskrunner import TaskRunner, TaskRunnerConfig
from taskrunner.backends.redis import RedisBackend

REDIS_URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")


async def main() -> None:
    # --8<-- [start:client]
    # Any redis-py *sync* client speaking RESP2; its calls run in worker threads.
    client = redis.Redis.from_url(REDIS_URL, protocol=2)
    # The client stays yours: closing the backend does not close it.
    async with RedisBackend.from_client(client, queue="reports") as backend:
        runner = TaskRunner(TaskRunnerConfig(consumer_group="reports"), backend)
        # --8<-- [end:client]
        done = trio.Event()

        @runner.task(name="render")
        async def render(payload: dict[str, str]) -> None:
            print(f"rendered {payload['report']}")
            done.set()

        async with trio.open_nursery() as nursery:
            await nursery.start(runner.serve)
            await runner.dispatch("render", {"report": "weekly"})
            await done.wait()
            runner.shutdown()

        stream = backend.stream_keys("reports").stream  # taskrunner:reports:reports
        print(f"stream {stream}: {await backend.length('reports')} entries left")
    client.close()


if __name__ == "__main__":
    trio.run(main)
