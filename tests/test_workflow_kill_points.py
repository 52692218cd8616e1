"""Crashes at each named point of a workflow step's life (tests/_workflow_kills.py) on
one MemoryBackend under MockClock: every workflow ends with its result, every step is
counted once and queued once, whichever point the crash lands on; and a crash in a
cancel (its reply lost, or a running step's runner dying as it learns of its stop)
still ends every workflow ``CANCELLED`` with nothing run after it."""

from __future__ import annotations

from typing import Any

import pytest
import trio
import trio.testing
from _workflow_kills import (
    CANCEL_POINTS,
    POINTS,
    KillFleet,
    KillLink,
    Point,
    check_completions,
    check_every_workflow,
    dispatch,
)

from taskrunner import WorkflowState, chain
from taskrunner.backends import Backend
from taskrunner.backends.memory import MemoryBackend

pytestmark = pytest.mark.mockclock

WORKFLOWS = 3
"""Chords and chains each (the point fires in one of them)."""

CONFIG: dict[str, Any] = {"reclaim_delay": 5.0, "shutdown_grace": 0.0, "block_duration": 1.0}


async def crash_at(backend: Backend, point: Point, config: dict[str, Any]) -> KillFleet:
    fleet = KillFleet(backend, point, config)
    client = fleet.runner(backend)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(fleet.supervise, nursery, 2)
        handles = await dispatch(client, WORKFLOWS)
        with trio.fail_after(600):
            await check_every_workflow(fleet, backend, "g", handles)
        nursery.cancel_scope.cancel()
    assert fleet.fired_at is not None, f"no call reached {point.name}"
    assert fleet.crashes == (1 if point.crash else 0)
    check_completions(fleet, point)
    return fleet


@pytest.mark.parametrize("point", POINTS, ids=lambda p: p.name)
async def test_a_crash_at_each_point_of_a_step_loses_and_repeats_nothing(
    autojump_clock: trio.testing.MockClock, point: Point
) -> None:
    await crash_at(MemoryBackend(), point, CONFIG)


async def cancel_with_crash(backend: Backend, point: Point, config: dict[str, Any]) -> KillFleet:
    fleet = KillFleet(backend, point, config)
    client = fleet.runner(backend)
    canceller = KillLink(backend, fleet)  # a client that crashes too (cancel_workflow)
    cancelling = fleet.runner(canceller)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(fleet.supervise, nursery, 2)
        handles = [
            await client.dispatch_workflow(chain(client.step("hold"), client.step("sink")))
            for _ in range(WORKFLOWS)
        ]
        with trio.fail_after(600):
            while len(fleet.task_ids) < WORKFLOWS:  # noqa: ASYNC110 (every hold runs)
                await trio.sleep(0.1)
            for wf in handles:
                try:
                    await cancelling.get_workflow(wf.id).cancel()
                except Exception:  # the crashed canceller's reply is lost
                    assert canceller.cut
                    await client.get_workflow(wf.id).cancel()
            for wf in handles:
                status = None
                while status is None or status.counts.get("queued"):
                    await trio.sleep(0.5)
                    status = await wf.status()
                assert status.state is WorkflowState.CANCELLED
                assert {s.id: s.state.value for s in status.steps} == {
                    "hold": "cancelled",
                    "sink": "cancelled",
                }
        nursery.cancel_scope.cancel()
    assert fleet.fired_at is not None, f"no call reached {point.name}"
    assert not fleet.completed, "nothing runs to its end after a cancel"
    assert all(len(ids) == 1 for ids in fleet.task_ids.values()), fleet.task_ids
    ends = await backend.workflow_ends("g")  # type: ignore[attr-defined]
    assert ends == {"succeeded": 0, "failed": 0, "cancelled": WORKFLOWS}
    return fleet


@pytest.mark.parametrize("point", CANCEL_POINTS, ids=lambda p: p.name)
async def test_a_crash_in_a_cancel_still_cancels_every_workflow(
    autojump_clock: trio.testing.MockClock, point: Point
) -> None:
    await cancel_with_crash(MemoryBackend(), point, CONFIG)
