"""``taskrunner inspect WORKFLOW_ID``: a workflow's DAG, one line per step.

Theory of operation: ``inspect`` (see :mod:`taskrunner.cli.tasks`) reads the
workflow's record first, with :func:`taskrunner.admin.get_workflow` (one
round trip), and falls back to a task only when there is none (a workflow's
end is kept as a result under its id, so the order matters). What it prints is
meant to be read by someone woken at 3 a.m.: a header with the workflow's
name, state and counts per state, the step whose failure ended it, then a table
with one line per step in declared order: its id, task, state, failure policy,
the parents it runs after (named) and its task id, and under a failed step its
error. ``--json`` prints :func:`workflow_document`, the stable interface.
"""

from __future__ import annotations

from typing import Any

from taskrunner._dispatch.workflows import StepStatus, WorkflowStatus
from taskrunner._workflows import StepState

__all__ = ["render_workflow", "workflow_document"]

# The order counts are shown in: where a step is on its way, then how it ended.
_STATE_ORDER = tuple(StepState)


def workflow_document(status: WorkflowStatus) -> dict[str, Any]:
    """``inspect --json`` of a workflow: its id, name, state, counts per state, the
    failed step and reason, and each step's id, task, state, policy, parents, queue,
    task id, error (``{"type", "message"}`` or ``null``) and progress."""
    return {
        "kind": "workflow",
        "id": status.workflow_id,
        "name": status.name,
        "state": status.state.value,
        "counts": dict(status.counts),
        "failed_step": status.failed_step or None,
        "reason": status.reason or None,
        "steps": [
            {
                "id": step.id,
                "task": step.task,
                "state": step.state.value,
                "on_failure": step.on_failure,
                "after": list(step.parents),
                "queue": step.queue,
                "task_id": step.task_id,
                "error": (
                    {"type": step.error_type, "message": step.error}
                    if step.error_type or step.error
                    else None
                ),
                "progress": step.progress,
            }
            for step in status.steps
        ],
    }


def counts_text(counts: dict[str, int] | Any) -> str:
    """``5 steps: 1 succeeded, 1 queued, 3 pending`` (states in their life's order)."""
    total = sum(counts.values())
    parts = [f"{counts[s.value]} {s.value}" for s in _STATE_ORDER if counts.get(s.value)]
    return f"{total} step{'' if total == 1 else 's'}: " + ", ".join(parts)


def _progress(step: StepStatus) -> str:
    return "" if step.progress is None else f"{step.progress:.0%}"


def render_workflow(status: WorkflowStatus) -> str:
    """``inspect`` of a workflow for people: a header, then one line per step."""
    lines = [
        f"workflow: {status.workflow_id} ({status.name})",
        f"state:    {status.state.value.upper()}",
        f"steps:    {counts_text(status.counts)}",
    ]
    if status.failed_step:
        lines.append(f"failed:   at step {status.failed_step}")
    if status.reason:
        lines.append(f"reason:   {status.reason}")
    progress = any(step.progress is not None for step in status.steps)
    header = ["STEP", "TASK", "STATE", "ON_FAILURE", "AFTER", "TASK ID"]
    if progress:
        header.insert(3, "PROGRESS")
    rows = [header]
    for step in status.steps:
        row = [
            step.id,
            step.task,
            step.state.value,
            step.on_failure,
            ", ".join(step.parents) or "-",
            step.task_id or "-",
        ]
        if progress:
            row.insert(3, _progress(step) or "-")
        rows.append(row)
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines.append("")
    errors = {step.id: step for step in status.steps if step.error_type or step.error}
    for row in rows:
        cells = (cell.ljust(width) for cell, width in zip(row, widths, strict=True))
        lines.append("  ".join(cells).rstrip())
        failed = errors.get(row[0]) if row is not header else None
        if failed is not None:
            lines.append(f"    error: {failed.error_type}: {failed.error}")
    return "\n".join(lines)
