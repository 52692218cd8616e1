"""The worker tasks: long-lived trio tasks, one per busy pool slot, each in a cancel scope.

Theory of operation. ``TaskRunner.cancel`` must interrupt any running task,
so every run needs a cancel scope around its action; but entering a fresh
:class:`trio.CancelScope` per run costs more than spawning the run's task
(about 9 us against 8 on trio 0.35, on a busy machine). So runs are not
tasks of their own: a :class:`Crew` keeps worker tasks that each run one
message after another inside one long-lived scope (a :class:`Slot`), and
re-create it only after it was cancelled. Handing a message to an idle
worker (a deque and a parked task) is cheaper than spawning a task, so
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
A run past its ``timeout`` ends the same way: it wrote its deadline into its
slot, and the crew's watchdog (:mod:`taskrunner._serve.watchdog`) cancels the
slot's scope at that deadline, which costs far less than a scope per run.

Context variables. A run was a trio task of its own, so it ran in its own copy of
the context variables; a worker running one message after another must not let
what one run sets leak into the next. Most runs set none, so a worker runs them
in its own task's context, as they are (nothing per run but a check): before
each run it checks that its context still holds what it held when the worker
started (:func:`_unchanged`: the same values, by identity). Once a run changed
it, every later run of that worker (its ending too) runs in a fresh copy of the
worker's first context (:func:`run_in`, which steps the run's coroutine inside
it, as trio steps a task's), which costs a copy, a raised ``StopIteration`` and,
for a run that awaits, a generator per run: far less than a task, but more than
the check (about 0.5 us against 0.05). Either way the tasks a run spawns
inherit the context it runs in, and what it sets is never seen by the next run.
"""

from __future__ import annotations

import contextvars
import logging
import math
import types
from collections import deque
from collections.abc import Awaitable, Callable, Coroutine, Generator
from typing import Any, cast

import trio

from taskrunner._serve.pool import WorkerPool
from taskrunner._serve.watchdog import Watchdog
from taskrunner.backends import QueueEntry

log = logging.getLogger(__name__)


class Slot:
    """One worker task's cancel scope, and what a stopped run left to do."""

    __slots__ = ("deadline", "ending", "scope", "stopped", "timed_out", "watchdog")

    def __init__(self, watchdog: Watchdog) -> None:
        self.scope = trio.CancelScope()
        """Cancelled to stop the run this worker runs (never while it runs none)."""
        self.stopped = False
        """:meth:`stop` was called: the scope is spent (a flag, cheaper to read than
        ``scope.cancel_called``, which reads the clock)."""
        self.timed_out = False
        """:meth:`expire` was called: the scope is spent, the run is past its timeout."""
        self.deadline = math.inf
        """The deadline of the run in this slot (set by :meth:`time`), else ``inf``."""
        self.watchdog = watchdog
        self.ending: Callable[[], Coroutine[Any, Any, None]] | None = None
        """The rest of a run this scope's cancellation cut short, to await outside it;
        that run's pool slot is freed once it returned."""

    def stop(self) -> None:
        """Stop the run in this slot (:meth:`InFlight.stop
        <taskrunner._execution.inflight.InFlight.stop>`)."""
        self.stopped = True
        self.scope.cancel()

    def time(self, deadline: float) -> None:
        """The run starting in this slot times out at ``deadline`` (the watchdog then
        expires it); set it back to ``inf`` when the run returns."""
        self.deadline = deadline
        if deadline < self.watchdog.wake_at:
            self.watchdog.nudge(deadline)

    def expire(self) -> None:
        """Cancel the run in this slot: it is past its deadline (the watchdog's call)."""
        self.deadline = math.inf
        self.timed_out = True
        self.scope.cancel()

    def renew(self) -> None:
        """A fresh scope, once the spent one was left."""
        self.scope = trio.CancelScope()
        self.stopped = self.timed_out = False
        self.deadline = math.inf


def _unchanged(first: contextvars.Context, values: list[tuple[Any, Any]]) -> bool:
    """Whether the running task's context holds just what ``first`` (a copy of it
    made earlier, whose items are ``values``) held: the same variables, with the
    same objects (an equal value that is another object counts as a change)."""
    now = contextvars.copy_context()
    try:
        # Context equality is one pointer test while nothing was set; it compares
        # values only after a change (and a value's __eq__ may raise).
        if now != first:
            return False
    except Exception:
        return False
    for var, value in values:  # (a loop: no generator made for an empty context)
        if now[var] is not value:
            return False
    return True


