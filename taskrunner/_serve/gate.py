"""The gate: whether a run may start now (pauses, concurrency slots, rate limits).

Theory of operation. The worker asks the gate once per run, after the
message is decoded and before the action starts (:meth:`Gate.admit`), and
gives the run's slot back once the action ended (:meth:`Gate.release`); both
are the only places flow control touches a run. A task with no limits, while
nothing is paused, never reaches the gate: the worker checks two flags, no
await, no round trip.

- A run of a *paused task* is parked (:meth:`~taskrunner.backends.FlowControl.park`):
  acked and moved to the delayed set far ahead, indexed, and made due again
  by the task's resume. The backend checks the pause in the same step, so a
  run is never parked after its task was resumed.
- A *limited* run asks the backend to admit it (one script: a concurrency
  slot leased for the task's reservation timeout, renewed by the refresher
  with the message; a start logged in the rate limit's window). Admitted, it
  runs. Refused, its message goes back through the delayed set
  (:meth:`~taskrunner.backends.Deferral.defer`: acked and re-added in one
  step) to come back after :mod:`taskrunner._flow.limits`'s wait: the rate limit's
  pace, or about half a second for a slot. The pool slot it held is free at
  once, and other tasks' messages go on (no head-of-line blocking). Waiting
  is not an attempt: the member carries the attempts used so far, this
  delivery's not counted, and a unique task keeps its lock.

Paused *queues* are the fetchers' business (they are not read); a message
that a read in flight delivered after the gate saw its queue paused goes
back to the end of its queue (deferred with no wait). The gate reads what is
paused every :data:`PAUSE_POLL` seconds (:func:`Gate.run`), for the fetchers
and for itself, and when a task is resumed it nudges the scheduler, so the
runs parked for it move back at once.

A backend error never leaves a run that did not start pending. Pending, it
would be reclaimed after ``reclaim_delay``: a second delivery, which the
delivery limit of a task with no retries takes for a poison message and
dead-letters without running it. That happens on a Redis Cluster whose group
slot migrates: every flow-control script is answered ``TRYAGAIN`` for as
long as the migration lasts (a script naming a key the migrating slot does
not hold, such as the slot set of a task with no concurrency limit or a
rate limit's pace, is refused until the slot has moved; see
docs/redis-cluster.md). So:

- From the first call on, the gate tracks the message in
  :class:`~taskrunner._execution.inflight.InFlight` (no slot to stop: nothing
  runs yet), so the refresher keeps it from being reclaimed however long the
  backend takes. An admitted run stays tracked: the worker's entry replaces
  the gate's, keeping its refresh time when that comes sooner.
- An admission or a park that fails sends the run back through the delayed
  set, as a refused one (:meth:`Gate._defer`): it comes back after the slot
  wait and asks again. It is never started in this delivery, so a call that
  took effect but lost its reply (a slot taken, a start logged, a run
  parked) cannot make a run start twice.
- A deferral that fails for a reason that may pass
  (:attr:`~taskrunner.errors.BackendError.retryable`) is tried again, with
  backoff, until the backend takes it. A deferral is idempotent: once it
  took effect the entry is no longer pending, and a repeat adds nothing.
  Only a deferral the store refuses for what it holds (``WRONGTYPE``...),
  which repeating cannot fix, leaves the message pending (logged).

Stopped meanwhile (shutdown), the message stays pending, as any run stopped does.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable

import attrs
import trio

from taskrunner import _wire
from taskrunner._config import ConfigHolder
from taskrunner._execution.backoff import backoff_delay
from taskrunner._execution.inflight import InFlight
from taskrunner._flow.limits import PARK_HORIZON, Paused, holder_id, rate_wait, slot_wait
from taskrunner._serve.outcome import dispatched_at, member_queue
from taskrunner._serve.scheduler import Scheduler
from taskrunner._task import Task
from taskrunner.backends import Backend, LimitedBy, ParkOutcome, QueueEntry, SlotHold
from taskrunner.errors import BackendError, InvalidTaskPayload

__all__ = ["NO_HOLD", "PAUSE_POLL", "RELEASE_TIMEOUT", "Gate", "GateCounters", "Hold"]

log = logging.getLogger(__name__)

PAUSE_POLL = 1.0
"""Seconds between two reads of the group's paused set."""
RELEASE_TIMEOUT = 2.0
"""Longest the release of a slot may take (shielded: it runs on cancellation too);
a slot not released expires with its lease."""


