"""``taskrunner inspect WORKFLOW_ID``: the rendering on MemoryBackend under MockClock,
and the command as a subprocess against a real server."""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Callable, Mapping

import trio
import trio.testing
from _fleet import serving
from test_cli import cli, ok
from test_workflows import report, runner_with_tasks

from taskrunner import StepState, Workflow, WorkflowHandle, WorkflowState, admin
from taskrunner.backends.memory import MemoryBackend
from taskrunner.backends.redis import RedisBackend
from taskrunner.cli.workflows import counts_text, render_workflow, workflow_document


def _lines_of(text: str, step: str) -> list[str]:
    return [line for line in text.splitlines() if line.split()[:1] == [step]]


async def test_a_running_workflow_shows_every_step_its_parents_policy_and_error(
    autojump_clock: trio.testing.MockClock,
) -> None:
    backend = MemoryBackend()
    runner, _ = runner_with_tasks(backend)
    dag = (
        Workflow("nightly")
        .step("extract", "echo", {"day": 1})
        .step("probe", "boom", {}, after=["extract"], on_failure="continue")
        .step("load", "slow", {}, after=["extract"])
        .step("mail", "echo", {"to": "ops"}, after=["probe", "load"], on_failure="skip")
    )
    async with serving(runner):
        wf = await runner.dispatch_workflow(dag)
        await _until(wf, lambda counts, state: counts.get("failed") == 1)
        status = await admin.get_workflow(backend, runner.config.consumer_group, wf.id)
        assert status is not None
        text = render_workflow(status)
        await wf.cancel()

    assert text.splitlines()[0] == f"workflow: {wf.id} (nightly)"
    assert "state:    RUNNING" in text
    assert "steps:    4 steps: 1 pending, 1 queued, 1 succeeded, 1 failed" in text
    (extract,) = _lines_of(text, "extract")
    assert extract.split() == ["extract", "echo", "succeeded", "fail", "-", extract.split()[-1]]
    (probe,) = _lines_of(text, "probe")
    assert probe.split()[:5] == ["probe", "boom", "failed", "continue", "extract"]
    # The error of the failed step is on the line under it.
    lines = text.splitlines()
    assert lines[lines.index(probe) + 1].strip() == "error: ValueError: no luck"
    (load,) = _lines_of(text, "load")
    assert load.split()[:5] == ["load", "slow", "queued", "fail", "extract"]
    (mail,) = _lines_of(text, "mail")
    assert mail.split() == ["mail", "echo", "pending", "skip", "probe,", "load", "-"]

    doc = workflow_document(status)
    assert doc["state"] == "running"
    assert doc["counts"] == {"succeeded": 1, "failed": 1, "queued": 1, "pending": 1}
    by_id = {step["id"]: step for step in doc["steps"]}
    assert list(by_id) == ["extract", "probe", "load", "mail"]
    assert by_id["probe"]["error"] == {"type": "ValueError", "message": "no luck"}
    assert by_id["mail"]["after"] == ["probe", "load"]
    assert by_id["mail"]["on_failure"] == "skip"
    assert by_id["mail"]["task_id"] is None
    assert by_id["load"]["task_id"] is not None


async def test_a_failed_workflow_names_the_step_that_ended_it(
    autojump_clock: trio.testing.MockClock,
) -> None:
    backend = MemoryBackend()
    runner, _ = runner_with_tasks(backend)
    dag = Workflow("fragile").step("a", "boom", {}).step("b", "echo", after=["a"])
    async with serving(runner):
        wf = await runner.dispatch_workflow(dag)
        await _until(wf, lambda counts, state: state.final)
        status = await admin.get_workflow(backend, runner.config.consumer_group, wf.id)
    assert status is not None
    assert status.state is WorkflowState.FAILED
    text = render_workflow(status)
    assert "state:    FAILED" in text
    assert "failed:   at step a" in text
    assert _lines_of(text, "b")[0].split()[2] == StepState.CANCELLED.value
    assert await admin.get_workflow(backend, runner.config.consumer_group, "nope") is None


async def _until(
    wf: WorkflowHandle, done: Callable[[Mapping[str, int], WorkflowState], bool]
) -> None:
    with trio.fail_after(600):
        while True:
            status = await wf.status()
            assert status is not None
            if done(status.counts, status.state):
                return
            await trio.sleep(0.05)


def test_counts_read_in_the_order_of_a_steps_life() -> None:
    assert counts_text({"succeeded": 2, "pending": 1}) == "3 steps: 1 pending, 2 succeeded"
    assert counts_text({"cancelled": 1}) == "1 step: 1 cancelled"


def test_inspect_prints_a_workflow_by_its_id(redis_url: str) -> None:
    group = f"wf-{uuid.uuid4().hex[:8]}"

    async def dispatch() -> tuple[str, str]:
        async with RedisBackend.from_url(redis_url) as backend:
            runner, _ = runner_with_tasks(backend, consumer_group=group)
            wf = await runner.dispatch_workflow(report())
            status = await wf.status()
            assert status is not None
            (root,) = (s.task_id for s in status.steps if s.task_id is not None)
            assert root is not None
            return wf.id, root

    workflow_id, root_task = trio.run(dispatch)
    env = dict(os.environ)
    where = ["--url", redis_url, "--group", group]
    human = ok(cli(env, "inspect", workflow_id, *where))
    assert human.splitlines()[0] == f"workflow: {workflow_id} (report)"
    assert "5 steps: 4 pending, 1 queued" in human
    assert _lines_of(human, "extract")[0].split() == [
        "extract", "echo", "queued", "fail", "-", root_task,
    ]  # fmt: skip
    assert _lines_of(human, "mail")[0].split()[3:6] == ["fail", "stats,", "chart"]
    doc = json.loads(ok(cli(env, "inspect", workflow_id, *where, "--json")))
    assert doc["kind"] == "workflow"
    assert [s["id"] for s in doc["steps"]] == ["extract", "clean", "stats", "chart", "mail"]
    # A step's task is still a task to inspect, and an unknown id fails in one line.
    task = json.loads(ok(cli(env, "inspect", root_task, *where, "--json")))
    assert task["state"] == "queued"
    missing = cli(env, "inspect", uuid.uuid4().hex, *where)
    assert missing.returncode == 1
    assert "no task or workflow" in missing.stderr
