"""Which queues a group has, and each queue's summaries.

Theory of operation. A group may read several queues (``TaskRunnerConfig(queues=...)``,
``@runner.task(queue=...)``), each its own stream, and nothing in the store lists
them. The dashboard finds them in what the store does say:

- the backend's own queue (``tasks`` unless the backend was given another), which
  every task without a queue of its own is dispatched to;
- the streams in the group's task catalog: every serving Python runner publishes,
  for each task it serves, the stream of that task's queue;
- the paused set (``taskrunner:<group>:paused``): a paused queue stays listed so it
  can be resumed, even when no runner names it any longer;
- the queues with keys on the store (``Inspection.list_queues``, read by the
  sampler at most once a minute): a queue that has messages shows even when no
  runner serves it yet, or one that only ``dispatch(..., queue=...)`` writes to.

A catalog stream is mapped back to its queue name by the backend's own layout
(:meth:`~taskrunner.backends.MessageQueue.stream_keys`): the name is what follows the
default stream's head, and it counts only if the backend maps that name back to the
same stream (a stream of another layout is left out rather than guessed at). This
is pure (:func:`queues_of`).

Per queue, :func:`read_queues` reads summaries only: ``XLEN``, the
claim-delay ring and ``XINFO GROUPS`` (``get_metrics``; ``length`` alone, without
the ring, for the sampler), and ``XINFO GROUPS`` and ``XINFO CONSUMERS``
(``group_info``), so the cost grows with the number of queues, never with their
lengths.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

import attrs

from taskrunner._config import queue_name_problem
from taskrunner._keys import StreamKeys
from taskrunner._wire import CatalogDocument
from taskrunner.backends import Backend, GroupInfo, Paused, QueueMetrics
from taskrunner.dashboard import _features

__all__ = ["QueueRead", "queue_of_stream", "queues_of", "read_queues", "task_queues"]


def queue_of_stream(
    stream: str, default: StreamKeys, stream_of: Callable[[str], str]
) -> str | None:
    """The queue whose stream is ``stream`` (pure, given ``stream_of``), or ``None``
    when no valid queue name maps to it.

    Args:
        stream: A stream name, as the catalog publishes it.
        default: The backend's own queue's keys (``backend.stream_keys(group)``).
        stream_of: The stream of a queue name (``backend.stream_keys(group, q).stream``);
            a ``ValueError`` from it (a name the layout refuses) means no queue.
    """
    if stream == default.stream:
        return default.queue
    head = default.stream[: len(default.stream) - len(default.queue)]
    if not default.stream.endswith(default.queue) or not stream.startswith(head):
        return None
    name = stream[len(head) :]
    if queue_name_problem(name) is not None:  # e.g. another queue's ":dead" stream
        return None
    try:
        same = stream_of(name) == stream
    except ValueError:
        return None
    return name if same else None


def queues_of(
    default: StreamKeys,
    streams: Iterable[str],
    paused: Iterable[str],
    stream_of: Callable[[str], str],
    stored: Iterable[str] = (),
) -> list[str]:
    """The group's queues (pure, given ``stream_of``): the backend's own first, then
    the others by name, from the catalog's ``streams``, the ``paused`` queues and
    those with keys on the store (``stored``: ``Inspection.list_queues``)."""
    found = {default.queue, *stored}
    for stream in streams:
        name = queue_of_stream(stream, default, stream_of)
        if name is not None:
            found.add(name)
    found.update(paused)
    return [default.queue, *sorted(found - {default.queue})]


def task_queues(
    catalog: Sequence[CatalogDocument], default: StreamKeys, stream_of: Callable[[str], str]
) -> dict[str, str | None]:
    """Each task the catalog names, with its queue (pure, given ``stream_of``; ``None``:
    a stream that names no queue). When runners disagree, the newest document wins."""
    out: dict[str, str | None] = {}
    for doc in sorted(catalog, key=lambda doc: doc.expires):
        for task in doc.tasks:
            out[task.name] = queue_of_stream(task.stream, default, stream_of)
    return out


@attrs.frozen(kw_only=True)
class QueueRead:
    """One queue of a group as read now."""

    name: str
    stream: str
    length: int
    """Entries in its stream (``XLEN``)."""
    metrics: QueueMetrics | None
    """With its claim delays, when read with ``claim_delays=True``."""
    info: GroupInfo
    """The group on this queue's stream, with its consumers."""
    paused: bool


def stream_of(backend: Backend, group: str) -> Callable[[str], str]:
    """``backend.stream_keys(group, name).stream`` as a function of ``name``."""
    return lambda name: backend.stream_keys(group, name).stream


async def read_queues(
    backend: Backend,
    group: str,
    catalog: Sequence[CatalogDocument],
    paused: Paused,
    *,
    claim_delays: bool = True,
    stored: Iterable[str] = (),
) -> list[QueueRead]:
    """Every queue of ``group`` (see :func:`queues_of`; ``stored``: the queues with keys
    on the store) with its summaries; with ``claim_delays``, its claim-delay ring's
    statistics too (``get_metrics``).

    Raises:
        BackendError: the store could not be read.
    """
    default = backend.stream_keys(group)
    names = queues_of(
        default,
        (task.stream for doc in catalog for task in doc.tasks),
        paused.queues,
        stream_of(backend, group),
        stored,
    )
    out = []
    for name in names:
        queue = None if name == default.queue else name
        if claim_delays:
            metrics = await backend.get_metrics(group, queue=queue)
            length = metrics.queue_size
        else:
            metrics, length = None, await backend.length(group, queue=queue)
        out.append(
            QueueRead(
                name=name,
                stream=backend.stream_keys(group, queue).stream,
                length=length,
                metrics=metrics,
                info=await backend.group_info(group, queue=queue),
                paused=name in paused.queues,
            )
        )
    return out


async def read_group_queues(
    backend: Backend, group: str, *, claim_delays: bool = True, stored: Iterable[str] = ()
) -> list[QueueRead]:
    """:func:`read_queues` with the group's catalog and pauses read first (two round
    trips more).

    Raises:
        BackendError: the store could not be read.
    """
    catalog = await backend.read_catalog(group)
    paused = await _features.paused(backend, group)
    return await read_queues(
        backend, group, catalog, paused, claim_delays=claim_delays, stored=stored
    )
