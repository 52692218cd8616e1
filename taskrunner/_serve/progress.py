"""The progress writer: runs' progress reports (and loose events), about once a second.

Theory of operation (the buffer: :mod:`taskrunner._execution.progress`). The
writer sleeps until something is buffered, gathers for
:data:`~taskrunner._execution.progress.PROGRESS_INTERVAL` seconds, then writes the
latest progress of every task that reported, and the buffered ``started`` and
``retried`` events the acker has not taken meanwhile, in one
:meth:`EventLog.write_events <taskrunner.backends.EventLog.write_events>` call. So
a runner whose tasks report 1,000 times a second costs one round trip a second,
and an idle one none. A failed write keeps what it took (newer reports win) for
the next, after a backoff.

A task's last report is not lost when it finishes: the writer writes it within a
second after the run, or in its final write at shutdown (shielded, bounded),
and the value stays for :data:`~taskrunner.backends._protocols.events.PROGRESS_TTL`.
A backend without an :class:`~taskrunner.backends.EventLog` drops reports.
"""

from __future__ import annotations

import logging

import trio

from taskrunner._config import ConfigHolder
from taskrunner._execution.backoff import backoff_delay
from taskrunner._execution.progress import PROGRESS_INTERVAL, Reports
from taskrunner._serve.shard_acks import progress_by_shard
from taskrunner.backends import Backend, EventBatch, EventLog, ProgressUpdate
from taskrunner.errors import BackendError

log = logging.getLogger(__name__)

FINAL_WRITE_TIMEOUT = 5.0


async def write(backend: EventLog, config: ConfigHolder, reports: Reports) -> bool:
    """Write what the buffer holds for the writer, in one call; put it back if the
    call fails. Returns whether there was anything to write."""
    progress, events = reports.take_for_writer()
    if not progress and not events:
        return False
    current = config.current
    batch = EventBatch(events=tuple(events), maxlen=current.events_maxlen) if events else None
    updates = [ProgressUpdate(task_id=t, progress=p) for t, p in progress.items()]
    try:
        if current.shards == 1:
            await backend.write_events(current.consumer_group, batch, updates)
        else:  # a shard's runs' progress goes to its shard (shard_acks.progress_by_shard)
            where = progress_by_shard(updates, current.consumer_group, current.shards)
            own = where.pop(current.consumer_group, [])
            for shard, in_shard in where.items():  # first: a failure then writes no event
                await backend.write_events(shard, None, in_shard)
            if batch is not None or own:
                await backend.write_events(current.consumer_group, batch, own)
    except BaseException:
        reports.put_back(progress, events)
        raise
    return True


async def run(
    backend: Backend,
    config: ConfigHolder,
    reports: Reports,
    *,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Write buffered progress and events about once a second until cancelled, then
    once more (shielded, bounded)."""
    if not isinstance(backend, EventLog):
        task_status.started()
        while True:  # nowhere to write them: drop them as they come
            await reports.wake.wait()
            reports.wake = trio.Event()
            reports.take_for_writer()
    task_status.started()
    failures = 0
    try:
        while True:
            await reports.wake.wait()
            await trio.sleep(PROGRESS_INTERVAL)  # gather: one write for all of it
            reports.wake = trio.Event()
            try:
                await write(backend, config, reports)
                failures = 0
            except BackendError as exc:
                failures += 1
                delay = backoff_delay(failures)
                log.warning(
                    "writing progress and events failed (%s); retrying in %.2fs", exc, delay
                )
                await trio.sleep(delay)
    finally:
        with trio.move_on_after(FINAL_WRITE_TIMEOUT, shield=True):
            try:
                await write(backend, config, reports)
            except BackendError as exc:
                log.warning("final write of progress and events failed (%s)", exc)
