"""The :class:`Schedules` protocol (periodic schedules' state in the store), its value
types, and the rules every backend applies atomically.

Theory of operation. Each schedule of a group has a *state* in the store
(:class:`ScheduleState`): its watermark (the newest tick handled), the tick it
last fired and that message's id, its in-flight mark (``overlap=False``) and
the outcome of its newest finished run. Only the lease holder changes the
watermark, and only through :meth:`Schedules.fire_ticks`, which checks, in
one atomic step with the change, that the caller holds the group's lease *by
its token* (the lease's value is the owner's instance id) and that each tick
is newer than the watermark; then it adds the message to the stream and
moves the watermark together. So a deposed or partitioned leader's late fire
is refused, and a leader that dies right after a fire leaves a watermark
that stops any later leader from firing that tick again.

:func:`apply_fire` and :func:`apply_outcome` are those rules as pure
functions: the in-memory backend runs them as they are, the Redis backend's
scripts (``lua/fire_ticks.lua``, ``lua/record_outcomes.lua``) do the same,
and the contract checks hold both to it. Times are the backend's clock.

On Redis a state is a set of fields of the hash ``taskrunner:<group>:schedules``
(``tick:<name>``, ``fired:<name>``...; :data:`STATE_FIELDS`), each a number
written as the caller's exact text, so no script ever rounds a tick. The
published specs are the hash ``taskrunner:<group>:schedule_specs``, one JSON
document per schedule name.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from typing import Protocol, runtime_checkable

import attrs

__all__ = [
    "STATE_FIELDS",
    "FireResult",
    "FireStatus",
    "RunOutcome",
    "ScheduleRecords",
    "ScheduleState",
    "Schedules",
    "TickFire",
    "apply_fire",
    "apply_outcome",
]


@attrs.frozen(kw_only=True)
class ScheduleState:
    """One schedule's state in the store (every field ``None`` until first set)."""

    tick: float | None = None
    """The watermark: the newest tick handled (fired, or skipped as overlapping), or
    the instant the schedule was first seen by a leader."""
    fired: float | None = None
    """The newest tick fired."""
    fired_at: float | None = None
    """When it was fired (the backend's clock)."""
    message_id: str | None = None
    """The stream id of that fire's message."""
    running: str | None = None
    """``overlap=False``: the stream id of the run in flight, until its outcome."""
    running_until: float | None = None
    """When that in-flight mark lapses by itself (the schedule's ``in_flight_ttl``)."""
    outcome: str | None = None
    """The newest finished run's outcome: ``"succeeded"`` or ``"failed"``."""
    outcome_tick: float | None = None
    """The tick that run served."""
    outcome_at: float | None = None
    """When it finished (the backend's clock)."""

    def in_flight(self, now: float) -> str | None:
        """The id of the run in flight at ``now``, if any (a lapsed mark counts as none)."""
        if self.running is None or self.running_until is None or self.running_until <= now:
            return None
        return self.running


STATE_FIELDS: Mapping[str, str] = {
    "tick": "tick",
    "fired": "fired",
    "fired_at": "fired_at",
    "message_id": "id",
    "running": "running",
    "running_until": "running_until",
    "outcome": "outcome",
    "outcome_tick": "outcome_tick",
    "outcome_at": "outcome_at",
}
"""Each :class:`ScheduleState` attribute and the head of its field on Redis
(``<head>:<schedule name>``)."""
TEXT_FIELDS = frozenset({"message_id", "running", "outcome"})
"""The attributes stored as text; the others are numbers."""


@attrs.frozen(kw_only=True)
class TickFire:
    """One tick to fire."""

    schedule: str
    tick: float
    message: bytes
    """The ``payload`` field of the stream entry to add."""
    exclusive: bool = False
    """``overlap=False``: skip the tick while a run is in flight, and mark this one."""
    in_flight_ttl: float = 0.0
    """With ``exclusive``: how long the mark lasts unless the outcome clears it."""
    queue: str | None = None
    """The queue whose stream the message is added to (the task's); ``None``: the
    backend's queue."""
    added: bool = False
    """A sharded group's fire: the message was added already, in a shard
    (:meth:`Schedules.add_tick`), so :meth:`Schedules.fire_ticks` records the fire
    and adds nothing."""
    message_id: str | None = None
    """With ``added``: the id the message was added under (a sharded id), recorded as
    the fire's (and as the in-flight run's when ``exclusive``); ``None`` when it is not
    known (see :meth:`Schedules.add_tick`), and the state's id is left as it was."""


class FireStatus(enum.StrEnum):
    """What :meth:`Schedules.fire_ticks` did with one tick."""

    FIRED = "fired"
    """The message was added and the watermark moved to the tick."""
    SKIPPED = "skipped"
    """``exclusive`` and a run was in flight: the watermark moved, nothing was added."""
    STALE = "stale"
    """The tick was not newer than the watermark: nothing changed."""
    NOT_LEADER = "not_leader"
    """The caller does not hold the lease: nothing changed."""


@attrs.frozen(kw_only=True)
class FireResult:
    status: FireStatus
    message_id: str | None = None
    """FIRED: the new entry's id; SKIPPED: the id of the run in flight."""
    watermark: float | None = None
    """STALE: the watermark that refused the tick."""


