"""Workflows end to end on MemoryBackend under MockClock: chains, chords, DAGs, every
failure policy, cancel in every state, a replayed finish counting once, results."""

from __future__ import annotations

import random
from collections import Counter
from functools import partial
from typing import Any

import pytest
import trio
import trio.testing
from _fleet import make_runner, serving, start_each, wait_until

from taskrunner import (
    Backoff,
    InvalidWorkflow,
    StepFailed,
    StepState,
    TaskContext,
    TaskNotFound,
    TaskRunner,
    Workflow,
    WorkflowCancelled,
    WorkflowFailed,
    WorkflowState,
    chain,
    chord,
    group,
)
from taskrunner._wire import decode_message, encode_result, succeeded
from taskrunner._workflows.audit import AUDIT_INTERVAL, UNCOUNTED_GRACE, Verdict, audit_step
from taskrunner.backends import Outcome
from taskrunner.backends.memory import MemoryBackend
from taskrunner.testing import PartitionedBackend


def runner_with_tasks(
    backend: MemoryBackend | None = None, **config: Any
) -> tuple[TaskRunner, Counter[str]]:
    runner = make_runner(backend or MemoryBackend(), **config)
    runs: Counter[str] = Counter()

    @runner.task("resize")
    async def resize(payload: dict[str, int]) -> dict[str, Any]:
        runs["resize"] += 1
        return {"resized": payload["id"]}

    @runner.task("upload")
    async def upload(payload: dict[str, Any]) -> str:
        runs["upload"] += 1
        return f"uploaded {payload['resized']}"

    @runner.task("fetch")
    async def fetch(payload: dict[str, Any]) -> int:
        runs["fetch"] += 1
        await trio.sleep(payload.get("sleep", 0))
        if payload.get("fail"):
            raise KeyError(payload["url"])
        return len(payload["url"])

    @runner.task("merge")
    async def merge(payload: list[Any], ctx: TaskContext) -> dict[str, Any]:
        runs["merge"] += 1
        return {"payload": payload, "parents": dict(ctx.parents)}

    @runner.task("echo")
    async def echo(payload: Any, ctx: TaskContext) -> Any:
        runs["echo"] += 1
        return {"payload": payload, "parents": dict(ctx.parents), "step": ctx.step}

    @runner.task("boom", max_retry=0)
    async def boom(payload: Any) -> None:
        runs["boom"] += 1
        raise ValueError("no luck")

    @runner.task("slow")
    async def slow(payload: Any) -> None:
        runs["slow"] += 1
        await trio.sleep(3600)

    @runner.task("flaky", max_retry=5, retry=Backoff(initial=600, factor=1, jitter=0))
    async def flaky(payload: Any) -> None:
        runs["flaky"] += 1
        raise RuntimeError("later")

    return runner, runs


async def test_a_chain_passes_each_result_on(autojump_clock: trio.testing.MockClock) -> None:
    runner, runs = runner_with_tasks()
    async with serving(runner):
        wf = await runner.dispatch_workflow(
            chain(runner.step("resize", {"id": 7}), runner.step("upload"))
        )
        assert await wf.result(timeout=60) == "uploaded 7"
        status = await wf.status()
    assert status is not None
    assert status.state is WorkflowState.SUCCEEDED
    assert status.counts == {"succeeded": 2}
    assert runs == {"resize": 1, "upload": 1}


async def test_a_chord_gives_the_list_of_results_in_order(
    autojump_clock: trio.testing.MockClock,
) -> None:
    runner, runs = runner_with_tasks()
    urls = ["a", "bbb", "cc"]
    async with serving(runner):
        wf = await runner.dispatch_workflow(
            chord(
                group(runner.step("fetch", {"url": u, "sleep": 3 - i}) for i, u in enumerate(urls)),
                runner.step("merge"),
            )
        )
        result = await wf.result(timeout=60)
    assert result["payload"] == [1, 3, 2]
    assert result["parents"] == {"fetch.1": 1, "fetch.2": 3, "fetch.3": 2}
    assert runs["merge"] == 1


