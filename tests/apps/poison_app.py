"""The application of ``tests/test_poison_fleet.py``: tasks that kill their process.

``taskrunner worker poison_app:runner``, configured from the environment as
``cli_app`` is (``TASKRUNNER_TEST_URL``, ``TASKRUNNER_TEST_QUEUE``). Timings are
short (reclaim after 1 s) so a killed worker's messages come back quickly.

- ``steady`` pushes its payload to ``<queue>:done``; ``max_retry=5``, so the
  deaths of the workers it happened to share a process with do not fail it;
- ``die_running`` ends the process at once (``os._exit``, as a segfault would:
  no cleanup, no ack) when its payload says ``{"die": true}``;
- ``die_structuring`` takes a typed payload whose validator SIGKILLs the
  process while the payload is structured (decoded), before the action runs.

Both killers allow two attempts.
"""

from __future__ import annotations

import json
import os
import signal
from typing import Any

import attrs

from taskrunner import TaskRunner, TaskRunnerConfig
from taskrunner.backends.redis import RedisBackend

URL = os.environ["TASKRUNNER_TEST_URL"]
QUEUE = os.environ.get("TASKRUNNER_TEST_QUEUE", "tasks")
DONE = f"{QUEUE}:done"

backend = RedisBackend.from_url(URL, queue=QUEUE)
runner = TaskRunner(
    TaskRunnerConfig(
        consumer_group="poison",
        num_workers=4,
        reclaim_delay=1.0,
        block_duration=0.1,
        leader_lease_ttl=1.0,
        shutdown_grace=5.0,
    ),
    backend,
)


@runner.task(name="steady", max_retry=5)
async def steady(payload: Any) -> None:
    await backend.client.execute("RPUSH", DONE, json.dumps(payload))


@runner.task(name="die_running", max_retry=2)
async def die_running(payload: dict[str, Any]) -> None:
    if payload.get("die"):
        os._exit(1)


def _kill_if(instance: Any, attribute: Any, value: bool) -> None:
    if value:
        os.kill(os.getpid(), signal.SIGKILL)


@attrs.frozen
class Victim:
    die: bool = attrs.field(default=False, validator=_kill_if)


@runner.task(name="die_structuring", max_retry=2)
async def die_structuring(payload: Victim) -> None:
    return None
