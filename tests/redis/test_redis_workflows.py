"""Workflows on a real server: the same scenarios as tests/test_workflows.py, the fan-in
counted by lua/finish.lua in the script that acks each step."""

from __future__ import annotations

import functools
import sys
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio
from _fleet import serving, wait_until

from taskrunner import (
    StepFailed,
    StepState,
    TaskContext,
    Workflow,
    WorkflowCancelled,
    WorkflowFailed,
    WorkflowState,
    chain,
    chord,
    group,
)
from taskrunner._wire import decode_message, encode_result, succeeded
from taskrunner._workflows.graph import compile_graph
from taskrunner.backends import Outcome
from taskrunner.backends.redis import RedisBackend, _workflows

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from test_workflows import report, runner_with_tasks


@pytest.fixture
async def backend(redis_url: str) -> AsyncIterator[RedisBackend]:
    async with RedisBackend.from_url(redis_url) as store:
        yield store


def group_name() -> str:
    return f"wf-{uuid.uuid4().hex[:8]}"


async def test_chain_chord_and_dag(backend: RedisBackend) -> None:
    runner, runs = runner_with_tasks(backend, consumer_group=group_name())
    async with serving(runner):
        wf = await runner.dispatch_workflow(
            chain(runner.step("resize", {"id": 7}), runner.step("upload"))
        )
        assert await wf.result(timeout=30) == "uploaded 7"
        wf = await runner.dispatch_workflow(
            chord(group(runner.step("fetch", {"url": u}) for u in ["a", "bbb", "cc"]),
                  runner.step("merge"))
        )  # fmt: skip
        result = await wf.result(timeout=30)
        assert result["payload"] == [1, 3, 2]
        wf = await runner.dispatch_workflow(report())
        mail = await wf.result(timeout=30)
        status = await wf.status()
    assert mail == {"payload": {"to": "me"}, "parents": {"stats": 2, "chart": 3}, "step": "mail"}
    assert status is not None
    assert status.state is WorkflowState.SUCCEEDED
    assert status.counts == {"succeeded": 5}
    assert runs["merge"] == 1
    assert runs["echo"] == 3


async def test_fail_cancels_running_steps_and_runs_the_handler(backend: RedisBackend) -> None:
    runner, runs = runner_with_tasks(backend, consumer_group=group_name())
    dag = Workflow("w", on_failure=runner.step("echo", id="alert"))
    dag = dag.step("bad", "boom").step("long", "slow").step("m", "merge", after=["bad", "long"])
    async with serving(runner):
        await wait_until(lambda: True)
        wf = await runner.dispatch_workflow(dag)
        with pytest.raises(WorkflowFailed) as caught:
            await wf.result(timeout=30)
        assert caught.value.step == "bad"
        await wait_until(lambda: runs["echo"] == 1, limit=30)

        async def settled() -> dict[str, StepState]:
            status = await wf.status()
            assert status is not None
            return {s.id: s.state for s in status.steps}

        with trio.fail_after(10):
            while (await settled())["long"] is not StepState.CANCELLED:  # noqa: ASYNC110 (a backend read)
                await trio.sleep(0.1)
        states = await settled()
    assert states == {
        "bad": StepState.FAILED,
        "long": StepState.CANCELLED,
        "m": StepState.CANCELLED,
        "alert": StepState.SUCCEEDED,
    }
    assert runs["merge"] == 0


async def test_continue_and_skip(backend: RedisBackend) -> None:
    runner, _ = runner_with_tasks(backend, consumer_group=group_name())
    seen: list[Any] = []

    @runner.task("look")
    async def look(payload: Any, ctx: TaskContext) -> str:
        seen.append((payload, dict(ctx.parents)))
        return "looked"

    dag = (
        Workflow("c")
        .step("bad", "boom", on_failure="continue")
        .step("worse", "boom", on_failure="skip")
        .step("ok", "fetch", {"url": "ab"})
        .step("end", "look", after=["bad", "worse", "ok"])
    )
    async with serving(runner):
        wf = await runner.dispatch_workflow(dag)
        assert await wf.result(timeout=30) == "looked"
    marker = StepFailed("bad", "ValueError", "no luck")
    assert seen == [([marker, 2], {"bad": marker, "ok": 2})]


async def test_cancel_while_queued(backend: RedisBackend) -> None:
    name = group_name()
    runner, runs = runner_with_tasks(backend, consumer_group=name)
    wf = await runner.dispatch_workflow(
        chord(group(runner.step("fetch", {"url": "a"}), runner.step("fetch", {"url": "b"})),
              runner.step("merge"))
    )  # fmt: skip
    assert await backend.length(name) == 2
    assert await wf.cancel()
    assert await backend.length(name) == 0
    assert not await wf.cancel()
    with pytest.raises(WorkflowCancelled):
        await wf.result(timeout=5)
    status = await wf.status()
    assert status is not None
    assert status.counts == {"cancelled": 3}
    assert runs == {}


