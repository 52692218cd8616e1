"""Contract checks of the Schedules protocol: fires fenced by the lease and the
watermark, in-flight marks and outcomes, published specs."""

from __future__ import annotations

import math

import attrs
import trio

from taskrunner.backends._protocols import Backend
from taskrunner.backends._protocols.schedules import FireStatus, RunOutcome, TickFire
from taskrunner.testing._harness import _LATE, _contract_check, _drain, _fresh_group, _name, _within


def _fire(name: str, tick: float, *, exclusive: bool = False, ttl: float = 5.0) -> TickFire:
    message = f'{{"task_name":"t","schedule":"{name}","tick":{tick!r}}}'.encode()
    return TickFire(
        schedule=name, tick=tick, message=message, exclusive=exclusive, in_flight_ttl=ttl
    )


def _run(name: str, tick: float, message_id: str, outcome: str, at: float) -> RunOutcome:
    return RunOutcome(schedule=name, tick=tick, message_id=message_id, outcome=outcome, at=at)


@_contract_check
async def check_fires_are_fenced_by_the_lease(backend: Backend) -> None:
    """``fire_ticks`` and ``start_schedules`` do nothing unless the caller holds the
    group's lease, by its token; the holder's fire adds the message to the stream
    and records the tick and the entry's id in the same step."""
    group, consumer, name = await _fresh_group(backend), _name("c"), _name("schedule")
    a, b = _name("a"), _name("b")
    tick = math.floor(backend.now())
    fire = _fire(name, tick)
    got = await backend.fire_ticks(group, a, [fire])
    assert [r.status for r in got] == [FireStatus.NOT_LEADER], f"nobody holds the lease: {got!r}"
    assert await backend.start_schedules(group, a, [name], tick) is None, "started without lease"
    assert await backend.acquire_lease(group, b, 5.0) is True
    got = await backend.fire_ticks(group, a, [fire, _fire(name, tick + 1)])
    assert [r.status for r in got] == [FireStatus.NOT_LEADER] * 2, f"b holds the lease: {got!r}"
    assert await backend.start_schedules(group, a, [name], tick) is None, "started by a non-holder"
    assert await _drain(backend, group, consumer) == [], "a refused fire added to the stream"
    records = await backend.read_schedules(group)
    assert name not in records.states, f"a refused fire changed the state: {records.states!r}"

    await backend.resign_lease(group, b)
    assert await backend.acquire_lease(group, a, 5.0) is True
    before = backend.now()
    got = await backend.fire_ticks(group, a, [fire])
    assert [r.status for r in got] == [FireStatus.FIRED], f"the holder's fire: {got!r}"
    entries = await _drain(backend, group, consumer)
    assert [e.payload for e in entries] == [fire.message], f"the fired message: {entries!r}"
    assert got[0].message_id == entries[0].id, f"the fire names its entry: {got!r} {entries!r}"
    state = (await backend.read_schedules(group)).states[name]
    assert (state.tick, state.fired, state.message_id) == (tick, tick, entries[0].id), state
    assert state.fired_at is not None, f"the fire's time is recorded: {state!r}"
    assert before - _LATE <= state.fired_at <= backend.now() + _LATE, state
    assert await backend.fire_ticks(group, a, []) == [], "fire_ticks([]) must return []"
    await backend.resign_lease(group, a)


