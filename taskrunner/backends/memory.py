"""The in-memory backend: a whole fleet in one process, on trio's clock.

One :class:`MemoryBackend` can be shared by several runners in one
``trio.run`` to simulate a fleet: they see one stream, one set of consumer
groups and one shared state, and with ``trio.testing.MockClock`` every
timeout, TTL and idle time advances deterministically.

It is also fine for embedded use in a single process, where losing the queue
on exit is acceptable.
"""

from __future__ import annotations

from collections.abc import Iterable
from types import TracebackType

from taskrunner import _keys
from taskrunner.backends._memory_state import MemoryState
from taskrunner.backends._memory_stream import MemoryStream


class MemoryBackend(MemoryStream, MemoryState):
    """Queue and shared state in process memory.

    Args:
        prefix: Stream namespace, as on Redis: the stream of a group is
            ``<prefix>:<queue>``, and ``None`` (the default) means
            ``taskrunner:<group>``, one stream per group. Groups given one
            prefix share its stream.
        queue: Stream name.
        delete_on_ack: Delete entries from the stream when acked (as ``XDEL``).

    Must be used inside ``trio.run``: every time comes from ``trio.current_time()``.
    """

    def __init__(
        self, *, prefix: str | None = None, queue: str = "tasks", delete_on_ack: bool = True
    ) -> None:
        MemoryStream.__init__(self, prefix=prefix, queue=queue, delete_on_ack=delete_on_ack)
        MemoryState.__init__(
            self, add_entry=lambda group, payload: self.add_raw(group, {"payload": payload})
        )

    def __repr__(self) -> str:
        return f"MemoryBackend(prefix={self.prefix!r}, queue={self.queue!r})"

    def _group_strings(self, group: str) -> list[str]:
        """The live string keys that belong to ``group`` as Redis lists them: its
        lease and tuning value, and every heartbeat and unique lock."""
        own = {_keys.leader(group), _keys.worker_tuning_capacity(group)}
        shared = (_keys.REPLICATION_PATTERN.rstrip("*"), f"{_keys.PREFIX}:unique:")
        return [k for k in self.keys() if k in own or k.startswith(shared)]

    def key_summary(self, group: str) -> list[tuple[str, str, int, float | None]]:
        """(name, type, size, ttl) of every key this backend would hold on Redis
        for ``group``: what ``taskrunner.admin.list_keys`` reports."""
        out: list[tuple[str, str, int, float | None]] = []
        keys = self.stream_keys(group)
        stream = self._streams.get(keys.stream)
        if stream is not None:
            if stream.entries or stream.groups:
                out.append((keys.stream, "stream", len(stream.entries), None))
            if stream.dead:
                out.append((keys.dead_letter, "stream", len(stream.dead), None))
            if stream.ring:
                out.append((keys.claim_delay_ring, "list", len(stream.ring), None))
        for name in self._group_strings(group):
            out.append((name, "string", len(self._strings[name][0]), self.ttl(name)))
        if self._delayed.get(group):
            out.append((_keys.delayed_tasks(group), "zset", len(self._delayed[group]), None))
        if self._metrics.get(group):
            out.append((_keys.metrics(group), "hash", len(self._metrics[group]), None))
        return out

    def flush_keys(self, group: str, names: Iterable[str]) -> None:
        """What ``taskrunner.admin.flush`` does on Redis: ``XGROUP DESTROY`` of
        ``group`` on its stream, then ``DEL`` of ``names`` (keys of ``group``
        as :meth:`key_summary` names them; others are ignored)."""
        keys = self.stream_keys(group)
        stream = self._streams.get(keys.stream)
        if stream is not None:
            stream.groups.pop(group, None)
        for name in names:
            if stream is not None and name == keys.stream:
                stream.entries.clear()
                stream.seq_of.clear()
                stream.groups.clear()
            elif stream is not None and name == keys.dead_letter:
                stream.dead.clear()
            elif stream is not None and name == keys.claim_delay_ring:
                stream.ring.clear()
            elif name == _keys.delayed_tasks(group):
                self._delayed.pop(group, None)
            elif name == _keys.metrics(group):
                self._metrics.pop(group, None)
            else:
                self._strings.pop(name, None)

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
