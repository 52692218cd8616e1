"""The workflows half of :class:`~taskrunner.TaskRunner`'s API: ``runner.step``,
``runner.dispatch_workflow``, ``runner.workflow`` and the :class:`WorkflowHandle`.

Theory of operation. ``dispatch_workflow`` compiles the workflow
(:func:`taskrunner._workflows.graph.compile_graph`), encodes every step's
message once (its task's settings, its payload's wire form or none, and
``workflow``/``step`` in its extras, with the workflow's ``keep`` as its
``keep_result``: a step always keeps its result, which its dependents receive),
and hands them to the backend's :meth:`~taskrunner.backends.WorkflowStore.start_workflow`,
which writes the record and queues the roots in one atomic step. From then on
the workflow moves inside the backend: every step's finish, counted with its
ack, queues its dependents (see :mod:`taskrunner.backends._protocols.workflows`).

The handle reads the record (``status``: one round trip), waits for the
workflow's end (``result``: the end is recorded as a result under the
workflow's id, so it waits as a task's result does) and cancels it.
"""

from __future__ import annotations

import math
import uuid
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any

import attrs
import trio

from taskrunner import _wire
from taskrunner._config import ConfigHolder
from taskrunner._dispatch.dispatcher import _queue_of
from taskrunner._dispatch.guards import require_trio
from taskrunner._task import Task
from taskrunner._workflows import (
    NO_PAYLOAD,
    StepFailed,
    StepSpec,
    StepState,
    Workflow,
    WorkflowCancelled,
    WorkflowFailed,
    WorkflowState,
)
from taskrunner._workflows.graph import Canvas, _check_policy, compile_graph
from taskrunner.backends import Backend, WorkflowRecord, WorkflowStates, WorkflowStore
from taskrunner.errors import TaskNotFound

__all__ = ["DEFAULT_KEEP", "StepStatus", "WorkflowHandle", "WorkflowStatus", "Workflows"]

DEFAULT_KEEP = 24 * 3600.0
"""Seconds a workflow's record and its steps' results live once it is over."""

_WAIT_SLICE = 3600.0


@attrs.frozen(kw_only=True)
class StepStatus:
    """One step of :class:`WorkflowStatus`."""

    id: str
    task: str
    state: StepState
    task_id: str | None = None
    """Its task's id once queued (``runner.get_task`` of it says queued, running...)."""
    queue: str | None = None
    error_type: str = ""
    error: str = ""
    """A failed step's error."""
    progress: float | None = None
    """A queued (running) step's last reported progress, the fraction of its
    ``ctx.progress`` (``None`` when it reported none)."""
    progress_note: str | None = None
    """The note of that report, if any."""
    parents: tuple[str, ...] = ()
    """The steps it runs after (their ids, declared order)."""
    on_failure: str = "fail"
    """Its failure policy: ``"fail"``, ``"continue"`` or ``"skip"``."""


@attrs.frozen(kw_only=True)
class WorkflowStatus:
    """A workflow as ``wf.status()`` found it (one round trip)."""

    workflow_id: str
    name: str
    state: WorkflowState
    counts: Mapping[str, int]
    """Steps per state (``"pending"``, ``"queued"``, ``"succeeded"``...)."""
    steps: tuple[StepStatus, ...]
    failed_step: str = ""
    reason: str = ""
    created_at: float = 0.0
    """When it was dispatched (unix seconds, the backend's clock)."""


def _error_of(document: bytes | None) -> tuple[str, str]:
    if document is None:
        return "", ""
    doc = _wire.decode_result(document)
    return doc.error_type, doc.error


def status_of(record: WorkflowRecord) -> WorkflowStatus:
    """The status a record says."""
    steps = []
    for step in record.steps:
        error_type, error = _error_of(step.result) if step.state is StepState.FAILED else ("", "")
        steps.append(
            StepStatus(
                id=step.id,
                task=step.task,
                state=step.state,
                task_id=step.task_id,
                queue=step.queue,
                error_type=error_type,
                error=error,
                parents=step.parents,
                on_failure=step.on_failure,
                progress=None if step.progress is None else step.progress.fraction,
                progress_note=None if step.progress is None else step.progress.note,
            )
        )
    return WorkflowStatus(
        workflow_id=record.workflow_id,
        name=record.name,
        state=record.state,
        counts=record.counts(),
        steps=tuple(steps),
        failed_step=record.failed_step,
        reason=record.reason,
        created_at=record.created_at,
    )


def _sink_value(step: str, document: bytes | None) -> Any:
    if document is None:
        return None
    doc = _wire.decode_result(document)
    if doc.state is _wire.TaskState.SUCCEEDED:
        return doc.value
    return StepFailed(step, doc.error_type or "TaskCancelled", doc.error)


