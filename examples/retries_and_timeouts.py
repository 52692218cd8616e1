"""Retries with backoff, ``Retry(delay=...)``, permanent errors and timeouts.

A failed attempt with attempts left comes back after its task's backoff, through
the delayed set (``retry=Backoff(...)``; the default is 1 s, 2 s, 4 s... up to
5 minutes, ± 10 %). An action can choose the delay itself by raising
``Retry(delay=...)``, mark exceptions as ``permanent`` (no further attempt), and
be cut off by its ``timeout`` (``TaskTimeout``, then retried like any failure).

Runs on trio's ``MockClock`` (``autojump_threshold=0``), so the minutes below
pass in an instant; the times printed are the runner's. Run it with
``python examples/retries_and_timeouts.py``.
"""

import logging

import trio
import trio.testing

from taskrunner import (
    Backoff,
    Delivery,
    Retry,
    TaskContext,
    TaskRunner,
    TaskRunnerConfig,
    TaskRunnerError,
)
from taskrunner.backends.memory import MemoryBackend


async def main() -> None:
    logging.basicConfig(level=logging.ERROR)  # the hooks below print what happens
    done = trio.Event()
    finished: list[str] = []

    def failed_task_handler(delivery: Delivery, error: TaskRunnerError) -> None:
        print(f"  {delivery.task_name} gave up on attempt {delivery.attempt}: {error}")
        finished.append("gave up")
        if len(finished) == 4:
            done.set()

    config = TaskRunnerConfig(consumer_group="shop", failed_task_handler=failed_task_handler)
    runner = TaskRunner(config, MemoryBackend())
    start = trio.current_time()

    def now() -> str:
        return f"t={trio.current_time() - start:5.1f}s"

    # --8<-- [start:backoff]
    @runner.task(max_retry=4, retry=Backoff(initial=2.0, factor=3.0, maximum=60.0, jitter=0))
    async def charge(payload: dict[str, int], ctx: TaskContext) -> None:
        print(f"  {now()} charge attempt {ctx.attempt} of {ctx.max_attempts}")
        if ctx.attempt < 3:
            raise ConnectionError("card processor unreachable")
        finished.append("charged")
        if len(finished) == 4:
            done.set()

    # --8<-- [end:backoff]

    # --8<-- [start:retry]
    @runner.task(max_retry=3)
    async def poll_export(payload: str, ctx: TaskContext) -> None:
        print(f"  {now()} poll_export attempt {ctx.attempt}: not ready")
        raise Retry(delay=30.0)  # another attempt in 30 s; it counts as an attempt

    # --8<-- [end:retry]

    # --8<-- [start:permanent]
    @runner.task(max_retry=5, permanent=(ValueError,))
    async def validate(payload: str) -> None:
        print(f"  {now()} validate {payload!r}")
        raise ValueError(f"not an order number: {payload!r}")

    # --8<-- [end:permanent]

    # --8<-- [start:timeout]
    @runner.task(timeout=10.0, max_retry=2, retry=Backoff(initial=5.0, jitter=0))
    async def fetch(payload: str) -> None:
        print(f"  {now()} fetch {payload} (the server never answers)")
        await trio.sleep_forever()

    # --8<-- [end:timeout]

    async with trio.open_nursery() as nursery:
        await nursery.start(runner.serve)
        await runner.dispatch("charge", {"cents": 1250})
        await runner.dispatch("poll_export", "report-7")
        await runner.dispatch("validate", "A-??")
        await runner.dispatch("fetch", "https://slow.example")
        with trio.fail_after(600):
            await done.wait()
        runner.shutdown()
    stats = runner.statistics()
    print(f"completed {stats.completed}, failed attempts {stats.failed}, retried {stats.retried}")


if __name__ == "__main__":
    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