def run_in(context: contextvars.Context, coro: Coroutine[Any, Any, None]) -> Awaitable[None] | None:
    """Start ``coro`` with each of its steps run in ``context``, as trio runs each step
    of a task in the task's own context; ``None`` if it ended at its first step (a
    no-op, or a task that computes and returns: no generator made), else what to
    await for the rest of it (what it yields to trio passes through, and what trio
    sends or throws back goes to it).

    ``context`` must not be entered anywhere else while ``coro`` runs.
    """
    try:
        yielded = context.run(coro.send, None)
    except StopIteration:
        return None
    return cast(Awaitable[None], _resume_in(context, coro, yielded))  # (types.coroutine)


@types.coroutine
def _resume_in(
    context: contextvars.Context, coro: Coroutine[Any, Any, None], yielded: Any
) -> Generator[Any, Any, None]:
    """The rest of :func:`run_in`, from its first yield on."""
    while True:
        try:
            send = yield yielded
        except BaseException as exc:  # thrown in by trio (or the generator's close)
            try:
                yielded = context.run(coro.throw, exc)
            except StopIteration:
                return
        else:
            try:
                yielded = context.run(coro.send, send)
            except StopIteration:
                return


Execute = Callable[[QueueEntry, str, Slot], Coroutine[Any, Any, None]]
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
        # The idle workers, parked, the last one to park on top: it is woken first (its
        # frames are the warmest). A list and trio's own reschedule, not a ParkingLot:
        # the lot's dict and its wake-up's generator cost as much again.
        self._idle: list[trio.lowlevel.Task] = []
        self._alive = 0
        self._closed = False
        self._slots: set[Slot] = set()
        self._watchdog = Watchdog(self._slots)
        workers.start_soon(self._watchdog.run)

    @property
    def alive(self) -> int:
        """Worker tasks alive, busy or idle."""
        return self._alive

    def busy(self) -> int:
        """Worker tasks running a message, or woken to run one."""
        return self._alive - len(self._idle)

    def start(self, entry: QueueEntry, consumer: str) -> None:
        """Run ``entry`` (read by ``consumer``, its pool slot reserved) on a worker."""
        self._queue.append((entry, consumer))
        if self._idle:
            trio.lowlevel.reschedule(self._idle.pop())
        else:
            self._alive += 1
            self._nursery.start_soon(self._work)

    def close(self) -> None:
        """No more messages: idle workers leave, busy ones once their queue is empty."""
        self._closed = True
        idle, self._idle = self._idle, []
        for task in idle:
            trio.lowlevel.reschedule(task)
        if not self._alive:
            self._watchdog.close()

    async def _work(self) -> None:
        slot = Slot(self._watchdog)
        self._slots.add(slot)
        first = contextvars.copy_context()  # this task's, as it started
        values = list(first.items())
        # None: runs run in this task's own context, until one changes it; then
        # each in a copy of first of its own.
        context: contextvars.Context | None = None
        me = trio.lowlevel.current_task()

        def unparked(_: object) -> trio.lowlevel.Abort:  # cancelled while idle
            self._idle.remove(me)
            return trio.lowlevel.Abort.SUCCEEDED

        try:
            while True:
                with slot.scope:
                    while self._queue or await self._next(me, unparked):
                        entry, consumer = self._queue.popleft()
                        if context is None and _unchanged(first, values):
                            await self._execute(entry, consumer, slot)
                        else:
                            context = first.copy()
                            rest = run_in(context, self._execute(entry, consumer, slot))
                            if rest is not None:
                                await rest
                        if slot.stopped or slot.timed_out:
                            break  # spent: a new one for the next run
                    else:
                        return
                ending, slot.ending = slot.ending, None
                slot.renew()
                if ending is not None:
                    try:
                        if context is None:  # the rest of that run, in its context
                            await ending()
                        else:
                            rest = run_in(context, ending())
                            if rest is not None:
                                await rest
                    finally:
                        self._pool.release()
        finally:
            self._alive -= 1
            self._slots.discard(slot)
            if self._closed and not self._alive:
                self._watchdog.close()

    async def _next(
        self, me: trio.lowlevel.Task, unparked: Callable[[object], trio.lowlevel.Abort]
    ) -> bool:
        """Wait for a message to run, idle (worker ``me``, whose abort function is
        ``unparked``); False when this worker should leave instead."""
        while not self._queue:
            if self._closed or self._alive > self._pool.capacity:
                return False
            self._idle.append(me)
            await trio.lowlevel.wait_task_rescheduled(unparked)
        return True
