"""desired_instances on a real server: a serving leader publishes it, and admin, ``stats``,
the Prometheus collector, ``list_keys`` and ``flush`` see it."""

from __future__ import annotations

import re
from typing import Any

import trio

from taskrunner import TaskRunner, TaskRunnerConfig, _keys, admin
from taskrunner._fleet.tuning import tuning_ttl
from taskrunner.backends import KeyKind
from taskrunner.backends.redis import RedisBackend
from taskrunner.cli import stats
from taskrunner.prometheus import RunnerCollector
from taskrunner.testing import sync_command

GROUP = "auto"


async def test_published_by_the_leader_and_read_back(redis_url: str) -> None:
    async with RedisBackend.from_url(redis_url) as backend:
        runner = TaskRunner(
            TaskRunnerConfig(
                consumer_group=GROUP,
                host="h1",
                num_workers=2,
                target_wait=0.5,
                long_queue_threshold=0.4,  # a tick every 0.2 s
                scale_down_hold=600.0,
                block_duration=0.1,
                leader_lease_ttl=1.0,
                shutdown_grace=1.0,
            ),
            backend,
        )

        @runner.task()
        async def work(payload: Any) -> None:
            await trio.sleep(0.2)

        await runner.dispatch_many("work", [None] * 80)
        async with trio.open_nursery() as nursery:
            await nursery.start(runner.serve)
            # Once timings reach the hash (a second): 0.2 s x ~70 / 2 slots is far over
            # 0.5 s, so one live instance asks for its growth bound, max(2, 1 + 4) = 5,
            # and keeps it (the hold is longer than the test).
            with trio.fail_after(20):
                while await admin.desired_instances(backend, GROUP) != 5:  # noqa: ASYNC110
                    await trio.sleep(0.05)
            doc = await stats.collect(backend, GROUP, None)
            collector = RunnerCollector(runner)
            await collector.refresh()
            gauge = [
                sample.value
                for family in collector.collect()
                if family.name == "taskrunner_desired_instances"
                for sample in family.samples
            ]
            keys = {k.name: k for k in await admin.list_keys(backend, GROUP)}
            nursery.cancel_scope.cancel()
        collector.close()

        assert doc["desired_instances"] == 5
        assert re.search(r"autoscale: 5 instance\(s\) desired, 1 live", stats.render(doc))
        assert gauge == [5.0]
        key = keys[_keys.desired_instances(GROUP)]
        assert (key.kind, key.type, key.size) == (KeyKind.DESIRED_INSTANCES, "string", 1)
        assert key.ttl is not None
        assert 0 < key.ttl <= tuning_ttl(0.4)
        port = int(redis_url.rsplit(":", 1)[1].split("/", 1)[0])
        assert sync_command(port, "GET", _keys.desired_instances(GROUP)) == b"5"

        deleted = await admin.flush(backend, GROUP, confirm=True)
        assert _keys.desired_instances(GROUP) in deleted
        assert await admin.desired_instances(backend, GROUP) is None


async def test_stats_says_when_nothing_is_published(redis_url: str) -> None:
    async with RedisBackend.from_url(redis_url) as backend:
        await backend.add(GROUP, [b"x"])
        doc = await stats.collect(backend, GROUP, None)
    assert doc["desired_instances"] is None
    assert "autoscale: none published (target_wait off)" in stats.render(doc)
