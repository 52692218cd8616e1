"""Periodic tasks: a cron schedule, an interval schedule, and the tick each run serves.

Runs a simulated morning in about a second: trio's MockClock (with autojump)
stands in for the wall clock, and the in-memory backend takes its time from
trio's clock, so the schedules fire exactly as they would in production, only
without waiting. On Redis the same code fires on unix time.
"""

from datetime import UTC, datetime

import trio
import trio.testing

from taskrunner import TaskContext, TaskRunner, TaskRunnerConfig, admin
from taskrunner.backends.memory import MemoryBackend

MORNING = datetime(2025, 3, 30, 0, 55, tzinfo=UTC).timestamp()
"""00:55 UTC on the day Berlin springs forward (02:00 CET -> 03:00 CEST)."""

clock = trio.testing.MockClock(autojump_threshold=0)
backend = MemoryBackend()
runner = TaskRunner(TaskRunnerConfig(consumer_group="ops"), backend)


def hhmm(tick: float | None) -> str:
    assert tick is not None
    return datetime.fromtimestamp(tick, UTC).strftime("%m-%d %H:%M UTC")


# --8<-- [start:declare]
# A task and its schedule in one: runs at minute 0, 15, 30 and 45 of every hour.
@runner.periodic(cron="*/15 * * * *", name="cleanup")
async def cleanup(payload: None, ctx: TaskContext) -> None:
    print(f"cleanup for the {hhmm(ctx.tick)} tick")


@runner.task
async def report(payload: dict[str, str], ctx: TaskContext) -> None:
    print(f"{payload['kind']} report for the {hhmm(ctx.tick)} tick ({ctx.schedule})")


@runner.task
async def ping(payload: None, ctx: TaskContext) -> None:
    print(f"ping for the {hhmm(ctx.tick)} tick")


# Schedules of tasks registered apart: a cron line in a time zone, and an interval.
runner.add_schedule(
    "nightly-report",
    task="report",
    cron="30 2 * * *",  # 02:30 Berlin time does not exist today: it runs at 03:00 CEST
    timezone="Europe/Berlin",
    payload={"kind": "daily"},
)
runner.add_schedule("heartbeat", task="ping", every=600.0)  # seconds, or a timedelta
# --8<-- [end:declare]


async def main() -> None:
    clock.jump(MORNING - trio.current_time())
    async with trio.open_nursery() as nursery:
        await nursery.start(runner.serve)
        await trio.sleep_until(MORNING + 35 * 60 + 1)  # just past 01:30 UTC (03:30 in Berlin)
        runner.shutdown()
    for row in await admin.schedules(backend, "ops"):
        print(
            f"{row.name}: {row.spec}, last fired {hhmm(row.last_fired)} "
            f"({row.last_outcome} at {hhmm(row.last_outcome_tick)}), next {hhmm(row.next_fire)}"
        )


if __name__ == "__main__":
    trio.run(main, clock=clock)
