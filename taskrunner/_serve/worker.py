"""The workers: each message run as one attempt of its task, by a worker of the crew.

:func:`run` is the workers nursery of ``serve``: it starts the fetchers inside
it (:mod:`taskrunner._serve.fetcher`), each of which hands every message it
read to the crew (:mod:`taskrunner._serve.crew`), whose long-lived worker
tasks run :meth:`Worker.execute` once per message, each in its worker's
cancel scope (a :class:`~taskrunner._serve.crew.Slot`), so the pool
(:mod:`taskrunner._serve.pool`) bounds how many run at once. Once stopped,
the fetchers are cancelled at once and the running tasks get the grace to
finish; the nursery drains before the services around it stop.

Running one message is four steps, one method each:

1. **bound the deliveries** (:meth:`Worker._over_limit`): a redelivered entry
   past its delivery limit goes to the failure path undecoded (below);
2. **prepare** (:meth:`Worker._prepare`): decode the message, find its task,
   check its attempt number (``attempts`` carried by a re-queued retry plus
   the delivery count) against the task's attempts, decode the payload;
3. **run** (:meth:`Worker._run`): first, for a task with a concurrency or
   rate limit or while something is paused (two flags: no await otherwise),
   the gate (:mod:`taskrunner._serve.gate`) admits the run, or parks or
   defers it (it runs later, and this delivery is not an attempt); then the
   attempt, registered in :class:`~taskrunner._execution.inflight.InFlight` by
   message id with its slot (what a cancel stops), in a cancel scope of its own
   whose deadline is the task's ``timeout`` when it has one: the middlewares, if any,
   around the action, given a :class:`~taskrunner.TaskContext` if it takes
   one; a plain ``def`` action in a worker thread. With no middleware and no
   context the action is awaited directly, so the hot path builds nothing
   it does not use;
4. **the outcome** (:mod:`taskrunner._serve.outcome`): ack, retry (through
   the delayed set, or left pending for reclaim) or the failure path.

Unknown task on a stream that other consumer groups also read: the entry is
theirs; it is acked for this group only (see :mod:`taskrunner._serve.sharing`).
Cancelled (hard shutdown): nothing is acked; the message is reclaimed later.

Cancelled by ``TaskRunner.cancel`` (the canceller, :mod:`taskrunner._serve.canceller`,
marks the run in :class:`~taskrunner._execution.inflight.InFlight` and stops its
slot, which cancels the worker's scope): every async run is interrupted, with
or without a timeout. The cancellation leaves the run inside a spent scope,
where any await would be cancelled too, so the rest of the run is left to the
slot (:meth:`Worker._stopped`, awaited once the worker left that scope): the
run is acked as cancelled, never retried, its lock released, and recorded as
cancelled when its task keeps results. A thread is not interrupted: its run is
acked as cancelled at once, and it keeps its pool slot (and concurrency slot)
until it returns; its outcome is discarded. A
redelivered entry is checked for a stop request before anything else (it may
have been cancelled while its worker was dead).

Results. A task that keeps results (``keep_result``) is acked with its result
document: the return value (a value that cannot be kept fails the run for
good with ``InvalidTaskResult``), or the error of its final failure.

Timeouts. Past its deadline an ``async`` action is cancelled and the attempt
fails with :class:`~taskrunner.errors.TaskTimeout`. A thread cannot be
cancelled: the attempt fails at the deadline all the same (its outcome is
decided then, retry included), the thread's result is discarded when it
returns, and the run keeps its pool slot (and its ``InFlight`` entry, no
longer refreshed) until then, so threads never pile up beyond the pool.

Poison entries. Any exception while decoding or validating an entry (a
``RecursionError`` from JSON nested 100,000 deep, a typed payload that does
not structure) sends it down the failure path with a short reason. An entry
that kills the whole process cannot be caught, so a redelivered entry's
delivery count is checked against its limit (:mod:`taskrunner._execution.poison`)
before it is decoded: past it, the entry goes to the failure path without
being decoded or run again. First deliveries skip that check. The check
uses the delivery count alone (the ``attempts`` of a re-queued retry are
inside the bytes it does not decode): a process-killing entry is never
re-queued (re-queueing needs a caught failure), so it stays one entry whose
delivery count bounds it.

The duration of every run, failed or not, goes to the timing recorder. A run
that holds a concurrency slot gives it back when its ``InFlight`` entry goes
(for a thread, once it returned).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Mapping
from functools import partial
from typing import Any

import attrs
import trio

from taskrunner._codec import decode_payload
from taskrunner._config import ConfigHolder
from taskrunner._execution.context import EMPTY_STATE, TaskContext
from taskrunner._execution.inflight import InFlight
from taskrunner._execution.middleware import CallNext, Middleware, run_chain
from taskrunner._execution.poison import delivery_limit
from taskrunner._fleet.timings import TimingRecorder
from taskrunner._serve import fetcher
from taskrunner._serve.crew import Crew, Slot
from taskrunner._serve.fetcher import FetcherContext
from taskrunner._serve.gate import NO_HOLD, Gate, Hold
from taskrunner._serve.outcome import Outcomes, brief, dispatched_at
from taskrunner._serve.pool import WorkerPool
from taskrunner._serve.sharing import StreamSharing
from taskrunner._task import Delivery, Task
from taskrunner._wire import TaskMessage, decode_message
from taskrunner.backends import QueueEntry
from taskrunner.errors import (
    BackendError,
    InvalidTaskPayload,
    InvalidTaskResult,
    TaskMaxRetryExceeded,
    TaskNotFound,
    TaskRunnerError,
    TaskTimeout,
)

log = logging.getLogger(__name__)


def _undecodable(exc: Exception) -> InvalidTaskPayload:
    if isinstance(exc, InvalidTaskPayload):
        return exc
    error = InvalidTaskPayload(f"{type(exc).__name__} while decoding: {brief(str(exc), 200)}")
    error.__cause__ = exc
    return error


def _delivery(entry: QueueEntry, consumer: str, message: TaskMessage | None) -> Delivery:
    return Delivery(
        id=entry.id,
        consumer=consumer,
        delivery_count=entry.delivery_count,
        raw=entry.payload,
        message=message,
        queue=entry.queue,
    )


@attrs.frozen
class _Ending:
    """What the outcome of a run that is not the hot path's needs to know."""

    keep: float | None
    """Seconds its task keeps results for, if it does."""
    started_at: float
    """When it started (the backend's clock; for a kept result)."""
    value: Any
    """What the action returned."""
    stopped: bool
    """It was asked to stop (``TaskRunner.cancel``)."""


