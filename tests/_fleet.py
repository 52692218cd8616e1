"""Helpers for tests that run runners on a shared MemoryBackend."""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import trio

from taskrunner import TaskRunner, TaskRunnerConfig
from taskrunner.backends import Backend
from taskrunner.testing import PartitionedBackend as Partition

__all__ = ["Partition", "make_runner", "serving", "start_each", "wait_until"]

_hosts = itertools.count(1)


def make_runner(backend: Backend, **config: Any) -> TaskRunner:
    config.setdefault("consumer_group", "g")
    config.setdefault("host", f"host{next(_hosts)}")
    return TaskRunner(TaskRunnerConfig(**config), backend)


@asynccontextmanager
async def serving(*runners: TaskRunner) -> AsyncIterator[trio.Nursery]:
    """Serve every runner for the block's duration, then stop them all."""
    async with trio.open_nursery() as nursery:
        for runner in runners:
            await nursery.start(runner.serve)
        yield nursery
        nursery.cancel_scope.cancel()


def start_each(nursery: trio.Nursery, runners: list[TaskRunner]) -> list[trio.CancelScope]:
    """Serve each runner in ``nursery``, each in a cancel scope of its own (returned in
    order), so a test can stop one runner: a crash if its link was cut first."""
    scopes = []
    for runner in runners:
        scope = trio.CancelScope()
        scopes.append(scope)

        async def serve(runner: TaskRunner = runner, scope: trio.CancelScope = scope) -> None:
            with scope:
                await runner.serve()

        nursery.start_soon(serve)
    return scopes


async def wait_until(
    predicate: Callable[[], bool], *, limit: float = 3600, step: float = 0.01
) -> None:
    """Poll ``predicate`` on trio's clock; fail loudly after ``limit`` seconds.

    Polling (rather than an event) keeps the runner free of test hooks; under
    MockClock each poll costs no real time.
    """
    with trio.fail_after(limit):
        while not predicate():  # noqa: ASYNC110
            await trio.sleep(step)
