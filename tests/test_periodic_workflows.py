"""Periodic workflows on MemoryBackend under MockClock: each tick of a workflow
schedule starts one workflow, under the id ``<schedule>@<tick ms>``; missed ticks follow
``catch_up``; a runner that crashes between the tick and the start (or after the start,
before its ack) neither loses the tick's workflow nor starts it twice."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime
from typing import Any

import pytest
import trio
import trio.testing
from _fleet import make_runner, serving, start_each
from test_workflows import WorkflowLink

from taskrunner import (
    InvalidWorkflow,
    TaskContext,
    TaskRunner,
    Workflow,
    WorkflowState,
    chain,
)
from taskrunner._schedules.workflows import WORKFLOW_TASK, scheduled_workflow_id
from taskrunner.backends import Backend
from taskrunner.backends.memory import MemoryBackend
from taskrunner.errors import BackendError, TaskNotFound

START = datetime(2025, 6, 2, 8, 0, 0, tzinfo=UTC).timestamp()


@pytest.fixture
async def at_start(autojump_clock: trio.testing.MockClock) -> None:
    autojump_clock.jump(START - trio.current_time())


def instance(
    backend: Backend, sinks: Counter[str], *, source: Any = None, **schedule: Any
) -> TaskRunner:
    """A runner with the steps' tasks and a workflow schedule ``nightly`` every 60 s."""
    runner = make_runner(backend, reclaim_delay=5.0)

    # Three attempts: a step a crashed runner had read is delivered again (reclaimed).
    @runner.task("resize", max_retry=3)
    async def resize(payload: dict[str, int]) -> int:
        return payload["id"] * 2

    @runner.task("upload", max_retry=3)
    async def upload(payload: int, ctx: TaskContext) -> str:
        assert ctx.workflow_id is not None
        sinks[ctx.workflow_id] += 1
        return f"uploaded {payload}"

    work = source or chain(runner.step("resize", {"id": 7}), runner.step("upload"))
    runner.add_schedule("nightly", workflow=work, every=60, **schedule)
    return runner


def ids(*minutes: int) -> set[str]:
    return {scheduled_workflow_id("nightly", START + 60 * m) for m in minutes}


async def test_each_tick_starts_one_workflow(
    autojump_clock: trio.testing.MockClock, at_start: None
) -> None:
    backend = MemoryBackend()
    sinks: Counter[str] = Counter()
    runner = instance(backend, sinks)
    async with serving(runner):
        await trio.sleep(3 * 60 + 30)
    assert set(sinks) == ids(1, 2, 3)
    assert set(sinks.values()) == {1}
    for workflow_id in ids(1, 2, 3):
        status = await runner.get_workflow(workflow_id).status()
        assert status is not None
        assert status.state is WorkflowState.SUCCEEDED
        assert await runner.get_workflow(workflow_id).result(timeout=1) == "uploaded 14"


async def test_a_callable_builds_each_ticks_workflow(
    autojump_clock: trio.testing.MockClock, at_start: None
) -> None:
    backend = MemoryBackend()
    sinks: Counter[str] = Counter()
    built: list[float] = []

    def build() -> Workflow:
        built.append(trio.current_time())
        return (
            Workflow("daily")
            .step("r", "resize", {"id": len(built)})
            .step("u", "upload", after=["r"])
        )

    runner = instance(backend, sinks, source=build)
    async with serving(runner):
        await trio.sleep(2 * 60 + 30)
    assert len(built) == 2
    results = [await runner.get_workflow(i).result(timeout=1) for i in sorted(ids(1, 2))]
    assert results == ["uploaded 2", "uploaded 4"]


