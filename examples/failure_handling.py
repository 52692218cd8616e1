"""Failure handling: retries, ``on_error``, ``failed_task_handler`` and the dead-letter stream.

A failed attempt with attempts left comes back after its task's backoff (the
``retry`` policy; by default 1 s, then 2 s, 4 s... up to 5 minutes), as a new
entry through the delayed set. When the last of ``max_retry`` attempts fails,
the message takes the failure path: ``failed_task_handler(delivery, error)``
if configured (returning acks it), otherwise the dead-letter stream.
``on_error(error, delivery)`` hears about every failed attempt.

The short backoff keeps the example fast. Run it with
``python examples/failure_handling.py``.
"""

import logging
from typing import Any

import trio

from taskrunner import (
    Backoff,
    Delivery,
    TaskExecutionError,
    TaskRunner,
    TaskRunnerConfig,
    TaskRunnerError,
)
from taskrunner.backends.memory import MemoryBackend

FAST: dict[str, Any] = {"block_duration": 0.05}
QUICKLY = Backoff(initial=0.05, factor=2.0, jitter=0)  # 50 ms, then 100 ms, ...


def on_error(error: TaskRunnerError, delivery: Delivery) -> None:
    if isinstance(error, TaskExecutionError):
        print(f"  on_error: {error.task_name} attempt {error.attempt} raised {error.error!r}")


async def with_handler() -> None:
    print("1. retries, then failed_task_handler")
    charged, refund_handled = trio.Event(), trio.Event()

    async def failed_task_handler(delivery: Delivery, error: TaskRunnerError) -> None:
        # Returning acks the message; raising would leave it pending for another try.
        print(f"  failed_task_handler: {delivery.task_name} gave up: {type(error).__name__}")
        refund_handled.set()

    config = TaskRunnerConfig(
        consumer_group="payments",
        on_error=on_error,
        failed_task_handler=failed_task_handler,
        **FAST,
    )
    runner = TaskRunner(config, MemoryBackend())
    attempts = 0

    @runner.task(name="charge", max_retry=3, retry=QUICKLY)
    async def charge(payload: dict[str, int]) -> None:
        nonlocal attempts
        attempts += 1
        if attempts < 3:
            raise ConnectionError("card processor unreachable")
        print(f"  charge: {payload['cents']} cents charged on attempt {attempts}")
        charged.set()

    @runner.task(name="refund", max_retry=2, retry=QUICKLY)
    async def refund(payload: dict[str, int]) -> None:
        raise ValueError("refund window closed")

    async with trio.open_nursery() as nursery:
        await nursery.start(runner.serve)
        await runner.dispatch("charge", {"cents": 1250})
        await runner.dispatch("refund", {"cents": 300})
        with trio.fail_after(5):
            await charged.wait()
            await refund_handled.wait()
        runner.shutdown()
    stats = runner.statistics()
    print(f"  completed {stats.completed}, failed attempts {stats.failed}, handled {stats.handled}")


async def with_dead_letters() -> None:
    print("2. no handler: the dead-letter stream")
    backend = MemoryBackend()
    last_attempt_failed = trio.Event()

    def note_last_attempt(error: TaskRunnerError, delivery: Delivery) -> None:
        if delivery.attempt == 2:  # refund's max_retry
            last_attempt_failed.set()

    config = TaskRunnerConfig(consumer_group="payments", on_error=note_last_attempt, **FAST)
    runner = TaskRunner(config, backend)

    @runner.task(name="refund", max_retry=2, retry=QUICKLY)
    async def refund(payload: dict[str, int]) -> None:
        raise ValueError("refund window closed")

    async with trio.open_nursery() as nursery:
        await nursery.start(runner.serve)
        await runner.dispatch("refund", {"cents": 300})
        with trio.fail_after(5):
            await last_attempt_failed.wait()
        runner.shutdown()  # graceful: the failure path (dead-lettering) finishes first
    for letter in await backend.dead_letters("payments"):
        print(f"  dead letter for message {letter.message_id}: {letter.error}")


async def main() -> None:
    # The hooks below print every failure; the runner also logs each failed attempt
    # at WARNING with its traceback, which would repeat them here. Keep ERROR and up.
    logging.basicConfig(level=logging.ERROR, format="%(levelname)s %(name)s: %(message)s")
    await with_handler()
    await with_dead_letters()


if __name__ == "__main__":
    trio.run(main)
