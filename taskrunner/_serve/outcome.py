"""What happens to a message once its run is over: ack, retry, or the failure path.

Theory of operation (the worker that runs the message is
:mod:`taskrunner._serve.worker`). Each finished run ends in exactly one of:

- **done**: the action returned. The entry is acked (batched by the acker),
  and a unique task's lock released after the ack.
- **retry**: the attempt failed and :func:`taskrunner._retry.next_step` gives
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
  acked.

Every failed attempt is reported to ``on_error`` (a ``Retry`` the action
raised is a request, not a failure: it is only logged) and counted.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable

from taskrunner import _wire
from taskrunner._config import ConfigHolder
from taskrunner._hooks import call_hook, call_hook_safely
from taskrunner._retry import Defer, GiveUp, next_step
from taskrunner._serve.acker import Acker
from taskrunner._task import Delivery, Task
from taskrunner._wire import TaskMessage, unique_lock
from taskrunner.backends import Backend
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


def lock_of(message: TaskMessage) -> tuple[str, str] | None:
    """The unique lock ``(key, token)`` a message holds, if any."""
    if message.unique and message.unique_lock_value:
        return unique_lock(message.task_name, message.unique_key), message.unique_lock_value
    return None


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
    """

    def __init__(
        self,
        config: ConfigHolder,
        backend: Backend,
        acker: Acker,
        nudge: Callable[[float], None],
    ) -> None:
        self._config = config
        self._backend = backend
        self._acker = acker
        self._nudge = nudge
        self.counters = WorkerCounters()
        self.rng = random.Random()
        """Where retry jitter is drawn from (seed it in a test)."""

    def done(self, entry_id: str, message: TaskMessage) -> None:
        """The action returned: ack, then release the message's lock."""
        self.counters.completed += 1
        self._acker.ack(entry_id, lock_of(message))

    def ack(self, entry_id: str) -> None:
        """Ack an entry that holds no lock (another group's, on a shared stream)."""
        self._acker.ack(entry_id, None)

    async def attempt_failed(
        self, task: Task, delivery: Delivery, error: Exception, *, dispatched_at: float
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
        if isinstance(step, GiveUp):
            final: TaskRunnerError = report
            if not step.permanent:
                final = TaskMaxRetryExceeded(task.name, delivery.id, task.attempts, error)
                final.__cause__ = error
            await self.fail(delivery, final, reported=not requested)
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
        try:
            member = _wire.encode_delayed(
                _wire.retry_delayed(
                    message,
                    run_at,
                    id=message.id or delivery.id,
                    attempts=delivery.attempt,
                    dispatched_at=dispatched_at,
                )
            )
            deferred = await self._backend.defer(
                self._config.current.consumer_group, delivery.id, member, run_at
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
        self, delivery: Delivery, error: TaskRunnerError, *, reported: bool = False
    ) -> None:
        """The failure path: handler or dead-letter, then ack; or leave pending."""
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
                    self._config.current.consumer_group, delivery.id, delivery.raw, reason
                )
            except BackendError as exc:
                log.error(
                    "could not dead-letter message %s (%s); leaving it pending", delivery.id, exc
                )
                return
            self.counters.dead_lettered += 1
            log.error("message %s moved to the dead-letter stream as %s", delivery.id, dead_id)
        lock = lock_of(delivery.message) if delivery.message is not None else None
        self._acker.ack(delivery.id, lock)
