"""Quick start: register a task, dispatch a few runs, serve them, shut down.

Run it with ``python examples/quickstart.py``; it finishes by itself.
"""

import trio

from taskrunner import TaskRunner, TaskRunnerConfig
from taskrunner.backends.memory import MemoryBackend

TOTAL = 5


async def main() -> None:
    backend = MemoryBackend()
    runner = TaskRunner(TaskRunnerConfig(consumer_group="quickstart"), backend)
    done = 0

    @runner.task(name="greet")
    async def greet(payload: dict[str, str]) -> None:
        nonlocal done
        print(f"hello, {payload['name']}")
        done += 1
        if done == TOTAL:
            runner.shutdown()  # serve() returns once running tasks finished and are acked

    async with trio.open_nursery() as nursery:
        await nursery.start(runner.serve)
        await runner.dispatch("greet", {"name": "Ada"})
        await runner.dispatch_many(
            "greet", [{"name": n} for n in ("Alan", "Grace", "Edsger", "Barbara")]
        )

    print(f"done: {runner.statistics().completed} completed, {runner.statistics().acked} acked")


if __name__ == "__main__":
    trio.run(main)
