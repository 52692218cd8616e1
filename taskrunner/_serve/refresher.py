"""Keeps long-running messages from being reclaimed.

Every ``tick`` seconds (half the shortest reservation timeout), the ids that
have run for about their reservation timeout since their last refresh are
refreshed in one backend call per consumer (``XCLAIM ... JUSTID`` on Redis):
their idle time resets, their delivery count does not move. An entry is
refreshed up to one tick early rather than late, so the gap between two
refreshes never exceeds its reservation timeout, which ``register`` keeps
below ``reclaim_delay``. An entry is marked refreshed only once the backend
confirmed it; after a failed call it is tried again on the next tick.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import trio

from taskrunner._inflight import InFlight
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
    """Refresh due in-flight messages until cancelled."""
    task_status.started()
    while True:
        interval = tick()
        await trio.sleep(interval)
        for consumer, ids in inflight.due(trio.current_time(), interval).items():
            sent = trio.current_time()
            try:
                await backend.refresh(group, consumer, ids)
                inflight.refreshed(ids, sent)
            except BackendError as exc:
                log.warning(
                    "refresh of %d running message(s) for %s failed (%s); they may be "
                    "reclaimed if this persists past reclaim_delay",
                    len(ids),
                    consumer,
                    exc,
                )