def report(**mail: Any) -> Workflow:
    return (
        Workflow("report")
        .step("extract", "echo", {"day": "2026-12-01"})
        .step("clean", "echo", after=["extract"])
        .step("stats", "fetch", {"url": "xy"}, after=["clean"])
        .step("chart", "fetch", {"url": "xyz"}, after=["clean"])
        .step("mail", "echo", {"to": "me"}, after=["stats", "chart"], **mail)
    )


async def test_a_dag_runs_each_step_once_after_its_parents(
    autojump_clock: trio.testing.MockClock,
) -> None:
    runner, runs = runner_with_tasks()
    async with serving(runner):
        wf = await runner.dispatch_workflow(report())
        mail = await wf.result(timeout=60)
        status = await wf.status()
    assert mail == {"payload": {"to": "me"}, "parents": {"stats": 2, "chart": 3}, "step": "mail"}
    assert status is not None
    assert [s.state for s in status.steps] == [StepState.SUCCEEDED] * 5
    assert runs == {"echo": 3, "fetch": 2}


async def test_several_sinks_give_a_dict_by_step(autojump_clock: trio.testing.MockClock) -> None:
    runner, _ = runner_with_tasks()
    dag = (
        Workflow("two")
        .step("a", "fetch", {"url": "a"})
        .step("b", "fetch", {"url": "bb"}, after=["a"])
        .step("c", "fetch", {"url": "ccc"}, after=["a"])
    )
    async with serving(runner):
        wf = await runner.dispatch_workflow(dag)
        assert await wf.result(timeout=60) == {"b": 2, "c": 3}


async def test_fail_cancels_the_rest_and_runs_the_handler(
    autojump_clock: trio.testing.MockClock,
) -> None:
    runner, runs = runner_with_tasks()
    dag = Workflow("w", on_failure=runner.step("echo", id="alert"))
    dag = dag.step("bad", "boom").step("long", "slow").step("m", "merge", after=["bad", "long"])
    async with serving(runner):
        wf = await runner.dispatch_workflow(dag)
        with pytest.raises(WorkflowFailed) as caught:
            await wf.result(timeout=60)
        assert caught.value.step == "bad"
        assert caught.value.error_type == "ValueError"
        # The running step is stopped (within about a second), the handler ran once.
        await wait_until(lambda: runs["echo"] == 1, limit=30)
        await trio.sleep(5)
        status = await wf.status()
    assert status is not None
    assert status.state is WorkflowState.FAILED
    states = {s.id: s.state for s in status.steps}
    assert states == {
        "bad": StepState.FAILED,
        "long": StepState.CANCELLED,
        "m": StepState.CANCELLED,
        "alert": StepState.SUCCEEDED,
    }
    assert runs["merge"] == 0
    alert = next(s for s in status.steps if s.id == "alert")
    assert alert.task_id is not None
    info = await runner.get_task(alert.task_id)
    assert info is not None
    marker = {"step": "bad", "type": "ValueError", "message": "no luck"}
    assert info.result["step"] == "alert"
    assert info.result["parents"] == {"bad": marker}


async def test_the_handler_receives_the_step_failed_marker(
    autojump_clock: trio.testing.MockClock,
) -> None:
    runner, _ = runner_with_tasks()
    dag = Workflow("w", on_failure=runner.step("echo", id="alert")).step("bad", "boom")
    seen: list[Any] = []

    @runner.task("echo2")
    async def echo2(payload: Any) -> None:
        seen.append(payload)

    async with serving(runner):
        wf = await runner.dispatch_workflow(dag)
        with pytest.raises(WorkflowFailed):
            await wf.result(timeout=60)
        await trio.sleep(5)
        status = await wf.status()
    assert status is not None
    alert = next(s for s in status.steps if s.id == "alert")
    assert alert.state is StepState.SUCCEEDED


