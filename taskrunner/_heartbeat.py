"""The replication heartbeat: one key per live instance.

Each instance sets ``taskrunner:replication:<host>`` to its instance id with
a 15 s lifetime and renews it every 10 s; counting those keys tells every
instance how many replicas are alive (the replication factor used by the
stats and the tuner). The key is deleted on graceful shutdown, and only if it
still holds this instance's id (a restarted process with the same host may
already own it).
"""

from __future__ import annotations

import logging

import trio

from taskrunner.backends import Backend
from taskrunner.errors import BackendError

log = logging.getLogger("taskrunner.heartbeat")

HEARTBEAT_TTL = 15.0
HEARTBEAT_INTERVAL = 10.0
REPLICATION_CACHE = 10.0
REMOVE_TIMEOUT = 2.0


async def _beat(backend: Backend, host: str, instance_id: str) -> None:
    try:
        await backend.heartbeat(host, instance_id, HEARTBEAT_TTL)
    except BackendError as exc:
        log.warning("heartbeat for %s failed: %s", host, exc)


async def run(
    backend: Backend,
    host: str,
    instance_id: str,
    *,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Beat until cancelled, then delete the heartbeat (bounded, shielded)."""
    await _beat(backend, host, instance_id)
    task_status.started()
    try:
        while True:
            await trio.sleep(HEARTBEAT_INTERVAL)
            await _beat(backend, host, instance_id)
    finally:
        with trio.move_on_after(REMOVE_TIMEOUT, shield=True):
            try:
                await backend.remove_heartbeat(host, instance_id)
            except BackendError as exc:
                log.warning(
                    "could not delete heartbeat of %s (%s); it expires by itself", host, exc
                )


class ReplicationCounter:
    """``get_number_of_replications`` with its 10 s cache."""

    def __init__(self, backend: Backend) -> None:
        self._backend = backend
        self._count = 0
        self._at: float | None = None

    async def get(self, *, serving: bool, refresh: bool = False) -> int:
        """Live instances; at least 1 while this one serves.

        Raises:
            BackendError: the first count could not be read (later failures
                return the cached value).
        """
        now = trio.current_time()
        if refresh or self._at is None or now - self._at >= REPLICATION_CACHE:
            try:
                self._count = await self._backend.count_heartbeats()
                self._at = now
            except BackendError:
                if self._at is None:
                    raise
                log.warning("could not count replicas; using the cached %d", self._count)
        return max(1, self._count) if serving else self._count
