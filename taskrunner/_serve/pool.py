"""The worker pool's capacity: how many tasks may run at once, resizable.

Theory of operation: the pool is a counter, not a set of worker tasks. A
fetcher *reserves* slots before it reads (so it never holds more messages
than the pool can start), starts one task per message it got, and gives back
the slots it did not use; each task frees its slot when it ends. Resizing
only changes the limit: growing wakes waiting fetchers at once, shrinking
lets running tasks finish and simply refuses new reservations until the
count falls below the new limit. Nothing here awaits except the wait for a
free slot, so the bookkeeping cannot be torn by cancellation.

A waiting fetcher is woken only when what it waits for is there: its first
free slot, or, while it lingers for a batch, ``at_least`` of them. Each
waiter lowers the pool's wake threshold to its own before it parks, and a
release wakes the waiters once the free slots reach it (then everyone woken
sets it again). Waking a lingering fetcher at every freed slot only for it
to park again cost a scheduling step per task.

Unlike the other modules of ``_serve``, this one has no ``run``: the pool is
state, with nothing to do on its own. The workers nursery it bounds is
:func:`taskrunner._serve.worker.run`.
"""

from __future__ import annotations

import math
from typing import Protocol

import trio


class SlotSource(Protocol):
    """What a fetcher reserves slots from: the :class:`WorkerPool` itself, or one
    shard's turn at it (:class:`taskrunner._serve.shard_fetch.ShardSlots`)."""

    @property
    def capacity(self) -> int:
        """The pool's capacity now."""
        ...

    async def reserve(self, most: int, *, at_least: int = 1, linger: float = 0.0) -> int:
        """Reserve between 1 and ``most`` slots, as :meth:`WorkerPool.reserve`."""
        ...

    def release(self, count: int = 1) -> None:
        """Give back ``count`` reserved slots."""
        ...


class ShardSlotSource(SlotSource, Protocol):
    """A shard's fetcher's way to the pool, which also decides how long each read may
    block (:class:`taskrunner._serve.shard_fetch.ShardSlots`)."""

    @property
    def read_block(self) -> float:
        """How long the read of the slots last reserved may block, in seconds."""
        ...


class WorkerPool:
    """Slots for concurrently running tasks.

    Args:
        capacity: The initial limit (>= 1).
    """

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be >= 1, got {capacity!r}")
        self._capacity = capacity
        self._used = 0
        self._lot = trio.lowlevel.ParkingLot()
        self._wake_free = math.inf
        """Free slots at which the parked waiters are woken (the least any waits for)."""

    @property
    def capacity(self) -> int:
        return self._capacity

    @property
    def in_use(self) -> int:
        """Slots reserved or running."""
        return self._used

    def resize(self, capacity: int) -> None:
        """Change the limit; running tasks are never disturbed.

        Raises:
            ValueError: ``capacity`` < 1.
        """
        if capacity < 1:
            raise ValueError(f"capacity must be >= 1, got {capacity!r}")
        self._capacity = capacity
        self._wake()

    def _wake(self) -> None:
        self._wake_free = math.inf  # each waiter woken sets it again before it parks
        self._lot.unpark_all()

    async def reserve(self, most: int, *, at_least: int = 1, linger: float = 0.0) -> int:
        """Wait until a slot is free, then reserve as many as are free, up to ``most``.

        Args:
            most: The most slots to reserve.
            at_least: With ``linger``, wait up to ``linger`` seconds after the
                first slot frees for this many (so a busy fetcher reads in
                batches instead of one message per freed slot).
            linger: See ``at_least``; 0 takes whatever is free at once.

        Returns:
            How many slots were reserved (>= 1); give back unused ones with
            :meth:`release`.

        Cancellation: nothing is reserved if cancelled.
        """
        wanted = max(1, min(at_least, most, self._capacity))
        deadline = math.inf
        while True:
            free = self._capacity - self._used
            if free >= wanted or (free >= 1 and trio.current_time() >= deadline):
                break
            if free >= 1 and deadline == math.inf:
                deadline = trio.current_time() + linger
                continue
            # Woken when the first slot frees, or (lingering) once ``wanted`` are free.
            self._wake_free = min(self._wake_free, 1 if deadline == math.inf else wanted)
            with trio.move_on_at(deadline):
                await self._lot.park()
        got = min(most, free)
        self._used += got
        return got

    def release(self, count: int = 1) -> None:
        """Give back ``count`` slots."""
        self._used -= count
        if self._capacity - self._used >= self._wake_free:
            self._wake()
