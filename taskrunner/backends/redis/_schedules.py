"""The :class:`~taskrunner.backends.Schedules` protocol on Redis.

Theory of operation. A group's schedule states are the hash
``taskrunner:<group>:schedules``: for each schedule a handful of fields named
``<head>:<schedule name>`` (:data:`~taskrunner.backends._protocols.schedules.STATE_FIELDS`),
each a number written as this process's exact text (``repr``) or an id. The
fenced steps are Lua scripts beside this module: ``fire_ticks.lua`` (check the
lease's value is the caller's instance id, compare each tick with the
watermark, ``XADD`` and record, in one step), ``start_schedules.lua`` and
``record_outcomes.lua``; a sharded group's fire adds its message in a shard first
(``add_tick.lua``, idempotent: docs/sharding.md) and ``fire_ticks.lua`` records it.
The published specs are the hash ``taskrunner:<group>:schedule_specs``, one JSON
document per name, written with a plain ``HSET``.

Redis Cluster: a fire touches the lease, the states and the stream together,
in different hash slots; like the delayed move it is out of scope there.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from taskrunner import _keys
from taskrunner.backends._protocols.schedules import (
    STATE_FIELDS,
    TEXT_FIELDS,
    FireResult,
    FireStatus,
    RunOutcome,
    ScheduleRecords,
    ScheduleState,
    TickFire,
)

from ._connection import CommandArg, Reply
from ._scripts import load_script
from ._state import RedisState, _float_arg

__all__ = ["RedisSchedules", "parse_states"]

logger = logging.getLogger(__name__)

FIRE_TICKS = load_script("fire_ticks.lua")
"""Fire a batch of ticks if the caller holds the lease; two values per fire, or 0."""
START_SCHEDULES = load_script("start_schedules.lua")
"""Set missing watermarks if the caller holds the lease; the whole state hash, or 0."""
ADD_TICK = load_script("add_tick.lua")
"""Add a sharded group's tick to a shard unless that shard added it: the entry id, or nil."""
RECORD_OUTCOMES = load_script("record_outcomes.lua")
"""Record finished runs' outcomes and drop their in-flight marks."""

_ATTRIBUTE_OF = {head: attribute for attribute, head in STATE_FIELDS.items()}


def _text(value: bytes) -> str:
    return value.decode(errors="backslashreplace")


def parse_states(reply: Reply) -> dict[str, ScheduleState]:
    """The states in an ``HGETALL`` of the state hash (fields it cannot read are skipped)."""
    values: dict[str, dict[str, Any]] = {}
    for raw_field, raw_value in zip(reply[::2], reply[1::2], strict=True):
        head, sep, name = _text(raw_field).partition(":")
        attribute = _ATTRIBUTE_OF.get(head)
        if not sep or attribute is None:
            logger.debug("skipping schedule state field %r", raw_field)
            continue
        if attribute in TEXT_FIELDS:
            value: Any = _text(raw_value)
        else:
            try:
                value = float(raw_value)
            except ValueError:
                logger.debug("skipping non-numeric schedule state field %r", raw_field)
                continue
        values.setdefault(name, {})[attribute] = value
    return {name: ScheduleState(**fields) for name, fields in values.items()}


class RedisSchedules(RedisState):
    """Periodic schedules' state on Redis (see the module docstring)."""

    async def publish_schedule_specs(self, group: str, specs: Mapping[str, bytes]) -> None:
        """``HSET`` every document (no call for none)."""
        if not specs:
            return
        args: list[CommandArg] = []
        for name, doc in specs.items():
            args += [name, doc]
        await self._client.execute("HSET", _keys.schedule_specs(group, self.key_layout), *args)

    async def start_schedules(
        self, group: str, owner: str, names: Sequence[str], baseline: float
    ) -> dict[str, ScheduleState] | None:
        """One script call (``lua/start_schedules.lua``)."""
        reply = await START_SCHEDULES(
            self._client,
            [_keys.leader(group, self.key_layout), _keys.schedules(group, self.key_layout)],
            [owner, _float_arg(baseline), *names],
        )
        if reply == 0:
            return None
        states = parse_states(reply)
        return {name: states.get(name, ScheduleState()) for name in names}

    async def fire_ticks(
        self, group: str, owner: str, fires: Sequence[TickFire]
    ) -> list[FireResult]:
        """One script call (``lua/fire_ticks.lua``); an empty batch does not reach the server.

        Raises:
            ResponseError: the script failed on the server (the fires before the
                one that failed are complete).
        """
        if not fires:
            return []
        queues = list(dict.fromkeys(fire.queue for fire in fires))
        if len(queues) > 1:  # one call per stream, in order; each fenced on its own
            by_index: dict[int, FireResult] = {}
            for queue in queues:
                at = [i for i, fire in enumerate(fires) if fire.queue == queue]
                done = await self.fire_ticks(group, owner, [fires[i] for i in at])
                by_index.update(zip(at, done, strict=True))
            return [by_index[i] for i in range(len(fires))]
        now = self.now()
        args: list[CommandArg] = [owner, _float_arg(now)]
        for fire in fires:
            args += [
                fire.schedule,
                _float_arg(fire.tick),
                fire.message,
                "1" if fire.exclusive else "0",
                _float_arg(now + fire.in_flight_ttl),
                f"+{fire.message_id or ''}" if fire.added else "",
            ]
        reply = await FIRE_TICKS(
            self._client,
            [
                _keys.leader(group, self.key_layout),
                _keys.schedules(group, self.key_layout),
                self._stream_of(group, fires[0].queue),
            ],
            args,
        )
        if reply == 0:
            return [FireResult(status=FireStatus.NOT_LEADER) for _ in fires]
        results = []
        for raw_status, value in zip(reply[::2], reply[1::2], strict=True):
            status = FireStatus(_text(raw_status))
            if status is FireStatus.STALE:
                results.append(FireResult(status=status, watermark=float(value)))
            else:
                results.append(FireResult(status=status, message_id=_text(value)))
        return results

    async def add_tick(self, group: str, fire: TickFire) -> str | None:
        """One script call (``lua/add_tick.lua``), on keys of ``group``'s slot only."""
        reply = await ADD_TICK(
            self._client,
            [_keys.schedules(group, self.key_layout), self._stream_of(group, fire.queue)],
            [fire.schedule, _float_arg(fire.tick), fire.message],
        )
        return None if reply is None else _text(reply)

    async def record_run_outcomes(self, group: str, outcomes: Sequence[RunOutcome]) -> None:
        """One script call (``lua/record_outcomes.lua``); none for no outcomes."""
        if not outcomes:
            return
        args: list[CommandArg] = []
        for run in outcomes:
            args += [run.schedule, _float_arg(run.tick), run.message_id, run.outcome]
            args.append(_float_arg(run.at))
        await RECORD_OUTCOMES(self._client, [_keys.schedules(group, self.key_layout)], args)

    async def read_schedules(self, group: str) -> ScheduleRecords:
        """``HGETALL`` of both hashes, pipelined (one round trip)."""
        specs, states = await self._client.pipeline(
            [
                ("HGETALL", _keys.schedule_specs(group, self.key_layout)),
                ("HGETALL", _keys.schedules(group, self.key_layout)),
            ]
        )
        return ScheduleRecords(
            specs={_text(k): bytes(v) for k, v in zip(specs[::2], specs[1::2], strict=True)},
            states=parse_states(states),
        )
