"""The replication heartbeat: one key per live instance, and one instance per host.

Each instance sets ``taskrunner:replication:<host>`` to its instance id with
a 15 s lifetime and renews it every 10 s; counting those keys tells every
instance how many replicas are alive (the replication factor used by the
stats and the tuner). The key is deleted on graceful shutdown, and only if it
still holds this instance's id.

Theory of operation (duplicate hosts). Two live processes with one ``host``
share consumer names and pending lists, which breaks reclaim, so a host has
one live instance at a time. Setting the key is atomic and refuses a key that
holds another id (:meth:`~taskrunner.backends.SharedState.heartbeat`). At
serve start (:func:`claim`), when the key holds another id, its holder is
either alive (another process with the same host) or a crashed predecessor
whose key has not expired yet (a restart within the 15 s TTL). The two are
told apart by watching the key: a live holder renews it at least every 10 s,
which shows as its time left going up (or its value changing); a dead one
lets it run down and expire. So :func:`claim` polls the key until it expires
(take it over) or is renewed (refuse with
:class:`~taskrunner.errors.DuplicateHost`): at most one TTL. The decision is
:func:`holder_verdict`, a pure function.

While serving, a beat that finds another id in the key (this instance stalled
past the TTL and a process with the same host took the key over, or a
process that does not check started) stops this instance: :func:`run` calls
``on_taken`` and returns, and the runner drains gracefully and raises
``DuplicateHost`` from ``serve``. The holder of the key carries on: both sides
decide the same way, so exactly one instance of the host keeps serving.
"""

from __future__ import annotations

import enum
import logging
import math
from collections.abc import Callable

import attrs
import trio

from taskrunner.backends import Backend
from taskrunner.errors import BackendError, DuplicateHost

log = logging.getLogger(__name__)

HEARTBEAT_TTL = 15.0
HEARTBEAT_INTERVAL = 10.0
REPLICATION_CACHE = 10.0
REMOVE_TIMEOUT = 2.0
WATCH_POLL = 0.5
"""Seconds between two looks at a heartbeat key held by another instance."""
RENEWAL_TOLERANCE = 0.5
"""How much longer than expected a key's time left may be before it counts as
renewed (clock steps, rounding to milliseconds, the poll's own round trip)."""


class Verdict(enum.Enum):
    """What watching another instance's heartbeat key has shown so far."""

    LIVE = "live"
    """It was renewed or rewritten: a live instance holds the host."""
    GONE = "gone"
    """It expired or was deleted: the host is free."""
    WAIT = "wait"
    """It is running down: look again."""


@attrs.frozen
class Sighting:
    """A heartbeat key as seen at one moment."""

    holder: str
    left: float
    """Seconds it had left."""
    at: float
    """When it was seen (trio's clock)."""


def holder_verdict(first: Sighting, holder: str | None, left: float, now: float) -> Verdict:
    """Whether another instance's key shows a live holder (pure).

    Args:
        first: The key when the watch began.
        holder: Who holds it now (``None``: no live key).
        left: Its seconds left now.
        now: Trio's clock now.
    """
    if holder is None:
        return Verdict.GONE
    if math.isinf(left):
        return Verdict.LIVE  # set without an expiry (by hand): it never runs down
    if holder != first.holder:
        return Verdict.LIVE  # another instance just wrote it
    expected = first.left - (now - first.at)
    if left > expected + RENEWAL_TOLERANCE:
        return Verdict.LIVE  # renewed
    return Verdict.WAIT


async def claim(backend: Backend, host: str, instance_id: str, *, group: str | None = None) -> None:
    """Take the host's heartbeat key for this instance, or refuse (see the module
    docstring); ``group`` is the instance's consumer group (the cluster layout's
    heartbeat keys are the group's). Returns at once when the key is free or already ours; waits at
    most about one TTL for another instance's key to be renewed or to expire.

    Raises:
        DuplicateHost: another live instance holds the host.

    A backend error is logged and serving goes on: every later beat checks again.
    """
    try:
        while (
            other := await backend.heartbeat(host, instance_id, HEARTBEAT_TTL, group=group)
        ) is not None:
            seen = await backend.heartbeat_holder(host, group=group)
            if seen is None:
                continue  # expired since: try again
            first = Sighting(holder=seen[0], left=seen[1], at=trio.current_time())
            log.info(
                "heartbeat key of host %s holds instance %s (%.1fs left): waiting until it "
                "is renewed (a live instance with the same host: refusing to start) or "
                "expires (a crashed predecessor: taking over)",
                host,
                other,
                first.left,
            )
            await _watch(backend, host, first, group)
    except BackendError as exc:
        log.warning("could not check the heartbeat key of host %s: %s", host, exc)


async def _watch(backend: Backend, host: str, first: Sighting, group: str | None) -> None:
    """Return once ``first``'s key is gone; raise if it is renewed."""
    while True:
        await trio.sleep(WATCH_POLL)
        seen = await backend.heartbeat_holder(host, group=group)
        holder, left = seen if seen is not None else (None, 0.0)
        verdict = holder_verdict(first, holder, left, trio.current_time())
        if verdict is Verdict.LIVE:
            raise DuplicateHost(host, holder or first.holder)
        if verdict is Verdict.GONE:
            log.info("heartbeat key of host %s expired; taking it over", host)
            return


async def _beat(backend: Backend, host: str, instance_id: str, group: str | None) -> str | None:
    """Renew the key; returns the id of another instance holding it, if any."""
    try:
        return await backend.heartbeat(host, instance_id, HEARTBEAT_TTL, group=group)
    except BackendError as exc:
        log.warning("heartbeat for %s failed: %s", host, exc)
        return None


async def run(
    backend: Backend,
    host: str,
    instance_id: str,
    on_taken: Callable[[DuplicateHost], object] = lambda error: None,
    *,
    group: str | None = None,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Beat until cancelled, then delete the heartbeat (bounded, shielded).

    If a beat finds the key held by another instance, logs an error, calls
    ``on_taken`` with the :class:`~taskrunner.errors.DuplicateHost` to raise,
    and stops beating.
    """
    other = await _beat(backend, host, instance_id, group)
    task_status.started()
    try:
        while other is None:
            await trio.sleep(HEARTBEAT_INTERVAL)
            other = await _beat(backend, host, instance_id, group)
        error = DuplicateHost(host, other)
        log.error("%s; this instance stops serving", error)
        on_taken(error)
    finally:
        with trio.move_on_after(REMOVE_TIMEOUT, shield=True):
            try:
                await backend.remove_heartbeat(host, instance_id, group=group)
            except BackendError as exc:
                log.warning(
                    "could not delete heartbeat of %s (%s); it expires by itself", host, exc
                )


class ReplicationCounter:
    """``get_number_of_replications`` with its 10 s cache: every instance on the store
    in the go layout, ``group``'s instances in the cluster layout (see
    ``SharedState.count_heartbeats``)."""

    def __init__(self, backend: Backend, group: str | None = None) -> None:
        self._backend = backend
        self._group = group
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
                self._count = await self._backend.count_heartbeats(group=self._group)
                self._at = now
            except BackendError:
                if self._at is None:
                    raise
                log.warning("could not count replicas; using the cached %d", self._count)
        return max(1, self._count) if serving else self._count
