"""Periodic schedules on one runner (MemoryBackend, trio's MockClock): declaring them,
what a run sees, overlap, catch-up after an outage, outcomes, and the wire fields."""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime, timedelta
from typing import Any

import attrs
import pytest
import trio
import trio.testing
from _fleet import make_runner, serving, start_each

from taskrunner import (
    AlreadyServing,
    Backoff,
    InvalidTaskPayload,
    Schedule,
    TaskContext,
    TaskMessage,
    TaskNotFound,
    TaskRunner,
)
from taskrunner._wire import MessageExtras, decode_message, encode_message
from taskrunner.backends import Backend, FireStatus, TickFire
from taskrunner.backends.memory import MemoryBackend
from taskrunner.testing import PartitionedBackend

START = datetime(2025, 6, 2, 8, 0, 0, tzinfo=UTC).timestamp()
"""Simulations start on this unix instant (MockClock jumped there)."""


@pytest.fixture
async def at_start(autojump_clock: trio.testing.MockClock) -> None:
    """Jump the clock to :data:`START` (a test takes ``autojump_clock`` too: pytest-trio
    runs a test on the clock among its own arguments)."""
    autojump_clock.jump(START - trio.current_time())


class Recorder:
    """Adds to the stream are recorded here, so deleted (acked) entries still count."""

    def __init__(self, backend: MemoryBackend) -> None:
        self.messages: list[tuple[float, TaskMessage]] = []
        original = backend.add_raw

        def add_raw(group: str, fields: dict[str, bytes], *, queue: str | None = None) -> str:
            payload = fields.get("payload")
            if payload is not None and b'"schedule"' in payload:
                self.messages.append((trio.current_time(), decode_message(payload)))
            return original(group, fields, queue=queue)

        backend.add_raw = add_raw  # type: ignore[method-assign]

    def ticks(self, schedule: str) -> list[float]:
        return [m.tick for _, m in self.messages if m.schedule == schedule and m.tick is not None]


# Declaring -------------------------------------------------------------------------


@pytest.fixture
def runner() -> TaskRunner:
    runner = make_runner(MemoryBackend())

    @runner.task
    async def report(payload: dict[str, str]) -> None: ...

    @runner.task(unique=True, unique_for=60)
    async def exclusive(payload: None) -> None: ...

    return runner


@pytest.mark.parametrize(
    ("options", "error", "message"),
    [
        ({}, ValueError, "needs exactly one of cron and every"),
        ({"cron": "* * * * *", "every": 30}, ValueError, "needs exactly one of cron and every"),
        ({"cron": "every day"}, ValueError, "Schedule.cron 'every day' is not a cron"),
        ({"cron": 5}, ValueError, "Schedule.cron must be a cron expression, got 5"),
        ({"every": 0.5}, ValueError, "Schedule.every must be seconds .* >= 1, got 0.5"),
        ({"every": "30"}, ValueError, "Schedule.every must be seconds .* got '30'"),
        ({"every": float("inf")}, ValueError, "Schedule.every must be seconds"),
        ({"every": 30, "catch_up": "some"}, ValueError, "Schedule.catch_up must be one of"),
        (
            {"cron": "0 3 * * *", "timezone": "Mars/Olympus"},
            ValueError,
            "Schedule.timezone must be an IANA time zone, got 'Mars/Olympus'",
        ),
        ({"every": 30, "in_flight_ttl": 0}, ValueError, "Schedule.in_flight_ttl must be"),
        ({"every": 30, "task": "nope"}, TaskNotFound, "nope"),
        ({"every": 30, "task": "exclusive"}, ValueError, "Schedule.task 'exclusive' is unique"),
        ({"every": 30, "payload": {"x": object()}}, InvalidTaskPayload, "not JSON"),
    ],
)
def test_a_bad_schedule_is_refused_in_one_line(
    runner: TaskRunner, options: dict[str, Any], error: type[Exception], message: str
) -> None:
    options = {"task": "report", **options}
    with pytest.raises(error, match=message) as caught:
        runner.add_schedule("nightly", **options)
    assert "\n" not in str(caught.value)
    assert runner.schedules == {}