@pytest.mark.parametrize(
    ("catch_up", "expected"),
    [
        # down from 08:02:30 to 08:10:30: 08:03 ... 08:10 missed (08:10 by 30 s)
        ("latest", [1, 2, 10, 11, 12]),
        ("none", [1, 2, 11, 12]),
        ("all", [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12]),
    ],
)
async def test_missed_ticks_follow_catch_up(
    autojump_clock: trio.testing.MockClock, at_start: None, catch_up: str, expected: list[int]
) -> None:
    backend = MemoryBackend()
    sinks: Counter[str] = Counter()
    async with serving(instance(backend, sinks, catch_up=catch_up)):
        await trio.sleep(150)
    await trio.sleep(8 * 60)  # nobody serves
    async with serving(instance(backend, sinks, catch_up=catch_up)):
        await trio.sleep(12 * 60 + 30 - 150 - 8 * 60)
    assert set(sinks) == ids(*expected)
    assert set(sinks.values()) == {1}


class CrashingLink(WorkflowLink):
    """A runner's link that dies at its first workflow start: before the start reaches
    the store, or after (the start applied, its reply lost)."""

    def __init__(self, backend: Backend, when: str) -> None:
        super().__init__(backend)
        self.when = when
        self.crashed = trio.Event()

    async def start_workflow(self, group: str, *args: Any) -> dict[str, str]:
        if self.crashed.is_set() or self.cut:
            raise BackendError("partitioned: start_workflow not sent", maybe_applied=False)
        if self.when == "after":
            await self.backend.start_workflow(group, *args)  # type: ignore[attr-defined]
        self.cut = True
        self.crashed.set()
        raise BackendError("partitioned: no reply to start_workflow")


@pytest.mark.parametrize("when", ["before", "after"])
async def test_a_crash_between_the_tick_and_the_start_loses_and_doubles_nothing(
    autojump_clock: trio.testing.MockClock, at_start: None, when: str
) -> None:
    store = MemoryBackend()
    sinks: Counter[str] = Counter()
    link = CrashingLink(store, when)
    first, second = instance(link, sinks), instance(store, sinks)
    async with trio.open_nursery() as outer:
        (scope,) = start_each(outer, [first])
        with trio.fail_after(120):
            await link.crashed.wait()  # the 08:01 tick fired; its start crashed
        scope.cancel()
        assert trio.current_time() - START < 62
        start_each(outer, [second])  # takes over: the lease, the tick's run, later ticks
        await trio.sleep(5 * 60 + 30 - (trio.current_time() - START))
        outer.cancel_scope.cancel()
    assert set(sinks) == ids(1, 2, 3, 4, 5), "the crashed tick's workflow is not lost"
    assert set(sinks.values()) == {1}, "nor run twice"
    status = await second.get_workflow(scheduled_workflow_id("nightly", START + 60)).status()
    assert status is not None
    assert status.state is WorkflowState.SUCCEEDED


async def test_a_workflow_schedule_is_checked_when_declared(autojump_clock: Any) -> None:
    runner = make_runner(MemoryBackend())

    @runner.task("resize")
    async def resize(payload: Any) -> None: ...

    with pytest.raises(ValueError, match="exactly one of task and workflow"):
        runner.add_schedule("n", every=60)
    with pytest.raises(ValueError, match="exactly one of task and workflow"):
        runner.add_schedule("n", task="resize", workflow=runner.step("resize"), every=60)
    with pytest.raises(TaskNotFound):
        runner.add_schedule("n", workflow=chain(runner.step("resize"), runner.step("x")), every=60)
    with pytest.raises(InvalidWorkflow):
        runner.add_schedule("n", workflow=Workflow("w").step("a", "resize", after=["b"]), every=60)
    with pytest.raises(ValueError, match=r"Schedule\.workflow of 'n' must be"):
        runner.add_schedule("n", workflow=42, every=60)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="overlap=False"):
        runner.add_schedule("n", workflow=runner.step("resize"), every=60, overlap=False)
    with pytest.raises(ValueError, match="needs a name"):
        runner.periodic(every=60, workflow=runner.step("resize"))
    assert runner.schedules == {}
    assert WORKFLOW_TASK not in runner.tasks, "a refused schedule registers nothing"
    runner.periodic(every=60, name="n", workflow=runner.step("resize"))
    assert runner.schedules["n"].task == WORKFLOW_TASK
