"""How the end of a run is acknowledged: plainly, with its result, or as cancelled.

Theory of operation. The worker (:mod:`taskrunner._serve.worker`) and the
outcomes (:mod:`taskrunner._serve.outcome`) decide a run's outcome; this part
turns it into the ack the acker sends: the entry,
its unique lock (released after the ack) and, when there is something to
record, an :class:`~taskrunner.backends.Outcome` built by
:mod:`taskrunner._execution.outcomes` (the result document of a task that keeps
results, the end of an entry-index mapping, the end of a stop request). A
task that keeps no results, did not come from the delayed set and was not
cancelled is acknowledged with its entry and lock alone, as it always was.

Cancelled runs: a run stopped by ``TaskRunner.cancel`` is acknowledged as
cancelled, never retried, and recorded as such when it keeps results; so is a
redelivered entry found asked to stop before it runs again (its runner died
while it ran), which :meth:`Finishing.cancelled_meanwhile` checks with one
backend call (redeliveries only).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from taskrunner._config import ConfigHolder
from taskrunner._execution.outcomes import (
    cancelled_document,
    entry_time,
    failure_document,
    keep_of,
    outcome,
    success_document,
)
from taskrunner._execution.poison import scheduled_run_in
from taskrunner._serve.acker import Acker
from taskrunner._task import Task
from taskrunner._wire import TaskMessage, decode_message, unique_lock
from taskrunner.backends import Backend, Outcome, QueueEntry, RunOutcome
from taskrunner.errors import BackendError, TaskRunnerError

__all__ = ["Finishing", "attempt_of", "enqueued_at", "lock_of", "periodic_outcome"]

log = logging.getLogger(__name__)


def lock_of(message: TaskMessage) -> tuple[str, str] | None:
    """The unique lock ``(key, token)`` a message holds, if any."""
    if message.unique and message.unique_lock_value:
        return unique_lock(message.task_name, message.unique_key), message.unique_lock_value
    return None


def periodic_outcome(
    message: TaskMessage | None, entry_id: str, outcome: str, now: float
) -> RunOutcome | None:
    """What to record for a run of a periodic schedule that reached its final
    ``outcome`` (``None`` for any other message: nothing is recorded, nothing costs).

    The run is named by its task id (the fired entry's stream id, kept by its
    retries), which is what the schedule's in-flight mark holds.
    """
    if message is None or message.extras is None:
        return None
    extras = message.extras
    if extras.schedule is None or extras.tick is None:
        return None
    return RunOutcome(
        schedule=extras.schedule,
        tick=extras.tick,
        message_id=extras.id or entry_id,
        outcome=outcome,
        at=now,
    )


def undecoded_outcome(raw: bytes | None, entry_id: str, now: float) -> RunOutcome | None:
    """The failure to record for an entry that was not decoded, if it serves a periodic
    schedule's tick (:func:`~taskrunner._execution.poison.scheduled_run_in`)."""
    run = scheduled_run_in(raw)
    if run is None:
        return None
    return RunOutcome(
        schedule=run.schedule,
        tick=run.tick,
        message_id=run.task_id or entry_id,
        outcome="failed",
        at=now,
    )


def attempt_of(delivery_count: int, message: TaskMessage | None) -> int:
    """The attempt number of a delivery: attempts of earlier entries plus this one's."""
    return (message.attempts if message is not None else 0) + delivery_count


def enqueued_at(entry_id: str, message: TaskMessage | None) -> float:
    """When the task was first dispatched: the message's ``dispatched_at``, else its
    entry's time."""
    if message is not None and message.dispatched_at is not None:
        return message.dispatched_at
    return entry_time(entry_id)


