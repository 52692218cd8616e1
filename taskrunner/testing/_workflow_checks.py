"""Contract checks of the WorkflowStore protocol: a step's finish counted once, its
dependent queued in the same step, the failure cascade, the cancel, the inputs.

A backend that keeps no workflows (it does not implement
:class:`~taskrunner.backends.WorkflowStore`) passes them without being checked: it
refuses ``dispatch_workflow`` instead.
"""

from __future__ import annotations

import uuid

from taskrunner import _wire
from taskrunner._workflows import StepState, WorkflowState
from taskrunner._workflows.graph import StepSpec, compile_graph
from taskrunner._workflows.graph import chord as _chord
from taskrunner._workflows.graph import group as _group
from taskrunner.backends._protocols import Backend
from taskrunner.backends._protocols.tracking import Outcome
from taskrunner.backends._protocols.workflows import WorkflowStates, WorkflowStore
from taskrunner.testing._harness import _contract_check, _fresh_group, _name

_KEEP = 60.0


async def _started(backend: Backend, group: str) -> tuple[str, dict[str, str]]:
    """A chord of two steps ``t.1``, ``t.2`` and its sink ``m``, started: its id and
    its roots' task ids."""
    assert isinstance(backend, WorkflowStore)
    graph = compile_graph(
        _chord(
            _group(StepSpec(task="t", payload=1), StepSpec(task="t", payload=2)), StepSpec(task="m")
        )
    )
    workflow_id = uuid.uuid4().hex
    messages = {
        node.id: _wire.encode_message(
            _wire.TaskMessage(
                task_name=node.task,
                payload=node.payload if node.has_payload else None,
                extras=_wire.MessageExtras(keep_result=_KEEP, workflow=workflow_id, step=node.id),
            )
        )
        for node in graph.steps
    }
    queues: dict[str, str | None] = {node.id: None for node in graph.steps}
    roots = await backend.start_workflow(group, workflow_id, graph, messages, queues, _KEEP)
    again = await backend.start_workflow(group, workflow_id, graph, messages, queues, _KEEP)
    assert again == roots, f"a repeated start must start nothing more, got {again} then {roots}"
    return workflow_id, roots


def _done(
    entry_id: str, workflow_id: str, step: str, state: str = "succeeded", value: object = 1
) -> Outcome:
    if state == "succeeded":
        doc = _wire.succeeded(
            "t", value, attempts=1, enqueued_at=1.0, started_at=2.0, finished_at=3.0
        )
    else:
        doc = _wire.failed(
            "t", "ValueError", "no", attempts=1, enqueued_at=1.0, started_at=2.0, finished_at=3.0
        )
    return Outcome(
        entry_id=entry_id,
        task_id=entry_id,
        document=_wire.encode_result(doc),
        keep=_KEEP,
        notify=_KEEP,
        workflow=workflow_id,
        step=step,
        step_state=state,
    )


