"""The application the CLI tests serve: ``taskrunner worker cli_app:runner``.

Configured from the environment, as a deployment would be:
``TASKRUNNER_TEST_URL`` (required), ``TASKRUNNER_TEST_QUEUE`` and
``TASKRUNNER_TEST_GROUP`` (and ``TASKRUNNER_TEST_RECLAIM_DELAY``, 2 s by default).
Timings are short so the tests run in seconds.
Every task leaves a side effect in Redis the tests can check: ``record``
pushes its payload to ``<queue>:done``; ``stamp`` (the fleet test's delayed
task) sleeps ``work`` seconds, then pushes ``"<index> <due> <started_at> <pid>"`` to
``<queue>:ran``.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import AsyncIterator
from typing import Any

import attrs
import trio

from taskrunner import TaskRunner, TaskRunnerConfig
from taskrunner.backends.redis import RedisBackend

URL = os.environ["TASKRUNNER_TEST_URL"]
QUEUE = os.environ.get("TASKRUNNER_TEST_QUEUE", "tasks")
GROUP = os.environ.get("TASKRUNNER_TEST_GROUP", "cli")
DONE = f"{QUEUE}:done"
RAN = f"{QUEUE}:ran"

backend = RedisBackend.from_url(URL, queue=QUEUE)
runner = TaskRunner(
    TaskRunnerConfig(
        consumer_group=GROUP,
        num_workers=4,
        reclaim_delay=float(os.environ.get("TASKRUNNER_TEST_RECLAIM_DELAY", "2.0")),
        block_duration=0.1,
        leader_lease_ttl=1.0,
        delayed_poll_interval=0.5,
        shutdown_grace=10.0,
    ),
    backend,
)

not_a_runner = 42

LEADER_LOG = os.environ.get("TASKRUNNER_TEST_LEADER_LOG")
"""When set, a file prefix: the process samples ``runner.is_leader`` every 5 ms and
writes each term to ``<prefix>-<pid>`` as ``first_true last_true`` wall times (the
Sentinel fleet test checks that no two instances' terms overlap)."""

if LEADER_LOG:

    @runner.lifespan
    @contextlib.asynccontextmanager
    async def sample_leadership(runner: TaskRunner) -> AsyncIterator[None]:
        async def sample(path: str) -> None:
            first: float | None = None
            last = 0.0
            with open(path, "a") as out:  # noqa: ASYNC230 - a few short writes per term
                try:
                    while True:
                        now = time.time()
                        if runner.is_leader:
                            first = now if first is None else first
                            last = now
                        elif first is not None:
                            out.write(f"{first!r} {last!r}\n")
                            out.flush()
                            first = None
                        await trio.sleep(0.005)
                finally:
                    if first is not None:  # leading when serve stopped
                        out.write(f"{first!r} {last!r}\n")

        async with trio.open_nursery() as nursery:
            nursery.start_soon(sample, f"{LEADER_LOG}-{os.getpid()}")
            yield
            nursery.cancel_scope.cancel()


@runner.task(name="record")
async def record(payload: Any) -> None:
    await backend.client.execute("RPUSH", DONE, json.dumps(payload))


@runner.task(name="slow")
async def slow(payload: dict[str, Any]) -> None:
    await trio.sleep(payload["seconds"])
    await backend.client.execute("RPUSH", DONE, json.dumps(payload))


@runner.task(name="once", unique=True, unique_for=60.0)
async def once(payload: Any) -> None:
    await backend.client.execute("RPUSH", DONE, json.dumps(payload))


@runner.task(name="stamp", max_retry=3)  # a run cut off by SIGKILL runs again
async def stamp(payload: dict[str, Any]) -> None:
    started = time.time()
    await trio.sleep(payload.get("work", 0))  # recorded only once the work is done
    line = f"{payload['index']} {payload['due']!r} {started!r} {os.getpid()}"
    await backend.client.execute("RPUSH", RAN, line)


@attrs.frozen
class Point:
    x: int
    y: int


@runner.task(name="point")
async def point(payload: Point) -> None:
    await backend.client.execute("RPUSH", DONE, json.dumps([payload.x, payload.y]))


@runner.task(name="kept", keep_result=60.0)
async def kept(payload: dict[str, Any]) -> dict[str, Any]:
    if payload.get("fail"):
        raise ValueError(f"asked to fail: {payload['fail']}")
    return {"doubled": payload["n"] * 2}
