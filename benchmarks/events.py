"""The event stream's cost, in one run: main, this tree with events off, and with them on.

``TaskRunnerConfig(events=True)`` must keep at least 0.85x of the processing rate with
events off, and events off at least 0.98x of a checkout without the feature. On a
shared, noisy machine separate runs are not comparable, so this script starts one
server and alternates the three cases round by round (the order rotating), each
round in a fresh process of that checkout's interpreter, and reports the ratios of
the medians:

    python benchmarks/events.py --baseline /path/to/main [--rounds 3] [--tasks 10000]

Each round serves ``--tasks`` no-op tasks dispatched with ``dispatch_many`` (one
runner, 32 workers, as ``benchmarks/ab.py`` does) on ``RedisBackend`` and reports
the processing rate (``run_noop_tasks`` of the checkout's own harness), the CPU per
task of this process and of the server (``INFO cpu``: what a loaded machine disturbs
least), and the events written (``XLEN`` of the group's event stream: 3 per task when
on).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve()
CASES = ("main", "off", "on")


def interpreter(tree: Path) -> str:
    venv = tree / ".venv" / "bin" / "python"
    return str(venv) if venv.exists() else sys.executable


def one_round(tree: Path, url: str, tasks: int, events: bool, run: int) -> dict[str, float]:
    env = dict(os.environ, PYTHONPATH=f"{tree}{os.pathsep}{tree / 'benchmarks'}")
    args = [interpreter(tree), str(HERE), "--child", url, str(tasks), str(int(events)), str(run)]
    out = subprocess.run(args, cwd=tree, env=env, check=True, capture_output=True, text=True).stdout
    rates: dict[str, float] = json.loads(out.strip().splitlines()[-1])
    return rates


def child(url: str, tasks: int, events: bool, run: int) -> None:
    sys.path.insert(0, str(Path.cwd() / "benchmarks"))
    import time

    import redis
    import trio
    from _harness import run_noop_tasks

    from taskrunner import TaskRunner, TaskRunnerConfig
    from taskrunner.backends.redis import RedisBackend

    group = f"ev{run}{int(events)}"
    options = {"events": True} if events else {}  # a checkout without the field: off

    server = redis.Redis.from_url(url)

    def redis_cpu() -> float:
        cpu = server.info("cpu")
        return float(cpu["used_cpu_user"]) + float(cpu["used_cpu_sys"])

    async def measure() -> float:
        backend = RedisBackend.from_url(url, queue="tasks")
        config = TaskRunnerConfig(consumer_group=group, num_workers=32, batch_size=32, **options)
        rates = await run_noop_tasks(TaskRunner(config, backend), tasks)
        await backend.aclose()
        return rates.process

    before, cpu = redis_cpu(), time.process_time()
    process = trio.run(measure)
    py_us = (time.process_time() - cpu) / tasks * 1e6
    redis_us = (redis_cpu() - before) / tasks * 1e6
    written = int(server.xlen(f"taskrunner:{group}:events") or 0)
    server.delete(f"taskrunner:{group}:events", f"taskrunner:{group}:tasks")
    result = {"process": process, "py_us": py_us, "redis_us": redis_us, "events": written}
    print(json.dumps(result))


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        url, tasks, events, run = sys.argv[2:6]
        child(url, int(tasks), events == "1", int(run))
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", type=Path, required=True, help="a checkout without events")
    parser.add_argument("--candidate", type=Path, default=HERE.parent.parent)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--tasks", type=int, default=10_000)
    args = parser.parse_args()

    from taskrunner.testing import running_server

    trees = {"main": args.baseline.resolve(), "off": args.candidate.resolve()}
    trees["on"] = trees["off"]
    results: dict[str, list[dict[str, float]]] = {case: [] for case in CASES}
    with running_server() as server:
        for n in range(args.rounds):
            order = CASES[n % 3 :] + CASES[: n % 3]
            for case in order:
                rates = one_round(trees[case], server.url, args.tasks, case == "on", n)
                results[case].append(rates)
                print(
                    f"  round {n + 1} {case}: process {rates['process']:,.0f}/s, "
                    f"py {rates['py_us']:.1f} us/task, redis {rates['redis_us']:.1f} us/task, "
                    f"events {rates['events']:,.0f}",
                    flush=True,
                )
    print(f"events: {args.tasks} no-op tasks, 32 workers, {args.rounds} rounds, {server.kind}")
    med = {
        (case, m): statistics.median(r[m] for r in results[case])
        for case in CASES
        for m in ("process", "py_us", "redis_us")
    }
    for case in CASES:
        print(
            f"  {case:<4} process {med[case, 'process']:>9,.0f}/s  "
            f"py {med[case, 'py_us']:.1f} us/task  redis {med[case, 'redis_us']:.1f} us/task"
        )
    # The rate is what the targets name; CPU per task (this process plus the server's)
    # is what a loaded machine disturbs least: throughput as CPU allows it.
    cpu = {case: med[case, "py_us"] + med[case, "redis_us"] for case in CASES}
    for a, b, target in (("off", "main", 0.98), ("on", "off", 0.85)):
        rate = med[a, "process"] / med[b, "process"]
        by_cpu = cpu[b] / cpu[a]
        print(f"  {a} / {b}: rate {rate:.3f}, by CPU per task {by_cpu:.3f}  (target >= {target})")


if __name__ == "__main__":
    main()
