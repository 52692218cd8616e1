"""What a step's finish, or a cancel, does to its workflow: pure, table-tested decisions.

Theory of operation. A workflow's record holds its state, each step's state and,
per step, how many of its parents have not finished (``waiting``). A step's
finish is decided by :func:`finish` from that record alone, and the backend
applies the decision in the same atomic step as the step's ack:

- a finish of a step already final is a *duplicate* (a replayed or repeated ack, a
  reclaimed run finishing twice): nothing changes, so every finish counts once,
  keyed by the step's id;
- in a workflow that is over (failed, cancelled) the step's state is recorded and
  nothing else happens;
- a success, or a failure under ``"continue"`` or ``"skip"``, counts for each
  dependent; one whose last parent this was is queued (exactly once: only the
  finish that takes its count to zero does it, and only from ``pending``);
- a failure (or cancel) under ``"fail"`` ends the workflow ``FAILED``: pending
  steps become cancelled, queued ones are named for cancelling, and the
  workflow's ``on_failure`` step is queued;
- when every step is final and none failed under ``"fail"``, the workflow
  ends ``SUCCEEDED``.

:func:`cancel` decides ``wf.cancel()`` the same way: pending steps cancelled,
queued steps named for cancelling, the workflow ``CANCELLED``.
"""

from __future__ import annotations

from collections.abc import Mapping

import attrs

from taskrunner._workflows.graph import WorkflowGraph
from taskrunner._workflows.state import StepState, WorkflowState

__all__ = ["Decision", "Progress", "cancel", "finish", "start"]


@attrs.frozen(kw_only=True)
class Progress:
    """The part of a workflow's record the decisions read."""

    state: WorkflowState
    steps: Mapping[str, StepState]
    """Every step's state (the handler's too, once it has one)."""
    waiting: Mapping[str, int]
    """Per step, its parents not finished yet."""
    left: int | None = None
    """Steps not final (the ``on_failure`` step left out); ``None``: counted from
    :attr:`steps` (a finish then costs a pass over them)."""


@attrs.frozen(kw_only=True)
class Decision:
    """What to write to the workflow's record, and what to queue or cancel."""

    duplicate: bool = False
    """The finish was counted before: nothing is written."""
    states: Mapping[str, StepState] = attrs.field(factory=dict)
    """Steps whose state changes, and to what."""
    waiting: Mapping[str, int] = attrs.field(factory=dict)
    """Steps whose count of waiting parents changes, and to what."""
    queue: tuple[str, ...] = ()
    """Steps to hand to their queues now, in declared order."""
    cancel: tuple[str, ...] = ()
    """Queued steps whose tasks to cancel (the cancel cascade)."""
    end: WorkflowState | None = None
    """The workflow's new final state, if it ends now."""
    failed_step: str = ""
    """The step whose failure ended it (``end`` is ``FAILED``)."""
    left: int | None = None
    """The new count of steps not final, when it changes."""


def start(graph: WorkflowGraph) -> Progress:
    """A new workflow's record: roots queued, every other step pending."""
    return Progress(
        state=WorkflowState.RUNNING,
        steps={
            node.id: StepState.QUEUED if not node.parents else StepState.PENDING
            for node in graph.steps
        },
        waiting={node.id: len(node.parents) for node in graph.steps if node.parents},
        left=len(graph.steps),
    )


def _queued_besides(
    progress: Progress, states: Mapping[str, StepState], step: str
) -> tuple[str, ...]:
    return tuple(
        s
        for s, state in progress.steps.items()
        if state is StepState.QUEUED and s != step and states.get(s, state) is StepState.QUEUED
    )


def finish(
    graph: WorkflowGraph,
    progress: Progress,
    step: str,
    outcome: StepState,
    *,
    policy: str | None = None,
) -> Decision:
    """What the finish of ``step`` with ``outcome`` (a final state) does (see the module
    docstring), under ``policy`` (``None``: the step's own ``on_failure``; the leader's
    check of uncounted steps gives ``"fail"``, whatever the step's).

    Raises:
        ValueError: ``outcome`` is not final.
    """
    if not outcome.final:
        raise ValueError(f"a step finishes in a final state, got {outcome!r}")
    current = progress.steps.get(step)
    if current is None or current.final:
        return Decision(duplicate=True)
    states: dict[str, StepState] = {step: outcome}
    handler = graph.handler
    if progress.state.final or (handler is not None and step == handler.id):
        return Decision(states=states)
    node = graph.step(step)
    if outcome is StepState.SUCCEEDED or (policy or node.on_failure) != "fail":
        waiting: dict[str, int] = {}
        queue: list[str] = []
        for child in graph.children.get(step, ()):
            left = progress.waiting.get(child, 0) - 1
            waiting[child] = left
            if left <= 0 and progress.steps.get(child) is StepState.PENDING:
                queue.append(child)
                states[child] = StepState.QUEUED
        if progress.left is None:
            left = sum(not states.get(n.id, progress.steps[n.id]).final for n in graph.steps)
        else:
            left = progress.left - 1
        return Decision(
            states=states,
            waiting=waiting,
            queue=tuple(queue),
            end=WorkflowState.SUCCEEDED if left <= 0 else None,
            left=left,
        )
    # A failure under "fail": the workflow ends here.
    for s, state in progress.steps.items():
        if state is StepState.PENDING:
            states[s] = StepState.CANCELLED
    handled: tuple[str, ...] = ()
    if handler is not None and handler.id not in progress.steps:
        states[handler.id] = StepState.QUEUED
        handled = (handler.id,)
    return Decision(
        states=states,
        queue=handled,
        cancel=_queued_besides(progress, states, step),
        end=WorkflowState.FAILED,
        failed_step=step,
    )


def cancel(graph: WorkflowGraph, progress: Progress) -> Decision:
    """What ``wf.cancel()`` does: nothing to a workflow that is over; else pending
    steps become cancelled, queued ones are named for cancelling, and the workflow
    ends ``CANCELLED``."""
    if progress.state.final:
        return Decision(duplicate=True)
    states = {s: StepState.CANCELLED for s, st in progress.steps.items() if st is StepState.PENDING}
    queued = tuple(s for s, st in progress.steps.items() if st is StepState.QUEUED)
    return Decision(states=states, cancel=queued, end=WorkflowState.CANCELLED)