@_contract_check
async def check_fires_only_newer_ticks(backend: Backend) -> None:
    """A tick not newer than the watermark is stale: nothing added, nothing changed;
    ticks and watermarks keep every digit (a baseline a few microseconds before a
    tick does not swallow the tick)."""
    group, consumer, name, owner = await _fresh_group(backend), _name("c"), _name("s"), _name("o")
    other = _name("s")
    assert await backend.acquire_lease(group, owner, 5.0) is True
    # Ticks are only compared with each other: a unix-sized one on every backend
    # (the in-memory clock starts near 0), where 14 digits would not keep them apart.
    tick = 1_800_000_000.0
    baseline = tick - 0.000004
    states = await backend.start_schedules(group, owner, [name, other], baseline)
    assert states is not None, "the holder starts its schedules"
    assert states[name].tick == baseline, f"a new schedule's watermark is the baseline: {states!r}"
    got = await backend.fire_ticks(group, owner, [_fire(name, baseline), _fire(name, tick)])
    assert [r.status for r in got] == [FireStatus.STALE, FireStatus.FIRED], (
        f"the baseline itself is stale, the tick after it fires: {got!r}"
    )
    assert got[0].watermark == baseline, f"a stale result names the watermark: {got!r}"
    got = await backend.fire_ticks(
        group,
        owner,
        [_fire(name, tick), _fire(name, tick - 60), _fire(name, tick + 1), _fire(name, tick + 1)],
    )
    statuses = [r.status for r in got]
    assert statuses == [FireStatus.STALE, FireStatus.STALE, FireStatus.FIRED, FireStatus.STALE], (
        f"only a newer tick fires, once: {statuses!r}"
    )
    entries = await _drain(backend, group, consumer)
    assert len(entries) == 2, f"two fires, two entries: {entries!r}"
    states = await backend.start_schedules(group, owner, [name, other], tick + 100)
    assert states is not None
    assert states[name].tick == tick + 1, f"a start keeps a watermark: {states!r}"
    assert states[other].tick == baseline, f"a start keeps a baseline: {states!r}"
    assert states[other].fired is None, f"a baseline is not a fire: {states!r}"
    await backend.resign_lease(group, owner)


@_contract_check
async def check_in_flight_marks_and_outcomes(backend: Backend) -> None:
    """An exclusive fire marks its run in flight; an exclusive tick is skipped while
    the mark holds (the watermark moves, nothing is added); the run's outcome
    clears the mark; a mark lapses after its ttl by itself. The newest tick's
    outcome is kept."""
    group, consumer, name, owner = await _fresh_group(backend), _name("c"), _name("s"), _name("o")
    assert await backend.acquire_lease(group, owner, 30.0) is True
    tick = float(math.floor(backend.now()))
    (first,) = await backend.fire_ticks(group, owner, [_fire(name, tick, exclusive=True)])
    assert first.status is FireStatus.FIRED, first
    state = (await backend.read_schedules(group)).states[name]
    assert state.running == first.message_id, f"an exclusive fire is in flight: {state!r}"
    got = await backend.fire_ticks(
        group, owner, [_fire(name, tick + 1, exclusive=True), _fire(name, tick + 2)]
    )
    assert [r.status for r in got] == [FireStatus.SKIPPED, FireStatus.FIRED], (
        f"an exclusive tick waits for the run in flight, another does not: {got!r}"
    )
    assert got[0].message_id == first.message_id, f"a skip names the run in flight: {got!r}"
    assert len(await _drain(backend, group, consumer)) == 2, "a skipped tick added an entry"
    assert (await backend.read_schedules(group)).states[name].tick == tick + 2

    now = backend.now()
    await backend.record_run_outcomes(
        group, [_run(name, tick + 2, got[1].message_id or "", "succeeded", now)]
    )
    state = (await backend.read_schedules(group)).states[name]
    assert state.running == first.message_id, f"another run's outcome cleared the mark: {state!r}"
    assert (state.outcome, state.outcome_tick) == ("succeeded", tick + 2), state
    await backend.record_run_outcomes(
        group, [_run(name, tick, first.message_id or "", "failed", now)]
    )
    state = (await backend.read_schedules(group)).states[name]
    assert state.running is None, f"the run's outcome must clear its mark: {state!r}"
    assert (state.outcome, state.outcome_tick) == ("succeeded", tick + 2), (
        f"an older tick's outcome replaced the newest one's: {state!r}"
    )
    await backend.record_run_outcomes(group, [])

    (fired,) = await backend.fire_ticks(
        group, owner, [_fire(name, tick + 3, exclusive=True, ttl=0.3)]
    )
    marked_at = trio.current_time()
    assert fired.status is FireStatus.FIRED, f"no run in flight any more: {fired!r}"
    (skipped,) = await backend.fire_ticks(group, owner, [_fire(name, tick + 4, exclusive=True)])
    _within(marked_at, 0.3)
    assert skipped.status is FireStatus.SKIPPED, f"the mark holds for its ttl: {skipped!r}"
    await trio.sleep(0.4)
    (lapsed,) = await backend.fire_ticks(group, owner, [_fire(name, tick + 5, exclusive=True)])
    assert lapsed.status is FireStatus.FIRED, f"a mark must lapse after its ttl: {lapsed!r}"
    await backend.resign_lease(group, owner)