async def test_continue_gives_dependents_a_step_failed_marker(
    autojump_clock: trio.testing.MockClock,
) -> None:
    runner, _runs = runner_with_tasks()
    seen: list[Any] = []

    @runner.task("look")
    async def look(payload: Any, ctx: TaskContext) -> str:
        seen.append((payload, dict(ctx.parents)))
        return "looked"

    dag = (
        Workflow("c")
        .step("bad", "boom", on_failure="continue")
        .step("ok", "fetch", {"url": "ab"})
        .step("end", "look", after=["bad", "ok"])
    )
    async with serving(runner):
        wf = await runner.dispatch_workflow(dag)
        assert await wf.result(timeout=60) == "looked"
    marker = StepFailed("bad", "ValueError", "no luck")
    assert seen == [([marker, 2], {"bad": marker, "ok": 2})]


async def test_skip_runs_dependents_without_it(autojump_clock: trio.testing.MockClock) -> None:
    runner, _ = runner_with_tasks()
    seen: list[Any] = []

    @runner.task("look")
    async def look(payload: Any, ctx: TaskContext) -> str:
        seen.append((payload, dict(ctx.parents)))
        return "looked"

    dag = (
        Workflow("s")
        .step("bad", "boom", on_failure="skip")
        .step("ok", "fetch", {"url": "ab"})
        .step("end", "look", after=["bad", "ok"])
    )
    async with serving(runner):
        wf = await runner.dispatch_workflow(dag)
        assert await wf.result(timeout=60) == "looked"
        status = await wf.status()
    assert seen == [([2], {"ok": 2})]
    assert status is not None
    assert status.state is WorkflowState.SUCCEEDED
    assert status.counts == {"failed": 1, "succeeded": 2}


async def test_cancel_while_queued_removes_every_entry(
    autojump_clock: trio.testing.MockClock,
) -> None:
    backend = MemoryBackend()
    runner, runs = runner_with_tasks(backend)
    wf = await runner.dispatch_workflow(
        chord(
            group(runner.step("fetch", {"url": "a"}), runner.step("fetch", {"url": "b"})),
            runner.step("merge"),
        )
    )
    assert await backend.length("g") == 2
    assert await wf.cancel()
    assert await backend.length("g") == 0
    assert not await wf.cancel()  # a repeat finds it over
    status = await wf.status()
    assert status is not None
    assert status.state is WorkflowState.CANCELLED
    assert status.counts == {"cancelled": 3}
    async with serving(runner):
        await trio.sleep(10)
        with pytest.raises(WorkflowCancelled):
            await wf.result(timeout=1)
    assert runs == {}


async def test_cancel_while_delayed_removes_the_retry(
    autojump_clock: trio.testing.MockClock,
) -> None:
    runner, runs = runner_with_tasks()
    async with serving(runner):
        wf = await runner.dispatch_workflow(
            chain(runner.step("flaky", id="f"), runner.step("upload"))
        )
        await wait_until(lambda: runs["flaky"] == 1, limit=30)
        await trio.sleep(5)  # its retry waits in the delayed set for 300 s
        assert await wf.cancel()
        await trio.sleep(1200)
        status = await wf.status()
    assert runs == {"flaky": 1}
    assert status is not None
    assert {s.id: s.state for s in status.steps} == {
        "f": StepState.CANCELLED,
        "upload": StepState.CANCELLED,
    }


async def test_cancel_while_running_stops_the_run_fleet_wide(
    autojump_clock: trio.testing.MockClock,
) -> None:
    backend = MemoryBackend()
    first, runs = runner_with_tasks(backend)
    second, runs2 = runner_with_tasks(backend)
    async with serving(first, second):
        wf = await first.dispatch_workflow(chain(runner_step(first, "slow"), first.step("upload")))
        await wait_until(lambda: runs["slow"] + runs2["slow"] == 1, limit=30)
        started = trio.current_time()
        assert await wf.cancel()
        with pytest.raises(WorkflowCancelled):
            await wf.result(timeout=60)
        await wait_until(lambda: _state(backend, wf.id, "slow") is StepState.CANCELLED, limit=30)
        assert trio.current_time() - started <= 2.0
    assert runs["upload"] + runs2["upload"] == 0


def runner_step(runner: TaskRunner, task: str) -> Any:
    return runner.step(task)


