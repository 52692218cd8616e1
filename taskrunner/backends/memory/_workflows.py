"""The :class:`~taskrunner.backends.WorkflowStore` protocol in memory.

Theory of operation: a workflow's record is a :class:`_Flow` under its key
(:func:`~taskrunner._workflows.keys.workflow_key`), holding the compiled
graph itself and the mutable :class:`~taskrunner._workflows.decisions.Progress`.
Every decision is :mod:`taskrunner._workflows.decisions`'s, applied with no
checkpoint in between, so each step is atomic as its Lua script is: a step's
finish is counted inside :meth:`~.MemoryTracking.finish` (before its ack,
:meth:`_step_finished`), a queued or delayed step cancelled by
:meth:`~.MemoryTracking.cancel` inside that call (:meth:`_step_removed`), and
the cancel cascade of a failed or cancelled workflow goes through the same
cancel step for each step not finished. A record expires ``keep`` seconds after
its workflow ends (lazily, when looked at).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping

import attrs
import trio

from taskrunner import _keys, _wire
from taskrunner._workflows import StepState, WorkflowGraph, WorkflowState
from taskrunner._workflows.audit import Verdict, audit_step, uncounted_reason
from taskrunner._workflows.decisions import Decision, Progress, cancel, finish, start
from taskrunner._workflows.inputs import ParentResult
from taskrunner._workflows.keys import workflow_key
from taskrunner.backends._protocols.events import TaskProgress
from taskrunner.backends._protocols.tracking import Outcome
from taskrunner.backends._protocols.workflows import StepRecord, StepSources, WorkflowRecord
from taskrunner.backends.memory._tracking import MemoryTracking

__all__ = ["MemoryWorkflows"]


@attrs.define(eq=False)
class _Flow:
    workflow_id: str
    graph: WorkflowGraph
    state: WorkflowState
    steps: dict[str, StepState]
    waiting: dict[str, int]
    messages: dict[str, bytes]
    queues: Mapping[str, str | None]
    keep: float
    created_at: float
    task_ids: dict[str, str] = attrs.Factory(dict)
    results: dict[str, bytes] = attrs.Factory(dict)
    left: int = 0
    failed_step: str = ""
    reason: str = ""
    expires_at: float = math.inf
    suspects: dict[str, float] = attrs.Factory(dict)
    """Queued steps found nowhere by the leader's check, and since when."""

    def progress(self) -> Progress:
        return Progress(state=self.state, steps=self.steps, waiting=self.waiting, left=self.left)


def _end_document(flow: _Flow, now: float) -> bytes:
    """The result kept under the workflow's id when it ends: what wakes ``wf.result``."""
    name = f"workflow:{flow.graph.name}"
    begun = flow.created_at
    if flow.state is WorkflowState.SUCCEEDED:
        doc = _wire.succeeded(
            name, None, attempts=1, enqueued_at=begun, started_at=begun, finished_at=now
        )
    elif flow.state is WorkflowState.FAILED:
        doc = _wire.failed(
            name,
            "WorkflowFailed",
            flow.reason or flow.failed_step,
            attempts=1,
            enqueued_at=begun,
            started_at=begun,
            finished_at=now,
        )
    else:
        doc = _wire.cancelled(name, attempts=1, enqueued_at=begun, finished_at=now)
    return _wire.encode_result(doc)


