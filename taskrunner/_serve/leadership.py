"""Leader election by a lease, and running leader-only work inside terms.

Theory of operation. One key per group holds the lease (``SET NX PX``); its
holder renews it every ``ttl / 2`` (``PEXPIRE`` only if still ours) and
followers try to take it about as often. A term begins when an acquire
succeeds and ends when a renew fails, errors, or does not answer in time.

Safety does not rely on the keeper noticing a failure: every acquire or
renew that succeeds extends the term's *validity* to (time the request was
sent) + ttl - margin, which is never later than the moment the store expires
the key. :attr:`Leadership.is_leader` is false past that instant, and every
leader-only job runs in a cancel scope whose deadline is that instant, so
even a leader cut off mid-call stops its jobs before any other instance can
acquire the lease. Demotion is immediate and cancels those scopes.
The intervals and the validity are the pure decisions of :mod:`taskrunner._fleet.lease`.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

import trio

from taskrunner._fleet.lease import lease_intervals, term_valid_until
from taskrunner.backends import Backend
from taskrunner.errors import BackendError

log = logging.getLogger(__name__)

LEASE_TTL = 5.0
RESIGN_TIMEOUT = 2.0


class Leadership:
    """Whether this instance leads its group right now, and the scopes of its term."""

    def __init__(self) -> None:
        self._valid_until = -float("inf")
        self._leader = False
        self._changed = trio.Event()
        self._scopes: set[trio.CancelScope] = set()

    @property
    def is_leader(self) -> bool:
        """True while a term is running and its lease is certainly still ours."""
        return self._leader and trio.current_time() < self._valid_until

    @property
    def valid_until(self) -> float:
        """When the current term certainly ends (-inf when not leading)."""
        return self._valid_until

    @property
    def in_term(self) -> bool:
        """A term was started and not yet ended by the keeper (it may have lapsed)."""
        return self._leader

    async def wait_changed(self) -> None:
        """Wait until this instance is promoted or demoted."""
        await self._changed.wait()

    def _notify(self) -> None:
        self._changed.set()
        self._changed = trio.Event()

    def promote(self, valid_until: float) -> None:
        self._leader = True
        self.extend(valid_until)
        self._notify()

    def extend(self, valid_until: float) -> None:
        self._valid_until = valid_until
        for scope in self._scopes:
            scope.deadline = valid_until

    def demote(self) -> None:
        if not self._leader:
            return
        self._leader = False
        self._valid_until = -float("inf")
        for scope in self._scopes:
            scope.cancel()
        self._notify()

    async def wait_leader(self) -> None:
        """Wait until this instance leads (returns at once if it does)."""
        while not self.is_leader:
            await self.wait_changed()

    async def run_as_leader(
        self,
        job: Callable[[], Awaitable[object]],
        *,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Run ``job()`` during every term, cancelled when the term ends; forever.

        Calls ``task_status.started()`` at once (the first term may be far off).
        If ``job`` returns during a term, it is not restarted until the next one.
        """
        task_status.started()
        while True:
            await self.wait_leader()
            with trio.CancelScope(deadline=self._valid_until) as scope:
                self._scopes.add(scope)
                try:
                    await job()
                    await trio.sleep_forever()  # until the term ends
                finally:
                    self._scopes.discard(scope)
            # A deadline hit without a demote means the keeper is late: wait for it.
            while self._leader and not self.is_leader:
                await self.wait_changed()


async def run(
    backend: Backend,
    group: str,
    owner: str,
    leadership: Leadership,
    *,
    ttl: float = LEASE_TTL,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Keep trying to lead; renew while leading; resign when cancelled."""
    task_status.started()
    try:
        while True:
            renew_every, retry_every = lease_intervals(ttl)
            if not leadership.is_leader:
                if leadership.in_term:  # a term that lapsed without a failed renew
                    log.warning(
                        "leadership of group %s lapsed: no renew answered before the term's end",
                        group,
                    )
                    leadership.demote()
                sent = trio.current_time()
                try:
                    acquired = await backend.acquire_lease(group, owner, ttl)
                except BackendError as exc:
                    log.warning("lease acquire for group %s failed: %s", group, exc)
                    acquired = False
                if acquired:
                    leadership.promote(term_valid_until(sent, ttl))
                    log.info("became leader of group %s (instance %s)", group, owner)
                    continue
                await trio.sleep(retry_every)
                continue
            await trio.sleep(renew_every)
            sent = trio.current_time()
            renewed = False
            with trio.move_on_at(leadership.valid_until):
                try:
                    renewed = await backend.renew_lease(group, owner, ttl)
                except BackendError as exc:
                    log.warning("lease renew for group %s failed: %s", group, exc)
            if renewed:
                leadership.extend(term_valid_until(sent, ttl))
            else:
                leadership.demote()
                log.warning("lost leadership of group %s (renew failed or timed out)", group)
    finally:
        if leadership.in_term:
            leadership.demote()
            with trio.move_on_after(RESIGN_TIMEOUT, shield=True):
                try:
                    await backend.resign_lease(group, owner)
                    log.info("resigned leadership of group %s", group)
                except BackendError as exc:
                    log.warning("could not resign leadership of group %s: %s", group, exc)
