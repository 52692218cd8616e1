"""The application the real-server periodic test serves:
``taskrunner worker periodic_app:runner``.

Configured from the environment like ``cli_app`` (``TASKRUNNER_TEST_URL``,
``TASKRUNNER_TEST_QUEUE``, ``TASKRUNNER_TEST_GROUP``), with short timings
(lease TTL 1 s). One schedule, ``beat``, ticks every second and catches up on
every missed tick, so each tick between the first and the last must fire;
each run pushes ``"<tick> <started_at> <pid>"`` to ``<queue>:beats``. Acked
entries stay in the stream (``delete_on_ack=False``): the stream is the test's
record of every fire.
"""

from __future__ import annotations

import os
import time

from taskrunner import TaskContext, TaskRunner, TaskRunnerConfig
from taskrunner.backends.redis import RedisBackend

URL = os.environ["TASKRUNNER_TEST_URL"]
QUEUE = os.environ.get("TASKRUNNER_TEST_QUEUE", "tasks")
GROUP = os.environ.get("TASKRUNNER_TEST_GROUP", "periodic")
BEATS = f"{QUEUE}:beats"

backend = RedisBackend.from_url(URL, queue=QUEUE, delete_on_ack=False)
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


@runner.periodic(every=1.0, name="beat", catch_up="all", max_retry=3)
async def beat(payload: None, ctx: TaskContext) -> None:
    assert ctx.tick is not None
    line = f"{ctx.tick!r} {time.time()!r} {os.getpid()}"
    await backend.client.execute("RPUSH", BEATS, line)