@_contract_check
async def check_workflow_fan_in_counts_each_step_once(backend: Backend) -> None:
    """``start_workflow`` queues the roots (once, however often repeated); each step's
    finish counts once however often it is repeated, and the sink is queued exactly
    once, by the finish of its last parent; ``step_inputs`` gives the parents' results
    in declared order; the workflow ends ``SUCCEEDED`` with the sink's finish."""
    if not isinstance(backend, WorkflowStore):
        return
    group, consumer = await _fresh_group(backend), _name("c")
    workflow_id, roots = await _started(backend, group)
    assert sorted(roots) == ["t.1", "t.2"], f"the roots should be queued, got {roots}"
    entries = {e.id: e for e in await backend.read(group, consumer, 10, 0)}
    assert set(entries) == set(roots.values()), "the roots' entries should be in the stream"
    for _ in range(3):  # a finish repeated (a lost reply) counts once
        await backend.finish(
            group, [roots["t.1"]], [_done(roots["t.1"], workflow_id, "t.1", value=10)]
        )
    assert await backend.read(group, consumer, 10, 0) == [], "the sink was queued too early"
    for _ in range(2):
        await backend.finish(
            group, [roots["t.2"]], [_done(roots["t.2"], workflow_id, "t.2", value=20)]
        )
    sinks = await backend.read(group, consumer, 10, 0)
    assert len(sinks) == 1, f"the sink must be queued exactly once, got {len(sinks)} entries"
    message = _wire.decode_message(sinks[0].payload)
    assert message.task_name == "m"
    assert message.extras is not None
    assert message.extras.step == "m", f"the sink's message names step {message.extras.step!r}"
    sources = await backend.step_inputs(group, workflow_id, "m")
    assert not sources.has_payload, "the sink was given no payload"
    values = [_wire.decode_result(p.document).value for p in sources.parents if p.document]
    assert [p.step for p in sources.parents] == ["t.1", "t.2"], sources
    assert values == [10, 20], f"the parents' results in declared order, got {values}"
    record = await backend.read_workflow(group, workflow_id)
    assert record is not None
    assert record.state is WorkflowState.RUNNING
    assert record.counts() == {"succeeded": 2, "queued": 1}, record.counts()
    if isinstance(backend, WorkflowStates):
        state = await backend.workflow_state(group, workflow_id)
        assert state is WorkflowState.RUNNING, f"workflow_state of a running one: {state}"
        assert await backend.workflow_end(group, workflow_id) is None, "it is not over"
    await backend.finish(group, [sinks[0].id], [_done(sinks[0].id, workflow_id, "m")])
    record = await backend.read_workflow(group, workflow_id)
    assert record is not None, "the record is gone"
    assert record.state is WorkflowState.SUCCEEDED, record
    if isinstance(backend, WorkflowStates):
        state = await backend.workflow_state(group, workflow_id)
        assert state is WorkflowState.SUCCEEDED, f"workflow_state of an ended one: {state}"
        assert await backend.workflow_state(group, "no-such-workflow") is None
        over = await backend.workflow_end(group, workflow_id)
        assert over is not None, "the end of a workflow that is over"
        assert over.state is WorkflowState.SUCCEEDED, over
        assert [s.id for s in over.steps] == ["m"], f"its end holds its sink alone: {over.steps}"
        assert over.steps[0].result == next(s.result for s in record.steps if s.id == "m")
    end = await backend.wait_result(group, workflow_id, 0)
    assert end is not None, "a workflow's end must be kept as a result under its id"


@_contract_check
async def check_workflow_failure_cascades(backend: Backend) -> None:
    """A step's failure under ``on_failure="fail"`` ends the workflow ``FAILED`` in its
    finish: its running sibling is asked to stop, its pending dependent cancelled."""
    if not isinstance(backend, WorkflowStore):
        return
    group, consumer = await _fresh_group(backend), _name("c")
    workflow_id, roots = await _started(backend, group)
    await backend.read(group, consumer, 10, 0)  # both running
    await backend.finish(group, [roots["t.1"]], [_done(roots["t.1"], workflow_id, "t.1", "failed")])
    record = await backend.read_workflow(group, workflow_id)
    assert record is not None, "the record is gone"
    assert record.state is WorkflowState.FAILED, record
    assert record.failed_step == "t.1", record.failed_step
    states = {s.id: s.state for s in record.steps}
    assert states["m"] is StepState.CANCELLED, states
    stopped = await backend.cancel_requested(group, [roots["t.2"]])
    assert stopped == [roots["t.2"]], "the running sibling must be asked to stop"
    if isinstance(backend, WorkflowStates):
        end = await backend.workflow_end(group, workflow_id)
        assert end is not None, "the end of a workflow that failed"
        assert end.failed_step == "t.1", end.failed_step
        ids = sorted(s.id for s in end.steps)
        assert ids == ["m", "t.1"], f"its end holds its sink and its failed step: {ids}"
    assert not await backend.cancel_workflow(group, workflow_id), "it is over already"


@_contract_check
async def check_workflow_cancel_removes_queued_steps(backend: Backend) -> None:
    """``cancel_workflow`` ends a running workflow ``CANCELLED`` in one step: its queued
    steps leave the stream, its pending ones are cancelled; a repeat does nothing."""
    if not isinstance(backend, WorkflowStore):
        return
    group = await _fresh_group(backend)
    before = await backend.length(group)
    workflow_id, _ = await _started(backend, group)
    assert await backend.length(group) == before + 2
    assert await backend.cancel_workflow(group, workflow_id), "a running workflow is cancelled"
    assert await backend.length(group) == before, "its queued steps must leave the stream"
    record = await backend.read_workflow(group, workflow_id)
    assert record is not None, "the record is gone"
    assert record.state is WorkflowState.CANCELLED, record
    assert record.counts() == {"cancelled": 3}, record.counts()
    assert not await backend.cancel_workflow(group, workflow_id), "a repeat cancels nothing"
    assert await backend.read_workflow(group, "no-such-workflow") is None
