"""Instructions per run of no-op tasks on the in-memory backend, for ``valgrind``.

A per-task path change on a noisy, shared machine is best compared by instruction
counts, not rates: run this script under callgrind from each checkout and compare the
totals ("Collected"). Everything here is the checkout's own code (``run_noop_tasks`` of
its ``benchmarks/_harness.py``); the count includes the interpreter's start and the
imports, the same for two checkouts up to their code's size, so the ratio understates
a per-task difference a little.

    PYTHONPATH=<tree>:<tree>/benchmarks valgrind --tool=callgrind \\
        python benchmarks/instructions_memory.py [--tasks 3000] [--features | --one] [--shards 1]

``--one`` counts the other way of feeding a runner: one ``await dispatch`` per task
while it serves (``run_dispatch_while_serving``), the case ``core_memory.py`` calls
"one dispatch per task". ``--shards 16`` serves a sharded group
(``TaskRunnerConfig(shards=16)``) instead.
"""

from __future__ import annotations

import argparse

import trio
from _harness import run_dispatch_while_serving, run_noop_tasks

from taskrunner import TaskRunner, TaskRunnerConfig
from taskrunner.backends.memory import MemoryBackend


async def main(tasks: int, features: bool, one: bool, shards: int) -> None:
    config = TaskRunnerConfig(consumer_group="instructions", num_workers=32, shards=shards)
    runner = TaskRunner(config, MemoryBackend())
    if one:
        await run_dispatch_while_serving(runner, tasks)
    else:
        await run_noop_tasks(runner, tasks, features=features)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=3000)
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument(
        "--features", action="store_true", help="a timeout, a context and a middleware"
    )
    mode.add_argument(
        "--one", action="store_true", help="one await dispatch per task while serving"
    )
    parser.add_argument("--shards", type=int, default=1, help="the group's shard count")
    args = parser.parse_args()
    trio.run(main, args.tasks, args.features, args.one, args.shards)
