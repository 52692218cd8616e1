"""The application the CLI tests serve: ``taskrunner worker cli_app:runner``.

Configured from the environment, as a deployment would be:
``TASKRUNNER_TEST_URL`` (required), ``TASKRUNNER_TEST_QUEUE`` and
``TASKRUNNER_TEST_GROUP`` (and ``TASKRUNNER_TEST_RECLAIM_DELAY``, 2 s by default;
``TASKRUNNER_TEST_MAX_RETRY`` and ``TASKRUNNER_TEST_MIN_REPLICAS``, below;
``TASKRUNNER_TEST_SHARDS``, the group's shards, 1 by default).
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
        shards=int(os.environ.get("TASKRUNNER_TEST_SHARDS", "1")),
    ),
    backend,
)

not_a_runner = 42

MAX_RETRY = int(os.environ.get("TASKRUNNER_TEST_MAX_RETRY", "1"))
"""``max_retry`` of ``record``, ``once`` and ``kept`` (1, one attempt, unless set). A test
that kills the master under the fleet sets 3: a run cut off by the crash (its own write
fails, or its outcome is lost with the master) must run again, as ``stamp``'s does, for
"every acknowledged dispatch ran" to be about the dispatches."""

MIN_REPLICAS = int(os.environ.get("TASKRUNNER_TEST_MIN_REPLICAS", "0"))
"""When set, every task's side effect is written with ``WAIT <n>`` in the same pipeline,
and a write fewer replicas confirmed fails the run (which then runs again): as durable as
a dispatch with ``min_replicas=<n>``, so that after a SIGKILL of the master a missing
side effect means a lost dispatch, not a write of the task's own that was never
replicated."""

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


async def push(key: str, value: str) -> None:
    """``RPUSH key value``, replicated to :data:`MIN_REPLICAS` replicas when that is set."""
    if not MIN_REPLICAS:
        await backend.client.execute("RPUSH", key, value)
        return
    _, confirmed = await backend.client.pipeline(
        [("RPUSH", key, value), ("WAIT", MIN_REPLICAS, 1000)]
    )
    if not isinstance(confirmed, int) or confirmed < MIN_REPLICAS:
        raise RuntimeError(f"side effect not replicated: WAIT counted {confirmed!r}")


@runner.task(name="record", max_retry=MAX_RETRY)
async def record(payload: Any) -> None:
    await push(DONE, json.dumps(payload))


@runner.task(name="slow")
async def slow(payload: dict[str, Any]) -> None:
    await trio.sleep(payload["seconds"])
    await backend.client.execute("RPUSH", DONE, json.dumps(payload))


@runner.task(name="once", unique=True, unique_for=60.0, max_retry=MAX_RETRY)
async def once(payload: Any) -> None:
    await push(DONE, json.dumps(payload))


@runner.task(name="stamp", max_retry=3)  # a run cut off by SIGKILL runs again
async def stamp(payload: dict[str, Any]) -> None:
    started = time.time()
    await trio.sleep(payload.get("work", 0))  # recorded only once the work is done
    line = f"{payload['index']} {payload['due']!r} {started!r} {os.getpid()}"
    await push(RAN, line)


@attrs.frozen
class Point:
    x: int
    y: int


@runner.task(name="point")
async def point(payload: Point) -> None:
    await backend.client.execute("RPUSH", DONE, json.dumps([payload.x, payload.y]))


@runner.task(name="kept", keep_result=60.0, max_retry=MAX_RETRY)
async def kept(payload: dict[str, Any]) -> dict[str, Any]:
    if payload.get("fail"):
        raise ValueError(f"asked to fail: {payload['fail']}")
    return {"doubled": payload["n"] * 2}
