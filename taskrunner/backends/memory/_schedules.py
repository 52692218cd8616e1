"""The :class:`~taskrunner.backends.Schedules` protocol in process memory.

The rules are :func:`~taskrunner.backends._protocols.schedules.apply_fire` and
:func:`~taskrunner.backends._protocols.schedules.apply_outcome`, applied with no
checkpoint between the lease check, the stream add and the state change, so
each call is as atomic as the Redis script is. State and specs are kept per
group under the names Redis would hold them by (``taskrunner:<group>:schedules``
and ``taskrunner:<group>:schedule_specs``: see :mod:`taskrunner._keys`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import attrs
import trio

from taskrunner import _keys
from taskrunner.backends._protocols.schedules import (
    FireResult,
    FireStatus,
    RunOutcome,
    ScheduleRecords,
    ScheduleState,
    TickFire,
    apply_fire,
    apply_outcome,
)
from taskrunner.backends.memory._state import MemoryState, check_text


class MemorySchedules(MemoryState):
    """A :class:`~taskrunner.backends.Schedules` held in process memory."""

    _schedule_states: dict[str, dict[str, ScheduleState]]
    _schedule_specs: dict[str, dict[str, bytes]]

    def _init_schedules(self) -> None:
        self._schedule_states = {}
        self._schedule_specs = {}

    def _holds_lease(self, group: str, owner: str) -> bool:
        return self._get(_keys.leader(group, self.key_layout)) == owner

    async def publish_schedule_specs(self, group: str, specs: Mapping[str, bytes]) -> None:
        await trio.lowlevel.checkpoint()
        check_text("publish_schedule_specs", "name", *specs)
        self._schedule_specs.setdefault(group, {}).update(specs)

    async def start_schedules(
        self, group: str, owner: str, names: Sequence[str], baseline: float
    ) -> dict[str, ScheduleState] | None:
        await trio.lowlevel.checkpoint()
        check_text("start_schedules", "name", *names)
        if not self._holds_lease(group, owner):
            return None
        states = self._schedule_states.setdefault(group, {})
        for name in names:
            state = states.get(name, ScheduleState())
            if state.tick is None:
                states[name] = attrs.evolve(state, tick=baseline)
        return {name: states[name] for name in names}

    async def fire_ticks(
        self, group: str, owner: str, fires: Sequence[TickFire]
    ) -> list[FireResult]:
        await trio.lowlevel.checkpoint()
        check_text("fire_ticks", "schedule", *(fire.schedule for fire in fires))
        if not self._holds_lease(group, owner):
            return [FireResult(status=FireStatus.NOT_LEADER) for _ in fires]
        states = self._schedule_states.setdefault(group, {})
        now = self.now()
        results = []
        for fire in fires:  # no checkpoint inside: atomic, like the Lua script
            state = states.get(fire.schedule, ScheduleState())
            new, status = apply_fire(state, fire, now)
            if status is FireStatus.FIRED:
                if fire.added:
                    entry_id = fire.message_id
                else:
                    entry_id = self._add_entry(group, fire.message, fire.queue)
                new = attrs.evolve(
                    new,
                    message_id=new.message_id if entry_id is None else entry_id,
                    running=entry_id if fire.exclusive else new.running,
                )
                results.append(FireResult(status=status, message_id=entry_id))
            elif status is FireStatus.SKIPPED:
                results.append(FireResult(status=status, message_id=state.running))
            else:
                results.append(FireResult(status=status, watermark=state.tick))
            states[fire.schedule] = new
        return results

    async def add_tick(self, group: str, fire: TickFire) -> str | None:
        await trio.lowlevel.checkpoint()
        check_text("add_tick", "schedule", fire.schedule)
        states = self._schedule_states.setdefault(group, {})
        state = states.get(fire.schedule, ScheduleState())
        if state.tick is not None and fire.tick <= state.tick:  # added already
            return state.message_id if fire.tick == state.tick else None
        entry_id = self._add_entry(group, fire.message, fire.queue)
        states[fire.schedule] = ScheduleState(tick=fire.tick, message_id=entry_id)
        return entry_id

    async def record_run_outcomes(self, group: str, outcomes: Sequence[RunOutcome]) -> None:
        await trio.lowlevel.checkpoint()
        check_text("record_run_outcomes", "schedule", *(o.schedule for o in outcomes))
        states = self._schedule_states.setdefault(group, {})
        for outcome in outcomes:
            states[outcome.schedule] = apply_outcome(
                states.get(outcome.schedule, ScheduleState()), outcome
            )

    async def read_schedules(self, group: str) -> ScheduleRecords:
        await trio.lowlevel.checkpoint()
        return ScheduleRecords(
            specs=dict(self._schedule_specs.get(group, {})),
            states=dict(self._schedule_states.get(group, {})),
        )