def _state(backend: MemoryBackend, workflow_id: str, step: str) -> StepState | None:
    flow = backend._flow("g", workflow_id)
    return None if flow is None else flow.steps.get(step)


async def test_cancel_once_finished_does_nothing(autojump_clock: trio.testing.MockClock) -> None:
    runner, _ = runner_with_tasks()
    async with serving(runner):
        wf = await runner.dispatch_workflow(runner.step("fetch", {"url": "abc"}))
        assert await wf.result(timeout=60) == 3
        assert not await wf.cancel()
        assert (await wf.status()).state is WorkflowState.SUCCEEDED  # type: ignore[union-attr]


async def test_leaving_the_block_by_cancellation_cancels_the_workflow(
    autojump_clock: trio.testing.MockClock,
) -> None:
    runner, runs = runner_with_tasks()
    async with serving(runner):
        with trio.move_on_after(5):
            async with runner.workflow(chain(runner.step("slow"), runner.step("upload"))) as wf:
                await trio.sleep_forever()
        with pytest.raises(WorkflowCancelled):
            await wf.result(timeout=60)
    assert runs["upload"] == 0


async def test_runner_cancel_of_a_queued_step_counts_it_cancelled(
    autojump_clock: trio.testing.MockClock,
) -> None:
    backend = MemoryBackend()
    runner, _ = runner_with_tasks(backend)
    wf = await runner.dispatch_workflow(
        chain(runner.step("fetch", {"url": "a"}), runner.step("upload"))
    )
    status = await wf.status()
    assert status is not None
    root = status.steps[0].task_id
    assert root is not None
    info = await runner.get_task(root)
    assert info is not None
    assert (info.workflow, info.step) == (wf.id, "fetch")  # get_task shows its workflow
    assert await runner.cancel(root)
    with pytest.raises(WorkflowFailed) as caught:
        await wf.result(timeout=1)
    assert caught.value.error_type == "TaskCancelled"


async def test_a_replayed_or_duplicated_finish_counts_once(
    autojump_clock: trio.testing.MockClock,
) -> None:
    backend = MemoryBackend()
    runner, _ = runner_with_tasks(backend)
    wf = await runner.dispatch_workflow(
        chord(
            group(runner.step("fetch", {"url": "a"}), runner.step("fetch", {"url": "b"})),
            runner.step("merge"),
        )
    )
    entries = await backend.read("g", "c1", 10, block=0)
    assert len(entries) == 2
    doc = encode_result(
        succeeded("fetch", 1, attempts=1, enqueued_at=0, started_at=0, finished_at=1)
    )

    def done(entry_id: str, step: str) -> Outcome:
        return Outcome(
            entry_id=entry_id,
            task_id=entry_id,
            document=doc,
            keep=60,
            notify=60,
            workflow=wf.id,
            step=step,
            step_state="succeeded",
        )

    first, second = entries
    step_of = {e.id: decode_message(e.payload).extras.step for e in entries}  # type: ignore[union-attr]
    # The first step's finish, replayed three times (a repeated ack, a reclaimed run).
    for _ in range(3):
        await backend.finish("g", [first.id], [done(first.id, step_of[first.id])])
    assert await backend.length("g") == 1  # the second step's entry, and no merge yet
    await backend.finish("g", [second.id], [done(second.id, step_of[second.id])])
    await backend.finish("g", [second.id], [done(second.id, step_of[second.id])])
    merges = await backend.read("g", "c1", 10, block=0)
    assert [decode_message(e.payload).task_name for e in merges] == ["merge"]
    assert await backend.read("g", "c1", 10, block=0) == []


async def test_invalid_workflows_queue_nothing(autojump_clock: trio.testing.MockClock) -> None:
    backend = MemoryBackend()
    runner, _ = runner_with_tasks(backend)
    with pytest.raises(InvalidWorkflow, match="step 'b' runs after 'x', which is no step of it"):
        await runner.dispatch_workflow(
            Workflow("w").step("a", "fetch", {"url": "a"}).step("b", "upload", after=["x"])
        )
    with pytest.raises(TaskNotFound):
        await runner.dispatch_workflow(
            chain(runner.step("fetch", {"url": "a"}), runner.step("nope"))
        )
    assert await backend.length("g") == 0
    assert backend.workflow_keys("g") == []


