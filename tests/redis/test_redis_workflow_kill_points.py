"""tests/test_workflow_kill_points.py's crashes at each named point of a step's life, on a
real server (in process: the runner crashed is one of this process's, its link cut):
every workflow ends with its result, every step counted and queued once, the fan-in
counted by lua/finish.lua. tests/redis/test_redis_workflow_kills.py SIGKILLs runner
processes at these points."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from taskrunner.backends.redis import RedisBackend

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from _workflow_kills import CANCEL_POINTS, POINTS, Point
from test_workflow_kill_points import cancel_with_crash, crash_at

pytestmark = pytest.mark.slow

CONFIG: dict[str, Any] = {
    "reclaim_delay": 1.0,
    "shutdown_grace": 0.0,
    "block_duration": 0.2,
    "leader_lease_ttl": 2.0,
}


@pytest.fixture
async def backend(redis_url: str) -> AsyncIterator[RedisBackend]:
    async with RedisBackend.from_url(redis_url) as store:
        yield store


@pytest.mark.parametrize("point", POINTS, ids=lambda p: p.name)
async def test_a_crash_at_each_point_of_a_step_loses_and_repeats_nothing(
    backend: RedisBackend, point: Point
) -> None:
    await crash_at(backend, point, CONFIG)


@pytest.mark.parametrize("point", CANCEL_POINTS, ids=lambda p: p.name)
async def test_a_crash_in_a_cancel_still_cancels_every_workflow(
    backend: RedisBackend, point: Point
) -> None:
    await cancel_with_crash(backend, point, CONFIG)
