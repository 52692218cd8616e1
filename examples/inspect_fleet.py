"""A serving fleet as an operator tool sees it, through the backend's inspection protocol.

``taskrunner.admin`` and the ``stats``, ``top``, ``keys`` and ``flush`` commands read
the store only through :class:`taskrunner.backends.Inspection`, which both shipped
backends implement; so can your tools. Runs on the in-memory backend on trio's mock
clock (so its output is the same every run): ``python examples/inspect_fleet.py``.
The same calls work on a ``RedisBackend``.
"""

import trio
from trio.testing import MockClock

from taskrunner import TaskRunner, TaskRunnerConfig
from taskrunner.backends import Inspection, KeyKind
from taskrunner.backends.memory import MemoryBackend


async def report(inspection: Inspection, group: str) -> None:
    # --8<-- [start:report]
    await inspection.ping()  # one round trip; raises BackendError when unreachable
    print(f"groups on the store: {await inspection.list_groups()}")
    for beat in await inspection.list_heartbeats():
        print(f"instance on {beat.host}, heartbeat {beat.ttl:.0f} s left")
    lease = await inspection.read_lease(group)
    print(f"leader lease: {'none' if lease is None else f'held, {lease.ttl:.1f} s left'}")
    counts = await inspection.count_keys(group)
    kinds = ", ".join(f"{kind} {counts[kind]}" for kind in KeyKind if counts[kind])
    print(f"keys of {group}: {counts.total} ({kinds})")
    # --8<-- [end:report]


async def main() -> None:
    backend = MemoryBackend()
    runner = TaskRunner(TaskRunnerConfig(consumer_group="billing", host="worker-1"), backend)

    @runner.task(name="remind")
    async def remind(payload: str) -> None: ...

    async with trio.open_nursery() as nursery:
        await nursery.start(runner.serve)
        while not runner.is_leader:
            await runner.wait_leadership_changed()
        await runner.dispatch_delayed("remind", "A-17", delay=3600)
        await report(backend, "billing")
        nursery.cancel_scope.cancel()


if __name__ == "__main__":
    trio.run(main, clock=MockClock(autojump_threshold=0))