def result_of(record: WorkflowRecord) -> Any:
    """The result of a workflow that is over: its one sink's result, or a dict of its
    sinks' results by step id.

    Raises:
        WorkflowFailed: it failed.
        WorkflowCancelled: it was cancelled.
    """
    if record.state is WorkflowState.CANCELLED:
        raise WorkflowCancelled(record.workflow_id)
    steps = {step.id: step for step in record.steps}
    if record.state is WorkflowState.FAILED:
        failed = steps.get(record.failed_step)
        error_type, error = _error_of(failed.result if failed is not None else None)
        if failed is not None and failed.state is StepState.CANCELLED:
            error_type, error = "TaskCancelled", "the step was cancelled"
        raise WorkflowFailed(
            record.workflow_id,
            record.failed_step,
            error_type or ("UncountedStep" if record.reason else "Error"),
            error or record.reason,
        )
    values = {s: _sink_value(s, steps[s].result) for s in record.sinks}
    if len(values) == 1:
        return next(iter(values.values()))
    return values


class WorkflowHandle:
    """A dispatched workflow: ``wf.id`` (also ``str(wf)``), its ``result``, ``status``
    and ``cancel``."""

    def __init__(self, workflow_id: str, name: str, flows: WorkflowTracker) -> None:
        self.id = workflow_id
        self.name = name
        self._flows = flows

    def __repr__(self) -> str:
        return f"WorkflowHandle(id={self.id!r}, name={self.name!r})"

    def __str__(self) -> str:
        return self.id

    async def result(self, timeout: float | None = None) -> Any:  # noqa: ASYNC109
        """Wait for the workflow to end and return its result: its last step's result,
        or a dict of its last steps' results by step id (a sink that failed under
        ``on_failure="continue"`` as a :class:`~taskrunner.StepFailed`).

        Raises:
            WorkflowFailed: it failed (the step, its error's type and text).
            WorkflowCancelled: it was cancelled.
            trio.TooSlowError: it did not end within ``timeout`` seconds (it runs on).
            BackendError: the backend could not be reached.

        Cancellation: waiting leaves nothing behind.
        """
        return await self._flows.result(self.id, timeout)

    async def status(self) -> WorkflowStatus | None:
        """Its state, the count of steps per state and each step's state, read in one
        round trip; ``None`` once its record has expired."""
        return await self._flows.status(self.id)

    async def cancel(self) -> bool:
        """Cancel it: pending steps are dropped, queued and delayed ones removed, running
        ones stopped fleet-wide within about a second; it ends ``CANCELLED``.

        Returns:
            Whether it was running.
        """
        return await self._flows.cancel(self.id)


class WorkflowTracker:
    """Dispatches workflows and reads them (the runner's, see :class:`Workflows`)."""

    def __init__(self, config: ConfigHolder, backend: Backend, tasks: Mapping[str, Task]) -> None:
        self._config = config
        self._backend = backend
        self._tasks = tasks

    def _store(self) -> WorkflowStore:
        if not isinstance(self._backend, WorkflowStore):
            raise TypeError(f"{type(self._backend).__name__} keeps no workflows")
        return self._backend

    @property
    def _group(self) -> str:
        return self._config.current.consumer_group

    async def dispatch(
        self, work: Workflow | Canvas | StepSpec, keep: float, workflow_id: str | None = None
    ) -> WorkflowHandle:
        """Start ``work`` under ``workflow_id`` (default: a fresh one); a start of an id
        already started changes nothing (a periodic tick's, run again)."""
        if not (keep > 0 and math.isfinite(keep)):
            raise ValueError(f"keep should be seconds > 0, got {keep!r}")
        shards = self._config.current.shards
        if shards > 1:  # the record, the steps and the audit are in the group's one slot
            raise ValueError(
                f"shards={shards}: a sharded group cannot run workflows; dispatch them "
                "to a group with shards=1 (docs/sharding.md)"
            )
        store = self._store()
        graph = compile_graph(work)
        workflow_id = workflow_id or uuid.uuid4().hex
        config = self._config.current
        own = self._backend.stream_keys(config.consumer_group).queue
        default = config.default_queue(own)
        messages: dict[str, bytes] = {}
        queues: dict[str, str | None] = {}
        nodes = [*graph.steps, *([graph.handler] if graph.handler is not None else [])]
        for node in nodes:
            task = self._tasks.get(node.task)
            if task is None:
                raise TaskNotFound(node.task)
            if task.unique:
                raise ValueError(
                    f"step {node.id!r}: task {task.name!r} is unique, and a unique task "
                    "cannot be a workflow step"
                )
            wire = task.dispatch_form(node.payload)[0] if node.has_payload else None
            # A first step given a payload has nothing to read before it runs.
            reads = bool(node.parents) or not node.has_payload or node is graph.handler
            message = _wire.new_message(
                task, wire, keep_result=keep, workflow=workflow_id, step=node.id, step_inputs=reads
            )
            messages[node.id] = _wire.encode_message(message)
            queues[node.id] = _queue_of(task, node.queue, default)
        await store.start_workflow(self._group, workflow_id, graph, messages, queues, keep)
        return WorkflowHandle(workflow_id, graph.name, self)

    async def status(self, workflow_id: str) -> WorkflowStatus | None:
        record = await self._store().read_workflow(self._group, workflow_id)
        return None if record is None else status_of(record)

    async def cancel(self, workflow_id: str) -> bool:
        return await self._store().cancel_workflow(self._group, workflow_id)

    async def result(self, workflow_id: str, timeout: float | None) -> Any:  # noqa: ASYNC109
        if timeout is not None and not (timeout >= 0 and not math.isnan(timeout)):
            raise ValueError(f"timeout must be seconds >= 0 or None, got {timeout!r}")
        store = self._store()
        # Its state alone while it runs (one field, not a wide workflow's whole record);
        # at its end, only the steps its result is made of. A store without states
        # reads the whole record each time.
        states = store if isinstance(store, WorkflowStates) else None
        deadline = math.inf if timeout is None else trio.current_time() + timeout
        gone = f"no workflow {workflow_id} (never dispatched, or expired)"
        while True:
            if states is None:
                record = await store.read_workflow(self._group, workflow_id)
                if record is None:
                    raise LookupError(gone)
                if record.state.final:
                    return result_of(record)
            else:
                state = await states.workflow_state(self._group, workflow_id)
                if state is None:
                    raise LookupError(gone)
                if state.final:
                    end = await states.workflow_end(self._group, workflow_id)
                    if end is None:  # expired in between
                        raise LookupError(gone)
                    return result_of(end)
            left = deadline - trio.current_time()
            if left <= 0:
                raise trio.TooSlowError(f"workflow {workflow_id} did not end within {timeout}s")
            # Its end is kept as a result under its id: wait for that, then read again.
            await self._backend.wait_result(self._group, workflow_id, min(left, _WAIT_SLICE))


