"""The leader's check for workflow steps acked without being counted (leader only).

A Go worker that runs a workflow's step acks it without counting it, and the
workflow would wait forever for it. Every :data:`~taskrunner._workflows.audit.AUDIT_INTERVAL`
seconds the leader has the backend look at every running workflow's queued steps
(:meth:`~taskrunner.backends.StepAudit.audit_steps`): a step found nowhere for
:data:`~taskrunner._workflows.audit.UNCOUNTED_GRACE` seconds fails its workflow with
a reason that says so (:mod:`taskrunner._workflows.audit` has the decision). A
backend without workflows is not checked at all.
"""

from __future__ import annotations

import logging

import trio

from taskrunner._workflows.audit import AUDIT_INTERVAL, UNCOUNTED_GRACE
from taskrunner.backends import StepAudit
from taskrunner.errors import BackendError

log = logging.getLogger(__name__)


async def run(
    backend: StepAudit,
    group: str,
    *,
    interval: float = AUDIT_INTERVAL,
    grace: float = UNCOUNTED_GRACE,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Check every ``interval`` seconds until cancelled (at the end of the term).

    The leader's job (:meth:`Leadership.run_as_leader
    <taskrunner._serve.leadership.Leadership.run_as_leader>` runs it in every term).
    """
    task_status.started()
    while True:
        try:
            for workflow_id in await backend.audit_steps(group, grace):
                log.warning(
                    "workflow %s of group %s failed: a step of it was acked without being "
                    "counted (a worker that knows no workflows, such as a Go worker, ran it)",
                    workflow_id,
                    group,
                )
        except BackendError as exc:
            log.warning("the uncounted-steps check for group %s failed: %s", group, exc)
        await trio.sleep(interval)