async def test_steps_obey_their_queues(autojump_clock: trio.testing.MockClock) -> None:
    backend = MemoryBackend()
    runner, _ = runner_with_tasks(backend, queues=["tasks", "other"])
    wf = await runner.dispatch_workflow(
        chain(runner.step("fetch", {"url": "a"}, queue="other"), runner.step("echo"))
    )
    assert await backend.length("g", queue="other") == 1
    assert await backend.length("g") == 0
    async with serving(runner):
        result = await wf.result(timeout=60)
    assert result == {"payload": 1, "parents": {"fetch": 1}, "step": "echo"}


class WorkflowLink(PartitionedBackend):
    """A link that carries the workflow calls too (through the same cut)."""

    backend: MemoryBackend

    async def start_workflow(self, group: str, *args: Any) -> dict[str, str]:
        return await self._through(
            "start_workflow", partial(self.backend.start_workflow, group, *args)
        )

    async def read_workflow(self, group: str, workflow_id: str) -> Any:
        return await self._through(
            "read_workflow", partial(self.backend.read_workflow, group, workflow_id)
        )

    async def step_inputs(self, group: str, workflow_id: str, step: str) -> Any:
        return await self._through(
            "step_inputs", partial(self.backend.step_inputs, group, workflow_id, step)
        )

    async def cancel_workflow(self, group: str, workflow_id: str) -> bool:
        return await self._through(
            "cancel_workflow", partial(self.backend.cancel_workflow, group, workflow_id)
        )


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
async def test_a_fleet_with_a_crash_runs_every_sink_exactly_once(
    autojump_clock: trio.testing.MockClock, seed: int
) -> None:
    """Three runners share the chords' steps; one crashes mid-way (its link cut: replies
    lost, including finishes in flight). Its steps are reclaimed and run again, but each
    counts once: every chord's sink runs exactly once, with every header's result."""
    rng = random.Random(seed)
    store = MemoryBackend()
    links = [WorkflowLink(store) for _ in range(3)]
    runners = [make_runner(link, reclaim_delay=5.0) for link in links]
    sinks: Counter[str] = Counter()
    got: dict[str, list[int]] = {}
    for runner in runners:

        @runner.task("part", max_retry=5)
        async def part(payload: dict[str, int]) -> int:
            await trio.sleep(payload["sleep"])
            return payload["i"]

        @runner.task("sink", max_retry=5)
        async def sink(payload: list[int], ctx: TaskContext) -> int:
            assert ctx.workflow_id is not None
            sinks[ctx.workflow_id] += 1
            got[ctx.workflow_id] = payload
            return sum(payload)

    async with trio.open_nursery() as outer:
        scopes = start_each(outer, runners)
        await trio.sleep(1)
        handles = [
            await runners[0].dispatch_workflow(
                chord(
                    group(
                        runners[0].step("part", {"i": i, "sleep": rng.randint(0, 6)})
                        for i in range(5)
                    ),
                    runners[0].step("sink"),
                )
            )
            for _ in range(10)
        ]
        await trio.sleep(rng.uniform(0.5, 4))
        links[2].cut = True  # a crash: no more calls, replies in flight lost
        scopes[2].cancel()
        results = [await wf.result(timeout=600) for wf in handles]
        await trio.sleep(60)  # nothing runs twice later either
        outer.cancel_scope.cancel()
    assert results == [10] * 10
    assert sorted(sinks.values()) == [1] * 10, sinks
    assert all(values == [0, 1, 2, 3, 4] for values in got.values()), got


