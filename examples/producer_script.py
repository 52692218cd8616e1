"""A plain script dispatches by name with the sync Producer; a trio runner runs it.

The script side needs neither trio nor the workers' code: ``Producer`` sends tasks
by name through redis-py. The worker side (here in a thread, so the example runs by
itself; in production its own process, see ``two_processes.py``) is an ordinary
trio runner of the same consumer group.

Start a Redis (or Valkey) server on localhost, then::

    python examples/producer_script.py

It connects to ``$REDIS_URL`` (default ``redis://127.0.0.1:6379/0``).
"""

import os
import threading
from datetime import UTC, datetime, timedelta
from typing import Any

import trio

from taskrunner import TaskAlreadyDispatched, TaskNotFound, TaskRunner, TaskRunnerConfig
from taskrunner.backends.redis import RedisBackend
from taskrunner.producer import Producer

REDIS_URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
RUNS = 7
"""What the script below makes the worker run: three resizes, two reminders, two syncs."""
ready = threading.Event()
ran: list[str] = []


async def worker() -> None:
    """The trio side: the runner that serves the tasks the script sends."""
    async with RedisBackend.from_url(REDIS_URL) as backend:
        config = TaskRunnerConfig(consumer_group="shop", delayed_poll_interval=0.5)
        runner = TaskRunner(config, backend)
        all_ran = trio.Event()

        def record(line: str) -> None:
            ran.append(line)
            if len(ran) == RUNS:
                all_ran.set()

        @runner.task(name="resize")
        async def resize(payload: dict[str, Any]) -> None:
            record(f"resized {payload['image']} to {payload['width']} px")

        @runner.task(name="remind")
        async def remind(payload: dict[str, Any]) -> None:
            record(f"reminded user {payload['user']}")

        @runner.task(name="sync_account", unique=True, unique_for=60, unique_key=lambda p: p["id"])
        async def sync_account(payload: dict[str, str]) -> None:
            await trio.sleep(0.5)
            record(f"synced account {payload['id']}")

        async with trio.open_nursery() as nursery:
            await nursery.start(runner.serve)
            ready.set()
            await all_ran.wait()
            nursery.cancel_scope.cancel()


def main() -> None:
    # --8<-- [start:script]
    producer = Producer.from_url(REDIS_URL, consumer_group="shop")
    handle = producer.dispatch("resize", {"image": "cat.png", "width": 100})
    print(f"dispatched resize as {handle.id}")
    producer.dispatch_many("resize", [{"image": f"{n}.png", "width": 50} for n in (1, 2)])
    producer.dispatch_delayed("remind", {"user": 7}, delay=timedelta(seconds=0.5))
    producer.schedule_for("remind", {"user": 8}, when=datetime.now(UTC) + timedelta(seconds=1))
    producer.dispatch("sync_account", {"id": "acct-1"}, unique_key="acct-1", unique_for=60)
    try:
        producer.dispatch("sync_account", {"id": "acct-1"}, unique_key="acct-1", unique_for=60)
    except TaskAlreadyDispatched as exc:
        print(f"refused: {exc.lock_key} is held")
    producer.close()
    # --8<-- [end:script]

    # --8<-- [start:strict]
    with Producer.from_url(REDIS_URL, consumer_group="shop", strict=True) as strict:
        try:
            strict.dispatch("resise", {"image": "typo.png"})
        except TaskNotFound as exc:
            print(f"refused: {exc}")
        strict.dispatch("sync_account", {"id": "acct-2"}, unique_key="acct-2")  # unique_for: 60
    # --8<-- [end:strict]


if __name__ == "__main__":
    thread = threading.Thread(target=trio.run, args=(worker,))
    thread.start()
    ready.wait()
    main()
    thread.join()  # the worker stops once it ran them all
    for line in ran:
        print(f"worker: {line}")
