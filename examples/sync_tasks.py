"""Plain ``def`` actions run in worker threads.

A task whose action is a plain function (not ``async def``) runs in a worker
thread (``trio.to_thread.run_sync``), so blocking code (an image library, a
synchronous database driver) does not stall the event loop. Threads are
bounded by the pool (each run keeps its slot until its thread returns), or by
``sync_threads``. A thread cannot be cancelled: past its ``timeout`` the
attempt fails with ``TaskTimeout`` at once (and is retried or fails as usual),
the thread's result is discarded when it returns, and only then is its slot
free again. Middleware wraps thread actions too.

Run it with ``python examples/sync_tasks.py``.
"""

import logging
import threading
import time

import trio

from taskrunner import Delivery, TaskContext, TaskRunner, TaskRunnerConfig, TaskRunnerError
from taskrunner.backends.memory import MemoryBackend


async def main() -> None:
    logging.basicConfig(level=logging.ERROR)
    gave_up = trio.Event()

    def failed_task_handler(delivery: Delivery, error: TaskRunnerError) -> None:
        last = type(getattr(error, "last_error", None)).__name__
        failed = type(error).__name__
        print(f"{delivery.task_name}: {failed} on attempt {delivery.attempt} ({last})")
        gave_up.set()

    config = TaskRunnerConfig(
        consumer_group="images",
        num_workers=8,
        sync_threads=2,
        failed_task_handler=failed_task_handler,
    )
    runner = TaskRunner(config, MemoryBackend())
    lock = threading.Lock()
    running = most = 0
    made: list[str] = []

    # --8<-- [start:thumbnail]
    @runner.task(name="thumbnail")
    def thumbnail(payload: dict[str, str]) -> None:  # a plain function: a worker thread
        nonlocal running, most
        with lock:
            running += 1
            most = max(most, running)
        time.sleep(0.1)  # blocking work, off the event loop
        with lock:
            running -= 1
            made.append(payload["image"])

    # --8<-- [end:thumbnail]

    # --8<-- [start:timeout]
    @runner.task(name="convert", timeout=0.2)
    def convert(payload: str, ctx: TaskContext) -> None:
        time.sleep(0.5)  # past its timeout: the attempt has failed; this result is dropped

    # --8<-- [end:timeout]

    async with trio.open_nursery() as nursery:
        await nursery.start(runner.serve)
        await runner.dispatch_many("thumbnail", [{"image": f"img{i}.png"} for i in range(6)])
        with trio.fail_after(10):
            while len(made) < 6:  # noqa: ASYNC110
                await trio.sleep(0.01)
            # After the thumbnails, so its thread does not take one of their two.
            await runner.dispatch("convert", "scan.tiff")
            await gave_up.wait()
            while runner.statistics().running:  # noqa: ASYNC110
                await trio.sleep(0.01)
        runner.shutdown()
    print(f"thumbnails made: {len(made)}, at most {most} threads at once")
    stats = runner.statistics()
    print(f"completed {stats.completed}, failed {stats.failed}")


if __name__ == "__main__":
    trio.run(main)
