"""Workflows: chains, groups, chords and DAGs of steps, as pure values and decisions.

Theory of operation. A workflow is a graph of *steps*, each one run of a task,
which starts when its parents have finished and receives their results. This
package is pure (no I/O, no clock): :mod:`.graph` builds and validates the
graph (``chain``, ``group``, ``chord``, ``Workflow``), :mod:`.decisions` says
what a step's finish does to it (which dependents are queued, which policy
applies, how the workflow ends), and :mod:`.inputs` what a step receives. The
backends apply those decisions inside the same atomic step as the step's ack
(``Tracking.finish``), so a finish counts once however often it is replayed;
the runner's side (``runner.dispatch_workflow``, the handle) lives in
:mod:`taskrunner._dispatch.workflows`.
"""

from taskrunner._workflows.graph import (
    NO_PAYLOAD,
    POLICIES,
    StepNode,
    StepSpec,
    Workflow,
    WorkflowGraph,
    chain,
    chord,
    group,
)
from taskrunner._workflows.state import (
    InvalidWorkflow,
    StepFailed,
    StepState,
    WorkflowCancelled,
    WorkflowFailed,
    WorkflowState,
)

__all__ = [
    "NO_PAYLOAD",
    "POLICIES",
    "InvalidWorkflow",
    "StepFailed",
    "StepNode",
    "StepSpec",
    "StepState",
    "Workflow",
    "WorkflowCancelled",
    "WorkflowFailed",
    "WorkflowGraph",
    "WorkflowState",
    "chain",
    "chord",
    "group",
]
