"""On a real server: a producer follows a workflow (``producer.workflow(id)``: its
``result``, ``status`` and ``cancel``), a producer's cancel of a queued step counts it
in its workflow as ``runner.cancel`` does, and ``wf.status()`` shows a step's progress."""

from __future__ import annotations

import asyncio
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
import trio
from _fleet import serving

from taskrunner import StepState, WorkflowFailed, WorkflowState, chain, chord, group
from taskrunner.backends.redis import RedisBackend
from taskrunner.errors import ResultTimeout
from taskrunner.producer import AsyncProducer, Producer

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from test_workflow_progress import check_step_progress, progress_runner
from test_workflows import runner_with_tasks


def group_name() -> str:
    return f"wfr-{uuid.uuid4().hex[:8]}"


async def test_status_shows_a_running_steps_progress_on_redis(redis_url: str) -> None:
    async with RedisBackend.from_url(redis_url) as backend:
        runner, release = progress_runner(backend, consumer_group=group_name())
        await check_step_progress(runner, release)


def follow_sync(url: str, name: str) -> tuple[Any, Any, Any]:
    with Producer.from_url(url, consumer_group=name) as producer:
        wf = producer.workflow(
            producer.dispatch_workflow(
                chain(producer.step("resize", {"id": 7}), producer.step("upload"))
            )
        )
        return str(wf), wf.result(timeout=30), wf.status()


async def follow_async(url: str, name: str) -> tuple[Any, Any]:
    async with AsyncProducer.from_url(url, consumer_group=name) as producer:
        wf = producer.workflow(
            await producer.dispatch_workflow(
                chord(group(producer.step("fetch", {"url": u}) for u in ["a", "bbb"]),
                      producer.step("merge"))
            )
        )  # fmt: skip
        return await wf.result(timeout=30), await wf.status()


async def test_a_producer_follows_its_workflow_to_its_result(redis_url: str) -> None:
    name = group_name()
    async with RedisBackend.from_url(redis_url) as backend:
        runner, _ = runner_with_tasks(backend, consumer_group=name)
        async with serving(runner):
            workflow_id, uploaded, status = await trio.to_thread.run_sync(
                follow_sync, redis_url, name
            )
            merged, chord_status = await trio.to_thread.run_sync(
                asyncio.run, follow_async(redis_url, name)
            )
        assert uploaded == "uploaded 7"
        assert status.state is WorkflowState.SUCCEEDED
        assert status.counts == {"succeeded": 2}
        assert merged["payload"] == [1, 3]
        assert chord_status.state is WorkflowState.SUCCEEDED
        # The runner's handle reads the same record.
        mine = await runner.get_workflow(workflow_id).status()
        assert mine is not None
        assert mine.steps == status.steps


def cancel_from_sync(url: str, name: str) -> tuple[Any, ...]:
    with Producer.from_url(url, consumer_group=name) as producer:
        wf = producer.workflow(
            producer.dispatch_workflow(
                chord(group(producer.step("fetch", {"url": u}) for u in ["a", "bb"]),
                      producer.step("merge"))
            )
        )  # fmt: skip
        with pytest.raises(ResultTimeout):
            wf.result(timeout=0.2)  # nothing serves it yet
        before = wf.status()
        assert before is not None
        task_id = next(s.task_id for s in before.steps if s.id == "fetch.1")
        assert task_id is not None
        cancelled = producer.cancel(task_id)
        after = wf.status()
        with pytest.raises(WorkflowFailed) as failed:
            wf.result(timeout=5)
        return cancelled, after, failed.value, producer.cancel(task_id)


async def test_a_producers_cancel_of_a_queued_step_counts_it(redis_url: str) -> None:
    name = group_name()
    cancelled, after, failed, again = await trio.to_thread.run_sync(
        cancel_from_sync, redis_url, name
    )
    assert cancelled is True
    assert again is False, "the step is over: nothing more to cancel"
    steps = {s.id: s.state for s in after.steps}
    assert steps["fetch.1"] is StepState.CANCELLED, "counted where it was removed"
    assert after.state is WorkflowState.FAILED  # on_failure="fail": the rest cancelled
    assert after.failed_step == "fetch.1"
    assert after.reason == "", "not the leader's uncounted-step verdict"
    assert steps["fetch.2"] is StepState.CANCELLED
    assert steps["merge"] is StepState.CANCELLED
    assert (failed.step, failed.error_type) == ("fetch.1", "TaskCancelled")


async def cancel_from_async(url: str, name: str) -> tuple[Any, ...]:
    async with AsyncProducer.from_url(url, consumer_group=name) as producer:
        workflow_id = await producer.dispatch_workflow(
            chain(producer.step("fetch", {"url": "a"}, on_failure="continue"),
                  producer.step("merge"))
        )  # fmt: skip
        wf = producer.workflow(workflow_id)
        before = await wf.status()
        assert before is not None
        cancelled = await producer.cancel(str(before.steps[0].task_id))
        return workflow_id, cancelled, await wf.status()


async def test_an_async_producers_cancel_of_a_step_applies_its_policy(redis_url: str) -> None:
    name = group_name()
    async with RedisBackend.from_url(redis_url) as backend:
        runner, runs = runner_with_tasks(backend, consumer_group=name)
        workflow_id, cancelled, after = await trio.to_thread.run_sync(
            asyncio.run, cancel_from_async(redis_url, name)
        )
        assert cancelled is True
        assert [s.state for s in after.steps] == [StepState.CANCELLED, StepState.QUEUED]
        async with serving(runner):  # "continue": merge runs, given a StepFailed
            merged = await runner.get_workflow(workflow_id).result(timeout=30)
    assert runs["fetch"] == 0
    assert merged["payload"]["type"] == "TaskCancelled"


async def test_a_producer_cancels_a_workflow(redis_url: str) -> None:
    name = group_name()

    def run() -> tuple[bool, bool, Any]:
        with Producer.from_url(redis_url, consumer_group=name) as producer:
            wf = producer.workflow(
                producer.dispatch_workflow(
                    chain(producer.step("resize", {"id": 1}), producer.step("upload"))
                )
            )
            return wf.cancel(), wf.cancel(), wf.status()

    first, second, status = await trio.to_thread.run_sync(run)
    assert (first, second) == (True, False)
    assert status.state is WorkflowState.CANCELLED
    assert status.counts == {"cancelled": 2}


async def test_a_runners_cancel_of_a_queued_step_hands_a_step_failed_on(redis_url: str) -> None:
    """The record keeps a cancelled document for a step cancelled off its queue, so a
    dependent under "continue" receives StepFailed(TaskCancelled), not None."""
    name = group_name()
    async with RedisBackend.from_url(redis_url) as backend:
        runner, runs = runner_with_tasks(backend, consumer_group=name)
        wf = await runner.dispatch_workflow(
            chain(runner.step("fetch", {"url": "a"}, on_failure="continue"), runner.step("merge"))
        )
        status = await wf.status()
        assert status is not None
        assert await runner.cancel(str(status.steps[0].task_id))
        async with serving(runner):
            merged = await wf.result(timeout=30)
    assert runs["fetch"] == 0
    assert merged["payload"]["type"] == "TaskCancelled"
