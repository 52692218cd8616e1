"""Workflows counted by outcome on a real server: ``finish.lua`` counts each end in
``taskrunner:<group>:workflow_ends``, in the step that ends it, in both key layouts."""

from __future__ import annotations

import sys
import uuid
from pathlib import Path

import pytest
from _fleet import serving

from taskrunner.backends.redis import RedisBackend
from taskrunner.prometheus import RunnerCollector
from taskrunner.testing import sync_command

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from test_prometheus_workflows import end_one_of_each, workflow_counters
from test_workflows import runner_with_tasks


@pytest.mark.parametrize("layout", ["go", "cluster"])
async def test_workflow_ends_are_counted_once_in_the_groups_hash(
    redis_url: str, layout: str
) -> None:
    group = f"wf-{uuid.uuid4().hex[:8]}"
    async with RedisBackend.from_url(redis_url, key_layout=layout) as backend:
        runner, _ = runner_with_tasks(backend, consumer_group=group, key_layout=layout)
        async with serving(runner):
            await end_one_of_each(runner)
        assert await backend.workflow_ends(group) == {"succeeded": 2, "failed": 1, "cancelled": 1}
        collector = RunnerCollector(runner)
        await collector.refresh()
        assert workflow_counters(collector, group) == {
            "taskrunner_workflows_succeeded_total": 2,
            "taskrunner_workflows_failed_total": 1,
            "taskrunner_workflows_cancelled_total": 1,
        }
        collector.close()
    key = (
        f"taskrunner:{{{group}}}:workflow_ends"
        if layout == "cluster"
        else (f"taskrunner:{group}:workflow_ends")
    )
    port = int(redis_url.rsplit(":", 1)[1].split("/")[0])
    assert sync_command(port, "HGET", key, "succeeded") == b"2"