def test_add_schedule_and_the_decorator_declare_schedules(runner: TaskRunner) -> None:
    nightly = runner.add_schedule(
        "nightly-report",
        task="report",
        cron="0 3 * * *",
        timezone="Europe/Berlin",
        payload={"kind": "daily"},
    )
    heartbeat = runner.add_schedule("heartbeat", task="report", every=timedelta(seconds=30))

    @runner.periodic(cron="*/5 * * * *", name="cleanup")
    async def cleanup(payload: None) -> None: ...

    assert runner.schedules == {
        "nightly-report": nightly,
        "heartbeat": heartbeat,
        "cleanup": Schedule(name="cleanup", task="cleanup", cron="*/5 * * * *"),
    }
    assert "cleanup" in runner.tasks
    assert heartbeat.every == 30.0
    assert nightly.describe() == "cron 0 3 * * * (Europe/Berlin)"
    assert heartbeat.describe() == "every 30s"
    with pytest.raises(ValueError, match="a schedule named 'heartbeat' is already added"):
        runner.add_schedule("heartbeat", task="report", every=60)


def test_a_refused_periodic_decorator_registers_no_task(runner: TaskRunner) -> None:
    with pytest.raises(ValueError, match=r"Schedule\.every"):

        @runner.periodic(every=0.1)
        async def too_often(payload: None) -> None: ...

    assert "too_often" not in runner.tasks
    assert runner.schedules == {}


async def test_schedules_are_added_before_serving(
    autojump_clock: trio.testing.MockClock, at_start: None
) -> None:
    runner = make_runner(MemoryBackend())

    @runner.task
    async def ping(payload: None) -> None: ...

    async with serving(runner):
        with pytest.raises(AlreadyServing):
            runner.add_schedule("ping", task="ping", every=30)


# Firing ------------------------------------------------------------------------------


async def test_ticks_fire_on_time_with_the_payload_and_the_tick(
    autojump_clock: trio.testing.MockClock,
    at_start: None,
) -> None:
    backend = MemoryBackend()
    runner = make_runner(backend)
    runs: list[tuple[float, dict[str, str], tuple[str | None, float | None]]] = []

    @runner.task
    async def report(payload: dict[str, str], ctx: TaskContext) -> None:
        runs.append((trio.current_time(), payload, (ctx.schedule, ctx.tick)))

    runner.add_schedule("every-minute", task="report", every=60, payload={"kind": "minutely"})
    async with serving(runner):
        await trio.sleep(300.5)
    ticks = [START + 60 * k for k in range(1, 6)]
    assert [tick for _, _, tick in runs] == [("every-minute", t) for t in ticks]
    assert [payload for _, payload, _ in runs] == [{"kind": "minutely"}] * 5
    for ran_at, _, (_, tick) in runs:
        assert tick is not None
        assert 0 <= ran_at - tick < 0.1, "a run starts at its tick, never before"
    first = runs[0][2][1]
    assert first is not None
    assert datetime.fromtimestamp(first, UTC) == datetime(2025, 6, 2, 8, 1, tzinfo=UTC)


async def test_a_dispatched_run_of_the_same_task_has_no_tick(
    autojump_clock: trio.testing.MockClock,
    at_start: None,
) -> None:
    runner = make_runner(MemoryBackend())
    seen: list[tuple[str | None, float | None]] = []

    @runner.periodic(every=60)
    async def ping(payload: None, ctx: TaskContext) -> None:
        seen.append((ctx.schedule, ctx.tick))

    async with serving(runner):
        await runner.dispatch("ping")
        await trio.sleep(61)
    assert seen == [(None, None), ("ping", START + 60)]


async def test_a_tick_fires_into_its_tasks_queue(
    autojump_clock: trio.testing.MockClock,
    at_start: None,
) -> None:
    backend = MemoryBackend(delete_on_ack=False)
    runner = make_runner(backend, queues=("critical", "default"))
    seen: list[float | None] = []

    @runner.periodic(every=60, queue="critical")
    async def ping(payload: None, ctx: TaskContext) -> None:
        seen.append(ctx.tick)

    async with serving(runner):
        await trio.sleep(61)
    assert seen == [START + 60]
    assert await backend.length("g", queue="critical") == 1
    assert await backend.length("g", queue="default") == 0
    assert await backend.length("g") == 0, "nothing in the backend's own queue"


