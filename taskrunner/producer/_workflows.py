"""Workflows from a producer: ``Producer.dispatch_workflow`` and ``AsyncProducer``'s.

Theory of operation. A producer starts a workflow exactly as the runner's
backend does: it compiles the same graph
(:func:`taskrunner._workflows.graph.compile_graph`), encodes each step's
message from what it knows of the step's task (:class:`~taskrunner._wire.CatalogTask`:
its settings from the catalog when strict, the defaults otherwise, the
queue a step names or its task is served on), with ``workflow``, ``step`` and
the workflow's ``keep`` as its ``keep_result``, and sends the runner's own
``lua/start_workflow.lua`` calls, with the same ``KEYS`` and ``ARGV``
(:func:`taskrunner.backends.redis._workflows.start_workflow_calls`): up to
``START_CHUNK`` steps the record is written and the roots queued in one atomic step;
a wider workflow starts in chunks, as the runner's does. From then on the workflow is the
runners'; ``runner.get_workflow(id)`` or ``taskrunner.admin.get_workflow`` follow
it. This module is the part without I/O; the producers send what it plans.
"""

from __future__ import annotations

import math
import time
import uuid
from typing import Any

from taskrunner import _wire
from taskrunner._workflows import NO_PAYLOAD, StepSpec, Workflow
from taskrunner._workflows.graph import Canvas, _check_policy, compile_graph
from taskrunner._workflows.keys import running_workflows, workflow_key
from taskrunner.backends.redis._connection import CommandArg
from taskrunner.backends.redis._step_cancel import cancel_step_call, named_step
from taskrunner.backends.redis._workflows import StartCall, start_workflow_calls
from taskrunner.producer._core import LUA, ProducerCore
from taskrunner.producer._plan import DEFAULT_QUEUE, wire_payload

__all__ = [
    "FINISH_SOURCE",
    "START_WORKFLOW_SOURCE",
    "plan_workflow",
    "producer_step",
    "step_cancel_call",
    "task_names",
]

START_WORKFLOW_SOURCE = (LUA / "start_workflow.lua").read_text()
"""The runner's ``lua/start_workflow.lua``."""
FINISH_SOURCE = (LUA / "finish.lua").read_text()
"""The runner's ``lua/finish.lua`` (its ``cancel_step``: a producer's cancel of a step)."""


def step_cancel_call(
    core: ProducerCore, task_id: str, reply: Any
) -> tuple[list[str], list[CommandArg]] | None:
    """The ``lua/finish.lua`` call that cancels the step ``lua/track.lua``'s cancel
    ``reply`` names and counts it in its workflow (its policy and the cancel cascade
    applied, as ``runner.cancel`` does), or ``None`` when the reply names no step."""
    named = named_step(reply)
    if named is None:
        return None
    _, workflow_id, step = named
    keys, args = cancel_step_call(
        core.destination.consumer_group,
        core.destination.key_layout,
        task_id,
        workflow_id,
        step,
        core.cancel_streams(),
        time.time(),
    )
    return [str(k) for k in keys], args


def producer_step(
    task_name: str,
    payload: Any = NO_PAYLOAD,
    *,
    id: str | None = None,
    queue: str | None = None,
    on_failure: str = "fail",
) -> StepSpec:
    """One run of task ``task_name`` in a workflow (as ``runner.step``).

    Raises:
        ValueError: ``on_failure`` is not ``"fail"``, ``"continue"`` or ``"skip"``.
    """
    _check_policy(id or task_name, on_failure)
    return StepSpec(task=task_name, payload=payload, id=id, queue=queue, on_failure=on_failure)


def task_names(work: Workflow | Canvas | StepSpec) -> list[str]:
    """The task names of ``work``'s steps (for a strict producer's catalog read)."""
    graph = compile_graph(work)
    nodes = [*graph.steps, *([graph.handler] if graph.handler is not None else [])]
    return sorted({node.task for node in nodes})


def plan_workflow(
    core: ProducerCore, work: Workflow | Canvas | StepSpec, keep: float
) -> tuple[str, list[StartCall]]:
    """``(workflow id, calls)``: the ``lua/start_workflow.lua`` calls (``(KEYS, ARGV)``,
    to send in order: one up to ``START_CHUNK`` steps, in chunks past it) that start
    ``work`` (every step's message encoded before anything is sent).

    Raises:
        InvalidWorkflow: a cycle, an unknown parent, a duplicate step id.
        TaskNotFound: strict, and a step's task is served by no live runner.
        InvalidTaskPayload: a step's payload cannot be encoded.
        ValueError: a step's task is unique, a queue name is invalid, or ``keep`` is
            not seconds > 0.
    """
    if not (keep > 0 and math.isfinite(keep)):
        raise ValueError(f"keep should be seconds > 0, got {keep!r}")
    graph = compile_graph(work)
    workflow_id = uuid.uuid4().hex
    messages: dict[str, bytes] = {}
    queues: dict[str, str | None] = {}
    streams: dict[str, str] = {}
    nodes = [*graph.steps, *([graph.handler] if graph.handler is not None else [])]
    for node in nodes:
        destination = core.route(node.task, node.queue)
        task = core.step_task(node.task, destination)
        if task.unique:
            raise ValueError(
                f"step {node.id!r}: task {node.task!r} is unique, and a unique task "
                "cannot be a workflow step"
            )
        wire = wire_payload(node.payload) if node.has_payload else None
        # A first step given a payload has nothing to read before it runs.
        reads = bool(node.parents) or not node.has_payload or node is graph.handler
        message = _wire.new_message(
            task, wire, keep_result=keep, workflow=workflow_id, step=node.id, step_inputs=reads
        )
        messages[node.id] = _wire.encode_message(message)
        # The backend's own queue is named by no queue (as the runner's dispatch does).
        queues[node.id] = None if destination.queue == DEFAULT_QUEUE else destination.queue
        streams[node.id] = destination.stream
    layout = core.destination.key_layout
    record = workflow_key(core.destination.consumer_group, workflow_id, layout)
    index = running_workflows(core.destination.consumer_group, layout)
    calls = start_workflow_calls(record, index, graph, messages, queues, streams, keep, time.time())
    return workflow_id, calls
