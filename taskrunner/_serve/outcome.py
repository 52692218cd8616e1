"""What happens to a message once its run is over: ack, retry, or the failure path.

Theory of operation (the worker that runs the message is
:mod:`taskrunner._serve.worker`). Each finished run ends in exactly one of:

- **done**: the action returned. The entry is acked (batched by the acker),
  and a unique task's lock released after the ack (and a periodic run's
  outcome, ``succeeded``, recorded after it: :func:`periodic_outcome`).
- **retry**: the attempt failed and :func:`taskrunner._execution.retry.next_step` gives
  another one. With a delay (the task's ``Backoff``, or a ``Retry`` raised by
  the action) the message is re-queued through the delayed set: a member
  carrying its task id, payload, trace, unique key and lock token, and the
  attempts used so far, is added and the entry acked in one atomic backend
  step (:meth:`~taskrunner.backends.Deferral.defer`). A unique task keeps its
  lock across the retry. If that step fails, or the task has ``retry=None``,
  the entry stays pending and comes back after ``reclaim_delay`` with a
  higher delivery count: attempts stay bounded either way.
- **the failure path**: no attempt left, a permanent error, an unknown task
  or an undecodable entry. ``failed_task_handler(delivery, error)`` returning
  means handled (ack); raising leaves the message pending for a later try.
  Without a handler the message goes to the dead-letter stream, then is
  acked (and a periodic run's outcome, ``failed``, recorded after the ack).
  An entry failed undecoded (past its delivery limit) records no outcome: an
  ``overlap=False`` schedule's in-flight mark then lapses by its TTL.

Every failed attempt is reported to ``on_error`` (a ``Retry`` the action
raised is a request, not a failure: it is only logged) and counted.

A run that ``TaskRunner.cancel`` stopped is acknowledged as cancelled, never
retried. What an ack records beside the entry (the result document of a task
that keeps results, the end of an entry-index mapping or of a stop request)
is :mod:`taskrunner._serve.finishing`'s; a plain message that keeps no results
is acknowledged with its entry and lock alone, as before.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable, Mapping
from typing import Any

from taskrunner import _shards, _wire
from taskrunner._config import ConfigHolder
from taskrunner._execution.hooks import call_hook, call_hook_safely
from taskrunner._execution.outcomes import outcome
from taskrunner._execution.progress import EVENT_DETAIL_CHARS, Reports
from taskrunner._execution.retry import Defer, GiveUp, next_step
from taskrunner._serve.acker import Acker
from taskrunner._serve.finishing import Finishing, periodic_outcome
from taskrunner._task import Delivery, Task
from taskrunner._wire import TaskMessage
from taskrunner.backends import Backend, QueueEntry
from taskrunner.errors import (
    BackendError,
    InvalidTaskPayload,
    Retry,
    TaskExecutionError,
    TaskMaxRetryExceeded,
    TaskRunnerError,
)

log = logging.getLogger(__name__)

REASON_CHARS = 1000
"""Longest error text logged or written to a dead letter (a bad entry's own text
can be megabytes long)."""


def brief(text: str, limit: int = REASON_CHARS) -> str:
    """``text`` cut to ``limit`` characters, with lone surrogates escaped, so it can
    be logged and stored anywhere."""
    if len(text) > limit:
        text = f"{text[:limit]}... ({len(text)} characters)"
    if not text.isascii():
        text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text


def dispatched_at(entry_id: str, message: TaskMessage) -> float:
    """When the task was first dispatched: the message's ``dispatched_at``, else
    its stream id's time."""
    if message.dispatched_at is not None:
        return message.dispatched_at
    return int(entry_id.partition("-")[0]) / 1000


def task_id_of(delivery: Delivery) -> str | None:
    """The task's id of a failed delivery, for its dead letter: the message's ``id``
    (a retried or delayed task's, kept across its entries), else its stream id; ``None``
    for an entry not decoded (its id is inside the bytes)."""
    if delivery.message is None:
        return None
    return delivery.message.id or delivery.id


def member_queue(backend: Backend, group: str, queue: str | None) -> str | None:
    """The ``queue`` field of a delayed member that re-queues an entry read from
    ``queue``: ``None`` (no field) for the backend's default queue, so a
    one-queue runner's members are what they always were."""
    if queue is None or queue == backend.stream_keys(group).queue:
        return None
    return queue


class WorkerCounters:
    def __init__(self) -> None:
        self.completed = 0
        self.failed = 0
        self.retried = 0
        self.dead_lettered = 0
        self.handled = 0


