"""The application the CLI tests serve: ``taskrunner worker cli_app:runner``.

Configured from the environment, as a deployment would be:
``TASKRUNNER_TEST_URL`` (required), ``TASKRUNNER_TEST_QUEUE`` and
``TASKRUNNER_TEST_GROUP``. Timings are short so the tests run in seconds.
Every task leaves a side effect in Redis the tests can check: ``record``
pushes its payload to ``<queue>:done``; ``stamp`` (the fleet test's delayed
task) sleeps ``work`` seconds, then pushes ``"<index> <due> <started_at> <pid>"`` to
``<queue>:ran``.
"""

from __future__ import annotations

import json
import os
import time
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
        reclaim_delay=2.0,
        block_duration=0.1,
        leader_lease_ttl=1.0,
        delayed_poll_interval=0.5,
        shutdown_grace=10.0,
    ),
    backend,
)

not_a_runner = 42


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
