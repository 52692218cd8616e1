"""The :class:`~taskrunner.backends.FlowControl` protocol in process memory, on trio's clock.

The same model as the Redis scripts, key for key: a group's paused set, a
sorted set (here a dict of holder -> lease expiry) of concurrency slots per
task, a sliding log (holder -> start time) and a pace (a string with an
expiry) per rate-limited task or key, and a parked index (a set of delayed
members) per paused task. Each method decides and changes everything with no
checkpoint in between, so it is atomic, as one script is on Redis. The
decision rules are written once, in :func:`taskrunner._flow.limits` terms, and
mirrored line for line by ``lua/admit.lua``.
"""

from __future__ import annotations

from collections.abc import Sequence

import trio

from taskrunner import _keys
from taskrunner._flow.limits import Paused, RateLimit
from taskrunner.backends._protocols.flow import Admission, LimitedBy, ParkOutcome, SlotHold
from taskrunner.backends.memory._queue import MemoryStream
from taskrunner.backends.memory._state import MemoryState, check_text


def _one_of(queue: str | None, task: str | None) -> str:
    if (queue is None) == (task is None):
        raise ValueError(f"give exactly one of queue and task, got queue={queue!r}, task={task!r}")
    return f"queue:{queue}" if queue is not None else f"task:{task}"


class MemoryFlow(MemoryStream, MemoryState):
    """Pauses, concurrency slots and rate limits held in process memory."""

    def __init__(self) -> None:
        self._zsets: dict[str, dict[str, float]] = {}  # slots and rate logs, by key
        self._sets: dict[str, set[bytes]] = {}  # paused sets and parked indexes, by key

    def _zset(self, key: str) -> dict[str, float]:
        return self._zsets.setdefault(key, {})

    def _drop_until(self, key: str, until: float) -> dict[str, float]:
        """The sorted set at ``key`` without its members scored ``<= until``."""
        zset = self._zset(key)
        for member in [m for m, score in zset.items() if score <= until]:
            del zset[member]
        return zset

    def _tidy(self, key: str) -> None:
        # An empty sorted set does not exist on Redis: neither here.
        if not self._zsets.get(key, True):
            del self._zsets[key]

    async def admit(
        self,
        group: str,
        task: str,
        holder: str,
        *,
        max_concurrency: int | None = None,
        lease: float = 0.0,
        rate: RateLimit | None = None,
        rate_key: str = "",
    ) -> Admission:
        await trio.lowlevel.checkpoint()
        check_text("admit", "holder", holder)
        check_text("admit", "rate_key", rate_key)
        now = trio.current_time()
        slots_key = _keys.concurrency(group, task, self.key_layout)
        if max_concurrency is not None:
            slots = self._drop_until(slots_key, now)
            if holder not in slots and len(slots) >= max_concurrency:
                self._tidy(slots_key)
                return Admission(admitted=False, limited_by=LimitedBy.CONCURRENCY)
        if rate is not None:
            log_key = _keys.rate(group, task, rate_key, self.key_layout)
            pace_key = _keys.rate_pace(group, task, rate_key, self.key_layout)
            log = self._drop_until(log_key, now - rate.per)
            if len(log) >= rate.limit:
                frees_at = min(log.values()) + rate.per
                if frees_at - now < rate.interval:  # its turn is now: a hair early
                    return Admission(
                        admitted=False, limited_by=LimitedBy.RATE, retry_after=frees_at - now
                    )
                paced = self._get(pace_key)
                at = max(frees_at, float(paced) if paced else -1.0)
                following = at + rate.interval
                self._strings[pace_key] = (repr(following), following + rate.per)
                return Admission(admitted=False, limited_by=LimitedBy.RATE, retry_after=at - now)
            log[holder] = now
        if max_concurrency is not None:
            self._zset(slots_key)[holder] = now + lease
        return Admission(admitted=True)

    async def renew_slots(self, group: str, holds: Sequence[SlotHold]) -> list[SlotHold]:
        await trio.lowlevel.checkpoint()
        now = trio.current_time()
        lost = []
        for hold in holds:
            slots = self._zsets.get(_keys.concurrency(group, hold.task, self.key_layout), {})
            # Still in the set: counted all along, even if its lease ran out since.
            if hold.holder in slots:
                slots[hold.holder] = now + hold.lease
            else:
                lost.append(hold)
        return lost

    async def release_slots(self, group: str, holds: Sequence[SlotHold]) -> None:
        await trio.lowlevel.checkpoint()
        for hold in holds:
            key = _keys.concurrency(group, hold.task, self.key_layout)
            self._zsets.get(key, {}).pop(hold.holder, None)
            self._tidy(key)

    async def paused(self, group: str) -> Paused:
        await trio.lowlevel.checkpoint()
        members = [m.decode() for m in self._sets.get(_keys.paused(group, self.key_layout), ())]
        return Paused(
            queues=frozenset(m.removeprefix("queue:") for m in members if m.startswith("queue:")),
            tasks=frozenset(m.removeprefix("task:") for m in members if m.startswith("task:")),
        )

    async def pause(self, group: str, *, queue: str | None = None, task: str | None = None) -> bool:
        member = _one_of(queue, task).encode()
        await trio.lowlevel.checkpoint()
        paused = self._sets.setdefault(_keys.paused(group, self.key_layout), set())
        if member in paused:
            return False
        paused.add(member)
        return True

    async def resume(
        self, group: str, *, queue: str | None = None, task: str | None = None
    ) -> bool:
        member = _one_of(queue, task).encode()
        await trio.lowlevel.checkpoint()
        key = _keys.paused(group, self.key_layout)
        paused = self._sets.get(key, set())
        was = member in paused
        paused.discard(member)
        if not paused:
            self._sets.pop(key, None)
        if task is not None:
            now = trio.current_time()
            delayed = self._delayed.get(group, {})
            for parked in self._sets.pop(_keys.parked(group, task, self.key_layout), set()):
                if parked in delayed:
                    delayed[parked] = now
        return was

    async def park(
        self,
        group: str,
        entry_id: str,
        member: bytes,
        run_at: float,
        task: str,
        *,
        queue: str | None = None,
        task_id: str | None = None,
    ) -> ParkOutcome:
        await trio.lowlevel.checkpoint()
        check_text("park", "entry_id", entry_id)
        check_text("park", "task_id", task_id or "")
        if f"task:{task}".encode() not in self._sets.get(_keys.paused(group, self.key_layout), ()):
            return ParkOutcome.NOT_PAUSED
        if not self.is_pending(group, entry_id, queue):
            return ParkOutcome.NOT_PENDING
        self._delayed.setdefault(group, {})[member] = run_at
        self._sets.setdefault(_keys.parked(group, task, self.key_layout), set()).add(member)
        if task_id is not None:
            self._delayed_index.setdefault(group, {})[task_id] = member
            entries = self._entry_index.get(group, {})
            if entries.get(task_id) == entry_id:
                del entries[task_id]
        self._ack(group, [entry_id], queue)
        return ParkOutcome.PARKED
