"""The :class:`WorkflowStore` protocol: a workflow's record, its start, its cancel.

Theory of operation. A workflow lives in one record per workflow
(``taskrunner:<group>:workflow:<id>``, a hash on Redis): its graph (each step's
task, queue, parents, dependents and ``on_failure``), its state and each
step's, per step the count of parents not finished yet, the encoded message
of each step not queued yet, each queued step's task id, and each finished
step's result document (kept for the workflow's life plus its ``keep``).

- :meth:`WorkflowStore.start_workflow` writes the record and queues the
  roots, in one atomic step.
- A step's finish is counted by :meth:`Tracking.finish
  <taskrunner.backends.Tracking.finish>`, in the same atomic step as its ack,
  for an :class:`~taskrunner.backends.Outcome` with a ``workflow``: keyed by
  its step id (a step already final counts no more), it applies
  :func:`taskrunner._workflows.decisions.finish`: dependents whose last parent
  it was are added to their queues' streams there and then, the failure
  policy is applied, the cancel cascade of a failed workflow is carried out
  (queued and delayed steps removed, running ones asked to stop), and a
  workflow that ends has its end recorded as a result under its id
  (``Tracking.wait_result`` wakes on it) and its record expires ``keep``
  seconds later.
- :meth:`Tracking.cancel <taskrunner.backends.Tracking.cancel>` of a step's
  queued or delayed task counts it as cancelled there too.
- :meth:`WorkflowStore.cancel_workflow` ends the workflow ``CANCELLED`` and
  cancels every queued, delayed and running step in one atomic step.

A Go worker that runs a step acks it without counting it (it knows nothing of
workflows): its dependents are never queued. See ``docs/workflows.md``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol, runtime_checkable

import attrs

from taskrunner._workflows import StepState, WorkflowGraph, WorkflowState
from taskrunner._workflows.inputs import ParentResult
from taskrunner.backends._protocols.events import TaskProgress

__all__ = [
    "StepAudit",
    "StepRecord",
    "StepSources",
    "WorkflowEnds",
    "WorkflowRecord",
    "WorkflowStates",
    "WorkflowStore",
]


@attrs.frozen(kw_only=True)
class StepRecord:
    """One step as its workflow's record holds it."""

    id: str
    task: str
    state: StepState
    queue: str | None = None
    parents: tuple[str, ...] = ()
    task_id: str | None = None
    """Its task's id once queued."""
    result: bytes | None = None
    """Its result document once finished."""
    on_failure: str = "fail"
    """Its failure policy (``"fail"``, ``"continue"`` or ``"skip"``)."""
    progress: TaskProgress | None = None
    """A queued step's last reported progress (``ctx.progress``), where the backend
    keeps progress; ``None`` when it reported none."""


@attrs.frozen(kw_only=True)
class StepSources:
    """What a step receives, as its workflow's record holds it."""

    has_payload: bool
    """It was given a payload (its message's); else it receives its parents' results."""
    parents: tuple[ParentResult, ...] = ()
    """Its parents' results in declared order (the failed step's, for the
    ``on_failure`` step)."""


@attrs.frozen(kw_only=True)
class WorkflowRecord:
    """A workflow as its record says, read in one atomic step."""

    workflow_id: str
    name: str
    state: WorkflowState
    steps: tuple[StepRecord, ...]
    """Declared order; the ``on_failure`` step last, once it was queued."""
    sinks: tuple[str, ...]
    failed_step: str = ""
    """The step whose failure ended it (``FAILED``), ``""`` otherwise."""
    reason: str = ""
    """Why it failed, when no step's own error says (a step a Go worker acked)."""
    created_at: float = 0.0
    """When it was dispatched (the backend's clock)."""

    def counts(self) -> dict[str, int]:
        """How many steps are in each state."""
        counts: dict[str, int] = {}
        for step in self.steps:
            counts[step.state.value] = counts.get(step.state.value, 0) + 1
        return counts


