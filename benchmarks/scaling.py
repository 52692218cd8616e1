"""Processing throughput with 1, 2 and 4 worker processes against one Redis.

Enqueues N no-op tasks (``dispatch_many``), starts P worker processes (each one
``TaskRunner`` serving with concurrency 32, as in ``redis_end_to_end.py``), and
times from their start until the stream is empty (``delete_on_ack``: an entry
leaves the stream when it is acked). The processes are started first and told
to go at once, so the time includes each one's start of ``serve`` (connecting,
the group) but not Python's start-up. Also reports the server's CPU per task
over the processing, and the ceiling one Redis core could feed at that cost
(1 s / CPU per task).

On a 2-core machine the processes share the cores with Redis and with each
other, so more processes cannot scale linearly here: the numbers show how
close the system stays to what the machine can give, not what a larger host
would reach.

    python benchmarks/scaling.py [--tasks N] [--processes 1,2,4] [--repeat R]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import redis

from taskrunner.testing import running_server

HERE = Path(__file__).resolve().parent
STREAM = "taskrunner:scale:tasks"


def child(url: str) -> None:
    import trio

    from taskrunner import TaskRunner, TaskRunnerConfig
    from taskrunner.backends.redis import RedisBackend

    async def main() -> None:
        backend = RedisBackend.from_url(url)
        runner = TaskRunner(
            TaskRunnerConfig(consumer_group="scale", num_workers=32, batch_size=32), backend
        )

        @runner.task()
        async def noop(payload: object) -> None:
            pass

        print("ready", flush=True)
        await trio.to_thread.run_sync(sys.stdin.readline)  # "go": every process at once
        async with trio.open_nursery() as nursery:
            await nursery.start(runner.serve)
            await trio.to_thread.run_sync(sys.stdin.read)  # until the parent closes it
            nursery.cancel_scope.cancel()
        await backend.aclose()

    trio.run(main)


def enqueue(url: str, n: int) -> None:
    import trio

    from taskrunner import TaskRunner, TaskRunnerConfig
    from taskrunner.backends.redis import RedisBackend

    async def main() -> None:
        backend = RedisBackend.from_url(url)
        runner = TaskRunner(TaskRunnerConfig(consumer_group="scale"), backend)

        @runner.task()
        async def noop(payload: object) -> None:
            pass

        for at in range(0, n, 10_000):
            await runner.dispatch_many("noop", [None] * min(10_000, n - at))
        await backend.aclose()

    trio.run(main)


def redis_cpu(client: redis.Redis) -> float:
    cpu = client.info("cpu")
    return float(cpu["used_cpu_user"]) + float(cpu["used_cpu_sys"])


def one_run(url: str, client: redis.Redis, n: int, processes: int) -> tuple[float, float]:
    """Tasks per second and Redis CPU µs per task, with ``processes`` workers."""
    client.delete(STREAM)
    enqueue(url, n)
    env = dict(os.environ, PYTHONPATH=f"{HERE.parent}{os.pathsep}{HERE}")
    workers = [
        subprocess.Popen(
            [sys.executable, __file__, "--child", url],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=env,
            text=True,
        )
        for _ in range(processes)
    ]
    try:
        for worker in workers:
            assert worker.stdout is not None
            assert worker.stdout.readline().strip() == "ready"
        start, cpu = time.perf_counter(), redis_cpu(client)
        for worker in workers:
            assert worker.stdin is not None
            worker.stdin.write("go\n")
            worker.stdin.flush()
        while client.xlen(STREAM):
            time.sleep(0.002)
        elapsed = time.perf_counter() - start
        cpu = redis_cpu(client) - cpu
    finally:
        for worker in workers:
            assert worker.stdin is not None
            worker.stdin.close()
        for worker in workers:
            worker.wait(timeout=30)
    return n / elapsed, cpu / n * 1e6


def main() -> None:
    if len(sys.argv) > 2 and sys.argv[1] == "--child":
        child(sys.argv[2])
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=40_000)
    parser.add_argument("--processes", default="1,2,4")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    counts = [int(p) for p in args.processes.split(",")]
    with running_server() as server:
        client = redis.Redis.from_url(server.url)
        results: dict[int, list[tuple[float, float]]] = {p: [] for p in counts}
        for _ in range(args.repeat):
            for p in counts:  # interleaved, so the machine's noise falls on all alike
                results[p].append(one_run(server.url, client, args.tasks, p))
    print(
        f"scaling: {args.tasks} no-op tasks, concurrency 32 per process, {server.kind}, "
        f"{os.cpu_count()} cores, median of {args.repeat}"
    )
    base = statistics.median(r for r, _ in results[counts[0]])
    for p in counts:
        rate = statistics.median(r for r, _ in results[p])
        cpu = statistics.median(c for _, c in results[p])
        print(
            f"  {p} process(es): {rate:>9,.0f} tasks/s  ({rate / base:.2f}x)  "
            f"Redis CPU {cpu:.2f} us/task  (one Redis core: {1e6 / cpu:>9,.0f} tasks/s)"
        )


if __name__ == "__main__":
    main()