class Finishing:
    """Acknowledges the runs of one runner (see the module docstring).

    Args:
        config: The runner's configuration (the group).
        backend: Its clock (a result's times) and its stop requests.
        acker: Where acks go.
        tasks: The registered tasks by name, read as it is (their ``keep_result``).
    """

    def __init__(
        self, config: ConfigHolder, backend: Backend, acker: Acker, tasks: Mapping[str, Task]
    ) -> None:
        self._config = config
        self._backend = backend
        self._acker = acker
        self._tasks = tasks
        self.cancelled_count = 0

    def now(self) -> float:
        """The backend's clock: a result's times."""
        return self._backend.now()

    def succeeded(
        self,
        entry: QueueEntry,
        task: Task,
        message: TaskMessage,
        keep: float | None,
        started_at: float,
        value: Any,
    ) -> None:
        """Acknowledge a run whose action returned ``value`` (with its result).

        Raises:
            InvalidTaskResult: the task keeps results and ``value`` cannot be
                kept; nothing was acknowledged (the run fails).
        """
        document = None
        if keep is not None:
            document = success_document(
                task,
                value,
                attempts=attempt_of(entry.delivery_count, message),
                enqueued_at=enqueued_at(entry.id, message),
                started_at=started_at,
                finished_at=self._backend.now(),
            )
        self._acker.ack(
            entry.id,
            lock_of(message),
            periodic_outcome(message, entry.id, "succeeded", self._backend.now()),
            outcome(entry.id, message, keep, document),
            queue=entry.queue,
        )

    def cancelled(
        self,
        entry: QueueEntry,
        message: TaskMessage | None,
        keep: float | None,
        started_at: float | None,
    ) -> None:
        """Acknowledge a run stopped by ``TaskRunner.cancel`` (or dropped before it ran);
        an entry that does not decode is acknowledged alone."""
        self.cancelled_count += 1
        if message is None:
            log.info("message %s cancelled", entry.id)
            self._acker.ack(
                entry.id,
                None,
                tracked=Outcome(entry_id=entry.id, task_id=entry.id, cancelled=True),
                queue=entry.queue,
            )
            return
        log.info("task %s (message %s) cancelled", message.task_name, entry.id)
        document = None
        if keep is not None:
            document = cancelled_document(
                message.task_name,
                attempts=attempt_of(entry.delivery_count, message),
                enqueued_at=enqueued_at(entry.id, message),
                started_at=started_at,
                finished_at=self._backend.now(),
            )
        done = outcome(entry.id, message, keep, document, cancelled=True)
        # A periodic run that was cancelled ends as one that failed (its mark is freed).
        periodic = periodic_outcome(message, entry.id, "failed", self._backend.now())
        self._acker.ack(entry.id, lock_of(message), periodic, done, queue=entry.queue)

    def failed(
        self,
        entry_id: str,
        delivery_count: int,
        message: TaskMessage | None,
        error: TaskRunnerError,
        started_at: float | None,
        *,
        queue: str | None = None,
        raw: bytes | None = None,
    ) -> None:
        """Acknowledge an entry (of ``queue``) the failure path handled (with its
        failure, when its task keeps results). An entry not decoded (``message`` is
        ``None``; ``raw``, its bytes) that serves a periodic schedule's tick records
        that run's failure, so the schedule does not wait for its in-flight mark to
        expire."""
        if message is None:
            self._acker.ack(
                entry_id, None, undecoded_outcome(raw, entry_id, self._backend.now()), queue=queue
            )
            return
        keep = keep_of(self._tasks.get(message.task_name), message)
        document = None
        if keep is not None:
            document = failure_document(
                message.task_name,
                error,
                attempts=attempt_of(delivery_count, message),
                enqueued_at=enqueued_at(entry_id, message),
                started_at=started_at,
                finished_at=self._backend.now(),
            )
        self._acker.ack(
            entry_id,
            lock_of(message),
            periodic_outcome(message, entry_id, "failed", self._backend.now()),
            outcome(entry_id, message, keep, document),
            queue=queue,
        )

    async def cancelled_meanwhile(self, entry: QueueEntry) -> bool:
        """Whether a redelivered entry was asked to stop (if so it is acknowledged
        as cancelled, not run again). A failed look counts as not asked.

        Asked before the delivery limit is applied: an entry cancelled while its
        worker died is acknowledged as cancelled rather than failed. Its message is
        decoded (not its payload, and nothing runs) to release its lock and record
        it; one that does not decode is acknowledged alone.
        """
        try:
            stopped = await self._backend.cancel_requested(
                self._config.current.consumer_group, [entry.id]
            )
        except BackendError as exc:
            log.warning("could not check message %s for a cancel (%s); running it", entry.id, exc)
            return False
        if not stopped:
            return False
        try:
            message: TaskMessage | None = decode_message(entry.payload)
        except Exception:  # whatever the decoder raised: it is acknowledged alone
            message = None
        keep = keep_of(self._tasks.get(message.task_name), message) if message is not None else None
        self.cancelled(entry, message, keep, None)
        return True
