""":class:`~taskrunner.backends.Deferral` in memory: ack and re-queue in one step."""

from __future__ import annotations

import trio

from taskrunner.backends.memory._queue import MemoryStream
from taskrunner.backends.memory._state import MemoryState, check_text


class MemoryDefer(MemoryStream, MemoryState):
    """A :class:`~taskrunner.backends.Deferral` over the in-memory stream and state."""

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
        await trio.lowlevel.checkpoint()
        check_text("defer", "entry_id", entry_id)
        check_text("defer", "task_id", task_id or "")
        # No checkpoint from here on: the ack and the add are one step, like the script.
        stream = self._stream(group, queue)
        pending = stream.groups.get(group)
        if pending is None or pending.pending.pop(entry_id, None) is None:
            return False
        if self.delete_on_ack:
            seq = stream.seq_of.pop(entry_id, None)
            if seq is not None:
                del stream.entries[seq]
        self._delayed.setdefault(group, {})[member] = run_at
        if task_id is not None:
            self._delayed_index.setdefault(group, {})[task_id] = member
            entries = self._entry_index.get(group, {})
            if entries.get(task_id) == entry_id:
                del entries[task_id]
        return True
