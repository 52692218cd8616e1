"""Which queues a consumer group has, found from what the store says.

Theory of operation. A group may read several queues (``TaskRunnerConfig(queues=...)``,
``@runner.task(queue=...)``), each its own stream, and no key lists them. An operator
tool (``taskrunner.admin``, the command line, the dashboard) that has a backend and a
group name only finds them in:

- the backend's own queue (``tasks`` unless the backend was given another);
- the group's task catalog: every serving Python runner publishes, for each task it
  serves, the stream of that task's queue;
- the paused set: a paused queue stays listed so that it can be resumed;
- the keys on the store (:meth:`~taskrunner.backends.Inspection.list_queues`, when
  the backend implements it): every queue with a stream, dead letters or a
  claim-delay ring, so a queue that has messages is found even when no runner
  serves it yet.

A stream is mapped back to its queue by the layout
(:func:`taskrunner.backends._layout.queue_key`): a name that maps to no valid
queue is left out rather than guessed at. :func:`queues_of` is the pure part.
"""

from __future__ import annotations

from collections.abc import Iterable

from taskrunner._dispatch.guards import implements_inspection
from taskrunner._keys import StreamKeys
from taskrunner.backends import Backend
from taskrunner.backends._layout import queue_key

__all__ = ["group_queues", "queues_of"]


def queues_of(
    own: StreamKeys,
    streams: Iterable[str],
    paused: Iterable[str],
    stored: Iterable[str] = (),
) -> list[str]:
    """The group's queues (pure): the backend's own first, then the others by name,
    from the catalog's ``streams``, the ``paused`` queues and those with keys.

    Args:
        own: The backend's own queue's keys (``backend.stream_keys(group)``).
        streams: Streams the catalog names.
        paused: The queues paused.
        stored: The queues with keys on the store (``Inspection.list_queues``).
    """
    found = {own.queue, *stored}
    for stream in streams:
        hit = queue_key(stream, own)
        if hit is not None:
            found.add(hit[1])
    found.update(paused)
    return [own.queue, *sorted(found - {own.queue})]


async def group_queues(backend: Backend, group: str) -> list[str]:
    """Every queue of ``group`` the store shows (see the module docstring).

    Cost: the catalog and the paused set (two round trips), and, on a backend that
    implements :class:`~taskrunner.backends.Inspection`, its ``list_queues`` (two
    walks of the key space): an operator's call, not the per-task path.

    Raises:
        BackendError: the store could not be read.
    """
    own = backend.stream_keys(group)
    catalog = await backend.read_catalog(group)
    paused = (await backend.paused(group)).queues
    stored = await backend.list_queues(group) if implements_inspection(backend) else []
    streams = (task.stream for doc in catalog for task in doc.tasks)
    return queues_of(own, streams, paused, stored)
