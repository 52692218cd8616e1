"""A sharded group's periodic ticks land in its shards (issue 27): where each goes, and
which are added there before the fenced record.

Theory of operation. A sharded group's schedules, lease and watermarks are the group's
own, in its slot ``{<group>}``, and a tick is queued in a shard, in the shard's slot
(docs/sharding.md). No script spans two slots, so a fire is two steps:

1. **add** the tick's message in its shard (:meth:`Schedules.add_tick
   <taskrunner.backends.Schedules.add_tick>`), idempotent: the shard records the newest
   tick it added per schedule, and a tick at or before it adds nothing;
2. **record** the fire in the group's slot, fenced on the lease
   (:meth:`Schedules.fire_ticks <taskrunner.backends.Schedules.fire_ticks>` with the
   fire ``added``): the watermark moves, the sharded id is the fire's.

A leader that dies between the steps leaves the watermark where it was, so the next
leader fires the tick again; its shard is the same (:func:`tick_shard` is a pure
function of the schedule, the tick and the payload's shard key, never a round-robin
turn), so the add finds it added and gives back its id: the tick runs once. A deposed
leader's late add is of a tick the new leader fires too (to the same shard), so it
adds nothing twice either; its record is refused.

Which fires are added first (:func:`fires_to_add`): those :func:`apply_fire
<taskrunner.backends.apply_fire>` fires, given the group's states. An ``overlap=False``
tick whose previous run is in flight is skipped, and must not be added: so a batch with
an exclusive fire reads the states first (one round trip), and the rule runs on them,
each added exclusive fire counting as in flight for the next. Only the leader sets an
in-flight mark, so the record finds what the read found, or a mark gone since (the run
ended): that tick, not added, is then added by the record in the group's own stream,
which every sharded runner reads, as before this module; nothing is lost or doubled.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import attrs

from taskrunner import _shards
from taskrunner._dispatch.routing import stable_shard
from taskrunner.backends import Backend, FireStatus, ScheduleState, TickFire
from taskrunner.backends._protocols.schedules import apply_fire

ADDED = "added"
"""The in-flight mark :func:`fires_to_add` gives an exclusive fire it adds (its id is
not known yet), so the next exclusive tick of that schedule in the batch is skipped."""


def tick_shard(count: int, schedule: str, tick: float, shard_key: str | None) -> int:
    """The shard of ``count`` that ``schedule``'s ``tick`` is queued in: the stable hash
    of the payload's shard key (the task's ``shard_key`` of the schedule's payload, so a
    schedule's runs meet that key's other tasks), else of ``<schedule>@<tick>``, which
    spreads a schedule's ticks over the shards and gives every leader the same shard."""
    return stable_shard(shard_key if shard_key is not None else f"{schedule}@{tick!r}", count)


def fires_to_add(
    fires: Sequence[TickFire], states: Mapping[str, ScheduleState], now: float
) -> list[bool]:
    """For each of ``fires``, in order, whether the group's record would fire it given
    ``states`` (the group's states; read only for a batch with an exclusive fire: an
    empty mapping fires every other tick, whose watermark the leader keeps)."""
    known = dict(states)
    out = []
    for fire in fires:
        new, status = apply_fire(known.get(fire.schedule, ScheduleState()), fire, now)
        if status is FireStatus.FIRED and fire.exclusive:
            new = attrs.evolve(new, running=ADDED)
        known[fire.schedule] = new
        out.append(status is FireStatus.FIRED)
    return out


async def add_in_shards(
    backend: Backend,
    group: str,
    count: int,
    fires: Sequence[TickFire],
    shard_keys: Mapping[str, str | None],
) -> list[TickFire]:
    """Step 1 for ``fires`` of sharded ``group`` (``count`` shards): add each one the
    record would fire in its shard, and return the fires to record, those added marked
    ``added`` with their sharded ids (the others as they were).

    Raises:
        BackendError: an add failed (the adds before it are done, and idempotent).
    """
    states: Mapping[str, ScheduleState] = {}
    if any(fire.exclusive for fire in fires):
        states = (await backend.read_schedules(group)).states
    out = []
    for fire, add in zip(fires, fires_to_add(fires, states, backend.now()), strict=True):
        if not add:
            out.append(fire)
            continue
        index = tick_shard(count, fire.schedule, fire.tick, shard_keys.get(fire.schedule))
        inner = await backend.add_tick(_shards.shard_tag(group, index, count), fire)
        sharded = None if inner is None else _shards.shard_task_id(index, inner, count)
        out.append(attrs.evolve(fire, added=True, message_id=sharded))
    return out