@attrs.frozen
class _Refused:
    """An entry that cannot run: the failure path's delivery and error."""

    delivery: Delivery
    error: TaskRunnerError
    unknown_task: bool = False
    """It names a task not registered here (perhaps another group's, on a shared stream)."""


class _Thread:
    """A plain ``def`` action's thread: whether it returned, and an event set then
    (its run keeps its pool slot until it has)."""

    def __init__(self) -> None:
        self._token = trio.lowlevel.current_trio_token()
        self.returned = False
        self.done = trio.Event()

    def call(self, fn: Callable[[], Any]) -> Any:
        try:
            return fn()
        finally:
            self.returned = True
            try:
                self._token.run_sync_soon(self.done.set)
            except trio.RunFinishedError:  # the runner is gone: nobody waits any more
                pass


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
        self._tasks = tasks
        self._pool = pool
        self.outcomes = outcomes
        self._inflight = inflight
        self._timings = timings
        self._sharing = sharing
        self.observers: list[Callable[[str, float, bool], object]] = []
        # Set by serve for its duration:
        self.middlewares: tuple[Middleware, ...] = ()
        self.state: Mapping[str, Any] = EMPTY_STATE
        self.thread_limiter = trio.CapacityLimiter(math.inf)

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
                or await self._over_limit(entry, consumer)
            ):
                return
            prepared = self._prepare(entry, consumer)
            if isinstance(prepared, _Refused):
                await self._refuse(prepared)
            else:
                await self._run(entry, consumer, slot, *prepared)
        except Exception:
            # Only a bug gets here (ours, or an exception whose str() raises...).
            # The entry stays pending and comes back after reclaim_delay, past its
            # delivery limit eventually, undecoded.
            log.exception(
                "unexpected error while handling message %s; leaving it pending", entry.id
            )
        finally:
            if slot.ending is None:
                self._pool.release()

    # Step 2: prepare -------------------------------------------------------------
    # (Synchronous, as the run is: every coroutine layer on the hot path costs.)
    def _prepare(
        self, entry: QueueEntry, consumer: str
    ) -> tuple[Task, TaskMessage, Any] | _Refused:
        """The task, message and payload of ``entry``; or why it cannot run."""
        try:
            message = decode_message(entry.payload)
        except Exception as exc:
            return _Refused(_delivery(entry, consumer, None), _undecodable(exc))
        task = self._tasks.get(message.task_name)
        if task is None:
            unknown = TaskNotFound(message.task_name)
            return _Refused(_delivery(entry, consumer, message), unknown, unknown_task=True)
        if message.attempts + entry.delivery_count > task.attempts:
            # The last allowed attempt never finished (its worker died): give up.
            error = TaskMaxRetryExceeded(task.name, entry.id, task.attempts)
            return _Refused(_delivery(entry, consumer, message), error)
        try:
            payload = decode_payload(message.payload, task.payload_type, task.name, task.extra_keys)
        except Exception as exc:
            return _Refused(_delivery(entry, consumer, message), _undecodable(exc))
        return task, message, payload

    async def _refuse(self, refused: _Refused) -> None:
        """The failure path of an entry that cannot run (or another group's ack)."""
        delivery = refused.delivery
        if refused.unknown_task and await self._belongs_to_another_group(delivery):
            return
        await self.outcomes.fail(delivery, refused.error)

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
            admitted = await self._gate.admit(entry, attempt, message, task, payload)
            if admitted is None:
                return  # parked or deferred: it runs later
            hold = admitted
        timeout = task.timeout if task.timeout is not None else self._config.current.default_timeout
        started = trio.current_time()
        thread = _Thread() if task.shape.sync else None
        # Nothing to build for a plain async action without middleware: awaited as it is.
        plain = thread is None and task.shape.context is None and not self.middlewares
        extras = message.extras  # the message's keep_result, else the task's
        keep = extras.keep_result if extras is not None else None
        if keep is None:
            keep = task.keep_result
        # TaskRunner.cancel cancels the slot's long-lived scope (see _serve.crew); a
        # timeout gets a scope of its own, with its deadline.
        scope = None if timeout is None else trio.CancelScope(deadline=started + timeout)
        deadline = math.inf if timeout is None else started + timeout
        self._inflight.add(
            entry.id,
            consumer,
            task.reservation,
            started,
            deadline=deadline,
            slot=slot,
            queue=entry.queue,
            hold=hold.slot,
        )
        begun = self.outcomes.now() if keep is not None else 0.0  # a result's started_at
        error: Exception | None = None
        value: Any = None
        stopped = False
        try:
            if scope is None:
                if plain:
                    value = await task.action(payload)
                else:
                    value = await self._call(entry, task, message, payload, deadline, thread)
            else:
                with scope:
                    if plain:
                        value = await task.action(payload)
                    else:
                        value = await self._call(entry, task, message, payload, deadline, thread)
                if scope.cancelled_caught:
                    assert timeout is not None
                    error = TaskTimeout(task.name, entry.id, timeout)
        except Exception as exc:
            error = exc
        finally:
            if slot.stopped:
                # Stopped (only a stop request cancels the slot's scope, and only while
                # its entry runs): the rest of the run awaits, so it waits until the
                # worker has left the spent scope.
                if thread is not None:
                    self._inflight.settle(entry.id, queue=entry.queue)
                slot.ending = partial(
                    self._stopped,
                    entry,
                    task,
                    message,
                    thread,
                    _Ending(keep, begun, None, True),
                    hold,
                    started,
                )
            elif thread is None:
                stopped = self._inflight.remove(entry.id, queue=entry.queue)
                if hold is not NO_HOLD:  # the run's end: its slot given back
                    await self._gate.release(hold)
            else:  # its outcome is decided now: no stop interrupts what follows
                self._inflight.settle(entry.id, queue=entry.queue)
            if slot.ending is None:
                elapsed = trio.current_time() - started
                self._timings.record(task.name, elapsed)
                if self.observers:
                    self._notify(task.name, elapsed, error is None)
        if slot.ending is not None:
            return
        if error is None and thread is None and not stopped:
            if keep is None:
                self.outcomes.done(entry.id, message, entry.queue)  # step 4, the hot path's outcome
                return
            try:  # a kept result, with the ack
                self.outcomes.succeeded(entry, task, message, keep, begun, value)
            except InvalidTaskResult as invalid:
                await self.outcomes.fail(
                    _delivery(entry, consumer, message), invalid, started_at=begun
                )
            return
        await self._outcome(
            entry,
            consumer,
            task,
            message,
            error,
            thread,
            _Ending(keep, begun, value, stopped),
            hold,
        )

    # Step 4: the outcome -------------------------------------------------------------
    async def _stopped(
        self,
        entry: QueueEntry,
        task: Task,
        message: TaskMessage,
        thread: _Thread | None,
        ending: _Ending,
        hold: Hold,
        started: float,
    ) -> None:
        """The end of a run stopped by ``TaskRunner.cancel`` (awaited outside the worker's
        spent scope): acked as cancelled; a thread, which runs on, keeps the run's pool
        and concurrency slots until it returns."""
        try:
            self.outcomes.cancelled(entry, message, ending.keep, ending.started_at)
            elapsed = trio.current_time() - started
            self._timings.record(task.name, elapsed)
            if self.observers:
                self._notify(task.name, elapsed, False)
            if thread is not None and not thread.returned:
                log.info(
                    "task %s (message %s) was cancelled in a thread that is still running: "
                    "its pool slot frees when it returns",
                    task.name,
                    entry.id,
                )
                await thread.done.wait()
        finally:
            self._inflight.remove(entry.id, queue=entry.queue)
            if hold is not NO_HOLD:
                await self._gate.release(hold)

    async def _outcome(
        self,
        entry: QueueEntry,
        consumer: str,
        task: Task,
        message: TaskMessage,
        error: Exception | None,
        thread: _Thread | None,
        ending: _Ending,
        hold: Hold,
    ) -> None:
        """Cancelled, ack (with the result), retry or the failure path; then wait for a
        thread past its timeout."""
        try:
            # A thread's run is tracked until it returns: its stop request is read here.
            stopped = ending.stopped or (
                thread is not None and self._inflight.stop_requested(entry.id, queue=entry.queue)
            )
            if stopped:
                self.outcomes.cancelled(entry, message, ending.keep, ending.started_at)
            elif error is not None:
                await self.outcomes.attempt_failed(
                    task,
                    _delivery(entry, consumer, message),
                    error,
                    dispatched_at=dispatched_at(entry.id, message),
                    started_at=ending.started_at if ending.keep is not None else None,
                )
            elif ending.keep is None:
                self.outcomes.done(entry.id, message, entry.queue)
            else:
                try:
                    self.outcomes.succeeded(
                        entry, task, message, ending.keep, ending.started_at, ending.value
                    )
                except InvalidTaskResult as invalid:
                    await self.outcomes.fail(
                        _delivery(entry, consumer, message), invalid, started_at=ending.started_at
                    )
            if thread is not None and not thread.returned:
                log.warning(
                    "task %s (message %s) ran past its timeout in a thread that is still "
                    "running: its pool slot frees when it returns",
                    task.name,
                    entry.id,
                )
                await thread.done.wait()
        finally:
            if thread is not None:  # the thread's end: its slot given back
                self._inflight.remove(entry.id, queue=entry.queue)
                if hold is not NO_HOLD:
                    await self._gate.release(hold)

    def _call(
        self,
        entry: QueueEntry,
        task: Task,
        message: TaskMessage,
        payload: Any,
        deadline: float,
        thread: _Thread | None,
    ) -> Any:
        """The attempt with its context, middlewares or thread: the awaitable of the
        action's result (returned, not awaited here: a coroutine layer less per run)."""
        shape = task.shape
        ctx = None
        if shape.context is not None or self.middlewares:
            ctx = TaskContext(
                message_id=entry.id,
                task_id=message.id or entry.id,
                task_name=task.name,
                attempt=message.attempts + entry.delivery_count,
                max_attempts=task.attempts,
                deadline=None if deadline == math.inf else deadline,
                dispatched_at=self.outcomes.unix_time(dispatched_at(entry.id, message)),
                state=self.state,
                trace=message.trace or EMPTY_STATE,
                schedule=message.schedule,
                tick=message.tick,
            )
        if thread is None and not self.middlewares:  # a context alone: called as it is
            if shape.context == 1:
                return task.action(payload, ctx)
            return task.action(payload, **{str(shape.context): ctx})
        if shape.context is None:
            action: CallNext = partial(task.action, payload)
        elif shape.context == 1:
            action = partial(task.action, payload, ctx)
        else:
            action = partial(task.action, payload, **{str(shape.context): ctx})
        if thread is not None:
            action = partial(
                trio.to_thread.run_sync,
                partial(thread.call, action),
                limiter=self.thread_limiter,
                abandon_on_cancel=True,
            )
        if not self.middlewares:
            return action()
        assert ctx is not None
        return run_chain(self.middlewares, ctx, action)

    async def _belongs_to_another_group(self, delivery: Delivery) -> bool:
        """Whether an unknown task is another group's (the stream is shared): if
        so it is acked for this group only, never dead-lettered.

        The other groups are looked up once (the failure path, not the hot
        path) and then remembered; an error leaves the entry pending.
        """
        task_name = delivery.task_name or ""
        try:
            others = self._sharing.seen or await self._sharing.others()
        except BackendError as exc:
            log.warning(
                "message %s names unknown task %s and the stream's groups could not be "
                "read (%s); leaving it pending",
                delivery.id,
                task_name,
                exc,
            )
            return True
        if not others:
            return False
        self._sharing.skip_unknown(task_name, delivery.id)
        self.outcomes.ack(delivery.id, delivery.queue)
        return True

    # Step 1: bound the deliveries ----------------------------------------------------
    async def _over_limit(self, entry: QueueEntry, consumer: str) -> bool:
        """Send a redelivered entry past its delivery limit down the failure path,
        undecoded (it may be what killed the workers before); True if it was."""
        bound = delivery_limit(entry.payload, self._tasks)
        if entry.delivery_count <= bound.limit:
            return False
        error: TaskRunnerError
        if bound.task_name is not None:
            error = TaskMaxRetryExceeded(bound.task_name, entry.id, bound.limit)
        else:
            error = InvalidTaskPayload(
                f"delivered {entry.delivery_count} times without naming a registered task "
                f"(at most {bound.limit} deliveries); not decoded again"
            )
        log.warning(
            "message %s delivered %d times, over its limit of %d: failing it without "
            "decoding it, in case it is what killed the workers it was delivered to",
            entry.id,
            entry.delivery_count,
            bound.limit,
        )
        await self.outcomes.fail(_delivery(entry, consumer, None), error)
        return True

    def _notify(self, task_name: str, elapsed: float, succeeded: bool) -> None:
        for observer in list(self.observers):
            try:
                observer(task_name, elapsed, succeeded)
            except Exception:
                log.exception("timing observer %r raised; removing it", observer)
                self.observers.remove(observer)


async def run(
    fetching: FetcherContext,
    stop: trio.Event,
    grace: Callable[[], float],
    *,
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
    """
    async with trio.open_nursery() as workers:
        crew = Crew(fetching.execute, workers, fetching.pool)
        async with trio.open_nursery() as fetchers:
            for fetcher_id in range(1, fetching.config.num_fetchers + 1):
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
