"""Periodic schedules: every instance declares them, the leader fires each tick once.

Theory of operation. A runner's schedules live in :class:`Periodic`. Two
jobs use them:

- :meth:`Periodic.announce`, on every serving instance, once at start:
  publish each schedule's spec document (what ``taskrunner schedules`` shows),
  warning when another instance published the same name with another spec;
- :meth:`Periodic.run`, the leader's job, run in every term (and cancelled
  when it ends, before the lease can expire). It starts the term with one
  fenced call that reads every schedule's watermark (and gives a new
  schedule its first one, *now*, so its first tick is the next one), then
  loops: at ``now``, the pure :func:`taskrunner._schedules.ticks.due_ticks` says which
  ticks after each watermark fire (never one after ``now``); they go to the
  backend in one fenced call (:meth:`~taskrunner.backends.Schedules.fire_ticks`:
  the lease checked by this instance's id, each tick compared with the
  watermark in the store, the message added and the watermark moved, all in
  one step); then it sleeps until the next tick. The watermarks it keeps in
  memory are only a copy, valid during the term (only the lease holder moves
  them); the store decides, so a deposed leader's late fire is refused and a
  fire is never repeated by a later term. It also republishes its specs every
  :data:`SPEC_REFRESH`, so the specs shown are the leader's and a conflicting
  declaration is seen by the leader too.

A tick at most two lease TTLs overdue is on time (a handover delays it; it
still fires); older ticks were missed and follow the schedule's ``catch_up``.
A failed backend call is retried with backoff during the term. A runner with
no schedules does nothing here: no key, no round trip.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

import trio

from taskrunner import _wire
from taskrunner._codec import encode_payload
from taskrunner._config import ConfigHolder
from taskrunner._execution.backoff import backoff_delay
from taskrunner._schedules.periodic import Schedule, read_spec, same_spec, spec_document
from taskrunner._schedules.shard_fires import add_in_shards
from taskrunner._schedules.ticks import due_ticks
from taskrunner._schedules.workflows import check_workflow_source
from taskrunner._task import Task
from taskrunner.backends import Backend, FireStatus, TickFire
from taskrunner.errors import BackendError, TaskNotFound

log = logging.getLogger(__name__)

SPEC_REFRESH = 60.0
"""Seconds between the leader's republishing of its specs."""
GRACE_LEASES = 2.0
"""A tick this many lease TTLs overdue or less is on time (see the module docstring)."""
RETRY_BASE = 0.1
RETRY_CAP = 5.0
"""Backoff bounds (seconds) for a failed backend call."""


def _when(tick: float) -> str:
    return datetime.fromtimestamp(tick, UTC).isoformat(timespec="seconds")


