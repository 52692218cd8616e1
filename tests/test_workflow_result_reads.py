"""``wf.result()`` polls a running workflow's state alone and reads its record once,
at its end (a wide workflow's record is large), on MemoryBackend under MockClock."""

from __future__ import annotations

from typing import Any

import trio
import trio.testing
from _fleet import make_runner, serving

from taskrunner import WorkflowState, chain
from taskrunner.backends import WorkflowRecord, WorkflowStates
from taskrunner.backends.memory import MemoryBackend


class CountingBackend(MemoryBackend):
    """A MemoryBackend that counts its reads of whole workflow records."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.record_reads = 0

    async def read_workflow(self, group: str, workflow_id: str) -> WorkflowRecord | None:
        self.record_reads += 1
        return await super().read_workflow(group, workflow_id)


async def test_result_reads_the_record_once_at_the_end(
    autojump_clock: trio.testing.MockClock,
) -> None:
    backend = CountingBackend()
    runner = make_runner(backend)

    @runner.task("slow")
    async def slow(payload: Any) -> int:
        await trio.sleep(10)
        return 1

    async with serving(runner):
        wf = await runner.dispatch_workflow(chain(runner.step("slow", 0), runner.step("slow")))
        assert await wf.result(timeout=60) == 1
    assert backend.record_reads == 1, "a running workflow's state is polled, not its record"


async def test_workflow_state_follows_the_workflow(autojump_clock: trio.testing.MockClock) -> None:
    backend = MemoryBackend()
    assert isinstance(backend, WorkflowStates)
    runner = make_runner(backend)

    @runner.task("slow")
    async def slow(payload: Any) -> int:
        await trio.sleep(10)
        return 1

    assert await backend.workflow_state("g", "no-such-workflow") is None
    async with serving(runner):
        wf = await runner.dispatch_workflow(runner.step("slow", 0))
        assert await backend.workflow_state("g", wf.id) is WorkflowState.RUNNING
        await wf.result(timeout=60)
        assert await backend.workflow_state("g", wf.id) is WorkflowState.SUCCEEDED
