"""Tasks by id: the handle ``dispatch`` returns, and what ``get_task`` reports.

Theory of operation. A :class:`TaskHandle` is a task id and the part of the
runner that can follow it (:class:`taskrunner._dispatch.tracker.Tracker`): its
``result`` waits for the task's kept result, its ``cancel`` cancels it. A
:class:`TaskInfo` is what :func:`task_info` makes of the backend's snapshot of
a task (:class:`~taskrunner.backends.TaskSnapshot`): a pure function, so the
runner, ``taskrunner.admin`` and the command line all report a task alike.
Documents that do not decode (written by someone else) are reported with what
could be read, never raised: a lookup is an operator's tool.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

import attrs

from taskrunner import _wire
from taskrunner._dispatch.guards import require_trio
from taskrunner._wire import TaskState
from taskrunner.backends import TaskProgress, TaskSnapshot
from taskrunner.errors import InvalidTaskPayload

__all__ = ["Follower", "TaskError", "TaskHandle", "TaskInfo", "task_info"]


class Follower(Protocol):
    """What a handle asks of whoever can follow its task: the runner's
    :class:`~taskrunner._dispatch.tracker.Tracker`, or a producer's. (A protocol, so
    that the tracker, which makes handles, is not imported by them.)"""

    async def get_task(self, task_id: str, queue: str | None = None) -> TaskInfo | None: ...

    async def cancel(self, task_id: str, queue: str | None = None) -> bool: ...

    async def result(
        self, task_id: str, task_name: str, limit: float | None, result_type: type[Any] | None
    ) -> Any: ...


@attrs.frozen(kw_only=True)
class TaskError:
    """The error a failed task's result records."""

    type: str
    """The exception's type name (``"ValueError"``)."""
    message: str
    """Its text."""

    def __str__(self) -> str:
        return f"{self.type}: {self.message}"


@attrs.frozen(kw_only=True)
class TaskInfo:
    """Where a task is and what it did (see :meth:`TaskRunner.get_task
    <taskrunner.TaskRunner.get_task>`).

    Times are unix seconds on every backend (on ``MemoryBackend``, trio's clock plus
    its ``wall_origin``).
    """

    id: str
    """The task id."""
    state: TaskState
    task_name: str | None
    """The task's name, when the entry, member or result names it."""
    attempts: int
    """Attempts used: the current attempt's number while running, those of earlier
    entries while queued or scheduled (0 before the first; a retry waiting for its
    backoff counts the attempts that failed), the last attempt's number once done."""
    error: TaskError | None = None
    """Failed: the error it failed with."""
    result: Any = None
    """Succeeded: the action's return value, in its JSON form."""
    enqueued_at: float | None = None
    """When its current stream entry was added (queued, running, and in a kept result)."""
    started_at: float | None = None
    """When its last run started (kept results only)."""
    finished_at: float | None = None
    """When it finished (kept results only)."""
    run_at: float | None = None
    """Scheduled: when it is due."""
    entry_id: str | None = None
    """Queued or running: its stream entry's id."""
    consumer: str | None = None
    """Running: the consumer (``<group>_<host>_<fetcher>``) that holds it."""
    cancelling: bool = False
    """Running, and asked to stop (it is recorded cancelled when it does)."""
    payload: Any = None
    """Queued, running or scheduled: its payload, in its JSON form."""
    workflow: str | None = None
    """Queued, running or scheduled: the workflow it is a step of
    (``runner.get_workflow(info.workflow).status()``), if any."""
    step: str | None = None
    """Its step id in :attr:`workflow`."""
    progress: TaskProgress | None = None
    """Its last ``ctx.progress`` report (fraction, note, when), kept for a day after
    it was made; ``None`` if it reported none."""


def _entry_time(entry_id: str) -> float:
    return int(entry_id.partition("-")[0]) / 1000


def _same(t: float) -> float:
    return t


def _unix(unix_time: Callable[[float], float], t: float | None) -> float | None:
    return None if t is None else unix_time(t)


def task_info(snapshot: TaskSnapshot, unix_time: Callable[[float], float] = _same) -> TaskInfo:
    """What ``snapshot`` says of its task (pure).

    Args:
        snapshot: What the backend holds of the task.
        unix_time: The backend's clock to unix seconds
            (:meth:`SharedState.unix_time <taskrunner.backends.SharedState.unix_time>`),
            applied to every time reported.
    """
    info = _task_info(snapshot)
    if unix_time is _same:
        return info
    return attrs.evolve(
        info,
        enqueued_at=_unix(unix_time, info.enqueued_at),
        started_at=_unix(unix_time, info.started_at),
        finished_at=_unix(unix_time, info.finished_at),
        run_at=_unix(unix_time, info.run_at),
    )


