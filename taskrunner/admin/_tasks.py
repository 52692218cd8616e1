"""Tasks and workflows by id: a group's queues, where a task is, its events, and
cancelling a task or a workflow, with a backend and a group name alone.

A task is looked for on every queue of its group unless one is named
(:func:`queue_names`), in the shard its id names (:func:`shards_of`).
"""

from __future__ import annotations

import attrs

from taskrunner._config import queue_name_problem
from taskrunner._dispatch.events import EventReader
from taskrunner._dispatch.handle import TaskInfo, task_info
from taskrunner._dispatch.queues import group_queues
from taskrunner._dispatch.tracker import with_progress
from taskrunner._dispatch.workflows import WorkflowStatus, status_of
from taskrunner.admin._groups import shards_of
from taskrunner.backends import Backend, EventLog, WorkflowStore


async def queues(backend: Backend, group: str) -> list[str]:
    """Every queue of ``group`` the store shows: the backend's own first, then, by
    name, those the task catalog names, the paused ones and those with keys on the
    store (a stream, dead letters or a claim-delay ring), so a queue that has
    messages is listed even when no runner serves it yet.

    Raises:
        BackendError: the store could not be read.
    """
    return await group_queues(backend, group)


async def queue_names(backend: Backend, group: str, queue: str | None) -> list[str]:
    """The queues a call looks in: ``queue`` alone when named (checked), else every
    queue of ``group`` (:func:`queues`).

    Raises:
        ValueError: ``queue`` is not a queue name.
    """
    if queue is None:
        return await group_queues(backend, group)
    problem = queue_name_problem(queue)
    if problem is not None:
        raise ValueError(f"queue {problem}, got {queue!r}")
    return [queue]


async def get_task(
    backend: Backend, group: str, task_id: str, *, queue: str | None = None
) -> TaskInfo | None:
    """Where task ``task_id`` of ``group`` is now (see :meth:`TaskRunner.get_task
    <taskrunner.TaskRunner.get_task>`); ``None`` when the backend does not know it.

    Args:
        queue: The queue its entry is on; by default every queue of the group
            (:func:`queues`), the first holding it winning (stream ids are unique
            per stream only).

    Raises:
        ValueError: ``queue`` is not a queue name.
        BackendError: the store could not be read.
    """
    names = await queue_names(backend, group, queue)
    where = (await shards_of(backend, group)).locate(task_id)
    if where is None:
        return None
    snapshot = await backend.lookup(where[0], where[1], queues=names)
    if snapshot is None:
        return None
    info = await with_progress(backend, where[0], task_info(snapshot, backend.unix_time))
    return info if where[1] == task_id else attrs.evolve(info, id=task_id)


def events(backend: Backend, group: str, *, after: str | None = None) -> EventReader:
    """The events of ``group`` (see :meth:`TaskRunner.events
    <taskrunner.TaskRunner.events>`): ``async for event in admin.events(backend, "app")``.

    Raises:
        ValueError: ``after`` is not ``None``, ``"0"`` or an event id, or the backend
            has no event log.
    """
    if not isinstance(backend, EventLog):
        raise ValueError(f"{type(backend).__name__} has no event log to read")
    return EventReader(backend, group, after)


async def cancel(backend: Backend, group: str, task_id: str, *, queue: str | None = None) -> bool:
    """Cancel task ``task_id`` of ``group`` wherever it is (see :meth:`TaskRunner.cancel
    <taskrunner.TaskRunner.cancel>`), its entry looked for as :func:`get_task` does:
    ``False`` when it is done or unknown.

    Raises:
        ValueError: ``queue`` is not a queue name.
        BackendError: the store could not be reached.
    """
    names = await queue_names(backend, group, queue)
    where = (await shards_of(backend, group)).locate(task_id)
    if where is None:
        return False
    return (await backend.cancel(where[0], where[1], queues=names)).state is not None


def _workflows(backend: Backend) -> WorkflowStore:
    if not isinstance(backend, WorkflowStore):
        raise TypeError(f"{type(backend).__name__} keeps no workflows")
    return backend


async def get_workflow(backend: Backend, group: str, workflow_id: str) -> WorkflowStatus | None:
    """Workflow ``workflow_id`` of ``group`` as ``wf.status()`` shows it (its state,
    counts per state, each step's state, parents and policy), in one round trip;
    ``None`` when there is none (never dispatched, or expired).

    Raises:
        TypeError: the backend keeps no workflows.
        BackendError: the store could not be read.
    """
    record = await _workflows(backend).read_workflow(group, workflow_id)
    return None if record is None else status_of(record)


async def cancel_workflow(backend: Backend, group: str, workflow_id: str) -> bool:
    """Cancel workflow ``workflow_id`` of ``group`` as ``wf.cancel()`` does (its queued,
    delayed and running steps fleet-wide).

    Returns:
        Whether it was running (``False``: over already, or unknown).

    Raises:
        TypeError: the backend keeps no workflows.
        BackendError: the store could not be reached.
    """
    return await _workflows(backend).cancel_workflow(group, workflow_id)
