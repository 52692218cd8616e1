"""The in-memory backend: a whole fleet in one process, on trio's clock.

One :class:`MemoryBackend` can be shared by several runners in one
``trio.run`` to simulate a fleet: they see one stream, one set of consumer
groups and one shared state, and with ``trio.testing.MockClock`` every
timeout, TTL and idle time advances deterministically.

It is also fine for embedded use in a single process, where losing the queue
on exit is acceptable.
"""

from __future__ import annotations

from types import TracebackType

from taskrunner._keys import KeyLayout
from taskrunner.backends.memory._catalog import MemoryCatalog
from taskrunner.backends.memory._defer import MemoryDefer
from taskrunner.backends.memory._events import MemoryEvents
from taskrunner.backends.memory._flow import MemoryFlow
from taskrunner.backends.memory._inspect import MemoryInspection
from taskrunner.backends.memory._queue import MemoryStream
from taskrunner.backends.memory._state import MemoryState
from taskrunner.backends.memory._workflows import MemoryWorkflows


class MemoryBackend(MemoryEvents, MemoryWorkflows, MemoryInspection, MemoryDefer, MemoryFlow):
    """Queue, shared state, task tracking, workflows and the event log in process memory,
    and their :class:`~taskrunner.backends.Inspection`.

    Args:
        prefix: Stream namespace, as on Redis: the stream of a group is
            ``<prefix>:<queue>``, and ``None`` (the default) means
            ``taskrunner:<group>``, one stream per group. Groups given one
            prefix share its stream.
        queue: Stream name.
        delete_on_ack: Delete entries from the stream when acked (as ``XDEL``).
        key_layout: The names of its keys, as on Redis (``"go"`` or ``"cluster"``,
            see :mod:`taskrunner._keys`); ``None`` (the default) is ``"go"`` unless a
            runner's ``TaskRunnerConfig.key_layout`` asks for another.

    Must be used inside ``trio.run``: every time comes from ``trio.current_time()``.
    The times it reports to a user (``ctx.dispatched_at``, ``TaskInfo``'s times, dead
    letters', schedules' ``last_fired_at``) are unix seconds nonetheless: that clock
    plus :attr:`wall_origin` (:meth:`unix_time`), fixed when it is created (or first
    used, when created outside ``trio.run``).
    """

    def __init__(
        self,
        *,
        prefix: str | None = None,
        queue: str = "tasks",
        delete_on_ack: bool = True,
        key_layout: KeyLayout | None = None,
    ) -> None:
        MemoryStream.__init__(
            self, prefix=prefix, queue=queue, delete_on_ack=delete_on_ack, key_layout=key_layout
        )
        MemoryState.__init__(
            self,
            add_entry=lambda group, payload, queue: self.add_raw(
                group, {"payload": payload}, queue=queue
            ),
        )
        MemoryFlow.__init__(self)
        self._init_tracking()
        self._init_workflows()
        self._init_events()
        MemoryCatalog.__init__(self)
        self._init_schedules()

    def __repr__(self) -> str:
        return f"MemoryBackend(prefix={self.prefix!r}, queue={self.queue!r})"

    async def aclose(self) -> None:
        """Nothing to release; present for the :class:`~taskrunner.backends.Backend` protocol."""

    async def __aenter__(self) -> MemoryBackend:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()