class Outcomes:
    """Carries out the outcome of each run (see the module docstring).

    Args:
        config: The runner's configuration (hooks, handler, group).
        backend: Where retries are re-queued and failed messages dead-lettered.
        acker: Where finished messages are acked.
        nudge: Told the run-at time of every retry re-queued, so the scheduler
            moves it on time.
        tasks: The registered tasks by name, read as it is (their ``keep_result``).
    """

    def __init__(
        self,
        config: ConfigHolder,
        backend: Backend,
        acker: Acker,
        nudge: Callable[[float], None],
        tasks: Mapping[str, Task],
        reports: Reports | None = None,
    ) -> None:
        self._config = config
        self._backend = backend
        self.backend = backend
        """The backend itself (where a workflow step's inputs are read)."""
        self._acker = acker
        self._nudge = nudge
        self.counters = WorkerCounters()
        self.unix_time = backend.unix_time
        """The backend's clock to unix seconds (``ctx.dispatched_at``), bound once."""
        self.finishing = Finishing(config, backend, acker, tasks, reports)
        self.reports = self.finishing.reports
        """Where runs report progress and events (see :mod:`taskrunner._execution.progress`)."""
        self.rng = random.Random()
        """Where retry jitter is drawn from (seed it in a test)."""

    def done(
        self,
        entry_id: str,
        message: TaskMessage,
        queue: str | None = None,
        delivery_count: int = 1,
        *,
        group: str | None = None,
        ended: bool = False,
    ) -> None:
        """The action of a task that keeps no results returned: ack (the entry of
        ``queue``, delivered ``delivery_count`` times, in ``group``: ``None`` is the
        runner's, else the shard it was read in), then release the message's lock
        (a message with our extras may end an entry-index mapping). ``ended``: as
        for :meth:`Acker.ack <taskrunner._serve.acker.Acker.ack>` (its in-flight
        entry was ended, and is released by nothing after this)."""
        self.counters.completed += 1
        if self._config.current.events:
            self.finishing.final("succeeded", entry_id, delivery_count, message, queue, group=group)
        if message.extras is None:  # a plain message pays one test
            lock = self.finishing.lock(message, group)
            self._acker.ack(entry_id, lock, queue=queue, group=group, ended=ended)
        else:
            self._acker.ack(
                entry_id,
                self.finishing.lock(message, group),
                periodic_outcome(message, entry_id, "succeeded", self._backend.now(), group),
                outcome(entry_id, message, None),
                queue=queue,
                group=group,
                ended=ended,
            )

    def now(self) -> float:
        """The backend's clock (a kept result's times)."""
        return self._backend.now()

    def succeeded(
        self,
        entry: QueueEntry,
        task: Task,
        message: TaskMessage,
        keep: float,
        started_at: float,
        value: Any,
        *,
        ended: bool = False,
    ) -> None:
        """The action of a task that keeps results returned ``value``: ack with it
        (``ended``: as for :meth:`done`).

        Raises:
            InvalidTaskResult: ``value`` cannot be kept; nothing was acknowledged.
        """
        self.finishing.succeeded(entry, task, message, keep, started_at, value, ended=ended)
        self.counters.completed += 1

    def cancelled(
        self,
        entry: QueueEntry,
        message: TaskMessage | None,
        keep: float | None,
        started_at: float | None,
    ) -> None:
        """The run was asked to stop (``TaskRunner.cancel``): ack as cancelled."""
        self.finishing.cancelled(entry, message, keep, started_at)

    async def cancelled_meanwhile(self, entry: QueueEntry) -> bool:
        """Whether a redelivered entry was asked to stop (then it is acked as cancelled)."""
        return await self.finishing.cancelled_meanwhile(entry)

    def ack(self, entry_id: str, queue: str | None = None, *, group: str | None = None) -> None:
        """Ack an entry that holds no lock (another group's, on a shared stream)."""
        self._acker.ack(entry_id, None, queue=queue, group=group)

    async def attempt_failed(
        self,
        task: Task,
        delivery: Delivery,
        error: Exception,
        *,
        dispatched_at: float,
        started_at: float | None = None,
    ) -> None:
        """Attempt ``delivery.attempt`` raised ``error`` (a ``TaskTimeout`` past the
        timeout): report it, then retry or take the failure path."""
        attempt = delivery.attempt
        step = next_step(
            attempt=attempt,
            attempts=task.attempts,
            error=error,
            policy=task.retry,
            permanent=task.permanent,
            rng=self.rng,
        )
        requested = isinstance(error, Retry)
        report = TaskExecutionError(task.name, delivery.id, attempt, error)
        report.__cause__ = error
        if requested:
            log.info(
                "task %s (message %s) asked for a retry on attempt %d of %d",
                task.name,
                delivery.id,
                attempt,
                task.attempts,
            )
        else:
            self.counters.failed += 1
            if isinstance(step, GiveUp):
                then = " (a permanent error)" if step.permanent else ""
            elif isinstance(step, Defer):
                then = f"; retrying in {step.delay:.3g}s"
            else:
                then = "; it will be retried after reclaim_delay"
            log.warning(
                "task %s (message %s) failed on attempt %d of %d: %s: %s%s",
                task.name,
                delivery.id,
                attempt,
                task.attempts,
                type(error).__name__,
                error,
                then,
                exc_info=error,
            )
            await call_hook_safely("on_error", self._config.current.on_error, report, delivery)
        if self._config.current.events and not isinstance(step, GiveUp):
            detail = f"{type(error).__name__}: {error}"[:EVENT_DETAIL_CHARS]
            self.reports.record(
                self.reports.event(
                    "retried",
                    task_id=_shards.run_task_id(
                        delivery.group, task_id_of(delivery) or delivery.id
                    ),
                    task_name=task.name,
                    queue=delivery.queue,
                    attempt=attempt,
                    message_id=delivery.id,
                    detail=detail,
                )
            )
        if isinstance(step, GiveUp):
            final: TaskRunnerError = report
            if not step.permanent:
                final = TaskMaxRetryExceeded(task.name, delivery.id, task.attempts, error)
                final.__cause__ = error
            await self.fail(delivery, final, reported=not requested, started_at=started_at)
        elif isinstance(step, Defer):
            await self._defer(task, delivery, step.delay, dispatched_at)
        else:
            self.counters.retried += 1

    async def _defer(
        self, task: Task, delivery: Delivery, delay: float, dispatched_at: float
    ) -> None:
        """Re-queue the message for its next attempt, ``delay`` seconds from now."""
        message = delivery.message
        assert message is not None  # a run always has its decoded message
        run_at = self._backend.now() + delay
        group = delivery.group or self._config.current.consumer_group  # a shard's own
        try:
            member = _wire.encode_delayed(
                _wire.retry_delayed(
                    message,
                    run_at,
                    id=message.id or delivery.id,
                    attempts=delivery.attempt,
                    dispatched_at=dispatched_at,
                    queue=member_queue(self._backend, group, delivery.queue),
                )
            )
            deferred = await self._backend.defer(
                group,
                delivery.id,
                member,
                run_at,
                queue=delivery.queue,
                task_id=message.id or delivery.id,
            )
        except (BackendError, InvalidTaskPayload) as exc:
            log.warning(
                "could not re-queue message %s (task %s) for its next attempt (%s); it "
                "stays pending and comes back after reclaim_delay",
                delivery.id,
                task.name,
                exc,
            )
            self.counters.retried += 1
            return
        if not deferred:
            log.warning(
                "message %s (task %s) was no longer pending when its retry was queued "
                "(reclaimed by another consumer?); not re-queued",
                delivery.id,
                task.name,
            )
            return
        self.counters.retried += 1
        self._nudge(run_at)

    async def fail(
        self,
        delivery: Delivery,
        error: TaskRunnerError,
        *,
        reported: bool = False,
        started_at: float | None = None,
    ) -> None:
        """The failure path: handler or dead-letter, then ack (with the failure, for a
        task that keeps results); or leave pending."""
        reason = brief(f"{type(error).__name__}: {error}")
        if not reported:
            log.error(
                "message %s (task %s) cannot be processed: %s",
                delivery.id,
                brief(delivery.task_name or "?", 200),
                reason,
            )
            await call_hook_safely("on_error", self._config.current.on_error, error, delivery)
        handler = self._config.current.failed_task_handler
        if handler is not None:
            try:
                await call_hook(handler, delivery, error)
            except Exception:
                log.exception(
                    "failed_task_handler raised for message %s; leaving it pending "
                    "(it is tried again after reclaim_delay)",
                    delivery.id,
                )
                return
            self.counters.handled += 1
        else:
            try:
                dead_id = await self._backend.dead_letter(
                    delivery.group or self._config.current.consumer_group,
                    delivery.id,
                    delivery.raw,
                    reason,
                    queue=delivery.queue,
                    task_id=task_id_of(delivery),
                )
            except BackendError as exc:
                log.error(
                    "could not dead-letter message %s (%s); leaving it pending", delivery.id, exc
                )
                return
            self.counters.dead_lettered += 1
            log.error("message %s moved to the dead-letter stream as %s", delivery.id, dead_id)
        self.finishing.failed(
            delivery.id,
            delivery.delivery_count,
            delivery.message,
            error,
            started_at,
            queue=delivery.queue,
            raw=delivery.raw,
            group=delivery.group,
        )
