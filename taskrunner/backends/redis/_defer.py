""":class:`~taskrunner.backends.Deferral` on Redis: one script acks the entry and
adds the member (``lua/defer.lua``), so no crash can fall between them."""

from __future__ import annotations

from taskrunner import _keys
from taskrunner.backends.redis._connection import CommandArg
from taskrunner.backends.redis._errors import NoGroupError
from taskrunner.backends.redis._queue import RedisQueue
from taskrunner.backends.redis._scripts import load_script
from taskrunner.backends.redis._state import RedisState, _float_arg

DEFER = load_script("defer.lua")
"""``XACK`` (and ``XDEL``) an entry and ``ZADD`` a member, only if the entry was
pending; 1 if it was, else 0."""


class RedisDefer(RedisQueue, RedisState):
    """A :class:`~taskrunner.backends.Deferral` on Redis streams."""

    async def defer(
        self,
        group: str,
        entry_id: str,
        member: bytes,
        run_at: float,
        *,
        queue: str | None = None,
        task_id: str | None = None,
    ) -> bool:
        """One script call: ``XACK``, then ``XDEL`` when deleting on ack, then ``ZADD``
        (and, with ``task_id``, the id indexes), only if the ``XACK`` acked the entry.

        Cancellation: the script ran entirely or not at all; a repeat returns
        False and adds nothing.
        """
        keys = [
            self._stream(group, queue),
            _keys.delayed_tasks(group, self.key_layout),
            _keys.delayed_index(group, self.key_layout),
            _keys.entry_index(group, self.key_layout),
        ]
        args: list[CommandArg] = [
            group,
            entry_id,
            member,
            _float_arg(run_at),
            "1" if self.delete_on_ack else "0",
            task_id or "",
        ]
        try:
            reply = await DEFER(self._client, keys, args)
        except NoGroupError:
            return False
        return bool(reply == 1)
