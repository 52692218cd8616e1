"""A flush after a real run leaves no key of the group behind: a run with the event
stream (``events=True``), a task's progress (``ctx.progress``) and a workflow, and in
the cluster layout a sharded group's dispatches too, then ``admin.flush``. "No key
behind" is asked of the store itself (every name it holds that names the group), not
of the listing, so a key the listing does not know fails the test. The same scenario
runs on a real server in tests/redis/test_redis_flush_run.py."""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable

import pytest
import trio
import trio.testing
from _fleet import make_runner, serving

from taskrunner import TaskContext, TaskRunner, TaskRunnerConfig, admin, chain
from taskrunner.backends import KeyKind
from taskrunner.backends._protocols import Backend
from taskrunner.backends.memory import MemoryBackend

Names = Callable[[], Awaitable[list[str]]]
"""Every key name the store holds now."""

SHARDS = 4


def fresh_group() -> str:
    return f"flush-{uuid.uuid4().hex[:8]}"


async def run_then_flush(backend: Backend, group: str, names: Names) -> None:
    """Serve a run that reports progress, writes events and runs a workflow; check the
    listing shows those keys; flush; check the store holds no name of the group."""
    runner = make_runner(backend, consumer_group=group, events=True)

    @runner.task("report", keep_result=60.0)
    async def report(payload: int, ctx: TaskContext) -> int:
        await ctx.progress(0.5, "half way")
        return payload

    async with serving(runner):
        assert await (await runner.dispatch("report", 1)).result(timeout=30) == 1
        flow = chain(runner.step("report", 2), runner.step("report"))
        assert await (await runner.dispatch_workflow(flow)).result(timeout=30) == 2
    sharded = f"{group}-sharded" if backend.key_layout == "cluster" else None
    if sharded is not None:  # a sharded group's dispatches (not served: its shards hold them)
        config = TaskRunnerConfig(consumer_group=sharded, shards=SHARDS, host="producer")
        producer = TaskRunner(config, backend)
        producer.task("report")(report)
        for n in range(8):
            await producer.dispatch("report", n)
        await producer.dispatch_delayed("report", 9, 60.0)
        sharded_kinds = {key.kind for key in await admin.list_keys(backend, sharded)}
        assert {KeyKind.STREAM, KeyKind.SHARD_COUNT} <= sharded_kinds, sharded_kinds
    kinds = {key.kind for key in await admin.list_keys(backend, group)}
    wanted = {KeyKind.EVENTS, KeyKind.PROGRESS, KeyKind.WORKFLOW, KeyKind.WORKFLOW_ENDS}
    assert wanted <= kinds, f"not listed: {sorted(wanted - kinds)}"

    for flushed in (group, sharded):
        if flushed is not None:
            await admin.flush(backend, flushed, confirm=True)

    left = sorted(name for name in await names() if group in name)
    assert left == [], f"the flush left keys of {group!r} behind: {left}"
    listed = [
        key
        for key in await admin.list_keys(backend, group)
        if key.kind not in (KeyKind.HEARTBEAT, KeyKind.UNIQUE_LOCK)  # every group's (go)
    ]
    assert listed == [], f"listed after the flush: {listed}"


@pytest.mark.parametrize("key_layout", ["go", "cluster"])
async def test_a_flush_after_a_run_leaves_no_key(
    key_layout: str, autojump_clock: trio.testing.MockClock
) -> None:
    async with MemoryBackend(key_layout=key_layout) as backend:  # type: ignore[arg-type]

        async def names() -> list[str]:
            # What the store holds, from its own tables (not from the listing): a
            # store the listing does not know is caught too.
            found = [*backend._all_keys(), *backend._flows, *backend._results]
            found += [f"{name} (events)" for name, s in backend._event_streams.items() if s.entries]
            found += [f"{g}:{task} (progress)" for g, task in backend._progress]
            found += [f"{g} (workflow ends)" for g, ends in backend._workflow_ends.items() if ends]
            return found + list(backend._strings) + list(backend._notices)

        await run_then_flush(backend, fresh_group(), names)
