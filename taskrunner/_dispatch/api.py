"""The dispatching half of :class:`~taskrunner.TaskRunner`'s API: its public methods,
whose docstrings are the contract.

:class:`Dispatching` is one of the runner's bases (with the registry's and the
schedules'), so ``runner.dispatch`` and the rest are the runner's own methods
while their text lives with the concept they belong to. Each checks it runs
on trio (:func:`~taskrunner._dispatch.guards.require_trio`) and hands over to
the runner's :class:`~taskrunner._dispatch.dispatcher.Dispatcher` (queueing)
or :class:`~taskrunner._dispatch.tracker.Tracker` (tasks by id).
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Any

from taskrunner._config import queue_name_problem
from taskrunner._dispatch.dispatcher import Dispatcher
from taskrunner._dispatch.events import EventReader
from taskrunner._dispatch.guards import require_trio
from taskrunner._dispatch.handle import TaskHandle, TaskInfo
from taskrunner._dispatch.tracker import Tracker
from taskrunner.backends import EventLog


def _queue_hint(task_id: str | TaskHandle, queue: str | None) -> str | None:
    """The queue to look for a task's entry on: ``queue``, else the handle's, else
    ``None`` (every queue).

    Raises:
        ValueError: ``queue`` cannot name a queue.
    """
    if queue is not None:
        problem = queue_name_problem(queue)
        if problem is not None:
            raise ValueError(f"queue {problem}, got {queue!r}")
        return queue
    if isinstance(task_id, TaskHandle):
        return task_id.queue
    return None


class Dispatching:
    """``dispatch``, ``dispatch_many``, ``dispatch_delayed``, ``schedule_for``,
    ``get_task``, ``cancel`` and ``events`` of :class:`~taskrunner.TaskRunner`."""

    _dispatcher: Dispatcher
    _tracker: Tracker

    async def dispatch(
        self, name: str, payload: Any = None, *, queue: str | None = None
    ) -> TaskHandle:
        """Queue one run of task ``name``.

        Args:
            queue: The queue to add it to, instead of the task's own (its
                ``queue``, else the backend's queue when ``config.queues`` names it
                or is ``None``, else the first queue ``config.queues`` names).

        Returns:
            Its handle: ``handle.id`` (also ``str(handle)``) is the task id, the
            stream id of the entry added; ``await handle.result(timeout)`` waits
            for the outcome of a task that keeps results.

        Raises:
            TaskNotFound: no task ``name`` is registered.
            InvalidTaskPayload: ``payload`` cannot be encoded (or its unique or
                rate-limit key cannot be computed); nothing was queued.
            ValueError: ``queue`` is not a valid queue name.
            TaskAlreadyDispatched: ``name`` is unique and its lock is held.
            ShardCountError: at the first dispatch, ``shards`` differs from the
                count the group is laid out in and the group is not empty
                (docs/sharding.md).
            BackendError: the backend could not be reached.
            WrongAsyncLibrary: awaited outside trio (under asyncio, say).

        Cancellation: the message may or may not have been queued. A unique
        task's lock is given back only when the add certainly did not happen
        (a ``BackendError`` with ``maybe_applied`` false); otherwise it is kept,
        so no duplicate gets in, and expires after ``unique_for`` (or is released
        by the worker, if the message was queued after all).
        """
        require_trio("TaskRunner.dispatch")
        return await self._dispatcher.dispatch(name, payload, queue=queue)

    async def dispatch_many(
        self, name: str, payloads: Iterable[Any], *, queue: str | None = None
    ) -> list[TaskHandle]:
        """Queue one run of task ``name`` per payload, in one backend call.

        Every payload is encoded before anything is queued, so an invalid one
        queues none.

        Returns:
            Their handles, in order.

        Raises:
            TaskNotFound, InvalidTaskPayload, BackendError: as :meth:`dispatch`.
            ValueError: the task is unique (dispatch those one by one, so each
                duplicate can be refused on its own), or ``queue`` is invalid.
        """
        require_trio("TaskRunner.dispatch_many")
        return await self._dispatcher.dispatch_many(name, payloads, queue=queue)

    async def dispatch_delayed(
        self,
        name: str,
        payload: Any = None,
        delay: float | timedelta = 0.0,
        *,
        queue: str | None = None,
    ) -> TaskHandle:
        """Queue one run of task ``name`` after ``delay`` (seconds, or a timedelta).

        The task waits in the group's delayed set; the leader moves it to the
        stream when due. A unique task takes its lock when it is moved, not
        now; while the lock is held it stays in the set.

        Returns:
            Its handle; its id is the delayed member's, which the entry it becomes
            keeps, so it stays the task's id throughout.

        Raises:
            TaskNotFound, InvalidTaskPayload, BackendError: as :meth:`dispatch`.
            ValueError: ``delay`` is negative or not finite, or ``queue`` is invalid.
        """
        require_trio("TaskRunner.dispatch_delayed")
        return await self._dispatcher.dispatch_delayed(name, payload, delay, queue=queue)

    async def schedule_for(
        self, name: str, payload: Any, when: datetime | float, *, queue: str | None = None
    ) -> TaskHandle:
        """Queue one run of task ``name`` at ``when``.

        Args:
            when: A timezone-aware datetime, or unix seconds. A time in the
                past runs at the next scheduler pass.

        Returns:
            Its handle (as :meth:`dispatch_delayed`).

        Raises:
            TaskNotFound, InvalidTaskPayload, BackendError: as :meth:`dispatch`.
            ValueError: ``when`` is a naive datetime or not finite, or ``queue`` is
                invalid.
        """
        require_trio("TaskRunner.schedule_for")
        return await self._dispatcher.schedule_for(name, payload, when, queue=queue)

    async def get_task(
        self, task_id: str | TaskHandle, *, queue: str | None = None
    ) -> TaskInfo | None:
        """Where a task is now, and, once done, what it did.

        Read in one atomic step from the backend, so it answers for a task run by
        any instance: queued (in the stream, not delivered), running (delivered,
        not acknowledged), scheduled (in the delayed set, dispatched with a
        delay or waiting for a retry), and, for a task that keeps results, its
        final state (succeeded, failed, cancelled) until ``keep_result`` runs out.

        A queued or running task is looked for on every queue this runner knows
        (``config.queues``, its tasks' queues, the backend's own), in that order.
        Stream ids are unique per stream only: two queues may hold entries of the
        same id (added in the same millisecond), so pass the handle (it knows its
        queue) or ``queue=`` to name one.

        Args:
            task_id: A task id (``handle.id``), or the handle.
            queue: The queue its entry is on; by default the handle's, else every
                queue this runner knows.

        Returns:
            ``None`` for an id the backend does not know now: never dispatched,
            done without a kept result (or its result expired), or a delayed
            task the Go library dispatched (it does not index its members).

        Raises:
            ValueError: ``queue`` is not a queue name.
            BackendError: the backend could not be reached.
        """
        require_trio("TaskRunner.get_task")
        return await self._tracker.get_task(str(task_id), _queue_hint(task_id, queue))

    async def cancel(self, task_id: str | TaskHandle, *, queue: str | None = None) -> bool:
        """Cancel a task, wherever it is in the fleet.

        - queued: its entry is deleted from the stream in one atomic step, so it
          never runs (a fetcher that read it first holds it: it is running);
        - scheduled: its member is removed from the delayed set;
        - running: the instance that runs it cancels that run within about a
          second (its cancel scope), then acknowledges it as cancelled, never
          to be retried. A sync action in a thread cannot be interrupted: its
          outcome is discarded and it is recorded as cancelled.

        A cancelled task releases its unique lock and, when it keeps results,
        is recorded as cancelled (``handle.result`` raises
        :class:`~taskrunner.errors.TaskCancelled`).

        Its entry is looked for on every queue this runner knows, as
        :meth:`get_task` does.

        Args:
            task_id: A task id (``handle.id``), or the handle.
            queue: The queue its entry is on; by default the handle's, else every
                queue this runner knows, the first holding it winning.

        Returns:
            ``True`` if it was cancelled (or, running, asked to stop: a run that
            finishes first keeps its outcome); ``False`` for a task that is done
            or unknown.

        Raises:
            ValueError: ``queue`` is not a queue name.
            BackendError: the backend could not be reached.

        Cancellation: the task may have been cancelled; a repeat returns
        ``False`` once it is gone.
        """
        require_trio("TaskRunner.cancel")
        return await self._tracker.cancel(str(task_id), _queue_hint(task_id, queue))

    def events(self, *, after: str | None = None) -> EventReader:
        """The group's events (``TaskRunnerConfig(events=True)``), oldest first, as
        they come: ``async for event in runner.events(): ...``.

        Each :class:`~taskrunner.TaskEvent` says what happened (``dispatched``,
        ``started``, ``succeeded``, ``failed``, ``retried``, ``cancelled``), to which
        task (id, name, queue, attempt, stream entry) and when. Every runner of the
        group with ``events=True`` writes to one capped stream, so any process reads
        the whole fleet's (see ``docs/events.md``).

        Args:
            after: ``None`` (the default): the events from now on; ``"0"``: from the
                oldest kept; an event's ``id``: the ones after it (to resume).

        Returns:
            An async iterator that never ends by itself: break out of the loop to
            stop (nothing is left open). Its ``last_id`` is where to resume.

        Raises:
            ValueError: ``after`` is not one of those, or the backend has no event
                log.
        """
        backend = self._tracker.backend
        if not isinstance(backend, EventLog):
            raise ValueError(f"{type(backend).__name__} has no event log to read")
        return EventReader(backend, self._tracker.group, after)
