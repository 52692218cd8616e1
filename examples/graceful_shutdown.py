"""Graceful shutdown, and how a task can run twice (at-least-once delivery).

1. ``runner.shutdown()`` stops fetching at once; running tasks finish and are
   acked before ``serve`` returns.
2. Cancelling ``serve`` does the same, then re-raises the cancellation.
3. A task still running when ``shutdown_grace`` runs out is cancelled and NOT
   acked: another runner reclaims it after ``reclaim_delay`` and runs it again.
   That second delivery counts as an attempt, so give such tasks
   ``max_retry >= 2`` (with the default of 1 it would go to the failure path).

Run it with ``python examples/graceful_shutdown.py``; it takes about a second.
"""

import logging

import attrs
import trio

from taskrunner import TaskRunner, TaskRunnerConfig
from taskrunner.backends.memory import MemoryBackend


@attrs.define
class Progress:
    started: trio.Event = attrs.Factory(trio.Event)
    finished: trio.Event = attrs.Factory(trio.Event)


def make_runner(
    backend: MemoryBackend, host: str, progress: Progress, **config: float
) -> TaskRunner:
    runner = TaskRunner(TaskRunnerConfig(consumer_group="reports", host=host, **config), backend)

    @runner.task(name="build_report", max_retry=2, reservation_timeout=0.1)
    async def build_report(payload: dict[str, str]) -> None:
        print(f"  {host}: building {payload['name']}...")
        progress.started.set()
        await trio.sleep(0.3)
        print(f"  {host}: {payload['name']} done")
        progress.finished.set()

    return runner


def report(runner: TaskRunner) -> str:
    stats = runner.statistics()
    return f"completed {stats.completed}, acked {stats.acked}, reclaimed {stats.reclaimed}"


async def shutdown_method() -> None:
    print("1. runner.shutdown()")
    progress = Progress()
    runner = make_runner(MemoryBackend(), "a", progress)
    async with trio.open_nursery() as nursery:
        await nursery.start(runner.serve)
        await runner.dispatch("build_report", {"name": "Q1"})
        await progress.started.wait()
        runner.shutdown()  # returns at once; serve returns once Q1 is done and acked
    print(f"  serve returned: {report(runner)}")


async def cancellation() -> None:
    print("2. cancelling serve")
    progress = Progress()
    runner = make_runner(MemoryBackend(), "a", progress)
    async with trio.open_nursery() as nursery:
        await nursery.start(runner.serve)
        await runner.dispatch("build_report", {"name": "Q2"})
        await progress.started.wait()
        nursery.cancel_scope.cancel()  # or a timeout around serve
    print(f"  serve returned: {report(runner)}")


async def grace_runs_out() -> None:
    print("3. shutdown_grace runs out: the task runs again elsewhere")
    backend = MemoryBackend()
    fast_reclaim = {"reclaim_delay": 0.2, "reclaim_interval": 0.05, "block_duration": 0.05}
    on_a, on_b = Progress(), Progress()
    a = make_runner(backend, "a", on_a, shutdown_grace=0.05, **fast_reclaim)
    b = make_runner(backend, "b", on_b, **fast_reclaim)
    async with trio.open_nursery() as nursery:
        await nursery.start(a.serve)
        await a.dispatch("build_report", {"name": "Q3"})
        await on_a.started.wait()
        await nursery.start(b.serve)  # b starts after a took the message
        a.shutdown()  # Q3 needs 0.3 s; a gives it 0.05 s, then cancels it
        await on_b.finished.wait()
        b.shutdown()
    print(f"  a: {report(a)}")
    print(f"  b: {report(b)}")


async def main() -> None:
    # Case 3 makes the runner warn that shutdown_grace ran out; that is the point here.
    logging.basicConfig(level=logging.ERROR, format="%(levelname)s %(name)s: %(message)s")
    await shutdown_method()
    await cancellation()
    await grace_runs_out()


if __name__ == "__main__":
    trio.run(main)