async def test_overlap_false_skips_ticks_while_a_run_is_in_flight(
    autojump_clock: trio.testing.MockClock,
    at_start: None,
) -> None:
    backend = MemoryBackend()
    recorder = Recorder(backend)
    runner = make_runner(backend)
    started: list[float] = []

    @runner.periodic(every=60, overlap=False)
    async def slow(payload: None) -> None:
        started.append(trio.current_time())
        await trio.sleep(150)  # spans the next two ticks

    async with serving(runner):
        await trio.sleep(60 * 8 + 1)
    # 60 runs until 210: 120 and 180 are skipped; 240 runs until 390; 300, 360 skipped...
    assert recorder.ticks("slow") == [START + 60, START + 240, START + 420]
    assert started == [START + 60, START + 240, START + 420]
    state = (await backend.read_schedules("g")).states["slow"]
    assert state.tick == START + 480, "a skipped tick moves the watermark"
    assert state.running is not None, "the 420 run is still in flight"


async def test_overlapping_runs_when_overlap_is_allowed(
    autojump_clock: trio.testing.MockClock, at_start: None
) -> None:
    backend = MemoryBackend()
    recorder = Recorder(backend)
    runner = make_runner(backend)

    @runner.periodic(every=60)
    async def slow(payload: None) -> None:
        await trio.sleep(150)

    async with serving(runner):
        await trio.sleep(60 * 4 + 1)
    assert recorder.ticks("slow") == [START + 60 * k for k in range(1, 5)]


async def test_outcomes_are_recorded(
    autojump_clock: trio.testing.MockClock, at_start: None
) -> None:
    backend = MemoryBackend()
    runner = make_runner(backend)
    calls = 0

    @runner.periodic(every=60, overlap=False)
    async def flaky(payload: None) -> None:
        nonlocal calls
        calls += 1
        if calls == 2:
            raise RuntimeError("boom")

    async with serving(runner):
        await trio.sleep(61)
        state = (await backend.read_schedules("g")).states["flaky"]
        assert (state.outcome, state.outcome_tick, state.running) == (
            "succeeded",
            START + 60,
            None,
        )
        await trio.sleep(60)
        state = (await backend.read_schedules("g")).states["flaky"]
        # max_retry=1: the failure is final; the run is dead-lettered and recorded failed
        assert (state.outcome, state.outcome_tick, state.running) == (
            "failed",
            START + 120,
            None,
        )
        assert len(await backend.dead_letters("g")) == 1


async def test_a_run_failed_undecoded_past_its_delivery_limit_records_its_outcome(
    autojump_clock: trio.testing.MockClock, at_start: None
) -> None:
    """Issue 24: the run of an ``overlap=False`` schedule whose worker died is reclaimed
    past its delivery limit and fails without being decoded; its schedule still learns
    the outcome, so its next tick fires then, not after ``in_flight_ttl``."""
    backend = MemoryBackend()
    recorder = Recorder(backend)
    config = {"reclaim_delay": 30.0, "leader_lease_ttl": 5.0}
    dying, survivor = make_runner(backend, **config), make_runner(backend, **config)
    started: list[float] = []
    for runner in (dying, survivor):

        @runner.periodic(every=60, overlap=False, in_flight_ttl=3600, name="exclusive")
        async def exclusive(payload: None) -> None:
            started.append(trio.current_time())
            if len(started) == 1:
                await trio.sleep_forever()  # its worker dies before it ends

    async with trio.open_nursery() as nursery:
        (dying_scope,) = start_each(nursery, [dying])
        with trio.fail_after(120):
            while not started:  # noqa: ASYNC110
                await trio.sleep(0.5)
        dying_scope.cancel()  # a crash: nothing is acked, the run stays pending
        nursery.start_soon(survivor.serve)
        await trio.sleep(60 * 4)
        nursery.cancel_scope.cancel()
    (dead,) = await backend.dead_letters("g")
    assert "TaskMaxRetryExceeded" in dead.error, "failed undecoded, past its delivery limit"
    assert recorder.ticks("exclusive")[0] == START + 60
    assert len(started) >= 2, f"the schedule waited for in_flight_ttl: runs at {started}"
    assert started[1] <= START + 180, "the tick after the reclaim fired"


