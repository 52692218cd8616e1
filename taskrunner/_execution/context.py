"""What an action and its middlewares know about the run: :class:`TaskContext`.

A frozen snapshot built by the worker for each run, and only when someone
will read it (an action that takes it, or a middleware), so actions that
take none pay nothing for it. New fields get a default, so the worker, the
tests and later features can add them without touching every constructor
call.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

import attrs
import trio

from taskrunner._execution.progress import Reports, check_progress

EMPTY_STATE: Mapping[str, Any] = MappingProxyType({})
"""``ctx.state`` without a lifespan."""


@attrs.frozen(kw_only=True)
class TaskContext:
    """One run of a task, as its action and middlewares see it.

    An action receives it as a second positional parameter, or as a parameter
    annotated ``TaskContext`` (by keyword); see :meth:`TaskRunner.task
    <taskrunner.TaskRunner.task>`.
    """

    message_id: str
    """The stream id of the entry being run (a retry is a new entry, with a new id)."""
    task_id: str
    """The task's id: the same across its retries. The message id of a plain
    dispatch, the delayed task's id of a delayed one (what ``dispatch`` and
    ``dispatch_delayed`` returned)."""
    task_name: str
    attempt: int
    """This attempt's number, 1-based, counted across retries and reclaims."""
    max_attempts: int
    """The task's attempts in all (``max_retry``, 0 meaning 1)."""
    deadline: float | None
    """When the run is cancelled for its timeout, on trio's clock
    (``trio.current_time()``); ``None`` without a timeout."""
    dispatched_at: float
    """When the task was first dispatched, in unix seconds on every backend
    (``time.time() - ctx.dispatched_at`` is how long ago): kept across delays and
    retries. On ``MemoryBackend`` it is trio's clock at dispatch plus the backend's
    ``wall_origin``, so it is deterministic under ``MockClock``."""
    state: Mapping[str, Any] = EMPTY_STATE
    """What the runner's lifespan yielded (read-only); empty without one."""
    trace: Mapping[str, str] = EMPTY_STATE
    """The trace context the message carries (W3C ``traceparent``...), empty
    when it carries none; read by ``taskrunner.otel``."""
    schedule: str | None = None
    """The periodic schedule whose tick this run serves (``runner.add_schedule``,
    ``@runner.periodic``); ``None`` for a run that was dispatched."""
    tick: float | None = None
    """The tick this run serves: the instant it was due, unix seconds in the
    backend's clock (trio's clock in memory); ``None`` unless ``schedule`` is set.
    A retry of the run serves the same tick."""
    workflow_id: str | None = None
    """The workflow this run is a step of (``runner.dispatch_workflow``); ``None``
    for a run that is no step."""
    step: str | None = None
    """Its step id in that workflow."""
    parents: Mapping[str, Any] = EMPTY_STATE
    """A step's parents' results by step id (a parent that failed under
    ``on_failure="continue"`` as a :class:`~taskrunner.StepFailed`; one that failed
    under ``"skip"`` left out); empty for a run that is no step."""

    _reports: Reports | None = attrs.field(default=None, repr=False, eq=False, alias="reports")
    """Where :meth:`progress` keeps its reports (the worker's runner); ``None``: a
    context built by hand, whose reports are checked and dropped."""

    async def progress(self, fraction: float, note: str | None = None) -> None:
        """Report how far the run is: ``TaskInfo.progress`` shows it (``get_task``,
        ``taskrunner inspect``, the dashboard).

        Cheap enough to call in a tight loop: the runner keeps the latest report per
        task and writes all of its tasks' reports in one call about once a second
        (see ``docs/events.md``). The last report is kept for a day after it was
        made, past the end of the run.

        Args:
            fraction: From 0 to 1.
            note: A short line of text (at most 200 characters), or ``None``.

        Raises:
            TypeError: ``fraction`` is not a number, or ``note`` not a string.
            ValueError: ``fraction`` is outside ``[0, 1]``, or ``note`` is too long
                or holds a line break.
        """
        value, text = check_progress(fraction, note)
        if self._reports is not None:
            self._reports.report(self.task_id, value, text)
        await trio.lowlevel.checkpoint()
