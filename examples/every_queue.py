"""Every queue is a first-class queue: a runner on two queues, a periodic task without a
queue of its own, tasks looked up and cancelled on either queue, and the dead letters of
both queues listed, replayed and purged.

Runs on trio's ``MockClock`` (``autojump_threshold=0``), so the waits below pass in an
instant. Run it with ``python examples/every_queue.py``.
"""

import logging
from typing import Any

import trio
import trio.testing

from taskrunner import TaskRunner, TaskRunnerConfig, admin
from taskrunner.backends.memory import MemoryBackend


async def main() -> None:
    logging.basicConfig(level=logging.CRITICAL)
    backend = MemoryBackend()
    # --8<-- [start:runner]
    runner = TaskRunner(
        TaskRunnerConfig(consumer_group="shop", queues=("orders", "emails")), backend
    )
    ticks: list[float] = []
    declined = {"order-2"}

    @runner.task(name="charge", queue="orders", keep_result=600)
    async def charge(payload: dict[str, Any]) -> str:
        if payload["order"] in declined:
            declined.discard(payload["order"])  # declined once: a dead letter, then replayed
            raise ValueError("card declined")
        return f"charged {payload['order']}"

    @runner.task(name="receipt", queue="emails", max_retry=0)
    async def receipt(payload: dict[str, Any]) -> None:
        raise ConnectionError("mail server down")

    @runner.periodic(every=5)  # no queue=: it runs on "orders", the first queue named
    async def tidy(payload: Any) -> None:
        ticks.append(trio.current_time())

    # --8<-- [end:runner]

    async with trio.open_nursery() as nursery:
        # --8<-- [start:lookup]
        await admin.pause(backend, "shop", queue="emails")  # so a receipt stays queued
        await trio.sleep(1.1)
        queued = await runner.dispatch("receipt", {"order": "order-1"})
        print(f"receipt queued on {queued.queue}: {(await queued.info()).state.value}")
        print(f"cancelled by id on any queue: {await runner.cancel(queued.id)}")
        await admin.resume(backend, "shop", queue="emails")
        # --8<-- [end:lookup]
        await nursery.start(runner.serve)
        first = await runner.dispatch("charge", {"order": "order-1"})
        print(f"charge on {first.queue}: {await first.result(timeout=10)}")
        await runner.dispatch("charge", {"order": "order-2"})
        await trio.sleep(0.01)
        await runner.dispatch("receipt", {"order": "order-2"})
        await trio.sleep(12)
        # --8<-- [start:dead]
        print(f"queues: {', '.join(await admin.queues(backend, 'shop'))}")
        for dead in await admin.dead_letters(backend, "shop"):  # every queue's
            print(
                f"dead letter on {dead.queue}: {dead.task_name}, {dead.reason.rpartition(': ')[2]}"
            )
        orders = await admin.dead_letters(backend, "shop", queue="orders")
        replayed = await admin.replay_dead_letters(
            backend, "shop", [d.id for d in orders], queue="orders"
        )
        print(f"replayed from orders: {sum(r.replayed for r in replayed)}")
        await trio.sleep(1)
        purged = await admin.purge_dead_letters(backend, "shop", confirm=True)
        print(f"purged: {purged} (the receipt's)")
        # --8<-- [end:dead]
        print(
            f"tidy ran {len(ticks)} times on orders; tasks stream: {await backend.length('shop')}"
        )
        nursery.cancel_scope.cancel()


if __name__ == "__main__":
    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
