"""Keeps long-running messages from being reclaimed, and their concurrency slots held.

Every ``tick`` seconds (half the shortest reservation timeout), the ids that
have run for about their reservation timeout since their last refresh are
refreshed in one backend call per consumer and queue (``XCLAIM ... JUSTID``
on Redis): their idle time resets, their delivery count does not move. An
entry is refreshed up to one tick early rather than late, so the gap between
two refreshes never exceeds its reservation timeout, which ``register`` keeps
below ``reclaim_delay``. An entry is marked refreshed only once the backend
confirmed it; after a failed call it is tried again on the next tick.

A run holding a concurrency slot is due twice per reservation timeout (see
:mod:`taskrunner._execution.inflight`), and the slots of every due run are renewed in
one more call (:meth:`~taskrunner.backends.FlowControl.renew_slots`) before
the messages are; such a run is marked refreshed only when both succeeded.
A slot found lost (its lease expired and another run took it) is logged: the
run goes on, one over its task's limit until it ends. A thread past its
timeout, or stopped, is no longer refreshed (its message may be reclaimed,
or was acked), but its slot is renewed all the same until the thread returns
(:meth:`InFlight.lingering <taskrunner._execution.inflight.InFlight.lingering>`): the
thread still runs, and counts against ``max_concurrency``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import trio

from taskrunner._execution.inflight import InFlight
from taskrunner.backends import Backend
from taskrunner.errors import BackendError

log = logging.getLogger(__name__)


async def run(
    backend: Backend,
    group: str,
    inflight: InFlight,
    tick: Callable[[], float],
    *,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Refresh due in-flight messages (and renew their slots) until cancelled."""
    task_status.started()
    while True:
        interval = tick()
        await trio.sleep(interval)
        now = trio.current_time()
        tables = inflight.tables()  # the runner's, then a sharded group's shards'
        dues = [(t, t.due(now, interval), t.lingering(now, interval)) for _, t in tables]
        holds = [
            h
            for table, due, lingering in dues
            for queue, ids in [*((q, i) for (_, q), i in due.items()), *lingering.items()]
            for h in table.holds(ids, queue=queue)
        ]
        slots_renewed = True
        if holds:
            try:
                lost = await backend.renew_slots(group, holds)
            except BackendError as exc:
                slots_renewed = False
                log.warning(
                    "renewal of %d concurrency slot(s) failed (%s); retrying on the next tick",
                    len(holds),
                    exc,
                )
            else:
                for hold in lost:
                    log.warning(
                        "a run of task %s lost its concurrency slot (its lease expired and "
                        "was taken); it runs on, over the limit until it ends",
                        hold.task,
                    )
                sent = trio.current_time()
                for table, _, lingering in dues:
                    for queue, ids in lingering.items():
                        table.refreshed(ids, sent, queue=queue)
        for (shard, _), (table, due, _) in zip(tables, dues, strict=True):
            where = group if shard is None else shard  # a shard's runs: refreshed there
            for (consumer, queue), ids in due.items():
                sent = trio.current_time()
                try:
                    await backend.refresh(where, consumer, ids, queue=queue)
                except BackendError as exc:
                    log.warning(
                        "refresh of %d running message(s) for %s failed (%s); they may be "
                        "reclaimed if this persists past reclaim_delay",
                        len(ids),
                        consumer,
                        exc,
                    )
                    continue
                if not slots_renewed:  # those holding a slot are due again next tick
                    ids = [i for i in ids if not table.holds([i], queue=queue)]
                table.refreshed(ids, sent, queue=queue)
