"""Testing your periodic schedules on trio's MockClock (pytest-trio's ``autojump_clock``).

Run it with ``python -m pytest examples/test_periodic_schedules.py``. The
in-memory backend takes its time from trio's clock, so jump the clock to the
instant you want to test (a DST change, the end of a month) and let a
simulated day pass in milliseconds: the schedules fire exactly as they would.
"""

from datetime import datetime
from zoneinfo import ZoneInfo

import pytest
import trio
from trio.testing import MockClock

from taskrunner import TaskContext, TaskRunner, TaskRunnerConfig
from taskrunner.backends.memory import MemoryBackend

pytestmark = pytest.mark.trio
BERLIN = ZoneInfo("Europe/Berlin")


def make_runner() -> tuple[TaskRunner, list[str]]:
    """The application's schedules, declared as in production."""
    runner = TaskRunner(TaskRunnerConfig(consumer_group="test"), MemoryBackend())
    ran: list[str] = []

    @runner.task
    async def report(payload: dict[str, str], ctx: TaskContext) -> None:
        assert ctx.tick is not None
        ran.append(datetime.fromtimestamp(ctx.tick, BERLIN).isoformat(sep=" "))

    runner.add_schedule(
        "nightly-report", task="report", cron="30 2 * * *", timezone="Europe/Berlin"
    )
    return runner, ran


async def serve_until(runner: TaskRunner, until: float) -> None:
    async with trio.open_nursery() as nursery:
        await nursery.start(runner.serve)
        await trio.sleep_until(until)
        runner.shutdown()


async def test_the_nightly_report_on_the_night_clocks_go_back(autojump_clock: MockClock) -> None:
    # 02:00-03:00 happens twice on 26 October 2025: first in CEST, then in CET.
    start = datetime(2025, 10, 26, 1, 50, tzinfo=BERLIN).timestamp()
    autojump_clock.jump(start - trio.current_time())
    runner, ran = make_runner()
    await serve_until(runner, start + 3 * 3600)  # until 03:50 CET
    assert ran == ["2025-10-26 02:30:00+02:00"], "once, at the first 02:30"


async def test_one_catch_up_run_after_an_outage(autojump_clock: MockClock) -> None:
    start = datetime(2025, 6, 1, 12, 0, tzinfo=BERLIN).timestamp()
    autojump_clock.jump(start - trio.current_time())
    runner, ran = make_runner()
    await serve_until(runner, start + 60)  # the fleet first runs at noon...
    await trio.sleep(3 * 86400)  # ...then is down for three nights
    await serve_until(runner, trio.current_time() + 60)
    # catch_up="latest" (the default): one run, for the most recent missed tick.
    assert ran == ["2025-06-04 02:30:00+02:00"]
