"""Unique tasks: at most one queued-or-running message per unique key.

``dispatch`` takes a lock (``taskrunner:unique:<task>:<key>``, lifetime
``unique_for`` seconds) and raises ``TaskAlreadyDispatched`` while it is held.
The lock is released when the message reaches its final outcome, so the same
key can be dispatched again after that.

Run it with ``python examples/unique_tasks.py``; it finishes by itself.
"""

import trio

from taskrunner import TaskAlreadyDispatched, TaskRunner, TaskRunnerConfig
from taskrunner.backends.memory import MemoryBackend


async def main() -> None:
    runner = TaskRunner(TaskRunnerConfig(consumer_group="accounts"), MemoryBackend())
    synced: set[int] = set()
    both_synced = trio.Event()

    @runner.task(
        name="sync_account",
        unique=True,
        unique_key=lambda payload: str(payload["account"]),
        unique_for=60,  # a crashed worker cannot hold the lock longer than this
    )
    async def sync_account(payload: dict[str, int]) -> None:
        print(f"syncing account {payload['account']}")
        synced.add(payload["account"])
        if synced == {1, 2}:
            both_synced.set()

    await runner.dispatch("sync_account", {"account": 1})
    await runner.dispatch("sync_account", {"account": 2})  # another key: fine
    try:
        await runner.dispatch("sync_account", {"account": 1})
    except TaskAlreadyDispatched as exc:
        print(f"refused: {exc.lock_key} is held")

    async with trio.open_nursery() as nursery:
        await nursery.start(runner.serve)
        await both_synced.wait()
        runner.shutdown()  # serve returns after the acks, and the locks are released

    await runner.dispatch("sync_account", {"account": 1})
    print("account 1 dispatched again after its first run finished")


if __name__ == "__main__":
    trio.run(main)
