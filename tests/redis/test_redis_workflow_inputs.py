"""A chain's step carries its one parent's result in its stream entry (lua/finish.lua
adds it when that parent's finish queues it), so the worker reads nothing before the
run; steps with several parents, or whose entry lost the fields (a retry), read them."""

from __future__ import annotations

import sys
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from _fleet import serving

from taskrunner import Backoff, TaskContext, Workflow, chain, chord, group
from taskrunner._wire import encode_result, succeeded
from taskrunner._workflows.keys import workflow_key
from taskrunner.backends import Outcome, StepSources
from taskrunner.backends.redis import RedisBackend

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from test_workflows import runner_with_tasks


class CountingReads(RedisBackend):
    """A RedisBackend that counts the steps whose inputs it reads."""

    reads: list[str]

    async def step_inputs(self, group: str, workflow_id: str, step: str) -> StepSources:
        self.reads.append(step)
        return await super().step_inputs(group, workflow_id, step)


@pytest.fixture
async def backend(redis_url: str) -> AsyncIterator[CountingReads]:
    async with CountingReads.from_url(redis_url) as store:
        assert isinstance(store, CountingReads)
        store.reads = []
        yield store


def group_name() -> str:
    return f"wfin-{uuid.uuid4().hex[:8]}"


async def test_a_chain_reads_no_inputs(backend: CountingReads) -> None:
    runner, _ = runner_with_tasks(backend, consumer_group=group_name())

    @runner.task("add")
    async def add(payload: Any, ctx: TaskContext) -> int:
        return int(payload) + 1 + len(ctx.parents)

    async with serving(runner):
        wf = await runner.dispatch_workflow(
            chain(runner.step("resize", {"id": 7}), runner.step("upload"))
        )
        assert await wf.result(timeout=30) == "uploaded 7"
        # given a payload of its own, a step still receives its parent in ctx.parents
        wf = await runner.dispatch_workflow(
            chain(runner.step("add", 0), runner.step("add"), runner.step("add", 100))
        )
        assert await wf.result(timeout=30) == 100 + 1 + 1
    assert backend.reads == [], "a chain's steps carry their inputs"


async def test_a_step_failed_under_continue_is_carried_as_step_failed(
    backend: CountingReads,
) -> None:
    runner, _ = runner_with_tasks(backend, consumer_group=group_name())
    dag = Workflow("w").step("bad", "boom", on_failure="continue").step("e", "echo", after=["bad"])
    async with serving(runner):
        wf = await runner.dispatch_workflow(dag)
        result = await wf.result(timeout=30)
    # echo got a StepFailed (its result, JSON, holds it as a dict)
    failed = {"step": "bad", "type": "ValueError", "message": "no luck"}
    assert result == {"payload": failed, "parents": {"bad": failed}, "step": "e"}
    assert backend.reads == ["bad"], "a root given no payload reads; e carries its parent"


async def test_a_step_with_several_parents_reads_them(backend: CountingReads) -> None:
    runner, _ = runner_with_tasks(backend, consumer_group=group_name())
    async with serving(runner):
        wf = await runner.dispatch_workflow(
            chord(
                group(runner.step("fetch", {"url": u}) for u in ["a", "bbb"]), runner.step("merge")
            )
        )
        result = await wf.result(timeout=30)
    assert result["payload"] == [1, 3]
    assert backend.reads == ["merge"], "a sink of several parents reads them"


async def test_a_step_whose_entry_carries_nothing_reads_its_inputs(
    backend: CountingReads,
) -> None:
    runner, _ = runner_with_tasks(backend, consumer_group=group_name())
    seen: list[Any] = []

    @runner.task("once_flaky", max_retry=2, retry=Backoff(initial=0.05, factor=1, jitter=0))
    async def once_flaky(payload: Any) -> Any:
        seen.append(payload)
        if len(seen) == 1:
            raise RuntimeError("again")  # retried: its entry is written anew, bare
        return payload

    async with serving(runner):
        wf = await runner.dispatch_workflow(
            chain(runner.step("resize", {"id": 3}), runner.step("once_flaky"))
        )
        assert await wf.result(timeout=30) == {"resized": 3}
    assert seen == [{"resized": 3}, {"resized": 3}]
    assert backend.reads == ["once_flaky"], "the retry read what the first run carried"


async def test_a_chain_steps_finish_queues_its_next_step_in_one_write(redis_url: str) -> None:
    """The finish writes the step's state and result and its next step's state and task
    id together (lua/finish.lua: one HSET), drops the next step's message, and leaves
    the next step's parent count alone (it has one parent, whose finish this is)."""
    name = group_name()
    async with RedisBackend.from_url(redis_url) as backend:
        runner, _ = runner_with_tasks(backend, consumer_group=name)
        wf = await runner.dispatch_workflow(
            chain(runner.step("resize", {"id": 7}), runner.step("upload"), runner.step("upload"))
        )
        [entry] = await backend.read(name, "c1", 10, block=0)
        doc = encode_result(
            succeeded("resize", {"id": 7}, attempts=1, enqueued_at=0, started_at=0, finished_at=1)
        )
        done = Outcome(
            entry_id=entry.id, task_id=entry.id, document=doc, keep=60, notify=60,
            workflow=wf.id, step="resize", step_state="succeeded",
        )  # fmt: skip
        assert await backend.finish(name, [entry.id], [done]) == 1
        [queued] = await backend.read(name, "c1", 10, block=0)
        assert queued.inputs is not None
        assert queued.inputs[1] == doc
        record = await backend._client.execute("HGETALL", workflow_key(name, wf.id))
        it = iter(record)
        fields = {bytes(k).decode(): bytes(v) for k, v in zip(it, it, strict=True)}
        assert fields["s:resize"] == b"succeeded"
        assert fields["r:resize"] == doc
        assert fields["s:upload.1"] == b"queued"
        assert fields["t:upload.1"] == queued.id.encode()
        assert "m:upload.1" not in fields
        assert fields["n:upload.1"] == b"1"  # not counted: only a pending step's is read
        assert fields["s:upload.2"] == b"pending"
        assert "m:upload.2" in fields
        assert fields["left"] == b"2"