class MemoryWorkflows(MemoryTracking):
    """A :class:`~taskrunner.backends.WorkflowStore` in process memory."""

    def _init_workflows(self) -> None:
        self._flows: dict[str, _Flow] = {}
        # group -> outcome -> workflows that ended so (lua's taskrunner:<group>:workflow_ends)
        self._workflow_ends: dict[str, dict[str, int]] = {}

    def _flow(self, group: str, workflow_id: str) -> _Flow | None:
        key = workflow_key(group, workflow_id, self.key_layout)
        flow = self._flows.get(key)
        if flow is not None and flow.expires_at <= trio.current_time():
            del self._flows[key]
            return None
        return flow

    def workflow_keys(self, group: str) -> list[str]:
        """Live workflow records of ``group`` (for inspection and tests)."""
        head = workflow_key(group, "", self.key_layout)
        now = trio.current_time()
        return [k for k, f in self._flows.items() if k.startswith(head) and f.expires_at > now]

    async def start_workflow(
        self,
        group: str,
        workflow_id: str,
        graph: WorkflowGraph,
        messages: Mapping[str, bytes],
        queues: Mapping[str, str | None],
        keep: float,
    ) -> dict[str, str]:
        await trio.lowlevel.checkpoint()
        key = workflow_key(group, workflow_id, self.key_layout)
        flow = self._flows.get(key)
        if flow is None:
            begun = start(graph)
            flow = self._flows[key] = _Flow(
                workflow_id=workflow_id,
                graph=graph,
                state=begun.state,
                steps=dict(begun.steps),
                waiting=dict(begun.waiting),
                messages=dict(messages),
                queues=dict(queues),
                keep=keep,
                created_at=trio.current_time(),
                left=len(graph.steps),
            )
            for node in graph.roots:
                self._queue_step(group, flow, node.id)
        return {node.id: flow.task_ids[node.id] for node in graph.roots if node.id in flow.task_ids}

    def _queue_step(self, group: str, flow: _Flow, step: str) -> None:
        """Hand ``step`` to its queue: the one place a step is queued (a sharded group
        picks the stream here)."""
        message = flow.messages.pop(step)
        flow.task_ids[step] = self.add_raw(group, {"payload": message}, queue=flow.queues.get(step))

    def _apply(
        self, group: str, flow: _Flow, decision: Decision, document: bytes | None, step: str
    ) -> None:
        if decision.duplicate:
            return
        if document is not None and step:
            flow.results[step] = document
        flow.steps.update(decision.states)
        flow.waiting.update(decision.waiting)
        if decision.left is not None:
            flow.left = decision.left
        if decision.end is not None:
            flow.state = decision.end
            flow.failed_step = decision.failed_step
            ends = self._workflow_ends.setdefault(group, {})
            ends[flow.state.value] = ends.get(flow.state.value, 0) + 1
            now = trio.current_time()
            flow.expires_at = now + flow.keep
            self._keep(
                group,
                flow.workflow_id,
                _end_document(flow, self.unix_time(now)),
                flow.keep,
                _wire.notify_ttl(flow.keep),
            )
        for queued in decision.queue:
            self._queue_step(group, flow, queued)
        for doomed in decision.cancel:
            # The cascade: queued and delayed steps are removed (their removal counts them
            # cancelled, below), running ones asked to stop (their finish counts them).
            task_id = flow.task_ids.get(doomed)
            if task_id is not None:
                self._cancel_now(group, task_id, [q for q in [flow.queues.get(doomed)] if q])

    def _step_finished(self, group: str, outcome: Outcome) -> None:
        assert outcome.workflow is not None
        flow = self._flow(group, outcome.workflow)
        if flow is None:
            return
        decision = finish(flow.graph, flow.progress(), outcome.step, StepState(outcome.step_state))
        self._apply(group, flow, decision, outcome.document, outcome.step)

    def _step_removed(self, group: str, raw: bytes | None) -> None:
        if raw is None or b'"workflow"' not in raw:
            return  # not a step: one test
        try:
            doc = json.loads(raw)
        except ValueError:
            return
        workflow, step = doc.get("workflow"), doc.get("step")
        if not isinstance(workflow, str) or not isinstance(step, str):
            return
        flow = self._flow(group, workflow)
        if flow is None:
            return
        decision = finish(flow.graph, flow.progress(), step, StepState.CANCELLED)
        self._apply(group, flow, decision, None, step)

    def _step_present(self, group: str, flow: _Flow, step: str) -> bool:
        """Whether a queued step is anywhere a taskrunner worker leaves it: delayed,
        pending, in its stream undelivered, or parked (its task paused)."""
        task_id = flow.task_ids.get(step)
        if task_id is None:
            return False
        member = self._delayed_index.get(group, {}).get(task_id)
        if member is not None and member in self._delayed.get(group, {}):
            return True
        entry_id = self._entry_of(group, task_id)
        s = self._streams.get(self.stream_keys(group, flow.queues.get(step)).stream)
        if entry_id is not None and s is not None:
            g = s.groups.get(group)
            seq = s.seq_of.get(entry_id)
            if g is not None and entry_id in g.pending:
                return True
            if seq is not None and (g is None or seq > g.cursor):
                return True
        paused: set[bytes] | None = getattr(self, "_sets", {}).get(
            _keys.paused(group, self.key_layout)
        )
        return paused is not None and f"task:{flow.graph.step(step).task}".encode() in paused

    async def audit_steps(self, group: str, grace: float) -> list[str]:
        await trio.lowlevel.checkpoint()
        now = trio.current_time()
        head = workflow_key(group, "", self.key_layout)
        failed: list[str] = []
        for key, flow in list(self._flows.items()):
            if not key.startswith(head) or flow.state.final:
                continue
            for step, state in list(flow.steps.items()):
                if state is not StepState.QUEUED or flow.state.final:
                    continue
                present = self._step_present(group, flow, step)
                verdict = audit_step(present, flow.suspects.get(step), now, grace)
                if verdict is Verdict.SUSPECT:
                    flow.suspects[step] = now
                elif verdict is Verdict.CLEAR:
                    del flow.suspects[step]
                elif verdict is Verdict.FAIL:
                    decision = finish(
                        flow.graph, flow.progress(), step, StepState.FAILED, policy="fail"
                    )
                    flow.reason = uncounted_reason(step)
                    self._apply(group, flow, decision, None, step)
                    failed.append(flow.workflow_id)
        return failed

    async def read_workflow(self, group: str, workflow_id: str) -> WorkflowRecord | None:
        await trio.lowlevel.checkpoint()
        flow = self._flow(group, workflow_id)
        if flow is None:
            return None
        graph = flow.graph
        nodes = list(graph.steps)
        if graph.handler is not None and graph.handler.id in flow.steps:
            nodes.append(graph.handler)
        return WorkflowRecord(
            workflow_id=workflow_id,
            name=graph.name,
            state=flow.state,
            steps=tuple(
                StepRecord(
                    id=node.id,
                    task=node.task,
                    state=flow.steps[node.id],
                    queue=flow.queues.get(node.id),
                    parents=node.parents,
                    task_id=flow.task_ids.get(node.id),
                    result=flow.results.get(node.id),
                    on_failure=node.on_failure,
                    progress=self._step_progress(group, flow, node.id),
                )
                for node in nodes
            ),
            sinks=graph.sinks,
            failed_step=flow.failed_step,
            reason=flow.reason,
            created_at=flow.created_at,
        )

    def _step_progress(self, group: str, flow: _Flow, step: str) -> TaskProgress | None:
        # MemoryEvents keeps progress (as MemoryInspection reads it: a backend built
        # without that base has none).
        task_id = flow.task_ids.get(step)
        if flow.steps[step] is not StepState.QUEUED or task_id is None:
            return None
        kept = getattr(self, "_progress", {}).get((group, task_id))
        if kept is None or kept[1] <= trio.current_time():
            return None
        progress: TaskProgress = kept[0]
        return progress

    async def workflow_state(self, group: str, workflow_id: str) -> WorkflowState | None:
        await trio.lowlevel.checkpoint()
        flow = self._flow(group, workflow_id)
        return None if flow is None else flow.state

    async def workflow_end(self, group: str, workflow_id: str) -> WorkflowRecord | None:
        record = await self.read_workflow(group, workflow_id)
        if record is None or not record.state.final:
            return None
        wanted = {*record.sinks, record.failed_step}
        return attrs.evolve(record, steps=tuple(s for s in record.steps if s.id in wanted))

    async def workflow_ends(self, group: str) -> dict[str, int]:
        await trio.lowlevel.checkpoint()
        ends = self._workflow_ends.get(group, {})
        return {state.value: ends.get(state.value, 0) for state in WorkflowState if state.final}

    async def step_inputs(self, group: str, workflow_id: str, step: str) -> StepSources:
        await trio.lowlevel.checkpoint()
        flow = self._flow(group, workflow_id)
        graph = flow.graph if flow is not None else None
        if flow is None or graph is None:
            return StepSources(has_payload=True)
        try:
            node = graph.step(step)
        except KeyError:
            return StepSources(has_payload=True)
        if graph.handler is not None and step == graph.handler.id:
            failed = flow.failed_step
            parents = (
                (ParentResult(step=failed, policy="continue", document=flow.results.get(failed)),)
                if failed
                else ()
            )
            return StepSources(has_payload=node.has_payload, parents=parents)
        return StepSources(
            has_payload=node.has_payload,
            parents=tuple(
                ParentResult(
                    step=parent,
                    policy=graph.step(parent).on_failure,
                    document=flow.results.get(parent),
                )
                for parent in node.parents
            ),
        )

    async def cancel_workflow(self, group: str, workflow_id: str) -> bool:
        await trio.lowlevel.checkpoint()
        flow = self._flow(group, workflow_id)
        if flow is None:
            return False
        decision = cancel(flow.graph, flow.progress())
        self._apply(group, flow, decision, None, "")
        return not decision.duplicate
