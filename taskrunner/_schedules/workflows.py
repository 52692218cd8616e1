"""Periodic workflows: a schedule whose every tick starts one workflow, exactly once.

Theory of operation. A workflow schedule (``runner.add_schedule(name,
workflow=...)`` or ``runner.periodic(..., workflow=...)``) is a schedule of one
built-in task, :data:`WORKFLOW_TASK`, with no payload: the leader fires its ticks as
it fires any other (fenced on the lease in ``fire_ticks``: each tick's message is
added once, with its watermark). The run of that message, on any runner, starts the
schedule's workflow under an id derived from the schedule and the tick
(:func:`scheduled_workflow_id`), and a start of an id already started changes
nothing (the backends' ``start_workflow``). So a leader that crashes after a fire
loses nothing (the message is in the stream; any runner runs it), and a run that
crashes after the start, before its ack, starts nothing more when it is delivered
again: each tick starts its workflow exactly once. Firing the workflow from inside
the fire itself would need the whole workflow's record, roots and messages in the
fenced script; the message costs one extra hop (a fetch and a run) instead.

The workflow is a value built once (a ``Workflow``, chain, group, chord or step,
checked when the schedule is declared) or a callable returning one (called at each
tick, so each workflow may differ: a date in a payload).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeAlias

from taskrunner._task import Task
from taskrunner._workflows import StepSpec, Workflow
from taskrunner._workflows.graph import Canvas, compile_graph
from taskrunner.errors import TaskNotFound

__all__ = [
    "WORKFLOW_TASK",
    "WorkflowSource",
    "build_workflow",
    "check_workflow_source",
    "scheduled_workflow_id",
]

WORKFLOW_TASK = "taskrunner.scheduled_workflow"
"""The built-in task a workflow schedule's ticks run: it starts the workflow."""

Work: TypeAlias = Workflow | Canvas | StepSpec
WorkflowSource: TypeAlias = Work | Callable[[], Work]
"""What a workflow schedule starts: a workflow built once, or a callable building one."""


def scheduled_workflow_id(schedule: str, tick: float) -> str:
    """The id of the workflow ``schedule``'s ``tick`` starts: ``<schedule>@<tick in
    ms>`` (never a stream id's shape, so never mistaken for a task's)."""
    return f"{schedule}@{round(tick * 1000)}"


def _is_work(source: object) -> bool:
    return isinstance(source, Workflow | Canvas | StepSpec)


def build_workflow(source: WorkflowSource) -> Work:
    """The workflow ``source`` gives (calling it when it is a callable).

    Raises:
        TypeError: the callable returned something else.
    """
    if _is_work(source):
        return source  # type: ignore[return-value]
    work = source()  # type: ignore[operator]
    if not _is_work(work):
        raise TypeError(
            f"a workflow schedule's callable must return a Workflow, chain, group, chord "
            f"or step, got {type(work).__name__}"
        )
    return work


def check_workflow_source(name: str, source: Any, tasks: Mapping[str, Task]) -> None:
    """Refuse what schedule ``name`` cannot start: a value that is no workflow (or
    callable), or a workflow built once whose graph is invalid or names a task not
    registered (declare the steps' tasks before the schedule).

    Raises:
        ValueError: ``source`` is neither; InvalidWorkflow: its graph is invalid.
        TaskNotFound: a step's task is not registered.
    """
    if not _is_work(source):
        if callable(source):
            return
        raise ValueError(
            f"Schedule.workflow of {name!r} must be a Workflow, chain, group, chord, step "
            f"or a callable returning one, got {type(source).__name__}"
        )
    graph = compile_graph(source)
    for node in [*graph.steps, *([graph.handler] if graph.handler is not None else [])]:
        if node.task not in tasks:
            raise TaskNotFound(node.task)
