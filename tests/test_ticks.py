"""The tick arithmetic of periodic schedules (taskrunner._schedules.ticks), in tables: interval
ticks, cron ticks in a zone across both DST transitions, and the catch-up decisions."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from taskrunner._schedules.ticks import (
    MAX_CATCH_UP,
    CatchUp,
    Cron,
    Due,
    Interval,
    Timetable,
    due_ticks,
)

BERLIN = ZoneInfo("Europe/Berlin")


def unix(*parts: int, zone: object = UTC, fold: int = 0) -> float:
    return datetime(*parts, tzinfo=zone, fold=fold).timestamp()  # type: ignore[arg-type, misc]


def local(tick: float, zone: ZoneInfo = BERLIN) -> str:
    """A tick as local wall time with its offset: ``2025-03-30 03:00+02:00``."""
    return datetime.fromtimestamp(tick, zone).isoformat(sep=" ", timespec="minutes")


@pytest.mark.parametrize(
    ("every", "moment", "expected"),
    [
        (30.0, 0.0, 30.0),
        (30.0, 29.999, 30.0),
        (30.0, 30.0, 60.0),  # strictly after: a tick is not its own next
        (30.0, 45.0, 60.0),
        (30.0, -1.0, 0.0),
        (1.5, 3.0, 4.5),
        (3.0, 9.0, 12.0),
        (86400.0, 1_761_436_800.5, 1_761_523_200.0),
        (3.3, 3 * 3.3, 4 * 3.3),  # 9.9 / 3.3 > 3: the product decides, not the quotient
    ],
)
def test_interval_next_after(every: float, moment: float, expected: float) -> None:
    tick = Interval(every).next_after(moment)
    assert tick == pytest.approx(expected)
    assert tick > moment
    assert (tick / every) == pytest.approx(round(tick / every))  # a multiple since the epoch


def test_interval_ticks_between_and_newest() -> None:
    timetable = Interval(60.0)
    assert list(timetable.between(60.0, 300.0)) == [120.0, 180.0, 240.0, 300.0]
    assert list(timetable.between(61.0, 119.0)) == []
    assert timetable.newest(0.0, 6_000_000.0, 3) == [5_999_880.0, 5_999_940.0, 6_000_000.0]
    assert timetable.newest(60.0, 130.0, 5) == [120.0]
    assert timetable.count(60.0, 300.0) == 4
    assert timetable.count(300.0, 60.0) == 0


def test_every_instance_computes_the_same_interval_ticks() -> None:
    """Ticks depend on the schedule alone, not on when an instance started."""
    timetable = Interval(30.0)
    starts = [0.0, 7.3, 29.99, 1_700_000_011.25]
    for start in starts:
        tick = timetable.next_after(start)
        assert tick % 30.0 == 0.0, (start, tick)


@pytest.mark.parametrize(
    ("expression", "after", "expected"),
    [
        ("*/5 * * * *", unix(2025, 1, 1, 10, 2), unix(2025, 1, 1, 10, 5)),
        ("*/5 * * * *", unix(2025, 1, 1, 10, 5), unix(2025, 1, 1, 10, 10)),
        ("*/5 * * * *", unix(2025, 1, 1, 10, 4) + 59.999, unix(2025, 1, 1, 10, 5)),
        ("0 3 * * *", unix(2025, 1, 1, 3, 0), unix(2025, 1, 2, 3, 0)),
        ("*/15 * * * * *", unix(2025, 1, 1, 10, 0) + 1, unix(2025, 1, 1, 10, 0) + 15),
        ("0 0 29 2 *", unix(2025, 1, 1), unix(2028, 2, 29)),
    ],
)
def test_cron_next_after_in_utc(expression: str, after: float, expected: float) -> None:
    assert Cron(expression).next_after(after) == expected


def test_cron_that_never_matches_has_no_next_tick() -> None:
    # The 31st of February: refused by cronsim as an expression that can never match.
    with pytest.raises(ValueError, match="cron '0 0 31 2 \\*'"):
        Cron("0 0 31 2 *")
    never = Cron("0 0 30 2 1")  # the 30th of February or a Monday in February: Mondays do come
    assert never.next_after(unix(2025, 1, 1)) is not None


@pytest.mark.parametrize("expression", ["", "* * * *", "61 * * * *", "* * * * * * *", "hourly"])
def test_bad_cron_is_refused(expression: str) -> None:
    with pytest.raises(ValueError, match="is not a cron expression"):
        Cron(expression)


# Europe/Berlin: 2025-03-30 02:00 CET -> 03:00 CEST (spring forward);
# 2025-10-26 03:00 CEST -> 02:00 CET (fall back). Each row: the expression, then the
# local times of its ticks from midnight on, as cronsim (Debian's cron) has them.
DST_TABLE = [
    # A fixed time inside the gap runs at the first minute after it.
    ("30 2 * * *", (2025, 3, 30), ["2025-03-30 03:00+02:00", "2025-03-31 02:30+02:00"]),
    # Two local times in the gap are one instant: one tick.
    (
        "0,30 2 * * *",
        (2025, 3, 30),
        ["2025-03-30 03:00+02:00", "2025-03-31 02:00+02:00", "2025-03-31 02:30+02:00"],
    ),
    # A time after the gap is untouched.
    ("0 3 * * *", (2025, 3, 30), ["2025-03-30 03:00+02:00", "2025-03-31 03:00+02:00"]),
    # With a * in the hour field the job is "scheduled normally": no 02:xx that day.
    (
        "*/30 * * * *",
        (2025, 3, 30),
        [
            "2025-03-30 00:30+01:00",
            "2025-03-30 01:00+01:00",
            "2025-03-30 01:30+01:00",
            "2025-03-30 03:00+02:00",
            "2025-03-30 03:30+02:00",
        ],
    ),
    # A fixed time in the repeated hour runs once, on the first pass (CEST).
    ("30 2 * * *", (2025, 10, 26), ["2025-10-26 02:30+02:00", "2025-10-27 02:30+01:00"]),
    (
        "0,30 2 * * *",
        (2025, 10, 26),
        ["2025-10-26 02:00+02:00", "2025-10-26 02:30+02:00", "2025-10-27 02:00+01:00"],
    ),
    # "Scheduled normally": the repeated hour runs on both passes.
    (
        "*/30 * * * *",
        (2025, 10, 26),
        [
            "2025-10-26 00:30+02:00",
            "2025-10-26 01:00+02:00",
            "2025-10-26 01:30+02:00",
            "2025-10-26 02:00+02:00",
            "2025-10-26 02:30+02:00",
            "2025-10-26 02:00+01:00",
            "2025-10-26 02:30+01:00",
            "2025-10-26 03:00+01:00",
        ],
    ),
]


@pytest.mark.parametrize(("expression", "day", "expected"), DST_TABLE)
def test_cron_across_dst_in_berlin(
    expression: str, day: tuple[int, int, int], expected: list[str]
) -> None:
    timetable = Cron(expression, BERLIN)
    start = unix(*day, zone=BERLIN)
    ticks = list(timetable.between(start, start + 2 * 86400))[: len(expected)]
    assert [local(t) for t in ticks] == expected
    assert ticks == sorted(set(ticks)), "ticks must be strictly increasing"


@pytest.mark.parametrize(("expression", "day", "expected"), DST_TABLE)
def test_a_restart_at_any_instant_sees_the_same_cron_ticks(
    expression: str, day: tuple[int, int, int], expected: list[str]
) -> None:
    """The first tick after any instant is the next one of the whole sequence: a
    leader that takes over in the middle of a DST transition (in the repeated hour
    too) neither repeats a tick nor skips one."""
    timetable = Cron(expression, BERLIN)
    start = unix(*day, zone=BERLIN)
    ticks = list(timetable.between(start, start + 4 * 86400))
    for moment in [start + minutes * 60 + 17.5 for minutes in range(0, 36 * 60, 19)]:
        want = next(t for t in ticks if t > moment)
        assert timetable.next_after(moment) == want, local(moment)
        assert list(timetable.between(moment, ticks[-1])) == [t for t in ticks if t > moment]


def test_cron_in_a_zone_ticks_on_local_time() -> None:
    nightly = Cron("0 3 * * *", BERLIN)
    winter = nightly.next_after(unix(2025, 1, 15))
    summer = nightly.next_after(unix(2025, 7, 15))
    assert local(winter) == "2025-01-15 03:00+01:00"
    assert local(summer) == "2025-07-15 03:00+02:00"
    assert winter == unix(2025, 1, 15, 2, 0)
    assert summer == unix(2025, 7, 15, 1, 0)


GRACE = 10.0
MINUTE = Interval(60.0)


@pytest.mark.parametrize(
    ("watermark", "now", "catch_up", "fire", "missed"),
    [
        # On time: the tick due now (or up to the grace ago) fires, whatever catch_up says.
        (60.0, 120.0, "none", [120.0], 0),
        (60.0, 120.5, "latest", [120.0], 0),
        (60.0, 129.0, "none", [120.0], 0),  # a handover made it 9 s late
        (60.0, 129.99, "none", [120.0], 0),
        (60.0, 130.0, "none", [], 1),  # the grace late: missed
        (60.0, 119.999, "all", [], 0),  # never early
        (120.0, 150.0, "all", [], 0),
        (120.0, 120.0, "all", [], 0),
        (130.0, 120.0, "all", [], 0),  # a watermark in the future (a clock behind)
        # A tick past the grace was missed: catch_up decides.
        (60.0, 131.0, "none", [], 1),
        (60.0, 131.0, "latest", [120.0], 0),
        (60.0, 131.0, "all", [120.0], 0),
        # The fleet was down from 60 to 600.5: one on-time tick (600) and 8 missed.
        (60.0, 600.5, "latest", [600.0], 8),  # the on-time run covers the missed ones
        (60.0, 600.5, "none", [600.0], 8),
        (60.0, 600.5, "all", [120.0, 180.0, 240.0, 300.0, 360.0, 420.0, 480.0, 540.0, 600.0], 0),
        # ... down until 630: every tick was missed.
        (60.0, 630.0, "latest", [600.0], 8),
        (60.0, 630.0, "none", [], 9),
        (60.0, 630.0, "all", [120.0, 180.0, 240.0, 300.0, 360.0, 420.0, 480.0, 540.0, 600.0], 0),
        # A baseline between ticks (a schedule first seen at 75).
        (75.0, 120.0, "none", [120.0], 0),
    ],
)
def test_due_ticks(
    watermark: float, now: float, catch_up: CatchUp, fire: list[float], missed: int
) -> None:
    assert due_ticks(MINUTE, watermark, now, catch_up=catch_up, grace=GRACE) == Due(
        fire=tuple(fire), missed=missed
    )


def test_catch_up_all_is_bounded() -> None:
    # 200 minutes down: 199 missed ticks and one on time.
    due = due_ticks(MINUTE, 0.0, 200 * 60 + 5, catch_up="all", grace=GRACE)
    assert len(due.fire) == MAX_CATCH_UP + 1
    assert due.fire[0] == (200 - MAX_CATCH_UP) * 60  # the newest missed ones
    assert due.fire[-1] == 200 * 60
    assert due.missed == 199 - MAX_CATCH_UP


@pytest.mark.parametrize("catch_up", ["latest", "none", "all"])
def test_a_long_outage_of_a_frequent_cron_is_decided_quickly(catch_up: CatchUp) -> None:
    """A week without a leader, a tick every second: the decision looks back over
    the newest ticks only, not all 604,800 of them."""
    every_second = Cron("* * * * * *")
    start = unix(2025, 1, 1)
    now = start + 7 * 86400 + 0.5
    began = time.perf_counter()
    due = due_ticks(every_second, start, now, catch_up=catch_up, grace=GRACE)
    assert time.perf_counter() - began < 5.0
    assert all(start < t <= now for t in due.fire)
    assert due.fire == tuple(sorted(set(due.fire)))
    if catch_up == "all":
        assert len(due.fire) == MAX_CATCH_UP + GRACE
    else:
        assert len(due.fire) == GRACE  # the on-time ones: one a second over the grace
    assert due.missed >= 1


@pytest.mark.parametrize(
    "timetable",
    [Interval(30.0), Interval(7.0), Cron("*/5 * * * *", BERLIN), Cron("30 2 * * *", BERLIN)],
    ids=["30s", "7s", "every-5-min-berlin", "nightly-berlin"],
)
@pytest.mark.parametrize("catch_up", ["latest", "none", "all"])
def test_passes_fire_each_tick_once_and_never_early(
    timetable: Timetable, catch_up: CatchUp
) -> None:
    """A leader passing every few seconds over the DST weekend, its watermark moved
    to each fired tick, fires every tick exactly once, none before it is due."""
    start = unix(2025, 3, 29, zone=BERLIN)
    end = start + 3 * 86400
    watermark, now, fired = start, start, []
    while now < end:
        now += 53.7
        due = due_ticks(timetable, watermark, now, catch_up=catch_up, grace=60.0)
        assert all(t <= now for t in due.fire), "fired early"
        fired += due.fire
        if due.fire:
            watermark = due.fire[-1]
    assert fired == list(timetable.between(start, watermark))
    assert len(fired) == len(set(fired))


def test_a_timedelta_interval_is_its_seconds() -> None:
    from taskrunner import Schedule

    schedule = Schedule(name="s", task="t", every=timedelta(minutes=5))
    assert schedule.every == 300.0
    assert schedule.timetable == Interval(300.0)
