"""Stops the runs that ``TaskRunner.cancel`` asked to stop, wherever they were dispatched.

Theory of operation. Cancelling a running task only records a stop request
in the backend (``taskrunner:<group>:cancelled``): the instance that runs it
has to notice. Every :data:`POLL_INTERVAL` this service asks the backend
which of this runner's running entries were asked to stop, in one call for
all of them (``ZMSCORE`` on Redis), and cancels those runs' scopes
(:meth:`InFlight.stop <taskrunner._execution.inflight.InFlight.stop>`); the worker then
acknowledges each as cancelled. So a cancel takes effect within about a
second anywhere in the fleet, and costs one round trip a second per runner
while it runs something, none per task. A failed call is logged and tried on
the next tick.
"""

from __future__ import annotations

import logging

import trio

from taskrunner._execution.inflight import InFlight
from taskrunner.backends import Backend
from taskrunner.errors import BackendError

log = logging.getLogger(__name__)

POLL_INTERVAL = 1.0
"""Seconds between two looks at the stop requests."""


async def run(
    backend: Backend,
    group: str,
    inflight: InFlight,
    *,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Cancel the runs asked to stop, every :data:`POLL_INTERVAL`, until cancelled."""
    task_status.started()
    while True:
        await trio.sleep(POLL_INTERVAL)
        for shard, table in inflight.tables():  # a shard's stop requests are in it
            running = table.running()
            if not running:
                continue
            where = group if shard is None else shard
            try:
                stopped = await backend.cancel_requested(where, running)
            except BackendError as exc:
                log.warning("could not read the stop requests of %d run(s) (%s)", len(running), exc)
                continue
            for entry_id in stopped:
                if table.stop(entry_id):
                    log.info("message %s was cancelled: stopping its run", entry_id)