class Periodic:
    """A runner's schedules (see the module docstring).

    Args:
        backend: Where the fires and states go.
        config: The runner's configuration (group, host, lease TTL).
        tasks: The registered tasks by name, read as it is.
        instance_id: This instance's id: the lease's value while it leads.
    """

    def __init__(
        self,
        backend: Backend,
        config: ConfigHolder,
        tasks: Mapping[str, Task],
        instance_id: str,
    ) -> None:
        self._backend = backend
        self._config = config
        self._tasks = tasks
        self._instance_id = instance_id
        self.schedules: dict[str, Schedule] = {}
        """Declared schedules by name."""
        self._payloads: dict[str, Any] = {}  # wire payloads, encoded when added
        self._keys: dict[str, str | None] = {}  # shard keys of the payloads, by schedule

    @property
    def _group(self) -> str:
        return self._config.current.consumer_group

    def add(self, schedule: Schedule) -> Schedule:
        """Declare ``schedule`` (see :meth:`TaskRunner.add_schedule
        <taskrunner.TaskRunner.add_schedule>`).

        Raises:
            TaskNotFound: its task (or a step's, of a workflow built once) is not
                registered.
            ValueError: the name is taken, or the task is unique.
            InvalidTaskPayload: the payload does not encode for the task.
            InvalidWorkflow: its workflow, built once, is invalid.
        """
        if schedule.name in self.schedules:
            raise ValueError(f"a schedule named {schedule.name!r} is already added")
        task = self._tasks.get(schedule.task)
        if task is None:
            raise TaskNotFound(schedule.task)
        if task.unique:
            raise ValueError(
                f"Schedule.task {task.name!r} is unique; a schedule does not take unique "
                "locks: use overlap=False to keep its runs apart"
            )
        if schedule.workflow is not None:
            check_workflow_source(schedule.name, schedule.workflow, self._tasks)
        payload = encode_payload(schedule.payload, task.payload_type, task.name, task.extra_keys)
        # Where a sharded group's ticks go: the payload's shard key, if the task has one.
        sharded = self._config.current.shards > 1
        shard_key = task.shard_key_for(schedule.payload) if sharded else None
        self._payloads[schedule.name] = payload
        self._keys[schedule.name] = shard_key
        try:
            self.message(schedule, 0.0)  # refuse a payload too large now, not at the first tick
        except Exception:
            del self._payloads[schedule.name], self._keys[schedule.name]
            raise
        self.schedules[schedule.name] = schedule
        return schedule

    def message(self, schedule: Schedule, tick: float) -> bytes:
        """The stream message of ``schedule``'s run for ``tick``.

        Raises:
            InvalidTaskPayload: the message is too large.
        """
        task = self._tasks[schedule.task]
        message = _wire.new_message(
            task, self._payloads[schedule.name], schedule=schedule.name, tick=tick
        )
        return _wire.encode_message(message)

    # Every instance -------------------------------------------------------------
    async def announce(
        self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """Publish this instance's specs once (retrying with backoff), then return.

        Calls ``task_status.started()`` at once.
        """
        task_status.started()
        if not self.schedules:
            return
        failures = 0
        while True:
            try:
                await self.publish(leading=False)
                return
            except BackendError as exc:
                failures += 1
                delay = backoff_delay(failures, base=RETRY_BASE, cap=RETRY_CAP)
                log.warning("publishing schedules failed (%s); retrying in %.2fs", exc, delay)
                await trio.sleep(delay)

    async def publish(self, *, leading: bool) -> None:
        """Publish the specs, warning about a name another instance declared otherwise.

        A follower writes only the specs not published as it declares them; the
        leader writes all of its own, so the specs shown are the leader's.

        Raises:
            BackendError: the store could not be reached.
        """
        cfg = self._config.current
        published = (await self._backend.read_schedules(self._group)).specs
        now = self._backend.now()
        docs = {}
        for name, schedule in self.schedules.items():
            raw = published.get(name)
            doc = read_spec(raw) if raw is not None else None
            same = doc is not None and same_spec(schedule, doc)
            if doc is not None and not same and doc.get("by") != self._instance_id:
                log.warning(
                    "schedule %s is declared differently by instance %s (host %s): %s; "
                    "this instance (%s) declares %s. The leader's declaration fires",
                    name,
                    doc.get("by"),
                    doc.get("host"),
                    raw,
                    self._instance_id,
                    spec_document(schedule, instance_id=self._instance_id, host=cfg.host, at=now),
                )
            if leading or not same:
                docs[name] = spec_document(
                    schedule, instance_id=self._instance_id, host=cfg.host, at=now
                )
        await self._backend.publish_schedule_specs(self._group, docs)

    # The leader -----------------------------------------------------------------
    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Fire due ticks until cancelled (at the end of the term).

        The leader's job (:meth:`Leadership.run_as_leader
        <taskrunner._serve.leadership.Leadership.run_as_leader>` runs it in every
        term). Calls ``task_status.started()`` at once. Returns, until the next
        term, when the store says this instance does not hold the lease.
        """
        task_status.started()
        if not self.schedules:
            return
        failures = 0
        watermarks: dict[str, float | None] | None = None
        next_publish = 0.0
        while True:
            try:
                if watermarks is None:
                    watermarks = await self._start_term()
                    if watermarks is None:
                        return
                now = self._backend.now()
                if now >= next_publish:
                    await self.publish(leading=True)
                    next_publish = now + SPEC_REFRESH
                if not await self._fire_due(watermarks):
                    return
                failures = 0
            except BackendError as exc:
                failures += 1
                delay = backoff_delay(failures, base=RETRY_BASE, cap=RETRY_CAP)
                log.warning(
                    "periodic schedules of group %s: %s; retrying in %.2fs", self._group, exc, delay
                )
                await trio.sleep(delay)
                continue
            next_at = min([next_publish, *self._next_ticks(watermarks)])
            await trio.sleep(max(0.0, next_at - self._backend.now()))

    async def _start_term(self) -> dict[str, float | None] | None:
        states = await self._backend.start_schedules(
            self._group, self._instance_id, list(self.schedules), self._backend.now()
        )
        if states is None:
            log.warning(
                "periodic schedules of group %s: this instance does not hold the lease "
                "after all; not firing until its next term",
                self._group,
            )
            return None
        log.info(
            "firing %d periodic schedule(s) for group %s: %s",
            len(self.schedules),
            self._group,
            ", ".join(f"{n} ({s.describe()})" for n, s in sorted(self.schedules.items())),
        )
        return {name: state.tick for name, state in states.items()}

    def _grace(self) -> float:
        return GRACE_LEASES * self._config.current.leader_lease_ttl

    def _next_ticks(self, watermarks: Mapping[str, float | None]) -> list[float]:
        now = self._backend.now()
        ticks = []
        for name, schedule in self.schedules.items():
            after = watermarks.get(name)
            tick = schedule.timetable.next_after(now if after is None else after)
            if tick is not None:
                ticks.append(tick)
        return ticks

    async def _fire_due(self, watermarks: dict[str, float | None]) -> bool:
        """Fire what is due now; False when the store says the lease is not ours."""
        now = self._backend.now()
        fires: list[TickFire] = []
        for name, schedule in self.schedules.items():
            watermark = watermarks.get(name)
            if watermark is None:  # (start_schedules gives every schedule one)
                watermarks[name] = watermark = now
            due = due_ticks(
                schedule.timetable,
                watermark,
                now,
                catch_up=schedule.catch_up,
                grace=self._grace(),
            )
            if due.missed:
                log.warning(
                    "schedule %s missed %d tick(s) since %s (catch_up=%s): %s",
                    name,
                    due.missed,
                    _when(watermark),
                    schedule.catch_up,
                    f"running {len(due.fire)} now" if due.fire else "running none of them",
                )
            fires += [
                TickFire(
                    schedule=name,
                    tick=tick,
                    message=self.message(schedule, tick),
                    exclusive=not schedule.overlap,
                    in_flight_ttl=schedule.in_flight_ttl,
                    queue=self._config.current.queue_of(
                        self._tasks[schedule.task].queue,
                        self._backend.stream_keys(self._group).queue,
                    ),
                )
                for tick in due.fire
            ]
            if not due.fire and due.missed:
                # Nothing fires for the missed ticks: skip past them.
                watermarks[name] = max(watermark, now - self._grace())
        if not fires:
            return True
        shards = self._config.current.shards
        if shards > 1:  # two steps: add in the shards, then record (docs/sharding.md)
            fires = await add_in_shards(self._backend, self._group, shards, fires, self._keys)
        results = await self._backend.fire_ticks(self._group, self._instance_id, fires)
        for fire, result in zip(fires, results, strict=True):
            if result.status is FireStatus.NOT_LEADER:
                log.warning(
                    "fire of schedule %s refused: this instance no longer holds the lease of "
                    "group %s; not firing until its next term",
                    fire.schedule,
                    self._group,
                )
                return False
            if result.status is FireStatus.STALE:
                # Only a fleet bug or a hand-edited state gets here: follow the store.
                log.warning(
                    "schedule %s: tick %s was handled already (watermark %s)",
                    fire.schedule,
                    _when(fire.tick),
                    _when(result.watermark or fire.tick),
                )
                watermarks[fire.schedule] = result.watermark
                continue
            watermarks[fire.schedule] = fire.tick
            if result.status is FireStatus.SKIPPED:
                log.info(
                    "schedule %s: skipped tick %s, its previous run %s is still in flight",
                    fire.schedule,
                    _when(fire.tick),
                    result.message_id,
                )
            else:
                log.info(
                    "schedule %s fired tick %s as message %s",
                    fire.schedule,
                    _when(fire.tick),
                    result.message_id,
                )
        return True
