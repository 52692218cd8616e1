"""What a runner reports of its runs, buffered: progress (``ctx.progress``) and events.

Theory of operation. Nothing here does I/O. :class:`Reports` is one runner's
buffer: the latest progress per task (a task that reports 1,000 times between
two flushes leaves one value) and the events its runs produced, in order. Two
services empty it, so that neither costs a round trip per task:

- the acker (:mod:`taskrunner._serve.acker`) takes every buffered report and
  event with each flush, and its backend call writes them in its own round trip
  (the reports before the acks). A run's last event (``succeeded``, ``failed``,
  ``cancelled``) is recorded right before its ack is queued, so it goes with that
  ack, never before it: only the acker takes those (:meth:`Reports.record_final`);
  and a run's last report goes with its ack too, so it is there when its result is;
- the progress writer (:mod:`taskrunner._serve.progress`) wakes when something is
  buffered, waits :data:`PROGRESS_INTERVAL`, and writes the progress and the other
  events (``started``, ``retried``) in one call: at most one round trip per runner
  per second, and none while nothing is reported.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import trio

from taskrunner.backends._protocols.events import TaskEvent, TaskProgress

__all__ = ["EVENT_DETAIL_CHARS", "NOTE_CHARS", "PROGRESS_INTERVAL", "Reports", "check_progress"]

PROGRESS_INTERVAL = 1.0
"""Seconds the progress writer gathers reports before it writes them."""

NOTE_CHARS = 200
"""The longest progress note, in characters."""

EVENT_DETAIL_CHARS = 500
"""The longest ``detail`` of an event (a failure's error), in characters."""


def check_progress(fraction: object, note: object) -> tuple[float, str | None]:
    """``fraction`` as a float and ``note``, checked (pure).

    Raises:
        TypeError: ``fraction`` is not a number, or ``note`` not a string or ``None``.
        ValueError: ``fraction`` is outside ``[0, 1]`` (or NaN), or ``note`` is longer
            than :data:`NOTE_CHARS` or holds a line break.
    """
    if isinstance(fraction, bool) or not isinstance(fraction, int | float):
        raise TypeError(f"progress fraction must be a number from 0 to 1, got {fraction!r}")
    value = float(fraction)
    if math.isnan(value) or not 0.0 <= value <= 1.0:
        raise ValueError(f"progress fraction must be from 0 to 1, got {fraction!r}")
    if note is None:
        return value, None
    if not isinstance(note, str):
        raise TypeError(f"progress note must be a str or None, got {note!r}")
    if len(note) > NOTE_CHARS:
        raise ValueError(
            f"progress note must be at most {NOTE_CHARS} characters, got {len(note)}: "
            f"{note[:40]!r}..."
        )
    if "\n" in note or "\r" in note:
        raise ValueError(f"progress note must be one line, got {note!r}")
    return value, note


def _unset() -> float:
    return 0.0


class Reports:
    """One runner's buffered progress and events (see the module docstring).

    Args:
        clock: Now, in unix seconds (the backend's clock converted).
        own_queue: The backend's own queue's name (an entry's ``queue=None``).
    """

    def __init__(
        self, clock: Callable[[], float] = _unset, own_queue: Callable[[], str] = str
    ) -> None:
        self.clock = clock
        self.own_queue = own_queue
        self.progress: dict[str, TaskProgress] = {}
        self.events: list[TaskEvent] = []
        """Events either service may write."""
        self.final: list[TaskEvent] = []
        """Last events of runs, for the acker only (they go with their acks)."""
        self.wake = trio.Event()
        """Set when something the progress writer writes is buffered."""

    def event(
        self,
        kind: str,
        *,
        task_id: str,
        task_name: str,
        queue: str | None,
        attempt: int,
        message_id: str,
        detail: str = "",
    ) -> TaskEvent:
        """An event of now (``queue=None``: the backend's own queue)."""
        return TaskEvent(
            kind=kind,
            task_id=task_id,
            task_name=task_name,
            queue=self.own_queue() if queue is None else queue,
            attempt=attempt,
            at=self.clock(),
            message_id=message_id,
            detail=detail,
        )

    def report(self, task_id: str, fraction: float, note: str | None) -> None:
        """Keep ``task_id``'s latest progress (already checked)."""
        self.progress[task_id] = TaskProgress(fraction=fraction, note=note, at=self.clock())
        self.wake.set()

    def record(self, event: TaskEvent) -> None:
        """Buffer an event either service may write."""
        self.events.append(event)
        self.wake.set()

    def record_final(self, event: TaskEvent) -> None:
        """Buffer a run's last event, recorded right before its ack is queued."""
        self.final.append(event)

    def take_for_ack(self) -> tuple[dict[str, TaskProgress], list[TaskEvent]]:
        """Every buffered report and event, in the order recorded per run (the
        acker's take: a finished run's last report goes with its ack)."""
        progress, taken = self.progress, self.events + self.final
        self.progress, self.events, self.final = {}, [], []
        return progress, taken

    @property
    def holds_anything(self) -> bool:
        return bool(self.progress or self.events or self.final)

    def take_for_writer(self) -> tuple[dict[str, TaskProgress], list[TaskEvent]]:
        """The progress and the events the writer writes; the buffer keeps the rest."""
        progress, events = self.progress, self.events
        self.progress, self.events = {}, []
        return progress, events

    def put_back(self, progress: dict[str, TaskProgress], events: list[TaskEvent]) -> None:
        """Give back what a failed write took: newer progress wins, events stay first."""
        for task_id, value in progress.items():
            self.progress.setdefault(task_id, value)
        self.events[:0] = events
        self.wake.set()

    def put_back_for_ack(self, progress: dict[str, TaskProgress], events: list[TaskEvent]) -> None:
        """Give back what a failed ack took, for its retry (newer reports win)."""
        for task_id, value in progress.items():
            self.progress.setdefault(task_id, value)
        self.final[:0] = events
