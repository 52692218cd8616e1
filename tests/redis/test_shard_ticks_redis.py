"""A sharded group's periodic ticks on a real server (issue 27): a fleet of three runners
of 16 shards on a standalone server, and one on a 3-master cluster. Each tick runs once,
in a shard, under a sharded id that ``get_task`` finds from inside the run and out; a
leader whose record of a tick is lost after its add in the shard (a second add of that
tick, as the next leader's re-fire makes) adds nothing. tests/test_shard_ticks.py runs
the same on MemoryBackend with MockClock, with a leader dying between the two steps."""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterator

import pytest
from test_shard_serve_redis import fleet, new_group, wait_until

from taskrunner import TaskContext, TaskRunner, TaskState, _shards
from taskrunner.backends import TickFire
from taskrunner.backends.redis import RedisBackend
from taskrunner.testing import ClusterProcess, running_cluster

SHARDS = 16


async def check_ticks(url: str, count: int) -> None:
    """``count`` runners of a new sharded group fire ``beat`` every second: each tick runs
    once, in a shard, and is found by its id inside the run and out."""
    group = new_group()
    seen: dict[str, TaskState] = {}
    ticks: list[float] = []

    def define(runner: TaskRunner) -> None:
        @runner.task(name="beat", keep_result=60.0)
        async def beat(payload: None, ctx: TaskContext) -> None:
            info = await runner.get_task(ctx.task_id)
            assert info is not None, ctx.task_id
            seen[ctx.task_id] = info.state
            assert ctx.tick is not None
            ticks.append(ctx.tick)

        runner.add_schedule("beat", task="beat", every=1)

    async with fleet(url, group, define, count=count) as serving:
        await wait_until(lambda: len(ticks) >= 6)
        for task_id in list(seen):
            info = await serving[0].get_task(task_id)
            assert info is not None, task_id
    assert len(set(ticks)) == len(ticks), f"a tick ran twice: {Counter(ticks)}"
    assert set(seen.values()) == {TaskState.RUNNING}
    shards = {_shards.parse_task_id(task_id, SHARDS) is not None for task_id in seen}
    assert shards == {True}, f"every run has a sharded id: {sorted(seen)}"
    used = {task_id.partition(".")[0] for task_id in seen}
    assert len(used) >= 3, f"the ticks spread over the shards: {used}"


async def test_ticks_run_once_each_in_the_shards_on_a_standalone_server(redis_url: str) -> None:
    await check_ticks(redis_url, 3)


async def test_a_second_add_of_a_tick_adds_nothing(redis_url: str) -> None:
    """The re-fire of a tick whose record was lost: the shard gives back the id."""
    async with RedisBackend.from_url(redis_url, key_layout="cluster") as backend:
        group = new_group()
        tag = _shards.shard_tag(group, 5, SHARDS)
        fire = TickFire(schedule="beat", tick=1764636800.25, message=b'{"task_name":"beat"}')
        first = await backend.add_tick(tag, fire)
        assert first is not None
        assert await backend.add_tick(tag, fire) == first
        assert await backend.length(tag) == 1


@pytest.fixture(scope="module")
def cluster() -> Iterator[ClusterProcess]:
    with running_cluster(os.environ.get("TASKRUNNER_TEST_SERVER", "auto")) as running:
        yield running


async def test_ticks_run_once_each_in_the_shards_on_a_cluster(cluster: ClusterProcess) -> None:
    await check_ticks(cluster.url, 1)