@attrs.frozen(kw_only=True)
class RunOutcome:
    """A run of a scheduled message that reached its final outcome."""

    schedule: str
    tick: float
    message_id: str
    outcome: str
    """``"succeeded"`` or ``"failed"``."""
    at: float
    """When (the backend's clock)."""


@attrs.frozen(kw_only=True)
class ScheduleRecords:
    """Everything the store holds about a group's schedules."""

    specs: Mapping[str, bytes]
    """Published spec documents by schedule name."""
    states: Mapping[str, ScheduleState]
    """States by schedule name."""


def apply_fire(
    state: ScheduleState, fire: TickFire, now: float
) -> tuple[ScheduleState, FireStatus]:
    """The rule for one fire by the lease holder (pure): the new state and the status.

    The message id of a FIRED state is left for the caller to fill in (it is
    known once the entry is added, in the same atomic step).
    """
    if state.tick is not None and fire.tick <= state.tick:
        return state, FireStatus.STALE
    if fire.exclusive and state.in_flight(now) is not None:
        return attrs.evolve(state, tick=fire.tick), FireStatus.SKIPPED
    fired = attrs.evolve(state, tick=fire.tick, fired=fire.tick, fired_at=now)
    if fire.exclusive:
        fired = attrs.evolve(fired, running_until=now + fire.in_flight_ttl)
    return fired, FireStatus.FIRED


def apply_outcome(state: ScheduleState, outcome: RunOutcome) -> ScheduleState:
    """The rule for one finished run (pure): the newest tick's outcome is kept, and the
    in-flight mark goes if it is this run's."""
    if state.outcome_tick is None or outcome.tick >= state.outcome_tick:
        state = attrs.evolve(
            state, outcome=outcome.outcome, outcome_tick=outcome.tick, outcome_at=outcome.at
        )
    if state.running == outcome.message_id:
        state = attrs.evolve(state, running=None, running_until=None)
    return state


@runtime_checkable
class Schedules(Protocol):
    """Periodic schedules' state: fenced fires, outcomes, published specs.

    Every method takes the consumer ``group`` first; a group's schedules are
    apart from every other group's.
    """

    async def publish_schedule_specs(self, group: str, specs: Mapping[str, bytes]) -> None:
        """Store each schedule's spec document (replacing the one published before).

        Cancellation: some of the documents may have been stored; a repeat is harmless.
        """
        ...

    async def start_schedules(
        self, group: str, owner: str, names: Sequence[str], baseline: float
    ) -> dict[str, ScheduleState] | None:
        """At the start of a leader's term: atomically, if ``owner`` holds the group's
        lease, give every schedule of ``names`` that has no watermark the watermark
        ``baseline`` (a new schedule's first tick is its first after that), and
        return the states of all of ``names``.

        Returns:
            The states by name, or ``None`` (and nothing changed) when ``owner``
            does not hold the lease.

        Cancellation: the watermarks may have been set; a repeat sets none again.
        """
        ...

    async def fire_ticks(
        self, group: str, owner: str, fires: Sequence[TickFire]
    ) -> list[FireResult]:
        """Atomically: if ``owner`` holds the group's lease (the lease's value is
        ``owner``), apply :func:`apply_fire` to each fire in order, adding the
        message of each FIRED one to the group's stream (and recording its id:
        as ``message_id``, and as ``running`` when exclusive) in the same step;
        a fire ``added`` already (in a shard) is recorded under its ``message_id``
        and adds nothing.
        A process that dies mid-call applies all of them or none.

        Returns:
            One result per fire, in order; all NOT_LEADER, and nothing changed,
            when ``owner`` does not hold the lease.

        Cancellation: the fires may have been applied; a repeat finds their
        ticks STALE and adds nothing.
        """
        ...

    async def add_tick(self, group: str, fire: TickFire) -> str | None:
        """Atomically, in ``group`` (a shard's tag, docs/sharding.md), unless ``group``
        added a tick of ``fire.schedule`` at or after ``fire.tick`` already: add
        ``fire.message`` to the stream of ``fire.queue`` and record the tick and the new
        entry's id as that schedule's ``tick`` and ``message_id`` in ``group``'s own
        schedule states. The first step of a sharded group's fire (the second is
        :meth:`fire_ticks` in the group, with ``added``); no lease is checked here (a
        script never spans slots), so the add is idempotent instead: a leader re-firing
        a tick whose record was lost adds nothing.

        Returns:
            The entry's id in ``group``: the new one, or the one recorded when this
            very tick was added before; ``None`` when a later tick of the schedule was
            added (so this one was too, before it: a leader adds one schedule's ticks
            in order, to the shard routing gives them).

        Cancellation: the message may have been added; a repeat adds nothing.
        """
        ...

    async def record_run_outcomes(self, group: str, outcomes: Sequence[RunOutcome]) -> None:
        """Apply :func:`apply_outcome` for each finished run, in order, atomically
        (no lease needed: any worker records the runs it finished). An empty
        sequence does not reach the store.

        Cancellation: the outcomes may have been recorded; a repeat is harmless.
        """
        ...

    async def read_schedules(self, group: str) -> ScheduleRecords:
        """Every published spec and every state of the group's schedules."""
        ...