async def test_cancel_while_running(backend: RedisBackend) -> None:
    runner, runs = runner_with_tasks(backend, consumer_group=group_name())
    async with serving(runner):
        wf = await runner.dispatch_workflow(chain(runner.step("slow"), runner.step("upload")))
        await wait_until(lambda: runs["slow"] == 1, limit=30)
        started = trio.current_time()
        assert await wf.cancel()
        with trio.fail_after(10):
            while True:
                status = await wf.status()
                assert status is not None
                if status.steps[0].state is StepState.CANCELLED:
                    break
                await trio.sleep(0.05)
        assert trio.current_time() - started < 3
    assert runs["upload"] == 0


async def test_a_duplicated_finish_counts_once(backend: RedisBackend) -> None:
    name = group_name()
    runner, _ = runner_with_tasks(backend, consumer_group=name)
    wf = await runner.dispatch_workflow(
        chord(group(runner.step("fetch", {"url": "a"}), runner.step("fetch", {"url": "b"})),
              runner.step("merge"))
    )  # fmt: skip
    entries = await backend.read(name, "c1", 10, block=0)
    assert len(entries) == 2
    doc = encode_result(
        succeeded("fetch", 1, attempts=1, enqueued_at=0, started_at=0, finished_at=1)
    )

    def done(entry_id: str, step: str) -> Outcome:
        return Outcome(
            entry_id=entry_id, task_id=entry_id, document=doc, keep=60, notify=60,
            workflow=wf.id, step=step, step_state="succeeded",
        )  # fmt: skip

    for entry in entries:
        step = decode_message(entry.payload).extras.step  # type: ignore[union-attr]
        assert step is not None
        for _ in range(3):  # every finish reply lost and the finish sent again
            await backend.finish(name, [entry.id], [done(entry.id, step)])
    merges = await backend.read(name, "c1", 10, block=0)
    assert [decode_message(e.payload).task_name for e in merges] == ["merge"]
    assert await backend.read(name, "c1", 10, block=0) == []


async def test_a_batch_without_steps_sends_finish_nothing_more(backend: RedisBackend) -> None:
    """Workflows built but unused cost a plain batch no key and no argument."""
    plain = [Outcome(entry_id="1-0", task_id="1-0", document=b"{}", keep=1, notify=1)]
    assert backend.step_section("g", plain, 7, None) == ([], [])
    step = [attrs.evolve(plain[0], workflow="w", step="s", step_state="succeeded")]
    keys, args = backend.step_section("g", step, 7, None)
    assert args[:1] == ["\0workflows"]
    # delayed set and index, the group's workflow ends, the running workflows' index, the
    # paused set, one stream, the record's three
    assert len(keys) == 5 + 1 + 3
    assert keys[2:5] == [
        "taskrunner:g:workflow_ends",
        "taskrunner:g:workflows",
        "taskrunner:g:paused",
    ]


def test_start_calls_are_one_all_call_up_to_the_chunk_and_parts_then_gos_past_it() -> None:
    """The pure plan the backend and the producers share: the record, the running
    workflows' index, then the streams of the call's roots; the mode at ARGV[8]."""
    dag = (
        Workflow("w")
        .step("a", "fetch", {"url": "a"})
        .step("b", "fetch", {"url": "b"})
        .step("c", "merge", after=["a", "b"])
        .step("d", "upload", after=["c"])
        .step("e", "echo", 1)
    )
    graph = compile_graph(dag)
    ids = ["a", "b", "c", "d", "e"]
    messages = {i: i.encode() for i in ids}
    queues: dict[str, str | None] = {i: None for i in ids}
    streams = {i: "s:own" for i in ids} | {"e": "s:other"}
    plan = functools.partial(
        _workflows.start_workflow_calls, "rec", "idx", graph, messages, queues, streams, 60.0, 1.5
    )
    ((keys, args),) = plan(chunk=5)
    assert keys == ["rec", "idx", "s:other", "s:own"]
    assert args[7] == "all"
    assert args[8::6] == ids
    calls = plan(chunk=2)
    assert [args[7] for _, args in calls] == ["part", "part", "part", "go", "go"]
    assert [keys for keys, _ in calls[:3]] == [["rec", "idx"]] * 3
    assert [args[8::6] for _, args in calls[:3]] == [["a", "b"], ["c", "d"], ["e"]]
    assert [(keys, args[8:]) for keys, args in calls[3:]] == [
        (["rec", "idx", "s:own"], ["a", "b"]),
        (["rec", "idx", "s:other"], ["e"]),
    ]
    assert all(args[:7] == calls[0][1][:7] for _, args in calls)  # every call's head


