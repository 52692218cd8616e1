"""One sync Producer shared by request threads, as in Django or Flask under a threaded server.

The producer is made once, at import time (in Django's ``settings`` or an app module,
in Flask next to ``app``), and every request thread dispatches through it: redis-py's
connection pool hands each thread a connection of its own. Under gunicorn ``--preload``
the module is imported before the fork, and each worker process gets fresh connections
on its first call. Here a thread pool stands for the web server, and a trio runner in
another thread for the worker process.

Start a Redis (or Valkey) server on localhost, then::

    python examples/producer_threads.py

It connects to ``$REDIS_URL`` (default ``redis://127.0.0.1:6379/0``).
"""

import os
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import trio

from taskrunner import TaskRunner, TaskRunnerConfig
from taskrunner.backends.redis import RedisBackend
from taskrunner.producer import Producer

REDIS_URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
REQUESTS = 80

# --8<-- [start:module]
# tasks.py of the web application: one producer for the whole process.
producer = Producer.from_url(REDIS_URL, consumer_group="mail")


def order_placed(order_id: int, email: str) -> dict[str, Any]:
    """A view: the request thread queues the e-mail and answers at once."""
    handle = producer.dispatch("send_receipt", {"order": order_id, "to": email})
    return {"order": order_id, "receipt_task": handle.id}


# --8<-- [end:module]


sent = 0


async def worker(done: threading.Event) -> None:
    """The trio side: the runner that sends the e-mails."""
    async with RedisBackend.from_url(REDIS_URL) as backend:
        runner = TaskRunner(TaskRunnerConfig(consumer_group="mail", num_workers=16), backend)
        all_sent = trio.Event()

        @runner.task(name="send_receipt")
        async def send_receipt(payload: dict[str, Any]) -> None:
            global sent
            await trio.sleep(0.01)  # stands for the SMTP round trip
            sent += 1
            if sent == REQUESTS:
                all_sent.set()

        async with trio.open_nursery() as nursery:
            await nursery.start(runner.serve)
            done.set()
            await all_sent.wait()
            nursery.cancel_scope.cancel()


if __name__ == "__main__":
    serving = threading.Event()
    thread = threading.Thread(target=trio.run, args=(worker, serving))
    thread.start()
    serving.wait()
    with ThreadPoolExecutor(max_workers=8) as server:  # the web server's request threads
        answers = list(
            server.map(lambda n: order_placed(n, f"buyer{n}@example.com"), range(REQUESTS))
        )
    ids = {answer["receipt_task"] for answer in answers}
    print(f"8 threads answered {len(answers)} requests, {len(ids)} distinct task ids")
    thread.join()
    print(f"worker: sent {sent} receipts")
    producer.close()
