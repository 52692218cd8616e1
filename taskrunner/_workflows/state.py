"""The states of a workflow and its steps, the failure marker, and the workflow errors."""

from __future__ import annotations

import enum

import attrs

from taskrunner.errors import TaskRunnerError


class StepState(enum.StrEnum):
    """Where a step of a workflow is, as its workflow's record says."""

    PENDING = "pending"
    """Waiting for its parents: not handed to a queue yet."""
    QUEUED = "queued"
    """Handed to its queue: queued, running, or waiting for a retry (``get_task`` of its
    task id says which)."""
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    """Its last attempt failed (or it could not run)."""
    CANCELLED = "cancelled"
    """Cancelled: by ``wf.cancel()``, by a failure under ``on_failure="fail"``, or by
    ``runner.cancel`` of its task."""

    @property
    def final(self) -> bool:
        """Whether the step is over."""
        return self in _FINAL_STEPS


_FINAL_STEPS = frozenset({StepState.SUCCEEDED, StepState.FAILED, StepState.CANCELLED})


class WorkflowState(enum.StrEnum):
    """Where a workflow is."""

    RUNNING = "running"
    SUCCEEDED = "succeeded"
    """Every step is over and no failure under ``on_failure="fail"`` ended it."""
    FAILED = "failed"
    """A step failed under ``on_failure="fail"`` (or the leader found a step acked
    without being counted: a Go worker ran it)."""
    CANCELLED = "cancelled"
    """``wf.cancel()`` (or leaving ``runner.workflow(...)`` by cancellation)."""

    @property
    def final(self) -> bool:
        """Whether the workflow is over."""
        return self is not WorkflowState.RUNNING


@attrs.frozen
class StepFailed:
    """What a dependent receives in place of the result of a parent that failed under
    ``on_failure="continue"`` (in its payload and in ``ctx.parents``)."""

    step: str
    """The parent step's id."""
    type: str
    """The error's type name (``"TaskCancelled"`` for a cancelled step)."""
    message: str
    """The error's text."""


class InvalidWorkflow(TaskRunnerError, ValueError):
    """A workflow cannot be built or dispatched: a cycle, an unknown parent, a duplicate
    step id, an unknown policy, no step at all, or a step's inputs over the cap.

    Raised by the builders and ``runner.dispatch_workflow`` before anything is queued.

    Attributes:
        workflow: The workflow's name.
    """

    def __init__(self, workflow: str, reason: str) -> None:
        super().__init__(f"workflow {workflow!r}: {reason}")
        self.workflow = workflow
        self.reason = reason


class WorkflowFailed(TaskRunnerError):
    """``wf.result()`` of a workflow that ended ``FAILED``.

    Attributes:
        workflow_id: The workflow.
        step: The step whose failure ended it (``""`` when none is known).
        error_type: Its error's type name.
        error: Its error's text.
    """

    def __init__(self, workflow_id: str, step: str, error_type: str, error: str) -> None:
        super().__init__(f"workflow {workflow_id} failed at step {step!r}: {error_type}: {error}")
        self.workflow_id = workflow_id
        self.step = step
        self.error_type = error_type
        self.error = error


class WorkflowCancelled(TaskRunnerError):
    """``wf.result()`` of a workflow that was cancelled.

    Attributes:
        workflow_id: The workflow.
    """

    def __init__(self, workflow_id: str) -> None:
        super().__init__(f"workflow {workflow_id} was cancelled")
        self.workflow_id = workflow_id