async def test_a_step_failed_undecoded_past_its_delivery_limit_still_ends_its_workflow(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A step whose runner dies while it runs, past its delivery limit, is failed without
    being decoded (it may be what killed it): its failure is counted all the same, so
    its workflow ends instead of waiting forever."""
    store = MemoryBackend()
    links = [WorkflowLink(store) for _ in range(2)]
    runners = [make_runner(link, reclaim_delay=5.0) for link in links]
    started = trio.Event()
    for runner in runners:

        @runner.task("fragile", max_retry=0)
        async def fragile(payload: Any) -> None:
            started.set()
            await trio.sleep(3600)

        @runner.task("after")
        async def after(payload: Any) -> None:
            raise AssertionError("must not run")

    async with trio.open_nursery() as outer:
        scopes = start_each(outer, runners[:1])
        wf = await runners[1].dispatch_workflow(
            chain(runners[1].step("fragile"), runners[1].step("after"))
        )
        await started.wait()
        links[0].cut = True  # its runner dies while the step runs
        scopes[0].cancel()
        start_each(outer, runners[1:])
        with pytest.raises(WorkflowFailed) as caught:
            await wf.result(timeout=600)
        outer.cancel_scope.cancel()
    assert caught.value.step == "fragile"
    assert caught.value.error_type == "TaskMaxRetryExceeded"


@pytest.mark.parametrize(
    ("present", "since", "now", "verdict"),
    [
        (True, None, 100.0, Verdict.NOTHING),
        (True, 50.0, 100.0, Verdict.CLEAR),
        (False, None, 100.0, Verdict.SUSPECT),
        (False, 50.0, 100.0, Verdict.NOTHING),  # 50 s < the 60 s grace
        (False, 40.0, 100.0, Verdict.FAIL),
        (False, 10.0, 100.0, Verdict.FAIL),
    ],
)
def test_audit_step_fails_a_step_found_nowhere_only_after_the_grace(
    present: bool, since: float | None, now: float, verdict: Verdict
) -> None:
    assert audit_step(present, since, now, 60.0) is verdict


async def test_a_step_a_go_worker_acked_uncounted_fails_its_workflow_in_bounded_time(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Issue 28: a Go worker acks a step without counting it; the leader finds it
    (nowhere: not queued, pending nor delayed) and fails the workflow, saying why."""
    backend = MemoryBackend()
    runner, runs = runner_with_tasks(backend)
    wf = await runner.dispatch_workflow(
        chain(runner.step("fetch", {"url": "a"}, on_failure="continue"), runner.step("echo"))
    )
    (entry,) = await backend.read("g", "go-worker", 10, block=0)
    assert await backend.ack("g", [entry.id]) == 1  # the Go worker's ack: nothing counted
    acked = trio.current_time()
    async with serving(runner):
        with pytest.raises(WorkflowFailed) as caught:
            await wf.result(timeout=600)
    assert trio.current_time() - acked <= UNCOUNTED_GRACE + 2 * AUDIT_INTERVAL + 5
    assert "acked without being counted" in caught.value.error
    status = await wf.status()
    assert status is not None
    assert status.failed_step == "fetch"
    assert "Go worker" in status.reason
    assert {s.id: s.state for s in status.steps} == {
        "fetch": StepState.FAILED,
        "echo": StepState.CANCELLED,  # failed under "fail", whatever its own policy
    }
    assert runs == {}


async def test_the_uncounted_check_leaves_running_delayed_and_parked_steps_alone(
    autojump_clock: trio.testing.MockClock,
) -> None:
    backend = MemoryBackend()
    runner, runs = runner_with_tasks(backend)
    async with serving(runner):
        running = await runner.dispatch_workflow(chain(runner.step("slow"), runner.step("upload")))
        delayed = await runner.dispatch_workflow(chain(runner.step("flaky"), runner.step("upload")))
        await backend.pause("g", task="resize")
        await trio.sleep(2)  # runners notice a pause within about a second
        parked = await runner.dispatch_workflow(
            chain(runner.step("resize", {"id": 1}), runner.step("upload"))
        )
        await trio.sleep(3 * (UNCOUNTED_GRACE + AUDIT_INTERVAL))  # slow runs for 3600 s
        for wf in (running, delayed, parked):
            status = await wf.status()
            assert status is not None
            assert status.state is WorkflowState.RUNNING, (wf.id, status)
    assert (runs["slow"], runs["resize"]) == (1, 0)
