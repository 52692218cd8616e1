"""The :class:`EventLog` protocol: a task's progress, and the group's event stream.

Theory of operation. Two things a runner writes about its runs, neither of which
may cost a round trip per task:

- **Progress** (``ctx.progress``): the latest fraction and note of a running task,
  in ``taskrunner:<group>:progress:<task id>`` (a hash: ``fraction``, ``note``,
  ``at``), kept :data:`PROGRESS_TTL` seconds after its last write, so it outlives the
  run (``get_task`` of a finished task shows its last report) and never leaks. A
  runner keeps the latest value per task and writes all of them with one
  :meth:`EventLog.write_events` call about once a second.
- **Events** (``TaskRunnerConfig(events=True)``): the capped stream
  ``taskrunner:<group>:events`` (``XADD ... MAXLEN ~ <cap>``). An entry holds the
  :class:`TaskEvent` s one call wrote, in its one field ``events``
  (:func:`encode_events`: one ``XADD`` per call, however many events, which is what
  keeps them cheap), and an event's id is its entry's and its place in it
  (``<entry id>/<n>``). They ride in calls that run anyway: an :class:`EventBatch`
  given to :meth:`MessageQueue.add <taskrunner.backends.MessageQueue.add>` (the
  ``dispatched`` events of the entries it adds), :meth:`SharedState.add_delayed
  <taskrunner.backends.SharedState.add_delayed>`, :meth:`MessageQueue.ack
  <taskrunner.backends.MessageQueue.ack>` or :meth:`Tracking.finish
  <taskrunner.backends.Tracking.finish>` is written in that same round trip,
  after what the call does; ``None`` (events off) changes nothing in the call. An
  ``ack`` or ``finish`` also writes the batch's progress, before its acks: a runner
  sends its buffered reports with its acks, so a finished task's last report is
  written with its ack, and the writer only writes when no ack goes.

Both keys are the group's (in the cluster layout, in the group's hash slot).
Events are written at least once: a call retried after its reply was lost may
write its events twice (their ``task_id``, ``kind`` and ``attempt`` tell them apart
from a second run).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import NamedTuple, Protocol, runtime_checkable

import attrs

__all__ = [
    "DEFAULT_EVENTS_MAXLEN",
    "EVENT_KINDS",
    "PROGRESS_TTL",
    "EventBatch",
    "EventLog",
    "ProgressUpdate",
    "TaskEvent",
    "TaskProgress",
    "decode_events",
    "encode_events",
    "split_event_id",
]

EVENT_KINDS = ("dispatched", "started", "succeeded", "failed", "retried", "cancelled")
"""Every :attr:`TaskEvent.kind`."""

DEFAULT_EVENTS_MAXLEN = 2_000
"""The event stream's default cap (``TaskRunnerConfig.events_maxlen``): about the last
2,000 entries (``MAXLEN ~``, so Redis may keep somewhat more), each the events of one
call: one per dispatch, up to two or three per run for a batch of acks (a batch of 32
runs, about 6 KB). So at least 2,000 events, and for a busy fleet tens of thousands in
a few MB."""

PROGRESS_TTL = 24 * 3600.0
"""Seconds a task's progress is kept after its last report."""


class TaskEvent(NamedTuple):
    """One event of the event stream (see :meth:`TaskRunner.events
    <taskrunner.TaskRunner.events>`).

    A named tuple rather than an attrs class: a runner makes two or three per task
    when events are on, and a tuple is the cheapest immutable record Python has (its
    first eight fields are also its row in the stream, :func:`encode_events`).
    """

    kind: str
    """One of :data:`EVENT_KINDS`."""
    task_id: str
    """The task's id (``""`` in a ``dispatched`` event given to ``add``: the id of the
    entry added, filled in by the backend)."""
    task_name: str
    queue: str
    """The queue's name (the stream's ``<queue>``)."""
    attempt: int
    """The attempt it is about (0 for ``dispatched`` and a cancel of a waiting task)."""
    at: float
    """When, in unix seconds (trio's clock plus ``wall_origin`` on ``MemoryBackend``)."""
    message_id: str = ""
    """The stream entry it is about (``""`` for a delayed task not in a stream yet)."""
    detail: str = ""
    """``failed`` and ``retried``: the error (``"ValueError: ..."``); ``cancelled``: the
    state it was cancelled in (``queued``, ``scheduled`` or ``running``); else ``""``."""
    id: str = ""
    """Its id, set when read back: ``<entry id>/<n>``, the ``n``-th event (from 0) of the
    stream entry ``<entry id>``. Pass it as ``after=`` to resume right after it."""


