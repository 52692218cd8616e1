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

from taskrunner import _keys, _shards
from taskrunner._config import ConfigHolder
from taskrunner._execution.outcomes import (
    cancelled_document,
    entry_time,
    failure_document,
    keep_of,
    outcome,
    success_document,
)
from taskrunner._execution.poison import scheduled_run_in, workflow_step_in
from taskrunner._execution.progress import EVENT_DETAIL_CHARS, Reports
from taskrunner._serve.acker import Acker
from taskrunner._task import Task
from taskrunner._wire import (
    TaskMessage,
    decode_message,
    keeps_result_alone,
    notify_ttl,
    unique_lock,
)
from taskrunner.backends import Backend, Outcome, QueueEntry, RunOutcome, TaskEvent
from taskrunner.errors import BackendError, TaskRunnerError

__all__ = ["Finishing", "attempt_of", "enqueued_at", "lock_of", "periodic_outcome"]

log = logging.getLogger(__name__)


def lock_of(message: TaskMessage, prefix: str) -> tuple[str, str] | None:
    """The unique lock ``(key, token)`` a message holds, if any (``prefix``: the head
    of the group's lock keys, :func:`taskrunner._keys.unique_prefix`)."""
    if message.unique and message.unique_lock_value:
        return unique_lock(message.task_name, message.unique_key, prefix), message.unique_lock_value
    return None


def periodic_outcome(
    message: TaskMessage | None,
    entry_id: str,
    outcome: str,
    now: float,
    group: str | None = None,
) -> RunOutcome | None:
    """What to record for a run of a periodic schedule that reached its final
    ``outcome`` (``None`` for any other message: nothing is recorded, nothing costs).

    The run is named by its task id (the fired entry's stream id, kept by its
    retries; a run read in shard ``group`` by its sharded id), which is what the
    schedule's in-flight mark holds.
    """
    if message is None or message.extras is None:
        return None
    extras = message.extras
    if extras.schedule is None or extras.tick is None:
        return None
    return RunOutcome(
        schedule=extras.schedule,
        tick=extras.tick,
        message_id=_shards.run_task_id(group, extras.id or entry_id),
        outcome=outcome,
        at=now,
    )


def undecoded_outcome(
    raw: bytes | None, entry_id: str, now: float, group: str | None = None
) -> RunOutcome | None:
    """The failure to record for an entry (read in ``group``) that was not decoded, if
    it serves a periodic schedule's tick
    (:func:`~taskrunner._execution.poison.scheduled_run_in`)."""
    run = scheduled_run_in(raw)
    if run is None:
        return None
    return RunOutcome(
        schedule=run.schedule,
        tick=run.tick,
        message_id=_shards.run_task_id(group, run.task_id or entry_id),
        outcome="failed",
        at=now,
    )


UNDECODED_STEP_KEEP = 24 * 3600.0
"""Seconds the failure of an undecoded workflow step is kept (its message, which says
its workflow's ``keep``, is not read)."""


