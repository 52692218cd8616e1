"""What ``taskrunner.admin.schedules`` shows (the pure join of published specs and
states), and the same rows from a served runner on the in-memory backend."""

from __future__ import annotations

from datetime import UTC, datetime

import trio
import trio.testing
from _fleet import make_runner, serving

from taskrunner import Schedule, admin
from taskrunner._schedules.periodic import spec_document
from taskrunner._schedules.view import ScheduleRow, schedule_rows
from taskrunner.backends import ScheduleRecords, ScheduleState
from taskrunner.backends.memory import MemoryBackend

START = datetime(2025, 6, 2, 8, 0, 0, tzinfo=UTC).timestamp()


def spec(**options: object) -> bytes:
    schedule = Schedule(name="s", task="report", **options)  # type: ignore[arg-type]
    return spec_document(schedule, instance_id="i", host="h1", at=START)


def test_rows_join_specs_and_states() -> None:
    records = ScheduleRecords(
        specs={
            "nightly": spec(cron="0 3 * * *", timezone="Europe/Berlin"),
            "beat": spec(every=30.0, overlap=False),
            "broken": b"not json",
        },
        states={
            "beat": ScheduleState(
                tick=START + 30,
                fired=START + 30,
                fired_at=START + 30.2,
                message_id="1-0",
                running="1-0",
                running_until=START + 3600,
                outcome="failed",
                outcome_tick=START,
                outcome_at=START + 1,
            ),
            "gone": ScheduleState(tick=START, fired=START, outcome="succeeded", outcome_tick=START),
        },
    )
    rows = {row.name: row for row in schedule_rows(records, now=START + 40)}
    assert list(rows) == ["beat", "broken", "gone", "nightly"]
    assert rows["beat"] == ScheduleRow(
        name="beat",
        task="report",
        spec="every 30s",
        catch_up="latest",
        overlap=False,
        next_fire=START + 60,  # the first tick after the watermark
        last_fired=START + 30,
        last_fired_at=START + 30.2,
        last_outcome="failed",
        last_outcome_tick=START,
        in_flight="1-0",
        declared_by="h1",
    )
    # No state yet: the next fire is the first tick after now, in Berlin's 03:00.
    assert rows["nightly"].next_fire == datetime(2025, 6, 3, 1, 0, tzinfo=UTC).timestamp()
    assert (rows["nightly"].spec, rows["nightly"].last_fired) == (
        "cron 0 3 * * * (Europe/Berlin)",
        None,
    )
    # A spec that does not parse, and a state whose schedule was removed from code.
    assert (rows["broken"].task, rows["broken"].next_fire) == (None, None)
    assert (rows["gone"].task, rows["gone"].spec, rows["gone"].next_fire) == (None, None, None)
    assert (rows["gone"].last_outcome, rows["gone"].in_flight) == ("succeeded", None)
    # An in-flight mark past its lapse time is not shown.
    later = {row.name: row for row in schedule_rows(records, now=START + 3600)}
    assert later["beat"].in_flight is None


async def test_admin_schedules_from_a_served_runner(autojump_clock: trio.testing.MockClock) -> None:
    autojump_clock.jump(START - trio.current_time())
    backend = MemoryBackend()
    runner = make_runner(backend)

    @runner.periodic(cron="*/5 * * * *", name="cleanup")
    async def cleanup(payload: None) -> None: ...

    assert await admin.schedules(backend, "g") == []
    async with serving(runner):
        await trio.sleep(301)
    (row,) = await admin.schedules(backend, "g")
    assert (row.name, row.task, row.spec) == ("cleanup", "cleanup", "cron */5 * * * * (UTC)")
    assert (row.last_fired, row.next_fire) == (START + 300, START + 600)
    assert (row.last_outcome, row.last_outcome_tick) == ("succeeded", START + 300)
