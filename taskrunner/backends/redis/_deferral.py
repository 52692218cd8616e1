"""The :class:`~taskrunner.backends.Deferral` protocol on Redis: one Lua script.

``lua/defer.lua`` checks that the entry is pending (``XPENDING``), adds the
member to the delayed set (``ZADD``), then acks the entry (``XACK``, and
``XDEL`` when deleting on ack), all in one step: a process that dies around
the call leaves the entry either pending (it is reclaimed and runs) or
deferred (it is moved back when due), never both, never neither.
"""

from __future__ import annotations

from taskrunner import _keys
from taskrunner.backends.redis._queue import RedisQueue
from taskrunner.backends.redis._scripts import load_script
from taskrunner.backends.redis._state import RedisState, _float_arg

__all__ = ["RedisDeferral"]

DEFER = load_script("defer.lua")
"""Ack a pending entry and add its delayed member, atomically; 1 if done, else 0."""


class RedisDeferral(RedisQueue, RedisState):
    """:meth:`defer` on a Redis stream and the group's delayed set."""

    async def defer(
        self, group: str, entry_id: str, member: bytes, run_at: float, *, queue: str | None = None
    ) -> bool:
        """One script call (see the module docstring).

        Raises:
            ResponseError: the script failed on the server (e.g. ``OOM``); the
                entry is then still pending and nothing was added.
        """
        reply = await DEFER(
            self._client,
            [self._stream(group, queue), _keys.delayed_tasks(group)],
            [group, entry_id, member, _float_arg(run_at), 1 if self.delete_on_ack else 0],
        )
        return int(reply) == 1