@attrs.frozen
class Hold:
    """What an admitted run holds until it ends."""

    slot: SlotHold | None = None
    """Its concurrency slot, when its task has a limit."""


NO_HOLD = Hold()
"""An admitted run that holds nothing (no concurrency limit)."""


class GateCounters:
    def __init__(self) -> None:
        self.deferred = 0
        self.parked = 0


class Gate:
    """A runner's admissions (see the module docstring).

    Args:
        backend: Where the limits and pauses live.
        config: The runner's configuration (its group).
        scheduler: Nudged with every deferral's run-at time, and on a resume.
        inflight: The runner's running messages, where the gate tracks each message
            it handles until it is admitted or handed back (so none is reclaimed).
        instance_id: This runner's id, in the holder ids of its runs.
        jitter: Uniform in [0, 1), for the slot wait (``random.random``).
    """

    def __init__(
        self,
        backend: Backend,
        config: ConfigHolder,
        scheduler: Scheduler,
        inflight: InFlight,
        instance_id: str,
        *,
        jitter: Callable[[], float] = random.random,
    ) -> None:
        self._backend = backend
        self._config = config
        self._scheduler = scheduler
        self._inflight = inflight
        self._instance_id = instance_id
        self._jitter = jitter
        self.paused = Paused()
        """What is paused in the group, as last read."""
        self.counters = GateCounters()
        self._changed = trio.Event()

    @property
    def _group(self) -> str:
        return self._config.current.consumer_group

    @property
    def pausing(self) -> bool:
        """Whether something is paused: then every run goes through :meth:`admit`."""
        return bool(self.paused)

    async def wait_changed(self) -> None:
        """Wait until what is paused changes."""
        await self._changed.wait()

    def _update(self, paused: Paused) -> None:
        if paused == self.paused:
            return
        for task in self.paused.tasks - paused.tasks:
            log.info("task %s resumed in group %s", task, self._group)
        for task in paused.tasks - self.paused.tasks:
            log.info("task %s paused in group %s: its runs are parked", task, self._group)
        for queue in paused.queues ^ self.paused.queues:
            state = "paused" if queue in paused.queues else "resumed"
            log.info("queue %s %s in group %s", queue, state, self._group)
        if self.paused.tasks - paused.tasks:
            self._scheduler.nudge(self._backend.now())  # parked runs are due now
        self.paused = paused
        self._changed.set()
        self._changed = trio.Event()

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Read the paused set every :data:`PAUSE_POLL` seconds until cancelled.

        Reads it once before ``task_status.started()``, so fetchers start with
        it (a failed first read starts with nothing paused, and tries again).
        """
        try:
            self._update(await self._backend.paused(self._group))
        except BackendError as exc:
            log.warning("could not read what is paused in group %s: %s", self._group, exc)
        task_status.started()
        while True:
            await trio.sleep(PAUSE_POLL)
            try:
                self._update(await self._backend.paused(self._group))
            except BackendError as exc:
                log.warning("could not read what is paused in group %s: %s", self._group, exc)

    async def admit(
        self,
        entry: QueueEntry,
        consumer: str,
        attempt: int,
        message: _wire.TaskMessage,
        task: Task,
        payload: object,
    ) -> Hold | None:
        """Admit one run (see the module docstring).

        Args:
            entry: The entry as read.
            consumer: The consumer it was delivered to (whose refreshes keep it).
            attempt: Its attempt number (earlier entries' attempts included).
            message: The decoded message.
            task: Its task.
            payload: The payload as the action receives it (for the rate limit's key).

        Returns:
            What the run holds when it may start (its message still tracked in
            the in-flight set, for the worker's entry to replace); ``None`` when
            it may not: it was parked or deferred (or, refused for good by the
            store, left pending), and is no longer tracked.

        Never raises but for cancellation.

        Cancellation: the message is no longer tracked; it stays pending unless
        the call cancelled had parked or deferred it.
        """
        paused_task = task.name in self.paused.tasks
        if not (paused_task or task.limited or entry.queue in self.paused.queues):
            return NO_HOLD
        # Tracked from the first call on: however long the backend takes, the
        # refresher keeps the message from being reclaimed (module docstring).
        self._inflight.of(entry.group).add(
            entry.id, consumer, task.reservation, trio.current_time(), queue=entry.queue
        )
        hold: Hold | None = None
        try:
            hold = await self._decide(entry, attempt, message, task, payload, paused_task)
        finally:
            if hold is None:
                self._inflight.of(entry.group).remove(entry.id, queue=entry.queue)
        return hold

    async def _decide(
        self,
        entry: QueueEntry,
        attempt: int,
        message: _wire.TaskMessage,
        task: Task,
        payload: object,
        paused_task: bool,
    ) -> Hold | None:
        if paused_task and await self._parked(entry, attempt, message, task):
            return None
        if entry.queue in self.paused.queues:
            # Read just before its queue's pause was seen (a fetcher's read in
            # flight): back to the end of its queue, where it waits, not run.
            await self._defer(entry, attempt, message, task, 0.0)
            return None
        if not task.limited:
            return NO_HOLD
        holder = holder_id(
            self._instance_id, entry.queue, entry.id, entry.delivery_count, entry.group
        )
        try:
            rate_key = task.rate_key_for(payload)
        except InvalidTaskPayload as exc:
            log.warning("%s; message %s counts against the task's own rate limit", exc, entry.id)
            rate_key = ""
        try:
            admission = await self._backend.admit(
                self._group,
                task.name,
                holder,
                max_concurrency=task.max_concurrency,
                lease=task.reservation,
                rate=task.rate_limit,
                rate_key=rate_key,
            )
        except BackendError as exc:
            # Back through the delayed set, not left pending: a reclaim would count
            # a second delivery, and the poison check would dead-letter a run that
            # never started (a cluster answers TRYAGAIN while the slot migrates).
            wait = slot_wait(self._jitter())
            log.warning(
                "could not admit message %s of task %s (%s); trying again in %.3fs",
                entry.id,
                task.name,
                exc,
                wait,
            )
            await self._defer(entry, attempt, message, task, wait)
            return None
        if admission.admitted:
            if task.max_concurrency is None:
                return NO_HOLD
            return Hold(slot=SlotHold(task=task.name, holder=holder, lease=task.reservation))
        if admission.limited_by is LimitedBy.RATE:
            wait = rate_wait(admission.retry_after)
        else:
            wait = slot_wait(self._jitter())
        await self._defer(entry, attempt, message, task, wait)
        return None

    def _member(
        self, entry: QueueEntry, attempt: int, message: _wire.TaskMessage, run_at: float
    ) -> bytes:
        member = _wire.retry_delayed(
            message,
            run_at,
            id=message.id or entry.id,
            attempts=attempt - 1,  # this delivery did not run: not an attempt
            dispatched_at=dispatched_at(entry.id, message),
            queue=member_queue(self._backend, entry.group or self._group, entry.queue),
        )
        return _wire.encode_delayed(member)

    async def _defer(
        self,
        entry: QueueEntry,
        attempt: int,
        message: _wire.TaskMessage,
        task: Task,
        wait: float,
    ) -> None:
        """Send the run back through the delayed set, to come back after ``wait``,
        trying again (with backoff) while the backend fails in a way that may pass."""
        failures = 0
        while True:
            run_at = self._backend.now() + wait
            member = self._member(entry, attempt, message, run_at)
            try:
                done = await self._backend.defer(
                    entry.group or self._group,  # a shard's run: back into its shard
                    entry.id,
                    member,
                    run_at,
                    queue=entry.queue,
                    task_id=message.id or entry.id,  # lookup and cancel find it while it waits
                )
            except BackendError as exc:
                if not exc.retryable:
                    log.error(
                        "could not defer message %s of task %s (%s); leaving it pending",
                        entry.id,
                        task.name,
                        exc,
                    )
                    return
                failures += 1
                delay = backoff_delay(failures)
                log.warning(
                    "could not defer message %s of task %s (%s); trying again in %.2fs",
                    entry.id,
                    task.name,
                    exc,
                    delay,
                )
                await trio.sleep(delay)
                continue
            break
        if done:
            self.counters.deferred += 1
            self._scheduler.nudge(run_at)
            log.debug("message %s of task %s waits %.3fs for its limit", entry.id, task.name, wait)
            await self._cancel_if_asked(entry, message, task)

    async def _cancel_if_asked(
        self, entry: QueueEntry, message: _wire.TaskMessage, task: Task
    ) -> None:
        """Follow a stop request the run's entry got while the gate held it.

        A cancel that met the message pending (the gate's call in flight) recorded
        a stop request for this entry, which the run now waiting in the delayed set
        (deferred or parked, under a new entry when it comes back) would never
        see. Asked after the move, so a cancel either found the entry (and its
        request is read here) or the member (and removed it itself)."""
        group = entry.group or self._group
        task_id = message.id or entry.id
        try:
            if not await self._backend.cancel_requested(group, [entry.id]):
                return
            done = await self._backend.cancel(
                group, task_id, queues=None if entry.queue is None else [entry.queue]
            )
        except BackendError as exc:
            log.warning(
                "could not check whether task %s (%s) was cancelled while it waited for its "
                "limit or pause (%s); a cancel sent in that moment may be lost",
                task_id,
                task.name,
                exc,
            )
            return
        if done.state is not None:
            log.info("task %s was cancelled while it waited for its limit or pause", task_id)

    async def _parked(
        self, entry: QueueEntry, attempt: int, message: _wire.TaskMessage, task: Task
    ) -> bool:
        """Park a run of a paused task; False when the task is not paused after all."""
        run_at = self._backend.now() + PARK_HORIZON
        member = self._member(entry, attempt, message, run_at)
        try:
            # A shard's run parks in its shard, whose own paused set
            # (docs/sharding.md) the park checks in the same step.
            outcome = await self._backend.park(
                entry.group or self._group,
                entry.id,
                member,
                run_at,
                task.name,
                queue=entry.queue,
                task_id=message.id or entry.id,  # lookup and cancel find it while parked
            )
        except BackendError as exc:
            # Not run (the park may have happened, and the task been resumed since):
            # back through the delayed set, to be parked when it comes back.
            wait = slot_wait(self._jitter())
            log.warning(
                "could not park message %s of paused task %s (%s); trying again in %.3fs",
                entry.id,
                task.name,
                exc,
                wait,
            )
            await self._defer(entry, attempt, message, task, wait)
            return True
        if outcome is ParkOutcome.NOT_PAUSED:
            return False
        if outcome is ParkOutcome.PARKED:
            self.counters.parked += 1
            await self._cancel_if_asked(entry, message, task)
        return True

    async def release(self, hold: Hold) -> None:
        """Give back what an admitted run held (shielded, bounded). Never raises."""
        if hold.slot is None:
            return
        with trio.move_on_after(RELEASE_TIMEOUT, shield=True):
            try:
                await self._backend.release_slots(self._group, [hold.slot])
            except BackendError as exc:
                log.warning(
                    "could not release a concurrency slot of task %s (%s); it frees when its "
                    "lease expires",
                    hold.slot.task,
                    exc,
                )
