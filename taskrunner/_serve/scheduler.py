"""The delayed-task scheduler (leader only).

Theory of operation. Delayed tasks wait in the group's delayed set, scored by
run-at time in the backend's clock. During its term the leader repeatedly:
reads a batch of due members, turns each into the stream message it becomes
(a unique task gets a fresh lock token), and has the backend move the batch
atomically (one Lua script on Redis: a member is removed and its message
added together, or neither). A unique task whose lock is still held stays in
the set for the next pass. Then it sleeps until the earliest run-at time, at
most ``delayed_poll_interval``, or until this instance adds a delayed task
(so a 200 ms delay fires in about 200 ms, not at the next poll).

A follower cannot wake the leader, so every serving instance also keeps the
run-at times of the delayed tasks it dispatched itself and, when one falls due
while another instance leads, runs a pass of its own. The move being atomic,
two passes at once never move a member twice. (A process that dispatches but
does not serve relies on the leader's poll.)

What each due member becomes, and how long to sleep, are the pure decisions
of :mod:`taskrunner._schedules.delayed`: a member that cannot become a message is
still moved, as it is and without a lock, so the worker that reads it sends
it down the failure path and no bad member holds up the batch it is in.
"""

from __future__ import annotations

import heapq
import logging
from collections.abc import Callable, Mapping

import trio

from taskrunner import _keys, _shards
from taskrunner._config import ConfigHolder
from taskrunner._execution.backoff import backoff_delay
from taskrunner._fleet.timings import TimingRecorder
from taskrunner._schedules.delayed import build_move, sleep_time
from taskrunner._task import Task
from taskrunner.backends import Backend
from taskrunner.errors import BackendError

log = logging.getLogger(__name__)

BATCH = 500
MAX_BATCHES_PER_PASS = 20
LOCAL_RETRY_BASE = 0.1
LOCAL_RETRY_CAP = 5.0
"""Backoff bounds (seconds) for retrying a failed local pass."""


class Scheduler:
    """Moves due delayed tasks; :meth:`run` is a leader-only job."""

    def __init__(
        self,
        backend: Backend,
        config: ConfigHolder,
        tasks: Mapping[str, Task],
        timings: TimingRecorder,
    ) -> None:
        self._backend = backend
        self._config = config
        self._tasks = tasks
        self._timings = timings
        self._wake = trio.Event()
        self._local: list[float] = []  # run-at times dispatched here, a heap
        self._local_wake = trio.Event()

    @property
    def _group(self) -> str:
        return self._config.current.consumer_group

    @property
    def _groups(self) -> tuple[str, ...]:
        """Whose delayed sets are moved: the group's, or every shard's and the group's
        (one leader works every shard: docs/sharding.md says why)."""
        config = self._config.current
        return _shards.served_groups(config.consumer_group, config.shards)

    def nudge(self, run_at: float) -> None:
        """A delayed task due at ``run_at`` was added here: the leader's loop (if it
        is this instance) re-checks at once, and :meth:`run_local` moves it on
        time if another instance leads."""
        self._wake.set()
        heapq.heappush(self._local, run_at)
        self._local_wake.set()

    async def run_local(
        self,
        is_leader: Callable[[], bool],
        *,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """On every serving instance: when a delayed task dispatched here falls
        due and this instance does not lead, run a pass itself.

        The leader only polls every ``delayed_poll_interval``; without this a
        200 ms delay dispatched on a follower would fire up to a poll late. The
        move is atomic (a member moves once, whoever moves it), so this is safe
        beside the leader's own passes. A run-at time is forgotten only once a
        pass after it succeeded: a failed pass is retried with backoff.

        Calls ``task_status.started()`` at once.
        """
        task_status.started()
        failures = 0
        while True:
            self._local_wake = trio.Event()
            if not self._local:
                await self._local_wake.wait()
                continue
            delay = self._local[0] - self._backend.now()
            if delay > 0:
                with trio.move_on_after(delay):
                    await self._local_wake.wait()  # an earlier one: recompute
                continue
            now = self._backend.now()
            if not is_leader():
                try:
                    await self.run_pass()
                except BackendError as exc:
                    # Keep the due times: the pass is retried with backoff
                    # rather than left to the leader's next poll.
                    failures += 1
                    retry_in = backoff_delay(failures, base=LOCAL_RETRY_BASE, cap=LOCAL_RETRY_CAP)
                    log.warning(
                        "delayed-task pass for group %s failed (%s); retrying in %.2fs",
                        self._group,
                        exc,
                        retry_in,
                    )
                    await trio.sleep(retry_in)
                    continue
            failures = 0
            while self._local and self._local[0] <= now:  # moved by that pass (or the leader)
                heapq.heappop(self._local)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Pass, sleep, repeat, until cancelled (at the end of the term).

        The leader's job (:meth:`Leadership.run_as_leader
        <taskrunner._serve.leadership.Leadership.run_as_leader>` runs it in every
        term). Calls ``task_status.started()`` before the first pass.
        """
        task_status.started()
        log.info("delayed-task scheduler running for group %s", self._group)
        while True:
            self._wake = trio.Event()
            next_at: float | None = None
            held = 0
            try:
                _, held = await self.run_pass()
                next_at = await self._next_delayed_at()
            except BackendError as exc:
                log.warning("delayed-task pass for group %s failed: %s", self._group, exc)
            delay = sleep_time(
                self._backend.now(),
                next_at,
                self._config.current.delayed_poll_interval,
                held=held > 0,
            )
            with trio.move_on_after(delay):
                await self._wake.wait()

    async def _next_delayed_at(self) -> float | None:
        """The earliest run-at time of every delayed set moved (:attr:`_groups`)."""
        times = [await self._backend.next_delayed_at(group) for group in self._groups]
        found = [at for at in times if at is not None]
        return min(found) if found else None

    async def run_pass(self) -> tuple[int, int]:
        """Move every due member, in batches, of each delayed set (a sharded group's:
        every shard's, then the group's own).

        Returns:
            (moved, held): how many moved, and how many due unique tasks stayed
            because their lock is held.
        """
        started = trio.current_time()
        moved = held = 0
        for group in self._groups:
            got, kept = await self._pass_of(group)
            moved, held = moved + got, held + kept
        self._timings.record_schedule(trio.current_time() - started)
        if moved:
            log.debug("moved %d delayed task(s) to the stream", moved)
        return moved, held

    async def _pass_of(self, group: str) -> tuple[int, int]:
        """Move the due members of ``group``'s delayed set (a shard's, in a sharded
        group: its messages, locks and stream are under its tag), in batches."""
        moved = held = 0
        for _ in range(MAX_BATCHES_PER_PASS):
            # Held members stay at the front of the due range: page past them, so
            # a crowd of them never hides the due members behind.
            due = await self._backend.due_delayed(group, self._backend.now(), BATCH, offset=held)
            if not due:
                break
            tasks = self._tasks
            prefix = _keys.unique_prefix(group, self._backend.key_layout)
            got = await self._backend.move_delayed(
                group, [build_move(raw, tasks, lock_prefix=prefix) for raw in due]
            )
            moved += got
            held += len(due) - got
            if len(due) < BATCH:
                break
        return moved, held