def undecoded_step(
    raw: bytes | None, entry_id: str, error: TaskRunnerError, attempts: int, now: float
) -> Outcome | None:
    """The failure to count for an entry that was not decoded, if it is a workflow's
    step (:func:`~taskrunner._execution.poison.workflow_step_in`): its workflow would
    wait for it forever otherwise."""
    step = workflow_step_in(raw)
    if step is None:
        return None
    document = failure_document(
        "", error, attempts=attempts, enqueued_at=entry_time(entry_id), started_at=None,
        finished_at=now,
    )  # fmt: skip
    return Outcome(
        entry_id=entry_id,
        task_id=step.task_id or entry_id,
        document=document,
        keep=UNDECODED_STEP_KEEP,
        notify=60.0,
        indexed=step.task_id is not None,
        workflow=step.workflow,
        step=step.step,
        step_state="failed",
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
        self,
        config: ConfigHolder,
        backend: Backend,
        acker: Acker,
        tasks: Mapping[str, Task],
        reports: Reports | None = None,
    ) -> None:
        self._config = config
        self._backend = backend
        self._acker = acker
        self._tasks = tasks
        self.reports = Reports() if reports is None else reports
        self.cancelled_count = 0

    def final(
        self,
        kind: str,
        entry_id: str,
        delivery_count: int,
        message: TaskMessage | None,
        queue: str | None,
        detail: str = "",
        group: str | None = None,
    ) -> None:
        """Buffer a run's last event, right before its ack is queued (events on only:
        the caller checks ``TaskRunnerConfig.events``), so it goes with that ack; a
        run read in shard ``group`` is named by its sharded id."""
        reports = self.reports
        if queue is None:
            queue = reports.own_queue()
        if message is None:
            at = reports.clock()
            task_id = _shards.run_task_id(group, entry_id)
            event = TaskEvent(kind, task_id, "", queue, delivery_count, at, entry_id, detail)
        else:
            attempt = message.attempts + delivery_count
            task_id = _shards.run_task_id(group, message.id or entry_id)
            event = TaskEvent(
                kind, task_id, message.task_name, queue, attempt,
                reports.clock(), entry_id, detail,
            )  # fmt: skip
        reports.final.append(event)

    def lock(self, message: TaskMessage | None, group: str | None = None) -> tuple[str, str] | None:
        """The unique lock ``(key, token)`` ``message`` holds, if any, in the backend's
        key layout, under ``group`` (a shard's tag; ``None``: the runner's group, where
        an unsharded group's locks are) (a message without one costs one test)."""
        if message is None or not (message.unique and message.unique_lock_value):
            return None
        if group is None:
            group = self._config.current.consumer_group
        return lock_of(message, _keys.unique_prefix(group, self._backend.key_layout))

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
        *,
        ended: bool = False,
    ) -> None:
        """Acknowledge a run whose action returned ``value`` (with its result).

        ``ended``: as for :meth:`Acker.ack <taskrunner._serve.acker.Acker.ack>` (the
        worker ended the run's in-flight entry, and nothing releases it after this).

        Raises:
            InvalidTaskResult: the task keeps results and ``value`` cannot be
                kept; nothing was acknowledged (the run fails).
        """
        document = None
        now = self._backend.now()
        if (
            keep is not None
            and keeps_result_alone(message.extras)
            and not message.unique
            and not self._config.current.events
        ):
            # The common kept result: the message says nothing but its keep_result (no
            # id, retry, schedule or workflow: its task id is its entry's, and the ack
            # records the result alone) and holds no lock. What the general way below
            # builds for it, without its tests (one run's Python cost, issue 29).
            document = success_document(
                task,
                value,
                attempts=entry.delivery_count,
                enqueued_at=entry_time(entry.id),
                started_at=started_at,
                finished_at=now,
            )
            kept = Outcome(
                entry_id=entry.id,
                task_id=entry.id,
                document=document,
                keep=keep,
                notify=notify_ttl(keep),
            )
            self._acker.ack(
                entry.id, None, None, kept, queue=entry.queue, group=entry.group, ended=ended
            )
            return
        if keep is not None:
            document = success_document(
                task,
                value,
                attempts=attempt_of(entry.delivery_count, message),
                enqueued_at=enqueued_at(entry.id, message),
                started_at=started_at,
                finished_at=now,
            )
        if self._config.current.events:
            self.final(
                "succeeded", entry.id, entry.delivery_count, message, entry.queue, group=entry.group
            )
        self._acker.ack(
            entry.id,
            self.lock(message, entry.group),
            periodic_outcome(message, entry.id, "succeeded", now, entry.group),
            outcome(entry.id, message, keep, document, state="succeeded"),
            queue=entry.queue,
            group=entry.group,
            ended=ended,
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
        if self._config.current.events:
            self.final(
                "cancelled", entry.id, entry.delivery_count, message, entry.queue, "running",
                group=entry.group,
            )  # fmt: skip
        if message is None:
            log.info("message %s cancelled", entry.id)
            self._acker.ack(
                entry.id,
                None,
                tracked=Outcome(entry_id=entry.id, task_id=entry.id, cancelled=True),
                queue=entry.queue,
                group=entry.group,
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
        done = outcome(entry.id, message, keep, document, cancelled=True, state="cancelled")
        # A periodic run that was cancelled ends as one that failed (its mark is freed).
        periodic = periodic_outcome(message, entry.id, "failed", self._backend.now(), entry.group)
        lock = self.lock(message, entry.group)
        self._acker.ack(entry.id, lock, periodic, done, queue=entry.queue, group=entry.group)

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
        group: str | None = None,
    ) -> None:
        """Acknowledge an entry (of ``queue``, read in ``group``) the failure path handled (with its
        failure, when its task keeps results). An entry not decoded (``message`` is
        ``None``; ``raw``, its bytes) that serves a periodic schedule's tick records
        that run's failure, so the schedule does not wait for its in-flight mark to
        expire."""
        if self._config.current.events:
            detail = f"{type(error).__name__}: {error}"[:EVENT_DETAIL_CHARS]
            self.final("failed", entry_id, delivery_count, message, queue, detail, group)
        if message is None:
            self._acker.ack(
                entry_id,
                None,
                undecoded_outcome(raw, entry_id, self._backend.now(), group),
                undecoded_step(raw, entry_id, error, delivery_count, self._backend.now()),
                queue=queue,
                group=group,
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
            self.lock(message, group),
            periodic_outcome(message, entry_id, "failed", self._backend.now(), group),
            outcome(entry_id, message, keep, document, state="failed"),
            queue=queue,
            group=group,
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
            group = entry.group or self._config.current.consumer_group
            stopped = await self._backend.cancel_requested(group, [entry.id])
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
