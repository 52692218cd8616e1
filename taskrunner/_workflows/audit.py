"""The leader's check for steps acked without being counted (a Go worker ran them).

Theory of operation. A taskrunner worker counts a step in the script that acks it,
and every other move of a step (a retry into the delayed set, back to its stream,
a park while its task is paused) is one atomic step too, so at every instant a
step the record calls ``queued`` is in its stream (not yet delivered), pending in
its group, or in the delayed set. A Go worker knows nothing of workflows: it acks
(and deletes) a step it ran without counting it, and the step is then *nowhere*
while its record still says ``queued``; its dependents would never be queued.

The leader looks at every running workflow's queued steps every
:data:`AUDIT_INTERVAL` seconds (one script per workflow, atomic with what it
looks at). A step found nowhere is marked *suspect* (the time is kept in the
record); one still nowhere :data:`UNCOUNTED_GRACE` seconds later fails its
workflow with a reason that says so, and one found again is cleared. So such a
workflow fails within about ``UNCOUNTED_GRACE + 2 * AUDIT_INTERVAL`` seconds of
the Go ack, and never hangs. :func:`audit_step` is that decision, pure; the
backends apply it (``lua/finish.lua``'s ``audit`` operation on Redis).
"""

from __future__ import annotations

import enum

__all__ = ["AUDIT_INTERVAL", "UNCOUNTED_GRACE", "Verdict", "audit_step", "uncounted_reason"]

AUDIT_INTERVAL = 30.0
"""Seconds between two of the leader's passes."""
UNCOUNTED_GRACE = 60.0
"""Seconds a step must be found nowhere, from the pass that first did, before its
workflow fails (longer than any pass takes, so a step is never failed on one look)."""


class Verdict(enum.Enum):
    """What one look at a queued step does."""

    NOTHING = "nothing"
    SUSPECT = "suspect"
    """Found nowhere for the first time: keep the time."""
    CLEAR = "clear"
    """Found again: forget the suspicion."""
    FAIL = "fail"
    """Found nowhere for :data:`UNCOUNTED_GRACE` seconds: fail the workflow."""


def audit_step(present: bool, suspect_since: float | None, now: float, grace: float) -> Verdict:
    """The verdict on a queued step found ``present`` (queued, pending or delayed) or
    not at ``now``, marked suspect at ``suspect_since`` (``None``: never)."""
    if present:
        return Verdict.NOTHING if suspect_since is None else Verdict.CLEAR
    if suspect_since is None:
        return Verdict.SUSPECT
    return Verdict.FAIL if now - suspect_since >= grace else Verdict.NOTHING


def uncounted_reason(step: str) -> str:
    """The reason a workflow failed at ``step``, acked without being counted."""
    return (
        f"step {step!r} was acked without being counted (its entry left its stream and "
        "its group's pending list uncounted: a worker that knows no workflows, such as "
        "a Go worker, ran it)"
    )
