"""The application the cluster fleet test serves: ``taskrunner worker cluster_app:runner``.

``cli_app``'s runner and tasks (plain, unique, delayed, result-keeping; its
``TASKRUNNER_TEST_LEADER_LOG`` lease sampler), plus the two kinds the cluster
fleet proof also runs: a periodic schedule, ``beat``, every second with every
missed tick caught up (each fire pushes ``"<tick> <pid>"`` to ``<queue>:beats``),
and a rate-limited task, ``limited`` (20 per second, pushes its payload to
``<queue>:limited``; ``cli_app``'s ``MAX_RETRY`` attempts). Both write as
``cli_app``'s tasks do (``cli_app.push``: replicated when ``MIN_REPLICAS`` is set).
Kept out of ``cli_app`` so the CLI tests' listings stay as
they are.
"""

from __future__ import annotations

import json
import os
from typing import Any

from cli_app import MAX_RETRY, QUEUE, push, runner

from taskrunner import RateLimit, TaskContext

BEATS = f"{QUEUE}:beats"
LIMITED = f"{QUEUE}:limited"

__all__ = ["runner"]


@runner.periodic(every=1.0, name="beat", catch_up="all", max_retry=3)
async def beat(payload: None, ctx: TaskContext) -> None:
    assert ctx.tick is not None
    await push(BEATS, f"{ctx.tick!r} {os.getpid()}")


@runner.task(name="limited", rate_limit=RateLimit(20, per=1.0), max_retry=MAX_RETRY)
async def limited(payload: Any) -> None:
    await push(LIMITED, json.dumps(payload))