@runtime_checkable
class WorkflowStore(Protocol):
    """Workflows' records (see the module docstring). Conventions as for every backend
    protocol."""

    async def start_workflow(
        self,
        group: str,
        workflow_id: str,
        graph: WorkflowGraph,
        messages: Mapping[str, bytes],
        queues: Mapping[str, str | None],
        keep: float,
    ) -> dict[str, str]:
        """Write the record of a new workflow and add its roots to their queues'
        streams, in one atomic step.

        A start of a ``workflow_id`` whose record exists changes nothing (a periodic
        tick's start run again after a crash).

        Args:
            workflow_id: A fresh id, or one derived (a periodic tick's).
            graph: The validated graph.
            messages: Each step's encoded message (the ``on_failure`` step's too).
            queues: Each step's queue (``None``: the backend's own).
            keep: Seconds the record lives once the workflow is over.

        Returns:
            The roots' task ids, by step id.

        Cancellation: the workflow may have been started; a repeat with the same
        ``workflow_id`` starts nothing and returns the roots' ids.
        """
        ...

    async def read_workflow(self, group: str, workflow_id: str) -> WorkflowRecord | None:
        """The workflow's record, in one round trip (and, on Redis, one pipelined read
        of its queued steps' progress when a step is queued); ``None`` when there is
        none (never dispatched, or expired)."""
        ...

    async def step_inputs(self, group: str, workflow_id: str, step: str) -> StepSources:
        """Whether a step was given a payload, and the result documents it receives (its
        parents', in declared order; the failed step's for the ``on_failure`` step), in
        one round trip. A step of a workflow that is gone receives nothing."""
        ...

    async def cancel_workflow(self, group: str, workflow_id: str) -> bool:
        """End the workflow ``CANCELLED`` and cancel every step that has not finished, in
        one atomic step (see the module docstring).

        Returns:
            Whether it was running (``False``: over already, or unknown).

        Cancellation: it may have been cancelled; a repeat returns ``False``.
        """
        ...


@runtime_checkable
class WorkflowEnds(Protocol):
    """The count of a group's workflows that ended, by outcome (for metrics). Apart from
    :class:`WorkflowStore`, so a store of one's own need not count to keep workflows."""

    async def workflow_ends(self, group: str) -> dict[str, int]:
        """How many workflows of ``group`` ended ``succeeded``, ``failed`` and
        ``cancelled`` (every key present, 0 when none), in one round trip. Each end is
        counted in the atomic step that ends its workflow, so once however often a step's
        finish is replayed; the counts are the group's, the same from every runner."""
        ...


@runtime_checkable
class WorkflowStates(Protocol):
    """A workflow's state alone, without its steps: what ``wf.result()`` polls, so
    waiting for a wide workflow does not read its whole record while it runs, then its
    end, with only the steps its result is made of. Apart from :class:`WorkflowStore`:
    without it, ``wf.result()`` reads the whole record."""

    async def workflow_state(self, group: str, workflow_id: str) -> WorkflowState | None:
        """The workflow's state, in one round trip; ``None`` when there is no record
        (never dispatched, or expired). A workflow whose start is still being written
        (a wide one, started in chunks) is ``RUNNING``."""
        ...

    async def workflow_end(self, group: str, workflow_id: str) -> WorkflowRecord | None:
        """The record of a workflow that is over, its ``steps`` only its sinks and the
        step whose failure ended it (what its result is made of), in at most two round
        trips; ``None`` when there is no record or it is not over."""
        ...


@runtime_checkable
class StepAudit(Protocol):
    """The leader's check for steps acked without being counted (a Go worker ran them;
    :mod:`taskrunner._workflows.audit`). Both shipped backends implement it; a
    :class:`WorkflowStore` without it is simply not checked."""

    async def audit_steps(self, group: str, grace: float) -> list[str]:
        """One pass over the group's running workflows: each queued step found neither in
        its stream (undelivered), nor pending, nor delayed, nor parked, is marked suspect;
        one marked at least ``grace`` seconds ago fails its workflow (``FAILED``, the
        step ``failed``, its reason :func:`~taskrunner._workflows.audit.uncounted_reason`,
        the cascade and the ``on_failure`` step as for any failure under ``"fail"``);
        one found again is cleared. Each workflow is looked at in one atomic step.

        Returns:
            The workflows it failed.

        Cancellation: a pass may have been partly done; the next one goes on.
        """
        ...
