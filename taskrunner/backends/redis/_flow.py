"""The :class:`~taskrunner.backends.FlowControl` protocol on Redis.

Theory of operation: every decision that reads and writes shared state is one
Lua script, so two runners never both take the last slot or the last start
of a window: ``lua/admit.lua`` (slots and rate log, on the server's ``TIME``),
``lua/renew_slots.lua``, ``lua/park.lua`` and ``lua/resume_task.lua``. The
rest is a plain command: ``SMEMBERS`` / ``SADD`` / ``SREM`` of the paused set,
``ZREM`` of released slots (pipelined, one round trip). Keys are
:mod:`taskrunner._keys`'s; a script's keys are all passed in ``KEYS`` (not
cluster-safe across tasks: see the state module's note on Redis Cluster).
"""

from __future__ import annotations

from collections.abc import Sequence

from taskrunner import _keys
from taskrunner._flow.limits import Paused, RateLimit
from taskrunner.backends._protocols.flow import Admission, LimitedBy, ParkOutcome, SlotHold
from taskrunner.backends.redis._connection import CommandArg
from taskrunner.backends.redis._queue import RedisQueue
from taskrunner.backends.redis._scripts import load_script
from taskrunner.backends.redis._state import RedisState, _float_arg

__all__ = ["RedisFlow"]

ADMIT = load_script("admit.lua")
"""Admit a start under a concurrency slot and a rate limit: ``{admitted, why, wait_us}``."""
RENEW_SLOTS = load_script("renew_slots.lua")
"""Extend slot leases still held; returns the indices of those not held."""
PARK = load_script("park.lua")
"""Park a paused task's run: 1 parked, 2 not paused, 0 not pending."""
RESUME_TASK = load_script("resume_task.lua")
"""Unpause a task and make its parked runs due; 1 if it was paused."""


def _ms(seconds: float) -> int:
    return max(1, round(seconds * 1000))


def _member(queue: str | None, task: str | None) -> str:
    if (queue is None) == (task is None):
        raise ValueError(f"give exactly one of queue and task, got queue={queue!r}, task={task!r}")
    return f"queue:{queue}" if queue is not None else f"task:{task}"


def _text(value: bytes | str) -> str:
    return value.decode(errors="backslashreplace") if isinstance(value, bytes) else value


class RedisFlow(RedisQueue, RedisState):
    """Pauses, concurrency slots and rate limits on Redis (see the module docstring)."""

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
        """One script call: ``admit.lua`` (see the protocol)."""
        keys = [
            _keys.concurrency(group, task, self.key_layout),
            _keys.rate(group, task, rate_key, self.key_layout),
            _keys.rate_pace(group, task, rate_key, self.key_layout),
        ]
        args: list[CommandArg] = [
            holder,
            max_concurrency or 0,
            _ms(lease) if max_concurrency else 0,
            rate.limit if rate is not None else 0,
            _ms(rate.per) if rate is not None else 0,
        ]
        admitted, why, wait_us = (int(x) for x in await ADMIT(self._client, keys, args))
        if admitted:
            return Admission(admitted=True)
        if why == 1:
            return Admission(admitted=False, limited_by=LimitedBy.CONCURRENCY)
        return Admission(admitted=False, limited_by=LimitedBy.RATE, retry_after=wait_us / 1e6)

    async def renew_slots(self, group: str, holds: Sequence[SlotHold]) -> list[SlotHold]:
        """One script call for every hold (none for no holds)."""
        if not holds:
            return []
        keys: list[CommandArg] = [
            _keys.concurrency(group, hold.task, self.key_layout) for hold in holds
        ]
        args: list[CommandArg] = []
        for hold in holds:
            args += [hold.holder, _ms(hold.lease)]
        lost = await RENEW_SLOTS(self._client, keys, args)
        return [holds[int(i) - 1] for i in lost]

    async def release_slots(self, group: str, holds: Sequence[SlotHold]) -> None:
        """One pipelined ``ZREM`` per hold, in one round trip (none for no holds)."""
        if holds:
            await self._client.pipeline(
                [
                    ("ZREM", _keys.concurrency(group, hold.task, self.key_layout), hold.holder)
                    for hold in holds
                ]
            )

    async def paused(self, group: str) -> Paused:
        """``SMEMBERS`` of the paused set."""
        members = [
            _text(m)
            for m in await self._client.execute("SMEMBERS", _keys.paused(group, self.key_layout))
        ]
        return Paused(
            queues=frozenset(m.removeprefix("queue:") for m in members if m.startswith("queue:")),
            tasks=frozenset(m.removeprefix("task:") for m in members if m.startswith("task:")),
        )

    async def pause(self, group: str, *, queue: str | None = None, task: str | None = None) -> bool:
        """``SADD`` to the paused set."""
        member = _member(queue, task)
        added: int = await self._client.execute(
            "SADD", _keys.paused(group, self.key_layout), member
        )
        return added == 1

    async def resume(
        self, group: str, *, queue: str | None = None, task: str | None = None
    ) -> bool:
        """``SREM`` for a queue; for a task, ``resume_task.lua`` (its parked runs too)."""
        member = _member(queue, task)
        if task is None:
            removed: int = await self._client.execute(
                "SREM", _keys.paused(group, self.key_layout), member
            )
            return removed == 1
        keys = [
            _keys.paused(group, self.key_layout),
            _keys.parked(group, task, self.key_layout),
            _keys.delayed_tasks(group, self.key_layout),
        ]
        was = await RESUME_TASK(self._client, keys, [member, _float_arg(self.now())])
        return int(was) == 1

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
        """One script call: ``park.lua``."""
        keys = [
            self._stream(group, queue),
            _keys.delayed_tasks(group, self.key_layout),
            _keys.paused(group, self.key_layout),
            _keys.parked(group, task, self.key_layout),
            _keys.delayed_index(group, self.key_layout),
            _keys.entry_index(group, self.key_layout),
        ]
        args: list[CommandArg] = [
            group,
            entry_id,
            member,
            _float_arg(run_at),
            1 if self.delete_on_ack else 0,
            f"task:{task}",
            task_id or "",
        ]
        reply = int(await PARK(self._client, keys, args))
        return {1: ParkOutcome.PARKED, 2: ParkOutcome.NOT_PAUSED}.get(
            reply, ParkOutcome.NOT_PENDING
        )
