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

from taskrunner import _keys
from taskrunner.backends._memory_state import MemoryState
from taskrunner.backends._memory_stream import MemoryStream


class MemoryBackend(MemoryStream, MemoryState):
    """Queue and shared state in process memory.

    Args:
        prefix: Stream namespace, as on Redis (the stream is ``<prefix>:<queue>``).
        queue: Stream name.
        delete_on_ack: Delete entries from the stream when acked (as ``XDEL``).

    Must be used inside ``trio.run``: every time comes from ``trio.current_time()``.
    """

    def __init__(
        self, *, prefix: str = "taskrunner", queue: str = "tasks", delete_on_ack: bool = True
    ) -> None:
        MemoryStream.__init__(self, delete_on_ack=delete_on_ack)
        MemoryState.__init__(self, add_entry=lambda payload: self.add_raw({"payload": payload}))
        self.prefix = prefix
        self.queue = queue

    @property
    def stream_key(self) -> str:
        return _keys.stream(self.prefix, self.queue)

    def __repr__(self) -> str:
        return f"MemoryBackend(stream={self.stream_key!r})"

    def key_summary(self, group: str) -> list[tuple[str, str, int, float | None]]:
        """(name, type, size, ttl) of every key this backend would hold on Redis
        for ``group``: what ``taskrunner.admin.list_keys`` reports."""
        out: list[tuple[str, str, int, float | None]] = []
        if self._entries or self._groups:
            out.append((self.stream_key, "stream", len(self._entries), None))
        if self._dead:
            out.append(
                (_keys.dead_letter(self.prefix, self.queue), "stream", len(self._dead), None)
            )
        if self._ring:
            ring = _keys.claim_delay_ring(self.prefix, self.queue)
            out.append((ring, "list", len(self._ring), None))
        for name in self.keys():
            out.append((name, "string", len(self._strings[name][0]), self.ttl(name)))
        if self._delayed.get(group):
            out.append((_keys.delayed_tasks(group), "zset", len(self._delayed[group]), None))
        if self._metrics.get(group):
            out.append((_keys.metrics(group), "hash", len(self._metrics[group]), None))
        return out

    def flush_group(self, group: str) -> None:
        """What ``taskrunner.admin.flush`` does on Redis: forget ``group`` and the
        shared string keys (leases, locks, heartbeats, tuning); the stream, its
        dead letters and claim-delay ring too unless another group reads it."""
        self._groups.pop(group, None)
        if not self._groups:
            self._entries.clear()
            self._seq_of.clear()
            self._dead.clear()
            self._ring.clear()
        self._strings.clear()
        self._delayed.pop(group, None)
        self._metrics.pop(group, None)

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
