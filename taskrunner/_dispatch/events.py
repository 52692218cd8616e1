"""Reading the event stream: what ``runner.events()`` and ``admin.events()`` return.

Theory of operation. :class:`EventReader` is an async iterator, not an async
generator: between two ``__anext__`` calls it holds nothing but the id of the
last event it returned and the events it read ahead, so a caller that breaks
out of its ``async for`` (or is cancelled) leaves nothing open and nothing to
finalize. Each read blocks in the backend for up to :data:`READ_BLOCK` seconds
(on Redis, ``XREAD BLOCK`` on a pooled dedicated connection given back after the
read) and reads again when nothing came; "from now" is resolved to the newest
event's id at the first read, so no event written after that is missed.
"""

from __future__ import annotations

from collections import deque

from taskrunner.backends import EventLog, TaskEvent
from taskrunner.backends._protocols.tracking import is_stream_id

__all__ = ["READ_BLOCK", "READ_COUNT", "EventReader", "check_after"]

READ_BLOCK = 5.0
"""Seconds one backend read waits for events before it reads again."""
READ_COUNT = 100
"""Events read ahead per backend read."""


def check_after(after: str | None) -> str | None:
    """``after`` as a reader takes it: ``None`` (from now), ``"0"`` (from the oldest
    kept), an event's id (``"<ms>-<seq>/<n>"``) or an entry's (``"<ms>-<seq>"``) (pure).

    Raises:
        ValueError: anything else.
    """
    if after is None:
        return None
    if after in ("0", "0-0"):
        return "0-0"
    entry, slash, index = after.partition("/") if isinstance(after, str) else ("", "", "")
    if not is_stream_id(entry) or (slash and not index.isdigit()):
        raise ValueError(
            f"after must be None (from now), '0' (from the oldest) or an event id "
            f"like '1733000000000-0/3', got {after!r}"
        )
    return after


class EventReader:
    """The events of one group, oldest first, as they come (see the module docstring).

    Args:
        backend: Where the stream is.
        group: The consumer group whose stream it is.
        after: ``None``: events from now on; ``"0"``: from the oldest kept; an
            event's ``id``: the ones after it (to resume where a reader stopped).

    Iterating never ends by itself; break out of the loop to stop.

    Raises:
        ValueError: ``after`` is not one of those.
    """

    def __init__(self, backend: EventLog, group: str, after: str | None = None) -> None:
        self._backend = backend
        self._group = group
        self._after = check_after(after)
        self._ahead: deque[TaskEvent] = deque()

    @property
    def last_id(self) -> str | None:
        """Where the last event returned is (its id, or its entry's when it ended it; or
        the starting point): pass it as ``after`` to resume right after that event."""
        return self._after

    def __aiter__(self) -> EventReader:
        return self

    async def __anext__(self) -> TaskEvent:
        """The next event, waiting for one as long as it takes.

        Raises:
            BackendError: the backend could not be read.
        """
        while not self._ahead:
            if self._after is None:
                self._after = await self._backend.last_event_id(self._group)
            read = await self._backend.read_events(
                self._group, self._after, count=READ_COUNT, block=READ_BLOCK
            )
            self._ahead.extend(read)
        event = self._ahead.popleft()
        # A read returns whole entries: the last event read ahead ends its entry, and
        # the next read goes on after that entry, not after the event.
        self._after = event.id if self._ahead else event.id.partition("/")[0]
        return event
