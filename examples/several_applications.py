"""Several applications on one Redis: a stream per consumer group, or one shared on purpose.

1. With the default settings each consumer group reads a stream of its own,
   ``taskrunner:<group>:tasks``: the shop never sees the mail's tasks, even
   while the mail worker is down, and the mail worker runs them when it is back.
2. Groups given one explicit ``prefix`` share its stream and each get every
   entry. Deleting on ack would delete entries before the other group read them,
   so ``serve`` refuses it; with ``delete_on_ack=False`` each group acks the
   other's tasks for itself only.

The store here is one ``MemoryBackend``; backends on one Redis server behave
the same. Run it with ``python examples/several_applications.py``; it takes
about a second.
"""

import logging

import trio

from taskrunner import SharedStreamError, TaskRunner, TaskRunnerConfig
from taskrunner.backends import Backend
from taskrunner.backends.memory import MemoryBackend


def applications(store: Backend) -> tuple[TaskRunner, TaskRunner]:
    # --8<-- [start:apps]
    shop = TaskRunner(TaskRunnerConfig(consumer_group="shop", block_duration=0.05), store)
    mail = TaskRunner(TaskRunnerConfig(consumer_group="mail", block_duration=0.05), store)

    @shop.task(name="charge")
    async def charge(payload: dict[str, int]) -> None:
        print(f"  shop charged {payload['cents']} cents")

    @mail.task(name="send_mail")
    async def send_mail(payload: dict[str, str]) -> None:
        print(f"  mail sent to {payload['to']}")

    # --8<-- [end:apps]
    return shop, mail


async def serve_for(runner: TaskRunner, seconds: float) -> None:
    async with trio.open_nursery() as nursery:
        await nursery.start(runner.serve)
        await trio.sleep(seconds)
        runner.shutdown()


async def a_stream_each() -> None:
    print("1. default settings: a stream per consumer group")
    store = MemoryBackend()
    shop, mail = applications(store)
    print(f"  shop reads {store.stream_keys('shop').stream}")
    print(f"  mail reads {store.stream_keys('mail').stream}")
    await mail.dispatch("send_mail", {"to": "ann@example.com"})  # the mail worker is down
    await shop.dispatch("charge", {"cents": 1250})
    await serve_for(shop, 0.3)
    print(f"  shop dead letters: {len(await store.dead_letters('shop'))}")
    print(f"  waiting in the mail's stream: {await store.length('mail')}")
    await serve_for(mail, 0.3)  # back up: it runs its task


async def one_shared_stream() -> None:
    print("2. one stream on purpose: prefix='orders'")
    store = MemoryBackend(prefix="orders")  # deletes on ack, the default
    shop, mail = applications(store)
    await serve_for(mail, 0.1)  # the mail group exists now
    try:
        await shop.serve()
    except SharedStreamError as exc:
        print(f"  refused: {exc.other_groups} read {exc.stream}, and delete_on_ack is on")

    # --8<-- [start:shared]
    store = MemoryBackend(prefix="orders", delete_on_ack=False)  # every group acks for itself
    # --8<-- [end:shared]
    shop, mail = applications(store)
    await serve_for(mail, 0.1)
    await mail.dispatch("send_mail", {"to": "bob@example.com"})
    await serve_for(shop, 0.3)  # acks send_mail for the shop only
    print(f"  shop dead letters: {len(await store.dead_letters('shop'))}")
    await serve_for(mail, 0.3)


async def main() -> None:
    await a_stream_each()
    await one_shared_stream()


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING)
    trio.run(main)
