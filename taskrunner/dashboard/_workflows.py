"""The dashboard's workflow page: its value, read and cancel (issue 28, section 4).

Theory of operation. A workflow's page shows what ``wf.status()`` reads (one round
trip, :func:`taskrunner.admin.get_workflow`): its state, counts per state, and
its DAG as a simple layered graph, each step in the layer after its deepest
parent (:func:`layers_of`, pure), so the page reads left to right in the order
the steps can run. Each step shows its task, state, policy, parents and error, and
links to its task's page once it has a task id. The page's ``/api/`` twin serves the
same :class:`WorkflowView`, whose step states the page rewrites as it polls (by
their place in :attr:`WorkflowView.layers`, since a step id may hold a ``.``).
The cancel button is :func:`taskrunner.admin.cancel_workflow`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import attrs

from taskrunner import StepState, StepStatus, WorkflowStatus, admin
from taskrunner.backends import Backend, WorkflowStore

__all__ = [
    "StepView",
    "WorkflowView",
    "cancel_workflow",
    "layers_of",
    "read_workflow",
    "workflow_view",
]


@attrs.frozen(kw_only=True)
class StepView:
    """One step as the workflow page shows it."""

    id: str
    task: str
    state: str
    """A :class:`~taskrunner.StepState` value."""
    on_failure: str
    after: list[str]
    """The steps it runs after, declared order."""
    task_id: str | None
    error: str | None
    """``Type: message`` of a failed step's error."""
    progress: float | None


@attrs.frozen(kw_only=True)
class WorkflowView:
    """What the workflow page shows (and its ``/api/`` twin serves)."""

    id: str
    name: str
    state: str
    """A :class:`~taskrunner.WorkflowState` value."""
    total: int
    counts: dict[str, int]
    """Steps per state, every state present (0 when none)."""
    failed_step: str | None
    reason: str | None
    layers: list[list[StepView]]
    """The DAG: layer ``n`` holds the steps whose deepest parent is in layer ``n - 1``."""
    cancellable: bool
    """Running: a cancel can still stop it."""


def layers_of(steps: Sequence[tuple[str, Iterable[str]]]) -> list[list[str]]:
    """Step ids by layer (pure): a step with no parent in layer 0, every other one a layer
    after its deepest parent; declared order within a layer. Parents that are not among
    ``steps`` are ignored (an ``on_failure`` step has none), and the graph is acyclic
    (validated when it was built)."""
    parents = {step: list(after) for step, after in steps}
    depth: dict[str, int] = {}

    def depth_of(step: str) -> int:
        if step not in depth:
            known = [p for p in parents[step] if p in parents]
            depth[step] = 1 + max(map(depth_of, known)) if known else 0
        return depth[step]

    layers: list[list[str]] = []
    for step, _ in steps:
        n = depth_of(step)
        while len(layers) <= n:
            layers.append([])
        layers[n].append(step)
    return layers


def _step_view(step: StepStatus) -> StepView:
    error = f"{step.error_type}: {step.error}" if step.error_type or step.error else None
    return StepView(
        id=step.id,
        task=step.task,
        state=step.state.value,
        on_failure=step.on_failure,
        after=list(step.parents),
        task_id=step.task_id,
        error=error,
        progress=step.progress,
    )


def workflow_view(status: WorkflowStatus) -> WorkflowView:
    """What the workflow page shows of ``status`` (pure)."""
    by_id = {step.id: step for step in status.steps}
    layers = layers_of([(step.id, step.parents) for step in status.steps])
    return WorkflowView(
        id=status.workflow_id,
        name=status.name,
        state=status.state.value,
        total=len(status.steps),
        counts={state.value: status.counts.get(state.value, 0) for state in StepState},
        failed_step=status.failed_step or None,
        reason=status.reason or None,
        layers=[[_step_view(by_id[step]) for step in layer] for layer in layers],
        cancellable=not status.state.final,
    )


async def read_workflow(backend: Backend, group: str, workflow_id: str) -> WorkflowView | None:
    """Workflow ``workflow_id`` of ``group``; ``None`` when unknown (or expired, or the
    backend keeps no workflows).

    Raises:
        BackendError: the store could not be read.
    """
    if not isinstance(backend, WorkflowStore):  # it has none to show
        return None
    status = await admin.get_workflow(backend, group, workflow_id)
    return None if status is None else workflow_view(status)


async def cancel_workflow(backend: Backend, group: str, workflow_id: str) -> bool:
    """Cancel the workflow (``admin.cancel_workflow``): ``False`` when it is over or
    unknown.

    Raises:
        BackendError: the store could not be reached.
    """
    if not isinstance(backend, WorkflowStore):
        return False
    return await admin.cancel_workflow(backend, group, workflow_id)