@_contract_check
async def check_schedule_specs(backend: Backend) -> None:
    """Published specs are read back by name; a new one replaces the old; per group."""
    group, other = _name("group"), _name("group")
    assert (await backend.read_schedules(group)).specs == {}, "a new group has no specs"
    await backend.publish_schedule_specs(group, {"a": b'{"v":1}', "b": b'{"v":2}'})
    await backend.publish_schedule_specs(group, {"a": b'{"v":3}'})
    await backend.publish_schedule_specs(group, {})
    specs = (await backend.read_schedules(group)).specs
    assert dict(specs) == {"a": b'{"v":3}', "b": b'{"v":2}'}, f"published specs: {specs!r}"
    assert (await backend.read_schedules(other)).specs == {}, "specs are per group"


@_contract_check
async def check_add_tick_adds_each_tick_once(backend: Backend) -> None:
    """``add_tick`` (a sharded group's first step, in a shard) adds a tick's message
    once: the same tick again gives the same id and adds nothing; a later tick adds;
    an earlier one, after it, adds nothing (``None``). ``fire_ticks`` of a fire
    ``added`` already records its id (as the in-flight run's too) and adds nothing."""
    shard, consumer = await _fresh_group(backend), _name("c")
    name, owner = _name("schedule"), _name("o")
    tick = math.floor(backend.now())
    first = await backend.add_tick(shard, _fire(name, tick))
    assert first is not None, "a new tick is added"
    assert await backend.add_tick(shard, _fire(name, tick)) == first, "a repeat gives its id"
    later = await backend.add_tick(shard, _fire(name, tick + 1))
    assert later is not None, "a later tick is added"
    assert later != first, f"a later tick is added anew: {later!r}"
    assert await backend.add_tick(shard, _fire(name, tick)) is None, "an earlier tick: added"
    entries = await _drain(backend, shard, consumer)
    assert [e.id for e in entries] == [first, later], f"each tick added once: {entries!r}"
    other = _name("schedule")
    assert await backend.add_tick(shard, _fire(other, tick)) is not None, "per schedule"

    group = await _fresh_group(backend)  # after the adds: a shared stream holds them too
    assert await backend.acquire_lease(group, owner, 5.0) is True
    fire = attrs.evolve(_fire(name, tick, exclusive=True), added=True, message_id=f"3.{first}")
    (got,) = await backend.fire_ticks(group, owner, [fire])
    assert (got.status, got.message_id) == (FireStatus.FIRED, f"3.{first}"), got
    state = (await backend.read_schedules(group)).states[name]
    assert (state.tick, state.message_id, state.running) == (tick, f"3.{first}", f"3.{first}")
    unknown = attrs.evolve(_fire(name, tick + 1), added=True)
    (got,) = await backend.fire_ticks(group, owner, [unknown])
    assert got.status is FireStatus.FIRED, got
    state = (await backend.read_schedules(group)).states[name]
    assert (state.tick, state.message_id) == (tick + 1, f"3.{first}"), f"id kept: {state!r}"
    assert await _drain(backend, group, consumer) == [], "a fire added already adds nothing"
    await backend.resign_lease(group, owner)
