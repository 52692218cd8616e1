"""``wf.status()`` shows each running step's reported progress (``ctx.progress``), read
with the record; a step that reported none, or is not queued, shows ``None``."""

from __future__ import annotations

import trio
import trio.testing
from _fleet import make_runner, serving

from taskrunner import StepState, TaskContext, TaskRunner, chain
from taskrunner._dispatch.workflows import StepStatus
from taskrunner.backends import Backend
from taskrunner.backends.memory import MemoryBackend


def progress_runner(backend: Backend, **config: object) -> tuple[TaskRunner, trio.Event]:
    runner = make_runner(backend, **config)
    release = trio.Event()

    @runner.task("crawl")
    async def crawl(payload: int, ctx: TaskContext) -> int:
        await ctx.progress(0.25)
        await ctx.progress(0.5, "half way")
        await release.wait()
        return payload

    @runner.task("tally")
    async def tally(payload: int) -> int:
        return payload + 1

    return runner, release


async def check_step_progress(runner: TaskRunner, release: trio.Event) -> None:
    wf = await runner.dispatch_workflow(chain(runner.step("crawl", 4), runner.step("tally")))
    seen: dict[str, StepStatus] = {}

    async def look() -> None:
        status = await wf.status()
        assert status is not None
        seen.update({s.id: s for s in status.steps})

    async with serving(runner):
        with trio.fail_after(60):
            while seen.get("crawl") is None or seen["crawl"].progress is None:
                await look()
                await trio.sleep(0.2)
        assert seen["crawl"].state is StepState.QUEUED
        assert seen["crawl"].progress == 0.5
        assert seen["crawl"].progress_note == "half way"
        assert seen["tally"].progress is None  # pending: no task yet
        release.set()
        assert await wf.result(timeout=30) == 5
        await look()
    assert seen["crawl"].state is StepState.SUCCEEDED
    assert seen["crawl"].progress is None, "a finished step shows no progress"


async def test_status_shows_a_running_steps_progress(
    autojump_clock: trio.testing.MockClock,
) -> None:
    runner, release = progress_runner(MemoryBackend())
    await check_step_progress(runner, release)


async def test_status_without_progress_reports_shows_none(
    autojump_clock: trio.testing.MockClock,
) -> None:
    runner, _ = progress_runner(MemoryBackend())
    wf = await runner.dispatch_workflow(chain(runner.step("tally", 1), runner.step("tally")))
    async with serving(runner):
        assert await wf.result(timeout=30) == 3
    status = await wf.status()
    assert status is not None
    assert [s.progress for s in status.steps] == [None, None]