def _task_info(snapshot: TaskSnapshot) -> TaskInfo:
    if snapshot.result is not None:
        return _finished(snapshot.task_id, snapshot.result)
    if snapshot.member is not None:
        try:
            member = _wire.decode_delayed(snapshot.member)
        except InvalidTaskPayload:
            return TaskInfo(
                id=snapshot.task_id,
                state=TaskState.SCHEDULED,
                task_name=None,
                attempts=0,
                run_at=snapshot.run_at,
            )
        return TaskInfo(
            id=snapshot.task_id,
            state=TaskState.SCHEDULED,
            task_name=member.task,
            attempts=member.attempts,
            run_at=snapshot.run_at,
            payload=member.payload,
            workflow=member.workflow,
            step=member.step,
        )
    assert snapshot.entry_id is not None, "a snapshot names a result, a member or an entry"
    try:
        message: _wire.TaskMessage | None = _wire.decode_message(snapshot.payload)
    except (InvalidTaskPayload, RecursionError):
        message = None
    return TaskInfo(
        id=snapshot.task_id,
        state=TaskState.RUNNING if snapshot.pending else TaskState.QUEUED,
        task_name=message.task_name if message is not None else None,
        attempts=(message.attempts if message is not None else 0)
        + (snapshot.delivery_count if snapshot.pending else 0),
        enqueued_at=_entry_time(snapshot.entry_id),
        entry_id=snapshot.entry_id,
        consumer=snapshot.consumer,
        cancelling=snapshot.stopping,
        payload=message.payload if message is not None else None,
        workflow=message.workflow if message is not None else None,
        step=message.extras.step if message is not None and message.extras is not None else None,
    )


def _finished(task_id: str, raw: bytes) -> TaskInfo:
    try:
        doc = _wire.decode_result(raw)
    except (InvalidTaskPayload, RecursionError) as exc:
        # Someone else's document: report that it is done and cannot be read.
        return TaskInfo(
            id=task_id,
            state=TaskState.FAILED,
            task_name=None,
            attempts=0,
            error=TaskError(type="InvalidTaskResult", message=f"unreadable result: {exc}"),
        )
    error = TaskError(type=doc.error_type, message=doc.error)
    return TaskInfo(
        id=task_id,
        state=doc.state,
        task_name=doc.task or None,
        attempts=doc.attempts,
        error=error if doc.state is TaskState.FAILED else None,
        result=doc.value,
        enqueued_at=doc.enqueued_at,
        started_at=doc.started_at,
        finished_at=doc.finished_at,
    )


class TaskHandle:
    """A dispatched task: its id, and what can be done with it.

    Returned by :meth:`TaskRunner.dispatch <taskrunner.TaskRunner.dispatch>` and
    its variants; ``str(handle)`` is its id, which
    :meth:`TaskRunner.get_task <taskrunner.TaskRunner.get_task>` and
    :meth:`TaskRunner.cancel <taskrunner.TaskRunner.cancel>` take. Handles are
    equal when their ids and task names are. Read-only by convention.
    """

    # A plain slotted class, not attrs.frozen: dispatch_many makes one per payload, and
    # a frozen attrs instance costs several times as much to build.
    __slots__ = ("_tracker", "id", "queue", "task_name")

    id: str
    """The task id: the stream id of its entry, or, dispatched with a delay, its
    delayed member's id (which the entry it becomes keeps)."""
    task_name: str
    """The task's name."""
    queue: str | None
    """The queue it was dispatched to (``None``: not known, every queue is looked in).
    Stream ids are unique per stream only, so the handle's lookups look there alone."""

    def __init__(
        self, id: str, task_name: str, tracker: Follower, queue: str | None = None
    ) -> None:
        self.id = id
        self.task_name = task_name
        self._tracker = tracker
        self.queue = queue

    def __repr__(self) -> str:
        return f"TaskHandle(id={self.id!r}, task_name={self.task_name!r})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, TaskHandle):
            return NotImplemented
        return (self.id, self.task_name) == (other.id, other.task_name)

    def __hash__(self) -> int:
        return hash((self.id, self.task_name))

    def __str__(self) -> str:
        return self.id

    # The contract names the bound (``handle.result(timeout=10)``), and the backend's
    # blocking wait has to be told it: a cancel scope around the call also works.
    async def result(
        self,
        timeout: float | None = None,  # noqa: ASYNC109
        *,
        type: type[Any] | None = None,
    ) -> Any:
        """Wait for the task's outcome and return its value.

        The task must keep results (``Task(keep_result=...)``): its outcome is
        waited for in the backend, so it works from any process that shares the
        backend, whichever instance runs the task.

        Args:
            timeout: Seconds to wait; ``None`` waits until the outcome comes
                (or the caller is cancelled).
            type: Structure the value into this type (an attrs class or
                dataclass) with cattrs; by default the task's return
                annotation, when it is one, else the JSON value as it is.

        Returns:
            What the action returned.

        Raises:
            TaskFailed: its last attempt failed (the error it records).
            TaskCancelled: it was cancelled.
            trio.TooSlowError: no outcome within ``timeout``.
            ValueError: the task (as registered here) keeps no results.
            InvalidTaskPayload: the value does not fit ``type``.
            BackendError: the backend could not be reached.

        Cancellation: the wait stops; it leaves nothing behind in the backend.
        """
        require_trio("TaskHandle.result")
        return await self._tracker.result(self.id, self.task_name, timeout, type)

    async def cancel(self) -> bool:
        """Cancel the task: :meth:`TaskRunner.cancel <taskrunner.TaskRunner.cancel>`."""
        require_trio("TaskHandle.cancel")
        return await self._tracker.cancel(self.id, self.queue)

    async def info(self) -> TaskInfo | None:
        """Where the task is now: :meth:`TaskRunner.get_task <taskrunner.TaskRunner.get_task>`."""
        require_trio("TaskHandle.info")
        return await self._tracker.get_task(self.id, self.queue)
