"""The worker tuner and the long-queue hook, on trio's MockClock (virtual time).

Run it with ``python examples/tuning.py``: a backlog of 400 one-second tasks
arrives at a runner with 4 workers; the leader's tuner grows the pool until the
predicted wait is near ``desired_wait_time``, the hook reports the backlog
meanwhile, and the pool shrinks again once the queue is empty. About a second
of real time.
"""

import logging

import trio
from trio.testing import MockClock

from taskrunner import Stats, TaskRunner, TaskRunnerConfig
from taskrunner.backends.memory import MemoryBackend

log = logging.getLogger("myapp")
hook_calls: list[float] = []


async def report_gauge(name: str, value: float) -> None:
    """Stands for your metrics client."""
    await trio.sleep(0.01)
    hook_calls.append(value)


# --8<-- [start:hook]
async def queue_backing_up(stats: Stats) -> None:
    """long_queue_hook: called by the leader on every tick with a long predicted wait."""
    log.warning(
        "queue backing up: predicted wait %.0f ms, est. %.0f tasks/s",
        stats.predicted_wait_time,
        stats.tps,
    )
    with trio.move_on_after(2):  # a slow hook delays the next tick: bound it
        await report_gauge("taskrunner.predicted_wait_ms", stats.predicted_wait_time)


# --8<-- [end:hook]


# --8<-- [start:config]
config = TaskRunnerConfig(
    consumer_group="emails",
    num_workers=4,  # the starting point
    min_workers=2,
    max_workers=64,
    desired_wait_time=20.0,  # aim for a 20 s predicted wait...
    desired_wait_time_tolerance=5.0,  # ...and leave the pool alone between 15 and 25 s
    tuning_cooldown=10.0,
    long_queue_threshold=30.0,  # hook above a 30 s predicted wait; a tick every 15 s
    long_queue_hook=queue_backing_up,
)
# --8<-- [end:config]


async def main() -> None:
    runner = TaskRunner(config, MemoryBackend())

    @runner.task(name="send_email")
    async def send_email(payload: int) -> None:
        await trio.sleep(1)  # one virtual second per email

    async with trio.open_nursery() as nursery:
        await nursery.start(runner.serve)
        await runner.dispatch_many("send_email", range(400))
        capacities = [runner.capacity]
        for _ in range(16):
            await trio.sleep(15)  # one aggregator tick
            if runner.capacity != capacities[-1]:
                capacities.append(runner.capacity)
        # --8<-- [start:stats]
        stats = await runner.get_timing_statistics()
        for task, avg_ms in stats.per_task_timing.items():
            print(f"{task}: avg {avg_ms:.0f} ms")
        print(f"predicted wait: {stats.predicted_wait_time:.0f} ms, est. {stats.tps:.0f} tasks/s")
        # --8<-- [end:stats]
        runner.shutdown()

    print("pool capacity over time: " + " -> ".join(map(str, capacities)))
    print(f"grew to {max(capacities)}, ended at {capacities[-1]}")
    print(f"long_queue_hook called {len(hook_calls)} time(s)")
    print(f"completed {runner.statistics().completed}")


if __name__ == "__main__":
    trio.run(main, clock=MockClock(autojump_threshold=0))
