"""The :class:`~taskrunner.backends.Deferral` protocol in process memory.

The pending check, the ack and the add to the delayed set happen with no
checkpoint between them, so no other task of the ``trio.run`` sees one
without the other: atomic, as the Lua script is on Redis.
"""

from __future__ import annotations

import trio

from taskrunner.backends._memory_state import MemoryState, check_text
from taskrunner.backends._memory_stream import MemoryStream


class MemoryDeferral(MemoryStream, MemoryState):
    """:meth:`defer` on the in-memory stream and delayed set."""

    async def defer(
        self, group: str, entry_id: str, member: bytes, run_at: float, *, queue: str | None = None
    ) -> bool:
        await trio.lowlevel.checkpoint()
        check_text("defer", "entry_id", entry_id)
        if not self.is_pending(group, entry_id, queue):
            return False
        self._delayed.setdefault(group, {})[member] = run_at
        self._ack(group, [entry_id], queue)
        return True