async def test_runner_cancel_of_a_queued_step_counts_it_cancelled(backend: RedisBackend) -> None:
    """Issue 28: runner.cancel of a queued step is counted in the same script as its
    removal (lua/finish.lua's cancel_step), its policy applied: the workflow ends."""
    name = group_name()
    runner, runs = runner_with_tasks(backend, consumer_group=name)
    wf = await runner.dispatch_workflow(
        chain(runner.step("fetch", {"url": "a"}), runner.step("upload"))
    )
    status = await wf.status()
    assert status is not None
    root = status.steps[0].task_id
    assert root is not None
    assert await runner.cancel(root)
    assert await backend.length(name) == 0
    with pytest.raises(WorkflowFailed) as caught:
        await wf.result(timeout=5)
    assert caught.value.step == "fetch"
    status = await wf.status()
    assert status is not None
    assert status.counts == {"cancelled": 2}
    assert not await runner.cancel(root)  # a repeat finds nothing to cancel
    assert runs == {}


async def test_runner_cancel_of_a_queued_step_under_continue_runs_its_dependent(
    backend: RedisBackend,
) -> None:
    name = group_name()
    runner, runs = runner_with_tasks(backend, consumer_group=name)
    dag = (
        Workflow("w")
        .step("a", "fetch", {"url": "a"}, on_failure="continue")
        .step("b", "echo", after=["a"])
    )
    wf = await runner.dispatch_workflow(dag)
    status = await wf.status()
    assert status is not None
    root = status.steps[0].task_id
    assert root is not None
    assert await runner.cancel(root)
    async with serving(runner):
        result = await wf.result(timeout=30)
    assert result["step"] == "b"
    assert runs == {"echo": 1}


async def test_runner_cancel_of_a_delayed_step_counts_it_cancelled(backend: RedisBackend) -> None:
    name = group_name()
    runner, runs = runner_with_tasks(backend, consumer_group=name)
    async with serving(runner):
        wf = await runner.dispatch_workflow(
            chain(runner.step("flaky", id="f"), runner.step("upload"))
        )
        await wait_until(lambda: runs["flaky"] == 1, limit=30)
        status = await wf.status()
        assert status is not None
        task_id = status.steps[0].task_id
        assert task_id is not None
        with trio.fail_after(10):  # its retry waits in the delayed set for 600 s
            while not await _scheduled(runner, task_id):  # noqa: ASYNC110
                await trio.sleep(0.05)
        assert await runner.cancel(task_id)
        with pytest.raises(WorkflowFailed):
            await wf.result(timeout=5)
    status = await wf.status()
    assert status is not None
    assert status.counts == {"cancelled": 2}
    assert runs == {"flaky": 1}


async def _scheduled(runner: Any, task_id: str) -> bool:
    info = await runner.get_task(task_id)
    return info is not None and info.state.value == "scheduled"


async def test_a_step_a_go_worker_acked_uncounted_fails_its_workflow(
    backend: RedisBackend,
) -> None:
    """Issue 28: the Go worker's ack is a plain XACK + XDEL, nothing counted; the
    leader's check (lua/finish.lua's audit) marks the step, then fails the workflow."""
    name = group_name()
    runner, _ = runner_with_tasks(backend, consumer_group=name)
    go = await runner.dispatch_workflow(
        chain(runner.step("fetch", {"url": "a"}), runner.step("upload"))
    )
    (entry,) = await backend.read(name, "go-worker", 10, block=0)
    stream = backend.stream_keys(name).stream
    assert await backend._client.execute("XACK", stream, name, entry.id) == 1
    assert await backend._client.execute("XDEL", stream, entry.id) == 1
    running = await runner.dispatch_workflow(
        chain(runner.step("fetch", {"url": "b"}), runner.step("upload"))
    )
    queued = await runner.dispatch_workflow(
        chain(runner.step("fetch", {"url": "c"}), runner.step("upload"))
    )
    assert len(await backend.read(name, "c1", 1, block=0)) == 1  # b's: now pending
    assert await backend.audit_steps(name, 60.0) == []  # marked suspect only
    assert await backend.audit_steps(name, 60.0) == []  # not for 60 s yet
    assert await backend.audit_steps(name, 0.0) == [go.id]
    assert await backend.audit_steps(name, 0.0) == []  # over: out of the index
    with pytest.raises(WorkflowFailed) as caught:
        await go.result(timeout=5)
    assert caught.value.step == "fetch"
    assert caught.value.error_type == "UncountedStep"
    assert "acked without being counted" in caught.value.error
    status = await go.status()
    assert status is not None
    assert {s.id: s.state for s in status.steps} == {
        "fetch": StepState.FAILED,
        "upload": StepState.CANCELLED,
    }
    assert "Go worker" in status.reason
    for wf in (queued, running):
        status = await wf.status()
        assert status is not None
        assert status.state is WorkflowState.RUNNING
    index = await backend._client.execute("ZRANGE", f"taskrunner:{name}:workflows", 0, -1)
    assert len(index) == 2  # the two running ones; an ended one leaves it


