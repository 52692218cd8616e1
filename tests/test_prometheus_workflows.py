"""Prometheus counts workflows by outcome: each end counted once, by the backend, in the
step that ends it (MemoryBackend under MockClock, and Redis in tests/redis)."""

from __future__ import annotations

import trio
import trio.testing
from _fleet import serving
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import CollectorRegistry
from test_workflows import runner_with_tasks

from taskrunner import TaskRunner, Workflow, WorkflowCancelled, WorkflowFailed, chain
from taskrunner.backends.memory import MemoryBackend
from taskrunner.prometheus import RunnerCollector


def workflow_counters(collector: RunnerCollector, group: str) -> dict[str, float]:
    registry = CollectorRegistry()
    registry.register(collector)
    exposition = generate_latest(registry).decode()
    return {
        sample.name: sample.value
        for family in text_string_to_metric_families(exposition)
        for sample in family.samples
        if sample.name.startswith("taskrunner_workflows_") and sample.labels == {"group": group}
    }


async def end_one_of_each(runner: TaskRunner) -> None:
    """Two workflows succeed, one fails, one is cancelled (twice: counted once)."""
    for n in (1, 2):
        wf = await runner.dispatch_workflow(
            chain(runner.step("resize", {"id": n}), runner.step("upload"))
        )
        assert await wf.result(timeout=60) == f"uploaded {n}"
    wf = await runner.dispatch_workflow(Workflow("bad").step("a", "boom", {}))
    try:
        await wf.result(timeout=60)
    except WorkflowFailed:
        pass
    else:  # pragma: no cover - the failure is the point
        raise AssertionError("the workflow should have failed")
    wf = await runner.dispatch_workflow(Workflow("long").step("a", "slow", {}))
    assert await wf.cancel()
    assert not await wf.cancel()
    try:
        await wf.result(timeout=60)
    except WorkflowCancelled:
        pass


async def test_workflows_are_counted_by_outcome(autojump_clock: trio.testing.MockClock) -> None:
    runner, _ = runner_with_tasks(MemoryBackend())
    group = runner.config.consumer_group
    collector = RunnerCollector(runner)
    # No snapshot yet: the families exist, without samples.
    assert workflow_counters(collector, group) == {}
    async with serving(runner):
        await collector.refresh()
        assert workflow_counters(collector, group) == {
            "taskrunner_workflows_succeeded_total": 0,
            "taskrunner_workflows_failed_total": 0,
            "taskrunner_workflows_cancelled_total": 0,
        }
        await end_one_of_each(runner)
        await collector.refresh()
    assert workflow_counters(collector, group) == {
        "taskrunner_workflows_succeeded_total": 2,
        "taskrunner_workflows_failed_total": 1,
        "taskrunner_workflows_cancelled_total": 1,
    }
    collector.close()


async def test_every_runner_of_the_group_exports_the_groups_count(
    autojump_clock: trio.testing.MockClock,
) -> None:
    backend = MemoryBackend()
    first, _ = runner_with_tasks(backend)
    second, _ = runner_with_tasks(backend, consumer_group=first.config.consumer_group)
    async with serving(first):
        await end_one_of_each(first)
    collector = RunnerCollector(second)
    await collector.refresh()
    counts = workflow_counters(collector, first.config.consumer_group)
    assert counts["taskrunner_workflows_succeeded_total"] == 2
    assert counts["taskrunner_workflows_cancelled_total"] == 1
    collector.close()
