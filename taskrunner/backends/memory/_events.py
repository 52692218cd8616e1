"""The :class:`~taskrunner.backends.EventLog` protocol in memory: progress and events.

Theory of operation: the same places as on Redis (see
:mod:`taskrunner.backends._protocols.events`). Each group's event stream is a
list of entries, each the events of one call, trimmed to its cap exactly (Redis
trims about as much, ``MAXLEN ~``), entry ids ``<ms>-<seq>`` with ``ms`` from unix
time as :meth:`unix_time` gives it, never going backwards, and event ids
``<entry id>/<n>`` as on Redis; blocked readers park on the
group's lot, which every append unparks. A task's progress is one value with an
expiry, vanishing lazily when read. The calls that carry events (``add``,
``add_delayed``, ``ack``, ``finish``) are the base class's (for ``add`` and ``ack``,
its checkpoint and then its step, inline), with the events appended after them with
no checkpoint between, so each stays one atomic step.
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs
import trio

from taskrunner.backends._protocols.events import (
    PROGRESS_TTL,
    EventBatch,
    ProgressUpdate,
    TaskEvent,
    TaskProgress,
    split_event_id,
)
from taskrunner.backends._protocols.tracking import Outcome
from taskrunner.backends.memory._tracking import MemoryTracking


def _with_ids(position: tuple[int, int], events: Sequence[TaskEvent]) -> list[TaskEvent]:
    entry = f"{position[0]}-{position[1]}"
    return [event._replace(id=f"{entry}/{n}") for n, event in enumerate(events)]


def _id_parts(entry_id: str) -> tuple[int, int]:
    ms, _, seq = entry_id.partition("-")
    try:
        return int(ms), int(seq or 0)
    except ValueError:
        return 0, 0


@attrs.define(eq=False)
class _EventStream:
    entries: list[tuple[tuple[int, int], tuple[TaskEvent, ...]]] = attrs.Factory(list)
    """(id, events) per entry, oldest first."""
    last: tuple[int, int] = (0, 0)
    lot: trio.lowlevel.ParkingLot = attrs.Factory(trio.lowlevel.ParkingLot)


class MemoryEvents(MemoryTracking):
    """An :class:`~taskrunner.backends.EventLog` in memory, and the event-carrying
    variants of ``add``, ``add_delayed``, ``ack`` and ``finish``."""

    def _init_events(self) -> None:
        self._event_streams: dict[str, _EventStream] = {}
        self._progress: dict[tuple[str, str], tuple[TaskProgress, float]] = {}

    def _events_of(self, group: str) -> _EventStream:
        stream = self._event_streams.get(group)
        if stream is None:
            stream = self._event_streams[group] = _EventStream()
        return stream

    def _append_events(self, group: str, batch: EventBatch, entry_ids: Sequence[str] = ()) -> None:
        """Append ``batch`` (no checkpoint); an event without a task id takes the
        entry id at its position in ``entry_ids``, as ``add``'s script does."""
        self._keep_progress(group, batch.progress)
        if not batch.events:
            return
        events = batch.events
        if entry_ids:
            events = (
                tuple(
                    e._replace(task_id=i, message_id=i) if not e.task_id else e
                    for e, i in zip(events, entry_ids, strict=False)
                )
                + events[len(entry_ids) :]
            )
        stream = self._events_of(group)
        ms = int(self.unix_time(trio.current_time()) * 1000)
        last_ms, last_seq = stream.last
        stream.last = (ms, 0) if ms > last_ms else (last_ms, last_seq + 1)
        stream.entries.append((stream.last, events))
        if len(stream.entries) > batch.maxlen:
            del stream.entries[: len(stream.entries) - batch.maxlen]
        stream.lot.unpark_all()

    def _keep_progress(self, group: str, progress: Sequence[ProgressUpdate]) -> None:
        expires = trio.current_time() + PROGRESS_TTL
        for update in progress:
            self._progress[group, update.task_id] = (update.progress, expires)

    # Calls that carry events ----------------------------------------------
    async def add(
        self,
        group: str,
        payloads: Sequence[bytes],
        *,
        queue: str | None = None,
        events: EventBatch | None = None,
    ) -> list[str]:
        # The stream's add and ack inline, not awaited through super(): one coroutine
        # less on the path of every dispatch and every ack.
        await trio.lowlevel.checkpoint()
        ids = self._add(group, payloads, queue)
        if events is not None:
            self._append_events(group, events, ids)
        return ids

    async def add_delayed(
        self,
        group: str,
        member: bytes,
        run_at: float,
        *,
        task_id: str | None = None,
        events: EventBatch | None = None,
    ) -> None:
        await super().add_delayed(group, member, run_at, task_id=task_id)
        if events is not None:
            self._append_events(group, events)

    async def ack(
        self,
        group: str,
        ids: Sequence[str],
        *,
        queue: str | None = None,
        events: EventBatch | None = None,
    ) -> int:
        await trio.lowlevel.checkpoint()
        acked = self._checked_ack(group, ids, queue)
        if events is not None:
            self._append_events(group, events)
        return acked

    def ack_at_once(self, group: str, ids: Sequence[str], queue: str | None = None) -> int | None:
        """:meth:`ack` without its checkpoint, for a caller already in a step of its own
        (the acker, acking a run's entry in the worker's step when nothing else waits:
        :mod:`taskrunner._serve.acker`); atomic like it, and as :meth:`ack` it raises
        for a malformed id.

        Returns ``None``, acking nothing, when this backend's :meth:`ack` is not its
        own (replaced on the instance or overridden in a subclass, as the tests that
        break or slow a backend do): the caller then awaits :meth:`ack`.
        """
        if type(self).ack is not MemoryEvents.ack or "ack" in self.__dict__:
            return None
        return self._checked_ack(group, ids, queue)

    async def finish(
        self,
        group: str,
        ids: Sequence[str],
        outcomes: Sequence[Outcome],
        *,
        queue: str | None = None,
        events: EventBatch | None = None,
    ) -> int:
        acked = await super().finish(group, ids, outcomes, queue=queue)
        if events is not None:
            self._append_events(group, events)
        return acked

    # EventLog ---------------------------------------------------------------
    async def write_events(
        self,
        group: str,
        events: EventBatch | None,
        progress: Sequence[ProgressUpdate] = (),
    ) -> None:
        await trio.lowlevel.checkpoint()
        self._keep_progress(group, progress)
        if events is not None:
            self._append_events(group, events)

    async def read_events(
        self, group: str, after: str, *, count: int, block: float
    ) -> list[TaskEvent]:
        await trio.lowlevel.checkpoint()
        stream = self._events_of(group)
        entry, index = split_event_id(after)
        start = _id_parts(entry)
        if index is not None:
            for position, events in stream.entries:
                if position == start and index + 1 < len(events):
                    return _with_ids(position, events)[index + 1 :]
        with trio.move_on_after(max(block, 0.0)):
            while not stream.entries or stream.entries[-1][0] <= start:
                if block <= 0:
                    break
                await stream.lot.park()
        found: list[TaskEvent] = []
        taken = 0
        for position, events in stream.entries:
            if position > start and taken < count:
                found += _with_ids(position, events)
                taken += 1
        return found

    async def last_event_id(self, group: str) -> str:
        await trio.lowlevel.checkpoint()
        entries = self._events_of(group).entries
        if not entries:
            return "0-0"
        ms, seq = entries[-1][0]
        return f"{ms}-{seq}"

    async def read_progress(self, group: str, task_id: str) -> TaskProgress | None:
        await trio.lowlevel.checkpoint()
        item = self._progress.get((group, task_id))
        if item is None:
            return None
        if item[1] <= trio.current_time():
            del self._progress[group, task_id]
            return None
        return item[0]