class Workflows:
    """``step``, ``dispatch_workflow``, ``workflow`` and ``get_workflow`` of
    :class:`~taskrunner.TaskRunner`."""

    _workflows: WorkflowTracker

    def step(
        self,
        task_name: str,
        payload: Any = NO_PAYLOAD,
        *,
        id: str | None = None,
        queue: str | None = None,
        on_failure: str = "fail",
    ) -> StepSpec:
        """One run of task ``task_name``, for ``chain``, ``group``, ``chord`` or
        ``Workflow(on_failure=...)``.

        Args:
            payload: Its payload; none: it receives its parent's result (a chain) or the
                list of its parents' results in order (after a group).
            id: Its step id (its results are known by it); default: its task's name,
                with ``.1``, ``.2``... when the task runs more than once.
            queue: The queue it runs on; ``None``: its task's.
            on_failure: ``"fail"`` (default), ``"continue"`` or ``"skip"``.

        Raises:
            ValueError: ``on_failure`` is not one of these.
        """
        _check_policy(id or task_name, on_failure)
        return StepSpec(task=task_name, payload=payload, id=id, queue=queue, on_failure=on_failure)

    async def dispatch_workflow(
        self, work: Workflow | Canvas | StepSpec, *, keep: float = DEFAULT_KEEP
    ) -> WorkflowHandle:
        """Dispatch a workflow, chain, group or chord: its record is written and its first
        steps queued in one atomic step.

        Args:
            keep: Seconds its record and its steps' results live once it is over.

        Returns:
            Its handle (``wf.result()``, ``wf.status()``, ``wf.cancel()``).

        Raises:
            InvalidWorkflow: a cycle, an unknown parent, a duplicate step id.
            TaskNotFound: a step names a task not registered here.
            InvalidTaskPayload: a step's payload cannot be encoded.
            ValueError: a step's task is unique, ``keep`` is not seconds > 0, or the
                group is sharded (``shards > 1``: workflows need one slot).
            TypeError: the backend keeps no workflows.
            BackendError: the backend could not be reached.

        Cancellation: the workflow may or may not have been started.
        """
        require_trio("TaskRunner.dispatch_workflow")
        return await self._workflows.dispatch(work, keep)

    def get_workflow(self, workflow_id: str) -> WorkflowHandle:
        """The handle of a workflow dispatched before (by any runner of the group)."""
        return WorkflowHandle(workflow_id, "", self._workflows)

    @asynccontextmanager
    async def workflow(
        self, work: Workflow | Canvas | StepSpec, *, keep: float = DEFAULT_KEEP
    ) -> AsyncIterator[WorkflowHandle]:
        """Dispatch a workflow for the duration of a block: leaving the block by
        cancellation (or an exception) cancels the workflow; leaving it normally
        leaves it running.

        Raises:
            InvalidWorkflow: as :meth:`dispatch_workflow` (and its other errors).
        """
        wf = await self.dispatch_workflow(work, keep=keep)
        try:
            yield wf
        except BaseException:
            with trio.CancelScope(shield=True), trio.move_on_after(10):
                await wf.cancel()
            raise
