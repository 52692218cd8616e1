"""The :class:`~taskrunner.backends.EventLog` protocol on Redis: progress and events.

Theory of operation (the keys: :mod:`taskrunner.backends._protocols.events`).
An event is one ``XADD <group root>:events MAXLEN ~ <cap> * field value ...``
(:func:`event_commands`); the calls that carry events append those commands to
the pipeline they send anyway (``ack``'s and ``finish``'s, with the claim-delay
ring), so they cost no round trip. ``add`` needs each new entry's id in its
event, which a pipeline cannot pass from one command to the next: with events
it is one ``lua/add_events.lua`` call instead of its ``XADD`` (again one round
trip). Without events none of this runs: the calls send what they always sent.

Progress is one hash per task, rewritten whole (``DEL``, ``HSET``, ``PEXPIRE``)
for every task of a flush, in one pipeline with the flush's events.

Reading events blocks in ``XREAD BLOCK`` on a dedicated connection taken from
the result waiters' small pool (the shared connection is pipelined and must
never block), given back after each read, so a reader that stops (breaks out of
its loop, is cancelled) holds nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from taskrunner import _keys
from taskrunner.backends._protocols.events import (
    EventBatch,
    ProgressUpdate,
    TaskEvent,
    TaskProgress,
    decode_events,
    split_event_id,
)
from taskrunner.backends.redis._connection import CommandArg
from taskrunner.backends.redis._event_commands import (
    add_events_arguments,
    progress_commands,
)
from taskrunner.backends.redis._queue import READ_TIMEOUT_MARGIN, _ms
from taskrunner.backends.redis._scripts import load_script
from taskrunner.backends.redis._tracking import RedisTracking

__all__ = ["ADD_EVENTS", "RedisEvents", "progress_of"]

ADD_EVENTS = load_script("add_events.lua")
"""``add`` with each entry's ``dispatched`` event (see the module docstring)."""
ADD_EVENTS_CHUNK = 500
"""Entries per ``lua/add_events.lua`` call (a script blocks the server while it runs)."""


def _text(value: Any) -> str:
    return value.decode(errors="backslashreplace") if isinstance(value, bytes) else str(value)


def _decoded(raw_id: Any, flat: Sequence[Any]) -> list[TaskEvent]:
    """The events of one entry of the event stream (its ``events`` field)."""
    it = iter(flat)
    fields = {_text(k): v for k, v in zip(it, it, strict=False)}
    raw = fields.get("events")
    return decode_events(_text(raw_id), raw if isinstance(raw, bytes | str) else None)


def _fields(flat: Sequence[Any]) -> dict[str, str]:
    it = iter(flat)
    return {_text(k): _text(v) for k, v in zip(it, it, strict=False)}


class RedisEvents(RedisTracking):
    """An :class:`~taskrunner.backends.EventLog` on Redis (see the module docstring)."""

    async def add(
        self,
        group: str,
        payloads: Sequence[bytes],
        *,
        queue: str | None = None,
        events: EventBatch | None = None,
    ) -> list[str]:
        """Without events, :meth:`RedisQueue.add`; with them, ``lua/add_events.lua``
        (in chunks, as ``add`` pipelines its ``XADD``)."""
        if events is None:
            return await super().add(group, payloads, queue=queue)
        keys: list[CommandArg] = [self._stream(group, queue), self._events_key(group)]
        ids: list[str] = []
        for start in range(0, len(payloads), ADD_EVENTS_CHUNK):
            chunk = payloads[start : start + ADD_EVENTS_CHUNK]
            batch = EventBatch(
                events=events.events[start : start + ADD_EVENTS_CHUNK], maxlen=events.maxlen
            )
            reply = await ADD_EVENTS(self._client, keys, add_events_arguments(chunk, batch))
            ids.extend(_text(entry_id) for entry_id in reply)
        return ids

    async def write_events(
        self,
        group: str,
        events: EventBatch | None,
        progress: Sequence[ProgressUpdate] = (),
    ) -> None:
        """One pipeline: each task's progress hash, then the events."""
        keys = [_keys.progress(group, u.task_id, self.key_layout) for u in progress]
        commands = progress_commands(keys, progress)
        if events is not None:
            commands += self._event_commands(group, events)
        if commands:
            await self._client.pipeline(commands)

    async def read_events(
        self, group: str, after: str, *, count: int, block: float
    ) -> list[TaskEvent]:
        """``XREAD COUNT`` (with ``BLOCK`` on a dedicated connection when ``block`` > 0);
        after an event's id, first ``XRANGE`` of the rest of its entry."""
        key = self._events_key(group)
        entry, index = split_event_id(after)
        if index is not None:
            rows = await self._client.execute("XRANGE", key, entry, entry)
            rest = [e for raw_id, flat in rows for e in _decoded(raw_id, flat)][index + 1 :]
            if rest:
                return rest
        if block <= 0:
            reply = await self._client.execute("XREAD", "COUNT", count, "STREAMS", key, entry)
        else:
            connection = self._waiter()
            try:
                reply = await connection.execute(
                    "XREAD", "COUNT", count, "BLOCK", max(1, _ms(block)), "STREAMS", key, entry,
                    reply_timeout=block + READ_TIMEOUT_MARGIN,
                )  # fmt: skip
            finally:
                await self._done_waiting(connection)
        if not reply:
            return []
        return [event for raw_id, flat in reply[0][1] for event in _decoded(raw_id, flat)]

    async def last_event_id(self, group: str) -> str:
        """``XREVRANGE + - COUNT 1``."""
        reply = await self._client.execute(
            "XREVRANGE", self._events_key(group), "+", "-", "COUNT", 1
        )
        return _text(reply[0][0]) if reply else "0-0"

    async def read_progress(self, group: str, task_id: str) -> TaskProgress | None:
        """``HGETALL`` of the task's progress hash."""
        return progress_of(
            await self._client.execute("HGETALL", _keys.progress(group, task_id, self.key_layout))
        )


def progress_of(reply: Any) -> TaskProgress | None:
    """A task's progress from ``HGETALL`` of its progress hash (``None``: it reported none)."""
    if isinstance(reply, dict):
        fields = {_text(k): _text(v) for k, v in reply.items()}
    else:
        fields = _fields(reply or [])
    if "fraction" not in fields:
        return None
    try:
        return TaskProgress(
            fraction=float(fields["fraction"]),
            note=fields.get("note"),
            at=float(fields.get("at", "0")),
        )
    except ValueError:
        return None  # written by hand: no progress to show
