"""Flow control: several queues, fleet-wide concurrency and rate limits, pause and resume.

One runner reads three queues by weight (6:3:1 of the reads while all are busy). The
``charge`` task has a concurrency limit (at most 2 runs at once, fleet-wide) and the
``email`` task a rate limit per domain (at most 5 starts in any second for each
domain); runs that must wait go back through the delayed set and do not count as
attempts. The ``low`` queue is paused, then resumed: its work waits in its stream.

Runs on trio's ``MockClock`` (``autojump_threshold=0``), so the waits below pass in
an instant; the times printed are the runner's. Run it with
``python examples/flow_control.py``.
"""

import bisect
import logging
from collections import defaultdict
from typing import Any

import trio
import trio.testing

from taskrunner import RateLimit, TaskRunner, TaskRunnerConfig, admin
from taskrunner.backends.memory import MemoryBackend


def most_in_any_second(starts: list[float]) -> int:
    ordered = sorted(starts)
    return max(bisect.bisect_left(ordered, t + 1.0) - i for i, t in enumerate(ordered))


async def main() -> None:
    logging.basicConfig(level=logging.ERROR)
    backend = MemoryBackend()
    # --8<-- [start:config]
    config = TaskRunnerConfig(
        consumer_group="shop",
        queues={"critical": 6, "default": 3, "low": 1},  # or ("critical", "default", "low")
    )
    runner = TaskRunner(config, backend)
    # --8<-- [end:config]
    running = most_running = 0
    emails: dict[str, list[float]] = defaultdict(list)
    reports: list[float] = []
    resumed = trio.Event()
    start = trio.current_time()

    # --8<-- [start:tasks]
    @runner.task(name="charge", queue="critical", max_concurrency=2)
    async def charge(payload: dict[str, int]) -> None:
        nonlocal running, most_running
        running += 1
        most_running = max(most_running, running)
        await trio.sleep(1.0)  # the card processor takes a second
        running -= 1

    @runner.task(
        name="email",
        queue="default",  # a task without one goes to the first queue named, "critical"
        rate_limit=RateLimit(5, per=1.0),
        rate_limit_key=lambda p: p["domain"],
    )
    async def email(payload: dict[str, str]) -> None:
        emails[payload["domain"]].append(trio.current_time())

    @runner.task(name="report", queue="default")
    async def report(payload: Any) -> None:
        reports.append(trio.current_time() - start)
        resumed.set()

    # --8<-- [end:tasks]

    async with trio.open_nursery() as nursery:
        await nursery.start(runner.serve)
        # --8<-- [start:pause]
        await admin.pause(backend, "shop", queue="low")  # or task="charge"; resume(...)
        await trio.sleep(1.1)  # every runner notices within about a second
        await runner.dispatch("report", {"month": "2026-11"}, queue="low")  # not the task's queue
        # --8<-- [end:pause]
        await runner.dispatch_many("charge", [{"cents": 100 * i} for i in range(6)])
        await runner.dispatch_many(
            "email",
            [
                {"domain": d, "to": f"u{i}@{d}"}
                for i in range(15)
                for d in ("a.example", "b.example")
            ],
        )
        await trio.sleep(10)
        print(
            f"while low is paused: {len(reports)} report(s) ran, "
            f"{await backend.length('shop', queue='low')} waiting in low"
        )
        await admin.resume(backend, "shop", queue="low")
        with trio.fail_after(60):
            await resumed.wait()
        runner.shutdown()
    stats = runner.statistics()
    print(f"charge: 6 runs, at most {most_running} at once")
    for domain, starts in sorted(emails.items()):
        most = most_in_any_second(starts)
        print(f"email to {domain}: {len(starts)} sent, at most {most} in any second")
    print(f"report ran after the resume: {reports[0] > 11.0}")
    print(f"waits (not attempts): {stats.deferred > 0}; failed: {stats.failed}")


if __name__ == "__main__":
    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