async def test_a_retried_run_serves_its_tick_and_stays_in_flight_until_its_last_attempt(
    autojump_clock: trio.testing.MockClock, at_start: None
) -> None:
    """A retry goes through the delayed set: it carries the schedule and the tick, so
    ctx.tick is the same on every attempt, and the in-flight mark (the fired entry's
    id, which is the retry's task id) holds until the run's final outcome."""
    backend = MemoryBackend()
    runner = make_runner(backend)
    attempts: list[tuple[str, str | None, float | None, float]] = []

    @runner.periodic(
        every=60, overlap=False, max_retry=3, retry=Backoff(initial=50.0, factor=1.0, jitter=0)
    )
    async def flaky(payload: None, ctx: TaskContext) -> None:
        attempts.append((ctx.task_id, ctx.schedule, ctx.tick, trio.current_time()))
        if ctx.attempt < 3:
            raise RuntimeError("boom")

    async with serving(runner):
        await trio.sleep(61)
        state = (await backend.read_schedules("g")).states["flaky"]
        assert state.running is not None, "the first attempt failed: the run is in flight"
        await trio.sleep(60)  # the 08:02 tick: the retry is still waiting, so it is skipped
        state = (await backend.read_schedules("g")).states["flaky"]
        assert (state.tick, state.fired, state.running) == (START + 120, START + 60, state.running)
        await trio.sleep(60)  # the third attempt succeeded at 08:02:40
        state = (await backend.read_schedules("g")).states["flaky"]
    first_run, next_run = attempts[:3], attempts[3:]
    assert [a[1:3] for a in first_run] == [("flaky", START + 60)] * 3
    assert len({task_id for task_id, *_ in first_run}) == 1, "one task across its retries"
    assert [round(at - START) for *_, at in first_run] == [60, 110, 160]
    assert [a[1:] for a in next_run] == [("flaky", START + 180, START + 180)]
    assert (state.outcome, state.outcome_tick) == ("succeeded", START + 60)
    assert state.fired == START + 180, "the mark cleared: the next tick fired"
    assert state.running == state.message_id == next_run[0][0], "and is in flight now"


async def test_a_new_schedule_starts_at_its_next_tick(
    autojump_clock: trio.testing.MockClock, at_start: None
) -> None:
    """A schedule first seen at 08:00:10 does not run the 08:00 tick it never knew."""
    await trio.sleep(10)
    backend = MemoryBackend()
    recorder = Recorder(backend)
    runner = make_runner(backend)

    @runner.periodic(every=60, catch_up="all")
    async def ping(payload: None) -> None: ...

    async with serving(runner):
        await trio.sleep(55)
    assert recorder.ticks("ping") == [START + 60]


@pytest.mark.parametrize(
    ("catch_up", "expected"),
    [
        # down from 08:02:30 to 08:10:30: 08:03 ... 08:10 missed (08:10 by 30 s)
        ("latest", [1, 2, 10, 11, 12]),
        ("none", [1, 2, 11, 12]),
        ("all", [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12]),
    ],
)
async def test_catch_up_after_the_fleet_was_down(
    autojump_clock: trio.testing.MockClock, at_start: None, catch_up: str, expected: list[int]
) -> None:
    backend = MemoryBackend()
    recorder = Recorder(backend)

    def instance() -> TaskRunner:
        runner = make_runner(backend)

        @runner.periodic(every=60, catch_up=catch_up)  # type: ignore[arg-type]
        async def ping(payload: None) -> None: ...

        return runner

    async with serving(instance()):
        await trio.sleep(150)
    await trio.sleep(8 * 60)  # nobody serves
    async with serving(instance()):
        await trio.sleep(12 * 60 + 1 - 150 - 8 * 60)
    assert recorder.ticks("ping") == [START + 60 * k for k in expected]


async def test_a_schedule_removed_from_code_stops_firing(
    autojump_clock: trio.testing.MockClock, at_start: None
) -> None:
    backend = MemoryBackend()
    recorder = Recorder(backend)
    old = make_runner(backend)

    @old.periodic(every=60)
    async def ping(payload: None) -> None: ...

    async with serving(old):
        await trio.sleep(61)
    new = make_runner(backend)

    @new.task
    async def ping_task(payload: None) -> None: ...

    async with serving(new):
        await trio.sleep(300)
    assert recorder.ticks("ping") == [START + 60]