async def test_a_wide_workflow_starts_in_chunks(backend: RedisBackend) -> None:
    """Issue 28: past start_chunk steps, the start is one script per chunk."""
    name = group_name()
    backend.start_chunk = 3
    calls: list[str] = []
    script = _workflows.START_WORKFLOW
    runner, runs = runner_with_tasks(backend, consumer_group=name)
    urls = ["a" * (i + 1) for i in range(10)]
    try:
        _workflows.START_WORKFLOW = _Counted(script, calls)  # type: ignore[assignment]
        wf = await runner.dispatch_workflow(
            chord(group(runner.step("fetch", {"url": u}) for u in urls), runner.step("merge"))
        )
    finally:
        _workflows.START_WORKFLOW = script
    assert calls == ["part"] * 4 + ["go"] * 4  # 11 steps in threes, 10 roots in threes
    async with serving(runner):
        result = await wf.result(timeout=30)
    assert result["payload"] == list(range(1, 11))
    assert runs == {"fetch": 10, "merge": 1}


@attrs.define
class _Counted:
    script: Any
    calls: list[str]

    async def __call__(self, client: Any, keys: Any, args: Any) -> Any:
        self.calls.append(args[7])
        return await self.script(client, keys, args)


async def test_a_chunked_start_cut_off_never_leaves_a_workflow_that_never_ends(
    backend: RedisBackend,
) -> None:
    """Cut off while writing its chunks: nothing runs and the record expires. Cut off
    while queueing its roots: the leader's check queues the rest, and it ends."""
    name = group_name()
    backend.start_chunk = 3
    runner, runs = runner_with_tasks(backend, consumer_group=name)
    urls = ["a" * (i + 1) for i in range(7)]
    script = _workflows.START_WORKFLOW
    cut = _CutOff(script, after=2)
    _workflows.START_WORKFLOW = cut  # type: ignore[assignment]
    try:
        with pytest.raises(ConnectionError):
            await runner.dispatch_workflow(
                chord(group(runner.step("fetch", {"url": u}) for u in urls), runner.step("merge"))
            )
        cut.after, cut.calls = 4, 0  # 3 'part' calls, then one 'go' of 3 roots of 7
        with pytest.raises(ConnectionError):
            await runner.dispatch_workflow(
                chord(group(runner.step("fetch", {"url": u}) for u in urls), runner.step("merge"))
            )
    finally:
        _workflows.START_WORKFLOW = script
    records = await backend._client.execute("KEYS", f"taskrunner:{name}:workflow:*")
    states = {}
    for record in records:
        key = record.decode()
        states[await backend._client.execute("HGET", key, "state")] = key
    assert set(states) == {b"starting", b"running"}
    early_key = states[b"starting"]
    assert 0 < await backend._client.execute("PTTL", early_key)  # it expires
    assert await backend.length(name) == 3  # the first 'go' chunk's roots only
    index = await backend._client.execute("ZRANGE", f"taskrunner:{name}:workflows", 0, -1)
    assert [i.decode() for i in index] == [states[b"running"]]  # the early one is not in it
    assert await backend.audit_steps(name, 60.0) == []  # queues the roots left pending
    assert await backend.length(name) == 7
    async with serving(runner):
        with trio.fail_after(30):
            while await _state_of(backend, states[b"running"]) != b"succeeded":  # noqa: ASYNC110
                await trio.sleep(0.05)
    assert runs == {"fetch": 7, "merge": 1}


@attrs.define
class _CutOff:
    """START_WORKFLOW, the dispatcher cut off (its connection lost) after ``after`` calls."""

    script: Any
    after: int
    calls: int = 0

    async def __call__(self, client: Any, keys: Any, args: Any) -> Any:
        if self.calls >= self.after:
            raise ConnectionError("cut off")
        self.calls += 1
        return await self.script(client, keys, args)


async def _state_of(backend: RedisBackend, record: str) -> Any:
    return await backend._client.execute("HGET", record, "state")
