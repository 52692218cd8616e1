"""A runner of chord steps for tests/redis/test_redis_workflow_kills.py, which SIGKILLs
it at random instants, or at a named point of a step's life
(``python tests/apps/workflow_kill_app.py URL GROUP``).

Each run of ``sink`` appends its task id to ``<GROUP>:sink_runs:<workflow id>`` with a
redis-py client of its own, before it returns: what survives the kill, so the test can
tell how many times each workflow's sink was queued (distinct task ids) and run. Each
run of a ``part`` appends its task id to ``<GROUP>:part_runs:<workflow id>:<step>`` too.

With ``TASKRUNNER_TEST_KILL_AT=call:applied:step`` (tests/_workflow_kills.py's
``parse_point``) the runner reaches the store through a link that SIGKILLs this process
at that point: before the call is sent, or (``applied`` 1) once it applied, its reply
never acted on; ``run`` as the call kills it inside the step's run. The hook lives in
this test app only: the library's path has nothing of it.
"""

from __future__ import annotations

import os
import random
import signal
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import redis
import trio

from taskrunner import TaskContext, TaskRunner, TaskRunnerConfig
from taskrunner.backends import Backend
from taskrunner.backends.redis import RedisBackend

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from _workflow_kills import RUN, Point, matches, parse_point
from test_workflows import WorkflowLink

T = TypeVar("T")
KILL_AT = "TASKRUNNER_TEST_KILL_AT"

ATTEMPTS = 50
"""Every kill may cost a step a delivery (it was read, then reclaimed): room for all."""


def die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


class SigkillLink(WorkflowLink):
    """A link that SIGKILLs this process at ``point``."""

    def __init__(self, backend: Backend, point: Point) -> None:
        super().__init__(backend)  # type: ignore[arg-type]
        self.point = point

    async def _through(self, name: str, call: Callable[[], Awaitable[T]]) -> T:
        if matches(self.point, name, call, None, applied=False):
            die()
        result = await super()._through(name, call)
        if matches(self.point, name, call, result, applied=True):
            die()
        return result


def tasks(runner: TaskRunner, side: redis.Redis | None, point: Point | None = None) -> None:
    group = runner.config.consumer_group

    def ran(ctx: TaskContext) -> None:
        if point is not None and point.call == RUN and point.step == ctx.step:
            die()

    @runner.task("part", max_retry=ATTEMPTS)
    async def part(payload: dict[str, int], ctx: TaskContext) -> int:
        if side is not None:
            side.rpush(f"{group}:part_runs:{ctx.workflow_id}:{ctx.step}", ctx.task_id)
        ran(ctx)
        await trio.sleep(random.uniform(0, 0.3))
        return payload["i"]

    @runner.task("sink", max_retry=ATTEMPTS)
    async def sink(payload: list[int], ctx: TaskContext) -> int:
        if side is not None:
            side.rpush(f"{group}:sink_runs:{ctx.workflow_id}", ctx.task_id)
        ran(ctx)
        await trio.sleep(random.uniform(0, 0.02))
        return sum(payload)


async def serve(url: str, group: str) -> None:
    side = redis.Redis.from_url(url)
    at = os.environ.get(KILL_AT)
    point = parse_point(at) if at else None
    async with RedisBackend.from_url(url) as store:
        config = TaskRunnerConfig(
            consumer_group=group, reclaim_delay=1.0, shutdown_grace=0.0, leader_lease_ttl=2.0
        )
        backend: Any = store if point is None else SigkillLink(store, point)
        runner = TaskRunner(config, backend)
        tasks(runner, side, point)
        await runner.serve()


if __name__ == "__main__":
    trio.run(serve, sys.argv[1], sys.argv[2])
