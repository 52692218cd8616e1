"""The task catalog: every serving instance says which tasks it serves.

Producers send tasks by name (``taskrunner.producer``); one created with
``strict=True`` refuses a name no live runner serves and takes the task's
settings (unique lock, lifetime, reservation timeout) from what the runners
publish here. Each instance publishes one document under its ``host`` in
``taskrunner:<group>:catalog`` (:class:`~taskrunner.backends.TaskCatalog`):
when ``serve`` starts (before it reports started, so a producer that waits for
``serve`` finds the tasks), then every :data:`PUBLISH_INTERVAL` seconds, each
document counting for :data:`CATALOG_TTL`. It removes its document when
``serve`` stops; a crashed instance's stops counting by itself within
:data:`CATALOG_TTL`. Publishing costs one backend call per interval, nothing
per task.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping

import trio

from taskrunner._task import Task
from taskrunner._wire import CatalogDocument, CatalogTask
from taskrunner.backends import Backend
from taskrunner.errors import BackendError

log = logging.getLogger(__name__)

PUBLISH_INTERVAL = 10.0
"""Seconds between two publishes (as the heartbeat's renewals)."""
CATALOG_TTL = 30.0
"""Seconds a document counts after it was published: three intervals, so one
failed publish (or a clock a few seconds off) never hides a live runner."""
REMOVE_TIMEOUT = 2.0


def catalog_document(
    host: str,
    instance_id: str,
    tasks: Mapping[str, Task],
    stream: str,
    now: float,
    queue_streams: Mapping[str, str] | None = None,
    default_queue: str | None = None,
) -> CatalogDocument:
    """What this instance publishes at ``now`` (the backend's clock): every registered
    task, served from its queue's stream (``queue_streams``, by queue name) or else
    from ``stream`` (a task without a queue of its own: ``default_queue``'s stream, when
    given), counting until ``now + CATALOG_TTL`` (pure)."""
    return CatalogDocument(
        host=host,
        instance=instance_id,
        expires=now + CATALOG_TTL,
        tasks=catalog_tasks(tasks.values(), stream, queue_streams, default_queue),
    )


def catalog_tasks(
    tasks: Iterable[Task],
    stream: str,
    queue_streams: Mapping[str, str] | None = None,
    default_queue: str | None = None,
) -> tuple[CatalogTask, ...]:
    """The catalog entries of registered ``tasks``, sorted by name: each served from
    its queue's stream (``queue_streams[task.queue]``); a task with no queue of its
    own from ``default_queue``'s (where the runner sends it, see
    ``TaskRunnerConfig.default_queue``), else from ``stream`` (the backend's queue)
    (pure)."""
    streams = queue_streams or {}

    def stream_of(task: Task) -> str:
        queue = task.queue if task.queue is not None else default_queue
        return stream if queue is None else streams.get(queue, stream)

    return tuple(
        task.catalog_entry(stream_of(task)) for task in sorted(tasks, key=lambda task: task.name)
    )


async def _publish(
    backend: Backend,
    group: str,
    host: str,
    instance_id: str,
    tasks: Mapping[str, Task],
    default_queue: str | None,
) -> None:
    stream = backend.stream_keys(group).stream
    queues = {task.queue for task in tasks.values() if task.queue is not None}
    if default_queue is not None:
        queues.add(default_queue)
    streams = {queue: backend.stream_keys(group, queue).stream for queue in queues}
    document = catalog_document(
        host, instance_id, tasks, stream, backend.now(), streams, default_queue
    )
    try:
        await backend.publish_catalog(group, document, CATALOG_TTL)
    except BackendError as exc:
        log.warning("could not publish the task catalog of %s: %s", host, exc)


async def run(
    backend: Backend,
    group: str,
    host: str,
    instance_id: str,
    tasks: Mapping[str, Task],
    *,
    default_queue: str | None = None,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Publish at once, then every :data:`PUBLISH_INTERVAL`, until cancelled; then
    remove this host's document (bounded, shielded).

    ``tasks`` is read at each publish, so a task registered while serving is
    published within an interval. A failed publish is logged; the next one tries
    again.
    """
    await _publish(backend, group, host, instance_id, tasks, default_queue)
    task_status.started()
    try:
        while True:
            await trio.sleep(PUBLISH_INTERVAL)
            await _publish(backend, group, host, instance_id, tasks, default_queue)
    finally:
        with trio.move_on_after(REMOVE_TIMEOUT, shield=True):
            try:
                await backend.remove_catalog(group, host)
            except BackendError as exc:
                log.warning(
                    "could not remove the task catalog of %s (%s); it stops counting in %ss",
                    host,
                    exc,
                    CATALOG_TTL,
                )
