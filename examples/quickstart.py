"""Quick start: register a task, dispatch a few runs, serve them, shut down.

Run it with ``python examples/quickstart.py``; it finishes by itself.
"""

import trio

from taskrunner import TaskRunner, TaskRunnerConfig
from taskrunner.backends.memory import MemoryBackend


async def main() -> None:
    runner = TaskRunner(TaskRunnerConfig(consumer_group="quickstart"), MemoryBackend())
    greeted: list[str] = []
    all_greeted = trio.Event()

    @runner.task(name="greet")
    async def greet(payload: dict[str, str]) -> None:
        print(f"hello, {payload['name']}")
        greeted.append(payload["name"])
        if len(greeted) == 5:
            all_greeted.set()

    async with trio.open_nursery() as nursery:
        await nursery.start(runner.serve)  # returns once the fetcher and workers run
        await runner.dispatch("greet", {"name": "Ada"})
        names = ["Alan", "Grace", "Edsger", "Barbara"]
        await runner.dispatch_many("greet", [{"name": name} for name in names])
        await all_greeted.wait()
        runner.shutdown()  # graceful: serve returns once running tasks finished and are acked

    stats = runner.statistics()
    print(f"done: {stats.completed} completed, {stats.acked} acked")


if __name__ == "__main__":
    trio.run(main)
