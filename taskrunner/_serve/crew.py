"""The worker tasks: long-lived trio tasks, one per busy pool slot, each in a cancel scope.

Theory of operation. ``TaskRunner.cancel`` must interrupt any running task,
so every run needs a cancel scope around its action; but entering a fresh
:class:`trio.CancelScope` per run costs more than spawning the run's task
(about 9 us against 8 on trio 0.35, on a busy machine). So runs are not
tasks of their own: a :class:`Crew` keeps worker tasks that each run one
message after another inside one long-lived scope (a :class:`Slot`), and
re-create it only after it was cancelled. Handing a message to an idle
worker (a deque and a parking lot) is cheaper than spawning a task, so
the scope comes for less than nothing.

The fetchers call :meth:`Crew.start` once per message read (they reserved
its pool slot before reading): the message is queued, and an idle worker is
woken, or a new one started when none is idle. A worker takes messages until
the queue is empty, then waits idle; a worker idle while more are alive than
the pool's capacity leaves (after the pool shrank), and after
:meth:`Crew.close` every idle worker leaves, so the workers nursery drains.

A stopped run (:meth:`InFlight.stop <taskrunner._execution.inflight.InFlight.stop>`
cancels the scope of its slot) leaves its ending in :attr:`Slot.ending`
(an await inside a cancelled scope would be cancelled too); the worker
awaits it once outside the spent scope, and frees the run's pool slot then.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Awaitable, Callable

import trio

from taskrunner._serve.pool import WorkerPool
from taskrunner.backends import QueueEntry

log = logging.getLogger(__name__)


class Slot:
    """One worker task's cancel scope, and what a stopped run left to do."""

    __slots__ = ("ending", "scope", "stopped")

    def __init__(self) -> None:
        self.scope = trio.CancelScope()
        """Cancelled to stop the run this worker runs (never while it runs none)."""
        self.stopped = False
        """:meth:`stop` was called: the scope is spent (a flag, cheaper to read than
        ``scope.cancel_called``, which reads the clock)."""
        self.ending: Callable[[], Awaitable[None]] | None = None
        """The rest of a run this scope's cancellation cut short, to await outside it;
        that run's pool slot is freed once it returned."""

    def stop(self) -> None:
        """Stop the run in this slot (:meth:`InFlight.stop
        <taskrunner._execution.inflight.InFlight.stop>`)."""
        self.stopped = True
        self.scope.cancel()

    def renew(self) -> None:
        """A fresh scope, once the spent one was left."""
        self.scope = trio.CancelScope()
        self.stopped = False


Execute = Callable[[QueueEntry, str, Slot], Awaitable[None]]
"""Runs one message read by consumer ``str`` in ``Slot`` (:meth:`Worker.execute
<taskrunner._serve.worker.Worker.execute>`); frees its pool slot when done, unless
it left an ending to the slot."""


class Crew:
    """The worker tasks of one ``serve``, in its workers nursery.

    Args:
        execute: Runs one message.
        workers: The nursery the worker tasks run in.
        pool: Whose capacity bounds the idle workers kept, and whose slot a
            stopped run's ending frees.
    """

    def __init__(self, execute: Execute, workers: trio.Nursery, pool: WorkerPool) -> None:
        self._execute = execute
        self._nursery = workers
        self._pool = pool
        self._queue: deque[tuple[QueueEntry, str]] = deque()
        self._idle = trio.lowlevel.ParkingLot()
        self._alive = 0
        self._closed = False

    @property
    def alive(self) -> int:
        """Worker tasks alive, busy or idle."""
        return self._alive

    def start(self, entry: QueueEntry, consumer: str) -> None:
        """Run ``entry`` (read by ``consumer``, its pool slot reserved) on a worker."""
        self._queue.append((entry, consumer))
        if self._idle.statistics().tasks_waiting:
            self._idle.unpark()
        else:
            self._alive += 1
            self._nursery.start_soon(self._work)

    def close(self) -> None:
        """No more messages: idle workers leave, busy ones once their queue is empty."""
        self._closed = True
        self._idle.unpark_all()

    async def _work(self) -> None:
        slot = Slot()
        try:
            while True:
                with slot.scope:
                    while await self._next():
                        entry, consumer = self._queue.popleft()
                        await self._execute(entry, consumer, slot)
                        if slot.stopped:
                            break  # spent: a new one for the next run
                    else:
                        return
                ending, slot.ending = slot.ending, None
                slot.renew()
                if ending is not None:
                    try:
                        await ending()
                    finally:
                        self._pool.release()
        finally:
            self._alive -= 1

    async def _next(self) -> bool:
        """Wait for a message to run; False when this worker should leave instead."""
        while not self._queue:
            if self._closed or self._alive > self._pool.capacity:
                return False
            await self._idle.park()
        return True
