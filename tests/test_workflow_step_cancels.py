"""A step taken off its queue by a cancel is kept ``CANCELLED`` under its own task id,
as a plain task that keeps results is (a step keeps its result for its workflow's
keep): ``runner.cancel`` of a queued or a delayed step, and the cascade of
``wf.cancel()`` and of a failure under ``on_failure="fail"``. Its workflow records it
cancelled too. On MemoryBackend only: Redis does not keep it yet (docs/workflows.md).
"""

from __future__ import annotations

from typing import Any

import pytest
import trio
import trio.testing
from _fleet import serving, wait_until
from test_workflows import runner_with_tasks

from taskrunner import (
    StepState,
    TaskState,
    Workflow,
    WorkflowCancelled,
    WorkflowFailed,
    chain,
)
from taskrunner.backends import Backend
from taskrunner.backends.memory import MemoryBackend

IDLE = "idle"
"""A queue no runner here reads: a step on it stays queued."""


async def _root(wf: Any, step: str) -> str:
    status = await wf.status()
    assert status is not None
    task_id = next(s.task_id for s in status.steps if s.id == step)
    assert task_id is not None
    return str(task_id)


async def _scheduled(runner: Any, task_id: str) -> bool:
    info = await runner.get_task(task_id)
    return info is not None and info.state is TaskState.SCHEDULED


async def _assert_kept_cancelled(runner: Any, wf: Any, step: str, task_id: str) -> None:
    status = await wf.status()
    assert status is not None
    assert next(s.state for s in status.steps if s.id == step) is StepState.CANCELLED
    info = await runner.get_task(task_id)
    assert info is not None, f"step {step!r} ({task_id}) kept nothing under its task id"
    assert info.state is TaskState.CANCELLED
    assert info.task_name == next(s.task for s in status.steps if s.id == step)


async def queued_step_cancelled(backend: Backend, group: str) -> None:
    runner, runs = runner_with_tasks(backend, consumer_group=group)
    wf = await runner.dispatch_workflow(
        chain(runner.step("fetch", {"url": "a"}), runner.step("upload"))
    )
    task_id = await _root(wf, "fetch")
    assert await runner.cancel(task_id)
    with pytest.raises(WorkflowFailed):
        await wf.result(timeout=5)
    await _assert_kept_cancelled(runner, wf, "fetch", task_id)
    assert runs == {}


async def delayed_step_cancelled(backend: Backend, group: str) -> None:
    runner, runs = runner_with_tasks(backend, consumer_group=group)
    async with serving(runner):
        wf = await runner.dispatch_workflow(
            chain(runner.step("flaky", id="f"), runner.step("upload"))
        )
        await wait_until(lambda: runs["flaky"] == 1, limit=30)
        task_id = await _root(wf, "f")
        with trio.fail_after(10):  # its retry waits in the delayed set for 600 s
            while not await _scheduled(runner, task_id):  # noqa: ASYNC110
                await trio.sleep(0.05)
        assert await runner.cancel(task_id)
        with pytest.raises(WorkflowFailed):
            await wf.result(timeout=5)
    await _assert_kept_cancelled(runner, wf, "f", task_id)


async def workflow_cancel_cascades(backend: Backend, group: str) -> None:
    runner, _ = runner_with_tasks(backend, consumer_group=group)
    wf = await runner.dispatch_workflow(
        chain(runner.step("fetch", {"url": "a"}), runner.step("upload"))
    )
    task_id = await _root(wf, "fetch")
    assert await wf.cancel()
    with pytest.raises(WorkflowCancelled):
        await wf.result(timeout=5)
    await _assert_kept_cancelled(runner, wf, "fetch", task_id)


async def failure_cascades(backend: Backend, group: str) -> None:
    runner, runs = runner_with_tasks(backend, consumer_group=group)
    dag = (
        Workflow("w")
        .step("boom", "boom")
        .step("idle", "fetch", {"url": "a"}, queue=IDLE)
        .step("after", "echo", after=["boom", "idle"])
    )
    # Stream ids are unique per stream only: in memory each stream counts from 0-1, so
    # the idle step's id would be boom's (whose kept failure get_task would find). One
    # entry ahead of it on IDLE keeps their ids apart.
    await runner.dispatch("fetch", {"url": "ahead"}, queue=IDLE)
    async with serving(runner):  # it reads its own queue, never IDLE
        wf = await runner.dispatch_workflow(dag)
        task_id = await _root(wf, "idle")
        with pytest.raises(WorkflowFailed) as caught:
            await wf.result(timeout=30)
    assert caught.value.step == "boom"
    await _assert_kept_cancelled(runner, wf, "idle", task_id)
    assert await backend.length(group, queue=IDLE) == 1  # the entry ahead, alone
    assert runs == {"boom": 1}


SCENARIOS = [
    queued_step_cancelled,
    delayed_step_cancelled,
    workflow_cancel_cascades,
    failure_cascades,
]


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: s.__name__)
async def test_a_step_cancelled_off_its_queue_is_kept_cancelled(
    autojump_clock: trio.testing.MockClock, scenario: Any
) -> None:
    await scenario(MemoryBackend(), "g")