async def test_conflicting_declarations_warn(
    autojump_clock: trio.testing.MockClock, at_start: None, caplog: pytest.LogCaptureFixture
) -> None:
    backend = MemoryBackend()
    recorder = Recorder(backend)

    def instance(every: float) -> TaskRunner:
        runner = make_runner(backend)

        @runner.periodic(every=every, name="ping")
        async def ping(payload: None) -> None: ...

        return runner

    leader, follower = instance(60), instance(120)
    with caplog.at_level(logging.WARNING, logger="taskrunner._serve.periodic"):
        async with serving(leader):
            await trio.sleep(1)
            async with serving(follower):
                await trio.sleep(200)
    warnings = [r.getMessage() for r in caplog.records if "declared differently" in r.getMessage()]
    assert any(leader.instance_id in w and f"({follower.instance_id})" in w for w in warnings), (
        "the follower that starts with another declaration is warned"
    )
    assert any(follower.instance_id in w and f"({leader.instance_id})" in w for w in warnings), (
        "the leader sees the other declaration when it republishes"
    )
    # The leader's declaration fires.
    assert recorder.ticks("ping") == [START + 60 * k for k in (1, 2, 3)]
    spec = json.loads((await backend.read_schedules("g")).specs["ping"])
    assert (spec["every"], spec["by"]) == (60.0, leader.instance_id)


async def test_a_runner_without_schedules_touches_no_schedule_key(
    autojump_clock: trio.testing.MockClock,
    at_start: None,
) -> None:
    backend = MemoryBackend()
    link = PartitionedBackend(backend)
    calls: list[str] = []
    original = link._through

    async def through(name: str, call: Any) -> Any:
        calls.append(name)
        return await original(name, call)

    link._through = through  # type: ignore[method-assign]
    runner = make_runner(link)

    @runner.task
    async def ping(payload: None) -> None: ...

    async with serving(runner):
        await runner.dispatch("ping")
        await trio.sleep(120)
    assert not [c for c in calls if "schedule" in c or c == "fire_ticks"]


# The wire ------------------------------------------------------------------------------


def test_the_schedule_fields_are_absent_from_a_plain_message() -> None:
    plain = TaskMessage(task_name="ping", payload={"a": 1})
    assert b"schedule" not in encode_message(plain)
    assert b"tick" not in encode_message(plain)


def test_the_schedule_fields_on_the_wire() -> None:
    message = TaskMessage(
        task_name="ping",
        payload=None,
        extras=MessageExtras(schedule="nightly", tick=1748851200.0),
    )
    raw = encode_message(message)
    assert raw == (
        b'{"task_name":"ping","payload":null,"unique":false,"unique_for":0,"unique_key":"",'
        b'"unique_lock_value":"","reservation_timeout":0,"schedule":"nightly",'
        b'"tick":1748851200.0}'
    )
    assert decode_message(raw) == message
    # A whole-number tick written by another writer reads as a float.
    assert decode_message(raw.replace(b"1748851200.0", b"1748851200")).tick == 1748851200.0


@pytest.mark.parametrize("tick", [b'"soon"', b"true", b"[1]"])
def test_a_bad_tick_is_an_invalid_message(tick: bytes) -> None:
    raw = b'{"task_name":"ping","schedule":"s","tick":' + tick + b"}"
    with pytest.raises(InvalidTaskPayload, match="field 'tick' should be unix seconds"):
        decode_message(raw)


async def test_a_message_names_its_schedule_and_tick(
    autojump_clock: trio.testing.MockClock, at_start: None
) -> None:
    backend = MemoryBackend()
    recorder = Recorder(backend)
    runner = make_runner(backend)

    @runner.periodic(cron="*/5 * * * *", name="cleanup", max_retry=3)
    async def cleanup(payload: None) -> None: ...

    async with serving(runner):
        await trio.sleep(301)
    (at, message), *_ = recorder.messages
    assert attrs.evolve(message, reservation_timeout=0) == TaskMessage(
        task_name="cleanup", extras=MessageExtras(schedule="cleanup", tick=START + 300)
    )
    assert at == START + 300


async def test_the_fire_is_fenced_by_the_lease_token(
    autojump_clock: trio.testing.MockClock, at_start: None
) -> None:
    """A backend-level view of the exactly-once step the leader takes."""
    backend: Backend = MemoryBackend()
    fire = TickFire(schedule="s", tick=START + 60, message=b'{"task_name":"t"}')
    assert await backend.acquire_lease("g", "old", 5.0)
    await trio.sleep(6)  # the old leader's lease lapses; a new one takes it
    assert await backend.acquire_lease("g", "new", 5.0)
    (late,) = await backend.fire_ticks("g", "old", [fire])
    (fresh,) = await backend.fire_ticks("g", "new", [fire])
    (again,) = await backend.fire_ticks("g", "new", [fire])
    assert [late.status, fresh.status, again.status] == [
        FireStatus.NOT_LEADER,
        FireStatus.FIRED,
        FireStatus.STALE,
    ]
