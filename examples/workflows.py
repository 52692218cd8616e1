"""Workflows: a chain, a chord, a DAG with a failure policy, and a cancel, in memory.

Run it with ``python examples/workflows.py``; it finishes by itself in about two seconds.
Each step is an ordinary task run; a step given no payload receives its parent's result
(a chain) or the list of its parents' results (a chord); every step sees its parents'
results by step id in ``ctx.parents``.
"""

import logging

import trio

from taskrunner import (
    StepFailed,
    TaskContext,
    TaskRunner,
    TaskRunnerConfig,
    Workflow,
    WorkflowCancelled,
    chain,
    chord,
    group,
)
from taskrunner.backends.memory import MemoryBackend

runner = TaskRunner(TaskRunnerConfig(consumer_group="media"), MemoryBackend())


# --8<-- [start:tasks]
@runner.task()
async def resize(payload: dict[str, int]) -> str:
    return f"thumbs/{payload['id']}.png"


@runner.task()
async def upload(path: str) -> str:  # no payload of its own: its parent's result
    return f"https://cdn.example/{path}"


@runner.task()
async def fetch(payload: dict[str, str]) -> int:
    return len(payload["url"])


@runner.task()
async def merge(sizes: list[int]) -> int:  # after a group: the list of results, in order
    return sum(sizes)


@runner.task(max_retry=0)
async def chart(payload: None) -> str:
    raise RuntimeError("no data for the chart")


@runner.task()
async def mail(payload: dict[str, str], ctx: TaskContext) -> str:
    parts = [
        f"{step}: failed ({value.type})" if isinstance(value, StepFailed) else f"{step}: {value}"
        for step, value in ctx.parents.items()
    ]
    return f"to {payload['to']}: " + ", ".join(parts)


@runner.task()
async def crunch(payload: None) -> None:
    await trio.sleep(3600)


# --8<-- [end:tasks]

# --8<-- [start:periodic]
# Every night at 03:00 Berlin time, one chord (built once), exactly once per tick:
runner.add_schedule(
    "nightly-sizes",
    workflow=chord(
        group(runner.step("fetch", {"url": u}) for u in ("https://a.example", "https://b.example")),
        runner.step("merge"),
    ),
    cron="0 3 * * *",
    timezone="Europe/Berlin",
)
# Every ten minutes, a chain built at each tick (a callable returning one):
runner.periodic(
    every=600,
    name="thumbs",
    workflow=lambda: chain(runner.step("resize", {"id": 7}), runner.step("upload")),
)
# --8<-- [end:periodic]


async def main() -> None:
    print("periodic:", ", ".join(f"{n} ({s.describe()})" for n, s in runner.schedules.items()))
    async with trio.open_nursery() as nursery:
        await nursery.start(runner.serve)
        # --8<-- [start:dispatch]
        wf = await runner.dispatch_workflow(
            chain(runner.step("resize", {"id": 7}), runner.step("upload"))
        )
        print("chain:", await wf.result(timeout=60))

        urls = ["https://a.example", "https://bb.example", "https://ccc.example"]
        wf = await runner.dispatch_workflow(
            chord(group(runner.step("fetch", {"url": u}) for u in urls), runner.step("merge"))
        )
        print("chord:", await wf.result(timeout=60))

        dag = (
            Workflow("report")
            .step("sizes", "fetch", {"url": "https://report.example"})
            .step("chart", "chart", after=["sizes"], on_failure="continue")
            .step("mail", "mail", {"to": "ops"}, after=["sizes", "chart"])
        )
        wf = await runner.dispatch_workflow(dag)
        print("dag:", await wf.result(timeout=60))
        status = await wf.status()
        assert status is not None
        print("dag status:", status.state.value, dict(sorted(status.counts.items())))
        # --8<-- [end:dispatch]

        # --8<-- [start:cancel]
        with trio.move_on_after(0.5):  # leaving the block by cancellation cancels it
            async with runner.workflow(chain(runner.step("crunch"), runner.step("upload"))) as wf:
                await trio.sleep_forever()
        try:
            await wf.result(timeout=60)
        except WorkflowCancelled:
            print("cancelled: result() raised WorkflowCancelled")
        await trio.sleep(1.5)  # the running step is stopped within about a second
        status = await wf.status()
        assert status is not None
        print("cancelled status:", {s.id: s.state.value for s in status.steps})
        # --8<-- [end:cancel]
        nursery.cancel_scope.cancel()


if __name__ == "__main__":
    logging.basicConfig(level=logging.CRITICAL)  # chart's failure is expected
    trio.run(main)
