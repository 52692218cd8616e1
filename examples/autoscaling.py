"""desired_instances and an autoscaler that follows it, on trio's MockClock (virtual time).

Run it with ``python examples/autoscaling.py``: one-second tasks arrive at 3 a second,
then at 11, then at 3 again. The group's leader publishes how many instances (of 2
workers each) keep the predicted wait under ``target_wait``; a stand-in for KEDA reads
the number every 5 s, as KEDA polls its Prometheus query, and starts or stops instances
to match. A few seconds of real time.
"""

import attrs
import trio
from trio.testing import MockClock

from taskrunner import TaskRunner, TaskRunnerConfig, admin
from taskrunner.backends.memory import MemoryBackend

# --8<-- [start:config]
config = TaskRunnerConfig(
    consumer_group="thumbnails",
    num_workers=2,
    target_wait=5.0,  # keep the predicted wait under 5 s...
    max_instances=20,  # ...with at most 20 instances
    scale_down_hold=60.0,  # step down only after a minute of lower need
    long_queue_threshold=4.0,  # an aggregator tick every 2 s
)
# --8<-- [end:config]


async def make_thumbnail(payload: None) -> None:
    await trio.sleep(1)  # one virtual second per thumbnail


async def main() -> None:
    backend = MemoryBackend()
    producer = TaskRunner(config, backend)  # dispatches only
    producer.task(name="make_thumbnail")(make_thumbnail)
    rate = 0
    seen: list[int] = []
    hosts = iter(range(1, 1000))

    async with trio.open_nursery() as nursery:
        fleet: list[trio.CancelScope] = []

        async def instance(scope: trio.CancelScope) -> None:
            runner = TaskRunner(attrs.evolve(config, host=f"pod-{next(hosts)}"), backend)
            runner.task(name="make_thumbnail")(make_thumbnail)
            with scope:
                await runner.serve()

        # --8<-- [start:autoscaler]
        async def autoscaler() -> None:
            """Stands for KEDA: read the number, scale the deployment to it."""
            while True:
                desired = await admin.desired_instances(backend, "thumbnails")
                if desired is not None and desired != len(fleet):
                    seen.append(desired)
                    while len(fleet) < desired:
                        fleet.append(trio.CancelScope())
                        nursery.start_soon(instance, fleet[-1])
                    while len(fleet) > desired:
                        fleet.pop().cancel()  # a graceful stop: the instance drains
                await trio.sleep(5)

        # --8<-- [end:autoscaler]

        async def load() -> None:
            await trio.sleep(0.5)
            while True:
                await producer.dispatch_many("make_thumbnail", [None] * rate)
                await trio.sleep(1)

        fleet.append(trio.CancelScope())
        nursery.start_soon(instance, fleet[-1])
        nursery.start_soon(autoscaler)
        nursery.start_soon(load)
        for rate, seconds in ((3, 100), (11, 200), (3, 300)):
            await trio.sleep(seconds)
            print(f"{rate:>2} tasks/s for {seconds} s: {len(fleet)} instance(s)")
        nursery.cancel_scope.cancel()

    print("desired instances over time: " + " -> ".join(map(str, seen)))


if __name__ == "__main__":
    trio.run(main, clock=MockClock(autojump_threshold=0))
