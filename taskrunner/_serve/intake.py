"""What a worker does with an entry before it runs it: bound, decode, or refuse it.

Theory of operation (the worker that runs what this admits is
:mod:`taskrunner._serve.worker`). Two steps, both before any attempt:

1. **bound the deliveries** (:meth:`Intake.over_limit`): a redelivered entry
   past its delivery limit goes to the failure path undecoded;
2. **prepare** (:meth:`Intake.prepare`, synchronous, as the hot path wants):
   decode the message, find its task, check its attempt number (``attempts``
   carried by a re-queued retry plus the delivery count) against the task's
   attempts, decode the payload; or say why the entry cannot run
   (:class:`Refused`), which :meth:`Intake.refuse` sends down the failure path.

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

Unknown task on a stream that other consumer groups also read: the entry is
theirs; it is acked for this group only (see :mod:`taskrunner._serve.sharing`).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import attrs

from taskrunner._codec import decode_payload
from taskrunner._execution.poison import delivery_limit
from taskrunner._serve.outcome import Outcomes, brief
from taskrunner._serve.sharing import StreamSharing
from taskrunner._serve.steps import STEP
from taskrunner._task import Delivery, Task
from taskrunner._wire import TaskMessage, decode_message
from taskrunner.backends import QueueEntry
from taskrunner.errors import (
    BackendError,
    InvalidTaskPayload,
    TaskMaxRetryExceeded,
    TaskNotFound,
    TaskRunnerError,
)

log = logging.getLogger(__name__)


def undecodable(exc: Exception) -> InvalidTaskPayload:
    """The failure of an entry whose decoding raised ``exc``."""
    if isinstance(exc, InvalidTaskPayload):
        return exc
    error = InvalidTaskPayload(f"{type(exc).__name__} while decoding: {brief(str(exc), 200)}")
    error.__cause__ = exc
    return error


def delivery_of(entry: QueueEntry, consumer: str, message: TaskMessage | None) -> Delivery:
    """The failure path's view of ``entry`` read by ``consumer``."""
    return Delivery(
        id=entry.id,
        consumer=consumer,
        delivery_count=entry.delivery_count,
        raw=entry.payload,
        message=message,
        queue=entry.queue,
        group=entry.group,
    )


@attrs.frozen
class Refused:
    """An entry that cannot run: the failure path's delivery and error."""

    delivery: Delivery
    error: TaskRunnerError
    unknown_task: bool = False
    """It names a task not registered here (perhaps another group's, on a shared stream)."""


class Intake:
    """Bounds, decodes and refuses the entries of one runner (see the module docstring).

    Args:
        tasks: The registered tasks by name, read as it is.
        outcomes: Where a refused entry's failure is carried out.
        sharing: The other groups on the stream (an unknown task may be theirs).
    """

    def __init__(
        self, tasks: Mapping[str, Task], outcomes: Outcomes, sharing: StreamSharing
    ) -> None:
        self._tasks = tasks
        self._outcomes = outcomes
        self._sharing = sharing

    def prepare(self, entry: QueueEntry, consumer: str) -> tuple[Task, TaskMessage, Any] | Refused:
        """The task, message and payload of ``entry`` (:data:`~taskrunner._serve.steps.STEP`
        for the payload of a workflow's step, whose inputs are read before it runs); or
        why it cannot run."""
        try:
            message = decode_message(entry.payload)
        except Exception as exc:
            return Refused(delivery_of(entry, consumer, None), undecodable(exc))
        task = self._tasks.get(message.task_name)
        if task is None:
            unknown = TaskNotFound(message.task_name)
            return Refused(delivery_of(entry, consumer, message), unknown, unknown_task=True)
        if message.attempts + entry.delivery_count > task.attempts:
            # The last allowed attempt left no outcome (its worker died, or its ack
            # was lost): give up.
            error = TaskMaxRetryExceeded(
                task.name, entry.id, task.attempts, deliveries=entry.delivery_count
            )
            return Refused(delivery_of(entry, consumer, message), error)
        extras = message.extras
        if extras is not None and extras.step_inputs:  # a step that receives results
            return task, message, STEP
        try:
            payload = decode_payload(message.payload, task.payload_type, task.name, task.extra_keys)
        except Exception as exc:
            return Refused(delivery_of(entry, consumer, message), undecodable(exc))
        return task, message, payload

    async def refuse(self, refused: Refused) -> None:
        """The failure path of an entry that cannot run (or another group's ack)."""
        delivery = refused.delivery
        if refused.unknown_task and await self._belongs_to_another_group(delivery):
            return
        await self._outcomes.fail(delivery, refused.error)

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
        self._outcomes.ack(delivery.id, delivery.queue, group=delivery.group)
        return True

    async def over_limit(self, entry: QueueEntry, consumer: str) -> bool:
        """Send a redelivered entry past its delivery limit down the failure path,
        undecoded (it may be what killed the workers before); True if it was."""
        bound = delivery_limit(entry.payload, self._tasks)
        if entry.delivery_count <= bound.limit:
            return False
        error: TaskRunnerError
        if bound.task_name is not None:
            error = TaskMaxRetryExceeded(
                bound.task_name, entry.id, bound.limit, deliveries=entry.delivery_count
            )
        else:
            error = InvalidTaskPayload(
                f"delivered {entry.delivery_count} times without naming a registered task "
                f"(at most {bound.limit} deliveries); not decoded again"
            )
        log.warning(
            "message %s delivered %d times, over its limit of %d: failing it without "
            "decoding it (its deliveries left no outcome: if its runs killed their "
            "workers, decoding it again could kill this one)",
            entry.id,
            entry.delivery_count,
            bound.limit,
        )
        await self._outcomes.fail(delivery_of(entry, consumer, None), error)
        return True
