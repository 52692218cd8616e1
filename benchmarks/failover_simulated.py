"""Leader failover time in a simulated fleet (MemoryBackend + trio's MockClock).

Three runners elect a leader; at a random moment the leader either crashes
(its link is cut, then its serve is cancelled: no resign) or stops
gracefully (it resigns). Reports the simulated time until another runner
leads, over many seeds, beside the lease TTL. Simulated time: the numbers are
the protocol's, not this machine's speed (trio's scheduling order still varies
a little from run to run, so medians move by a few hundredths of a TTL).

    python benchmarks/failover_simulated.py [--runs N]
"""

from __future__ import annotations

import argparse
import logging
import random
import statistics

import trio
import trio.testing

from taskrunner import TaskRunner, TaskRunnerConfig
from taskrunner.backends.memory import MemoryBackend
from taskrunner.testing import PartitionedBackend

TTL = 5.0


async def failover(seed: int, graceful: bool) -> float:
    rng = random.Random(seed)
    random.seed(seed)  # the lease keeper's jitter
    backend = MemoryBackend()
    links = [PartitionedBackend(backend) for _ in range(3)]
    runners = [
        TaskRunner(
            TaskRunnerConfig(consumer_group="g", host=f"h{i}", leader_lease_ttl=TTL),
            link,
        )
        for i, link in enumerate(links)
    ]
    async with trio.open_nursery() as outer:
        scopes = [trio.CancelScope() for _ in runners]
        for runner, scope in zip(runners, scopes, strict=True):

            async def serve(runner: TaskRunner = runner, scope: trio.CancelScope = scope) -> None:
                with scope:
                    await runner.serve()

            outer.start_soon(serve)
        while not any(r.is_leader for r in runners):  # noqa: ASYNC110
            await trio.sleep(0.001)
        await trio.sleep(rng.uniform(0, TTL))
        (old,) = (i for i, r in enumerate(runners) if r.is_leader)
        stopped = trio.current_time()
        if not graceful:
            links[old].cut = True
        scopes[old].cancel()
        while not any(r.is_leader for i, r in enumerate(runners) if i != old):  # noqa: ASYNC110
            await trio.sleep(0.001)
        took = trio.current_time() - stopped
        outer.cancel_scope.cancel()
    return took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=50)
    args = parser.parse_args()
    logging.disable(logging.CRITICAL)  # the crashed leader's lost calls are expected
    print(f"failover_simulated: 3 runners, lease TTL {TTL:g} s, {args.runs} seeds each")
    for graceful in (False, True):
        times = [
            trio.run(failover, seed, graceful, clock=trio.testing.MockClock(autojump_threshold=0))
            for seed in range(args.runs)
        ]
        kind = "graceful stop" if graceful else "crash (no resign)"
        print(
            f"  {kind:18} median {statistics.median(times):.2f} s, max {max(times):.2f} s"
            f"  = {max(times) / TTL:.2f} x TTL"
        )


if __name__ == "__main__":
    main()
