"""The workers: each message run as one attempt of its task, by a worker of the crew.

:func:`run` is the workers nursery of ``serve``: it starts the fetchers inside
it (:mod:`taskrunner._serve.fetcher`), each of which hands every message it
read to the crew (:mod:`taskrunner._serve.crew`), whose long-lived worker
tasks run :meth:`Worker.execute` once per message, each in its worker's
cancel scope (a :class:`~taskrunner._serve.crew.Slot`), so the pool
(:mod:`taskrunner._serve.pool`) bounds how many run at once. Once stopped,
the fetchers are cancelled at once and the running tasks get the grace to
finish; the nursery drains before the services around it stop.

Running one message is four steps:

1. **bound the deliveries** and 2. **prepare** (:mod:`taskrunner._serve.intake`):
   a redelivered entry past its delivery limit goes to the failure path
   undecoded; else the message and its payload are decoded, and its task and
   attempt number checked (an entry that cannot run is refused there);
3. **run** (:meth:`Worker._run`): first, for a task with a concurrency or
   rate limit or while something is paused (two flags: no await otherwise),
   the gate (:mod:`taskrunner._serve.gate`) admits the run, or parks or
   defers it (it runs later, and this delivery is not an attempt); then the
   attempt, registered in :class:`~taskrunner._execution.inflight.InFlight` by
   message id with its slot (what a cancel stops), its deadline written into
   the slot when its task has a ``timeout`` (the crew's watchdog cancels it
   then: :mod:`taskrunner._serve.watchdog`): the middlewares, if any, around
   the action, given a :class:`~taskrunner.TaskContext` if it takes one; a
   plain ``def`` action in a worker thread (:mod:`taskrunner._serve.attempt`).
   With no middleware and no context the action is awaited directly, so the
   hot path builds nothing it does not use;
4. **the outcome** (:mod:`taskrunner._serve.outcome`): ack, retry (through
   the delayed set, or left pending for reclaim) or the failure path.

Cancelled (hard shutdown): nothing is acked; the message is reclaimed later.

Cancelled by ``TaskRunner.cancel`` (the canceller, :mod:`taskrunner._serve.canceller`,
marks the run in :class:`~taskrunner._execution.inflight.InFlight` and stops its
slot, which cancels the worker's scope): every async run is interrupted, with
or without a timeout. The cancellation leaves the run inside a spent scope,
where any await would be cancelled too, so the rest of the run is left to the
slot (:mod:`taskrunner._serve.ending`, awaited once the worker left that
scope): the run is acked as cancelled, never retried, its lock released, and
recorded as cancelled when its task keeps results. A thread is not
interrupted: its run is acked as cancelled at once, and it keeps its pool slot
(and concurrency slot) until it returns; its outcome is discarded. A
redelivered entry is checked for a stop request before anything else (it may
have been cancelled while its worker was dead).

Results. A task that keeps results (``keep_result``) is acked with its result
document: the return value (a value that cannot be kept fails the run for
good with ``InvalidTaskResult``), or the error of its final failure.

Timeouts. Past its deadline an ``async`` action is cancelled and the attempt
fails with :class:`~taskrunner.errors.TaskTimeout`; as for a stop, the rest of
the run is left to the slot. A thread cannot be cancelled: the attempt fails
at the deadline all the same (its outcome is decided then, retry included),
the thread's result is discarded when it returns, and the run keeps its pool
slot (and its ``InFlight`` entry, no longer refreshed) until then, so threads
never pile up beyond the pool.

Poison entries and unknown tasks: see :mod:`taskrunner._serve.intake`.

The duration of every run, failed or not, goes to the timing recorder. A run
that holds a concurrency slot gives it back when its attempt ends (for a
thread, once it returned).

Acknowledgements. A run's ``InFlight`` entry outlives its attempt: it is
ended (:meth:`InFlight.end <taskrunner._execution.inflight.InFlight.end>`:
nothing to stop, no deadline) and stays, refreshed, until the acker saw its
ack land, so an ack that waits longer than ``reclaim_delay`` (``TRYAGAIN``
through a slot migration, a failover) does not let another instance reclaim
a message that already ran. An outcome that queues no ack (a retry left
pending, a failure path that could not finish) releases the entry at once,
and the message is reclaimed as before.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Mapping
from functools import partial
from typing import Any

import trio

from taskrunner import _shards
from taskrunner._config import ConfigHolder
from taskrunner._execution.context import EMPTY_STATE
from taskrunner._execution.inflight import InFlight
from taskrunner._execution.middleware import Middleware
from taskrunner._fleet.timings import TimingRecorder
from taskrunner._serve import fetcher, shard_fetch
from taskrunner._serve.acker import Acker
from taskrunner._serve.attempt import Thread, attempt_call
from taskrunner._serve.crew import Crew, Slot
from taskrunner._serve.ending import Ending, Endings
from taskrunner._serve.fetcher import FetcherContext
from taskrunner._serve.gate import NO_HOLD, Gate
from taskrunner._serve.intake import Intake, Refused, delivery_of, undecodable
from taskrunner._serve.outcome import Outcomes
from taskrunner._serve.pool import WorkerPool
from taskrunner._serve.sharing import StreamSharing
from taskrunner._serve.steps import STEP, step_payload, workflow_store
from taskrunner._task import Task
from taskrunner._wire import TaskMessage
from taskrunner.backends import QueueEntry, TaskEvent, WorkflowStore
from taskrunner.errors import BackendError, InvalidTaskResult, TaskTimeout

log = logging.getLogger(__name__)


class Worker:
    """Executes messages for one runner; :meth:`execute` is started once per message.

    Args:
        config: The runner's configuration (hooks, handler, group, default timeout).
        tasks: The registered tasks by name, read as it is.
        pool: Whose slot each run frees when it ends.
        outcomes: Where each run's outcome is carried out.
        sharing: The other groups on the stream (an unknown task may be theirs).
        inflight: Running messages, for the refresher.
        timings: Where every run's duration is recorded.
        gate: Admits each run of a limited task, or while something is paused.
    """

    def __init__(
        self,
        config: ConfigHolder,
        tasks: Mapping[str, Task],
        pool: WorkerPool,
        outcomes: Outcomes,
        sharing: StreamSharing,
        inflight: InFlight,
        timings: TimingRecorder,
        gate: Gate,
    ) -> None:
        self._config = config
        self._gate = gate
        self._intake = Intake(tasks, outcomes, sharing)
        self._pool = pool
        self.outcomes = outcomes
        self._inflight = inflight
        self._timings = timings
        self.observers: list[Callable[[str, float, bool], object]] = []
        self._endings = Endings(outcomes, inflight, gate, timings, self.observers)
        # Set by serve for its duration:
        self.middlewares: tuple[Middleware, ...] = ()
        self.state: Mapping[str, Any] = EMPTY_STATE
        self.thread_limiter = trio.CapacityLimiter(math.inf)
        self.clock: Callable[[], float] = trio.current_time
        """Trio's clock, read twice per run: serve binds its run's clock's own method,
        two Python calls fewer than ``trio.current_time`` each time."""
        # The backend steps' inputs were last read from, and it as a WorkflowStore:
        self._steps_from: tuple[object, WorkflowStore | None] = (None, None)

    @property
    def counters(self) -> Any:
        return self.outcomes.counters

    async def execute(self, entry: QueueEntry, consumer: str, slot: Slot) -> None:
        """Run one message in ``slot``; frees its pool slot when done, whatever happens,
        unless it leaves its ending to the slot (stopped: see :mod:`taskrunner._serve.crew`).

        Never raises but for cancellation: one entry must not stop ``serve``.
        """
        try:
            # Steps 1 and 2 inline: every coroutine layer on the hot path costs.
            if entry.delivery_count > 1 and (
                await self.outcomes.cancelled_meanwhile(entry)
                or await self._intake.over_limit(entry, consumer)
            ):
                return
            prepared = self._intake.prepare(entry, consumer)
            if isinstance(prepared, Refused):
                await self._intake.refuse(prepared)
            elif prepared[2] is STEP:  # a workflow's step: its inputs are read first
                await self._run_step(entry, consumer, slot, prepared[0], prepared[1])
            else:
                await self._run(entry, consumer, slot, *prepared)
        except Exception:
            # Only a bug gets here (ours, or an exception whose str() raises...).
            # The entry stays pending and comes back after reclaim_delay, past its
            # delivery limit eventually, undecoded.
            log.exception(
                "unexpected error while handling message %s; leaving it pending", entry.id
            )
            # Unless its ack is queued; a shard's run is in its shard's table.
            self._inflight.of(entry.group).release(entry.id, queue=entry.queue)
        finally:
            if slot.ending is None:
                self._pool.release()

    def _started(self, entry: QueueEntry, task: Task, message: TaskMessage) -> None:
        """Buffer the run's ``started`` event (events on only); it goes with the next
        ack, or the progress writer's next write (see :mod:`taskrunner._execution.progress`).
        Built positionally, inline: it is on the path of every run."""
        reports = self.outcomes.reports
        queue = entry.queue if entry.queue is not None else reports.own_queue()
        attempt = message.attempts + entry.delivery_count
        task_id = message.id or entry.id
        if entry.group is not None:  # a shard's run: its sharded id
            task_id = _shards.run_task_id(entry.group, task_id)
        event = TaskEvent("started", task_id, task.name, queue, attempt, reports.clock(), entry.id)
        reports.events.append(event)
        reports.wake.set()

    async def _run_step(
        self, entry: QueueEntry, consumer: str, slot: Slot, task: Task, message: TaskMessage
    ) -> None:
        """Read a step's inputs (:mod:`taskrunner._serve.steps`), then run it; a read
        that fails leaves the entry pending (it comes back), inputs that cannot be
        given fail it."""
        group = self._config.current.consumer_group
        backend = self.outcomes.backend
        if self._steps_from[0] is not backend:
            self._steps_from = (backend, workflow_store(backend))
        try:
            message, payload = await step_payload(
                backend,
                self._steps_from[1],
                group,
                task,
                message,
                entry.inputs,
                # ctx.parents is read only through a context (attempt.attempt_call's)
                with_parents=task.shape.context is not None or bool(self.middlewares),
            )
        except BackendError as exc:
            log.warning(
                "could not read the inputs of message %s (%s); leaving it pending", entry.id, exc
            )
            return
        except Exception as exc:
            refused = Refused(delivery_of(entry, consumer, message), undecodable(exc))
            await self._intake.refuse(refused)
            return
        await self._run(entry, consumer, slot, task, message, payload)

    # Step 3: run -------------------------------------------------------------------
    async def _run(
        self,
        entry: QueueEntry,
        consumer: str,
        slot: Slot,
        task: Task,
        message: TaskMessage,
        payload: Any,
    ) -> None:
        hold = NO_HOLD
        if task.limited or self._gate.pausing:
            attempt = message.attempts + entry.delivery_count
            admitted = await self._gate.admit(entry, consumer, attempt, message, task, payload)
            if admitted is None:
                return  # parked or deferred: it runs later
            hold = admitted
        timeout = task.timeout if task.timeout is not None else self._config.current.default_timeout
        started = self.clock()
        thread = Thread() if task.shape.sync else None
        # Nothing to build for a plain async action without middleware: awaited as it is.
        plain = thread is None and task.shape.context is None and not self.middlewares
        extras = message.extras  # the message's keep_result, else the task's
        keep = extras.keep_result if extras is not None else None
        if keep is None:
            keep = task.keep_result
        # TaskRunner.cancel cancels the slot's long-lived scope (see _serve.crew), and so
        # does the crew's watchdog at a timeout's deadline (_serve.watchdog).
        deadline = math.inf if timeout is None else started + timeout
        # Replaces the entry the gate tracked while admitting (no await since): its
        # sooner refresh is kept. A shard's run is in its shard's table (one lookup;
        # none, not even a call, for an unsharded group's).
        inflight = self._inflight if entry.group is None else self._inflight.of(entry.group)
        inflight.add(
            entry.id,
            consumer,
            task.reservation,
            started,
            deadline=deadline,
            slot=slot,
            queue=entry.queue,
            hold=hold.slot,
        )
        if self._config.current.events:
            self._started(entry, task, message)
        begun = self.outcomes.now() if keep is not None else 0.0  # a result's started_at
        error: Exception | None = None
        value: Any = None
        stopped = False
        try:
            if timeout is not None:
                slot.time(deadline)
            if plain:
                value = await task.action(payload)
            else:
                value = await attempt_call(
                    entry,
                    task,
                    message,
                    payload,
                    deadline,
                    thread,
                    middlewares=self.middlewares,
                    state=self.state,
                    unix_time=self.outcomes.unix_time,
                    limiter=self.thread_limiter,
                    reports=self.outcomes.reports,
                )
        except Exception as exc:
            error = exc
        except BaseException:
            if thread is None and not slot.stopped and not slot.timed_out:
                # Cancelled by a hard stop: no outcome, so no ack; the entry goes now
                # (the message stays pending for reclaim), not kept as if one came.
                inflight.remove(entry.id, queue=entry.queue)
            raise
        finally:
            if timeout is not None:
                slot.deadline = math.inf  # returned: the watchdog leaves it be
            if slot.stopped:
                # Stopped (only a stop request cancels the slot's scope, and only while
                # its entry runs): the rest of the run awaits, so it waits until the
                # worker has left the spent scope.
                if thread is not None:
                    inflight.settle(entry.id, queue=entry.queue)
                slot.ending = partial(
                    self._endings.stopped,
                    entry,
                    task,
                    message,
                    thread,
                    Ending(keep, begun, None, True),
                    hold,
                    started,
                )
            elif slot.timed_out:
                # Past its timeout (the watchdog cancelled the slot's scope): the rest of
                # the run awaits, so it waits until the worker has left the spent scope.
                assert timeout is not None
                error = TaskTimeout(task.name, entry.id, timeout)
                if thread is None:  # kept (refreshed) until its outcome's ack lands
                    stopped = inflight.end(entry.id, queue=entry.queue)
                else:
                    inflight.settle(entry.id, queue=entry.queue)
                slot.ending = partial(
                    self._endings.timed_out,
                    entry,
                    consumer,
                    task,
                    message,
                    error,
                    thread,
                    Ending(keep, begun, None, stopped),
                    hold,
                )
            elif thread is None:
                # Kept (refreshed) until its ack lands, so a slow ack cannot let the
                # message be reclaimed and run again (_execution.inflight).
                stopped = inflight.end(entry.id, queue=entry.queue)
                if hold is not NO_HOLD:  # the run's end: its slot given back
                    await self._gate.release(hold)
            else:  # its outcome is decided now: no stop interrupts what follows
                inflight.settle(entry.id, queue=entry.queue)
            if not slot.stopped:
                elapsed = self.clock() - started
                self._timings.record(task.name, elapsed)
                if self.observers:
                    self._endings.notify(task.name, elapsed, error is None)
        if slot.ending is not None:
            return
        if error is None and thread is None and not stopped:
            if keep is None:
                # step 4, the hot path's outcome (its entry ended above, released by
                # nothing after this: dropped once the ack lands)
                self.outcomes.done(
                    entry.id,
                    message,
                    entry.queue,
                    entry.delivery_count,
                    group=entry.group,
                    ended=True,
                )
                return
            try:  # a kept result, with the ack (its entry ended above, as for done)
                self.outcomes.succeeded(entry, task, message, keep, begun, value, ended=True)
            except InvalidTaskResult as invalid:
                try:
                    await self.outcomes.fail(
                        delivery_of(entry, consumer, message), invalid, started_at=begun
                    )
                finally:
                    inflight.release(entry.id, queue=entry.queue)
            return
        await self._endings.outcome(
            entry,
            consumer,
            task,
            message,
            error,
            thread,
            Ending(keep, begun, value, stopped),
            hold,
        )

    # Step 4: the outcome -------------------------------------------------------------


async def run(
    fetching: FetcherContext,
    stop: trio.Event,
    grace: Callable[[], float],
    *,
    acker: Acker | None = None,
    task_status: trio.TaskStatus[trio.CancelScope] = trio.TASK_STATUS_IGNORED,
) -> None:
    """The workers nursery: the fetchers, and one task per message they read, until
    ``stop`` is set; then drain.

    Calls ``task_status.started(scope)`` once every fetcher runs, with the
    workers nursery's cancel scope, whose deadline :meth:`TaskRunner.shutdown
    <taskrunner.TaskRunner.shutdown>` moves to cut a drain short. After the
    stop the fetchers are cancelled at once; running tasks get ``grace()``
    seconds to finish, then are cancelled and stay pending for reclaim.

    Args:
        fetching: What the fetchers share (``config.num_fetchers`` of them start).
        stop: Set to stop fetching and drain.
        grace: Seconds running tasks get once stopped (read when the drain
            starts, and again to report it).
        acker: The runner's acker, told by the crew how many runs are running
            (:attr:`Acker.running <taskrunner._serve.acker.Acker.running>`).
    """
    async with trio.open_nursery() as workers:
        crew = Crew(fetching.execute, workers, fetching.pool)
        if acker is not None:
            acker.running = crew.busy
        async with trio.open_nursery() as fetchers:
            for fetcher_id in range(1, fetching.config.num_fetchers + 1):
                if fetching.config.shards > 1:  # a fetcher per shard, taking turns
                    for part in shard_fetch.shard_contexts(fetching):
                        assert part.group is not None  # a shard's tag, or the group
                        start = shard_fetch.tag_entries(crew.start, part.group)
                        await fetchers.start(fetcher.run, part, start, fetcher_id)
                    continue
                await fetchers.start(fetcher.run, fetching, crew.start, fetcher_id)
            task_status.started(workers.cancel_scope)
            await stop.wait()
            fetchers.cancel_scope.cancel()
        crew.close()
        seconds = grace()
        running = fetching.pool.in_use
        if running:
            log.info("shutting down: waiting up to %.1fs for %d running task(s)", seconds, running)
        workers.cancel_scope.deadline = trio.current_time() + seconds
    if workers.cancel_scope.cancelled_caught:
        # (A hard stop may cut the body above short: read the grace again.)
        log.warning(
            "shutdown_grace (%.3gs) ran out; unfinished tasks were cancelled and "
            "stay pending for reclaim",
            grace(),
        )
