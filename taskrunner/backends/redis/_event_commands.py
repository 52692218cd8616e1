"""The commands that write events: shared by the calls that carry them (pure).

See :mod:`taskrunner.backends.redis._events` for where they ride.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from taskrunner.backends._protocols.events import (
    PROGRESS_TTL,
    EventBatch,
    ProgressUpdate,
    encode_events,
)
from taskrunner.backends.redis._connection import CommandArg

__all__ = ["Command", "add_events_arguments", "event_commands", "progress_commands"]

Command = tuple[CommandArg, ...]


def event_commands(key: str, batch: EventBatch) -> list[Command]:
    """The one ``XADD ... MAXLEN ~`` of the entry holding ``batch``'s events to the
    stream ``key``, or none without events (pure)."""
    if not batch.events:
        return []
    return [("XADD", key, "MAXLEN", "~", batch.maxlen, "*", "events", encode_events(batch.events))]


def add_events_arguments(payloads: Sequence[bytes], batch: EventBatch) -> list[CommandArg]:
    """The ``ARGV`` of ``lua/add_events.lua`` (pure)."""
    return [batch.maxlen, encode_events(batch.events), *payloads]


def progress_commands(
    keys: Sequence[str], batch: EventBatch | Sequence[ProgressUpdate]
) -> list[Command]:
    """Rewrite each task's progress hash (``keys``, in the order of the updates) whole,
    its lifetime renewed to :data:`PROGRESS_TTL` (pure)."""
    updates = batch.progress if isinstance(batch, EventBatch) else batch
    ttl = max(0, math.ceil(PROGRESS_TTL * 1000))
    commands: list[Command] = []
    for key, update in zip(keys, updates, strict=True):
        value = update.progress
        fields: list[CommandArg] = ["fraction", repr(value.fraction), "at", repr(value.at)]
        if value.note is not None:
            fields += ["note", value.note]
        commands += [("DEL", key), ("HSET", key, *fields), ("PEXPIRE", key, ttl)]
    return commands