@attrs.frozen(kw_only=True)
class TaskProgress:
    """A running task's last report (``ctx.progress``)."""

    fraction: float
    """Between 0 and 1."""
    note: str | None = None
    at: float = 0.0
    """When it was reported, in unix seconds."""

    def __str__(self) -> str:
        """``42%``, or ``42% (the note)``: how ``inspect`` and the dashboard show it."""
        percent = f"{self.fraction * 100:.0f}%"
        return percent if self.note is None else f"{percent} ({self.note})"


@attrs.frozen(kw_only=True)
class ProgressUpdate:
    """The latest progress of one task, to write."""

    task_id: str
    progress: TaskProgress


@attrs.frozen(kw_only=True)
class EventBatch:
    """Events (and progress) to write with a call, and the stream's cap."""

    events: tuple[TaskEvent, ...]
    maxlen: int = DEFAULT_EVENTS_MAXLEN
    """``XADD ... MAXLEN ~ maxlen``: the stream keeps about the last this many entries."""
    progress: tuple[ProgressUpdate, ...] = ()
    """Progress to write with an ``ack`` or ``finish``, before its acks (so a task's
    last report is there by the time its result is); ``add`` and ``add_delayed`` may
    ignore it."""


def encode_events(events: Sequence[TaskEvent]) -> bytes:
    """The ``events`` field of the stream entry holding ``events``: a JSON array of one
    row per event, its first eight fields in order (pure)."""
    return json.dumps([event[:8] for event in events], separators=(",", ":")).encode()


def _row(entry_id: str, index: int, row: object) -> TaskEvent | None:
    if not isinstance(row, list) or len(row) != 8:
        return None
    kind, task_id, task_name, queue, attempt, at, message_id, detail = row
    texts = (kind, task_id, task_name, queue, message_id, detail)
    if not all(isinstance(t, str) for t in texts) or not isinstance(attempt, int):
        return None
    if isinstance(at, bool) or not isinstance(at, int | float):
        return None
    return TaskEvent(
        kind, task_id, task_name, queue, attempt, float(at), message_id, detail,
        f"{entry_id}/{index}",
    )  # fmt: skip


def decode_events(entry_id: str, raw: bytes | str | None) -> list[TaskEvent]:
    """The events of the stream entry ``entry_id`` whose ``events`` field is ``raw``
    (pure); a row that is not an event's (an entry written by hand) is left out, so a
    reader never breaks on one."""
    try:
        rows = json.loads(raw) if raw is not None else []
    except ValueError:
        return []
    if not isinstance(rows, list):
        return []
    found = (_row(entry_id, index, row) for index, row in enumerate(rows))
    return [event for event in found if event is not None]


def split_event_id(event_id: str) -> tuple[str, int | None]:
    """``(entry id, n)`` of an event id ``<entry id>/<n>``; ``n`` is ``None`` for a bare
    entry id (after the whole entry) (pure). The caller checked its shape."""
    entry, _, index = event_id.partition("/")
    return entry, int(index) if index else None


@runtime_checkable
class EventLog(Protocol):
    """Progress and the event stream (see the module docstring). Both shipped
    backends implement it; a runner needs it for ``ctx.progress`` and ``events=True``.
    """

    async def write_events(
        self,
        group: str,
        events: EventBatch | None,
        progress: Sequence[ProgressUpdate] = (),
    ) -> None:
        """Write ``progress`` (each task's hash, its lifetime renewed to
        :data:`PROGRESS_TTL`) and ``events`` in one round trip.

        Cancellation: some of it may have been written; a repeat writes the same
        progress again and the events once more.
        """
        ...

    async def read_events(
        self, group: str, after: str, *, count: int, block: float
    ) -> list[TaskEvent]:
        """The events after ``after``, oldest first: an event's id (the rest of its
        entry, else the next entries'), or an entry id (``"0-0"``: from the first), from
        up to ``count`` entries; waiting up to ``block`` seconds for one when there is
        none (``0``: do not wait).

        Cancellation: nothing is left behind (a read writes nothing).
        """
        ...

    async def last_event_id(self, group: str) -> str:
        """The id of the newest entry, ``"0-0"`` when there is none: reading after it
        gives the events from now on."""
        ...

    async def read_progress(self, group: str, task_id: str) -> TaskProgress | None:
        """The task's last reported progress, ``None`` if it reported none (or it
        expired)."""
        ...
