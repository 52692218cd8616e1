"""Poison entries: what cannot be decoded, or killed its workers, takes the failure path.

1. An entry nested 100,000 deep (decoding it raises ``RecursionError``) goes to
   the failure path at once, with a short reason.
2. An entry whose worker process died twice while running it (here: two
   consumers that read it and never ack, as a SIGKILLed process leaves it)
   comes back with delivery count 3, over its task's ``max_retry=2``. It goes
   to the failure path without being decoded or run again, so an entry that
   crashes whoever touches it stops after a bounded number of deliveries. An
   entry that names no registered task gets 3 deliveries.
3. ``serve`` keeps running, and ordinary tasks with it.

Both reach ``failed_task_handler`` here; without one they would go to the
dead-letter stream.

The short ``reclaim_delay`` keeps the example fast. Run it with
``python examples/poison_entries.py``.
"""

import json
import logging

import trio

from taskrunner import Delivery, TaskRunner, TaskRunnerConfig, TaskRunnerError
from taskrunner.backends.memory import MemoryBackend

GROUP = "images"


async def main() -> None:
    # The runner logs each poison entry at ERROR; the handler below prints the same.
    logging.basicConfig(level=logging.CRITICAL)
    backend = MemoryBackend()
    failed: dict[str, tuple[Delivery, TaskRunnerError]] = {}
    both_failed, greeted = trio.Event(), trio.Event()

    def failed_task_handler(delivery: Delivery, error: TaskRunnerError) -> None:
        failed[delivery.id] = (delivery, error)  # returning acks it
        if len(failed) == 2:
            both_failed.set()

    config = TaskRunnerConfig(
        consumer_group=GROUP,
        failed_task_handler=failed_task_handler,
        reclaim_delay=0.2,
        reclaim_interval=0.05,
        block_duration=0.05,
    )
    runner = TaskRunner(config, backend)

    @runner.task(name="resize", max_retry=2, reservation_timeout=0.1)
    async def resize(payload: dict[str, str]) -> None:
        print(f"  resize {payload['path']}: never reached")

    @runner.task(name="greet")
    async def greet(payload: str) -> None:
        print(f"  hello, {payload}")
        greeted.set()

    (killer_id,) = await backend.add(
        GROUP, [json.dumps({"task_name": "resize", "payload": {"path": "x.tif"}}).encode()]
    )
    # Two worker processes read it and died before they could ack it.
    await backend.read(GROUP, "images_host-1_1", 10, 0)
    await backend.claim_stale(GROUP, "images_host-2_1", 0, 10)
    (nested_id,) = await backend.add(GROUP, [b"[" * 100_000])

    async with trio.open_nursery() as nursery:
        await nursery.start(runner.serve)
        with trio.fail_after(5):
            await both_failed.wait()
        print("1. an entry that cannot be decoded")
        delivery, error = failed[nested_id]
        reason = str(error).split(" while decoding")[0]
        print(
            f"  delivery {delivery.delivery_count}: {type(error).__name__}: {reason} while decoding"
        )
        print("2. an entry that killed the workers it was delivered to")
        delivery, error = failed[killer_id]
        reason = str(error).replace(killer_id, "<id>")
        print(f"  delivery {delivery.delivery_count}: {type(error).__name__}: {reason}")
        print(f"  decoded: {delivery.message is not None}, raw: {delivery.raw!r}")
        print("3. serve goes on")
        await runner.dispatch("greet", "Ada")
        with trio.fail_after(5):
            await greeted.wait()
        print(f"  serving: {runner.statistics().serving}")
        runner.shutdown()


if __name__ == "__main__":
    trio.run(main)
