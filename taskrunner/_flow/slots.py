"""How many pool slots a fetcher reserves before it reads.

Theory of operation (the fetcher that acts on it is
:mod:`taskrunner._serve.fetcher`). A fetcher reserves slots first and reads
at most that many messages, so it never holds a message the pool cannot
start at once. It asks for at most ``batch_size`` slots, and at most its fair
share of the pool (the capacity divided among the fetchers, rounded up), so
one fetcher blocked in a read cannot hold every slot while the others
starve. When its last read was full (a busy queue), it waits a moment for a
quarter of its ask to free up rather than reading one message per freed
slot; otherwise it takes whatever is free.

Pure: no I/O, table-tested in ``tests/test_slots.py``.
"""

from __future__ import annotations

from typing import NamedTuple

__all__ = ["SlotRequest", "slot_request"]


class SlotRequest(NamedTuple):
    """What a fetcher asks :meth:`~taskrunner._serve.pool.WorkerPool.reserve` for."""

    most: int
    """The most slots to reserve (>= 1)."""
    at_least: int
    """How many to wait (briefly) for before reading (>= 1)."""


def slot_request(*, capacity: int, fetchers: int, batch_size: int, busy: bool) -> SlotRequest:
    """The reservation of one fetcher before a read.

    Args:
        capacity: The pool's capacity now.
        fetchers: How many fetchers share the pool.
        batch_size: The most messages one read asks for.
        busy: Whether this fetcher's last read came back full.
    """
    share = -(-capacity // fetchers)
    most = min(batch_size, share)
    return SlotRequest(most=most, at_least=max(1, most // 4) if busy else 1)
