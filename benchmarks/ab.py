"""Before and after in one run: the end-to-end Redis benchmark from two checkouts.

A change to the per-task path must cost at most 3% of processing throughput,
measured before and after in one run. On a shared, noisy machine two separate
runs are not comparable, so this script starts one server and alternates the
two checkouts round by round (A B, B A, A B, ...), each round in a fresh
process of that checkout's own interpreter, and reports the ratio of the
medians.

    python benchmarks/ab.py [--baseline REF_OR_PATH] [--candidate PATH] [--rounds 6]

``--baseline`` is a checkout's path or a git ref (default ``HEAD``: the last
commit against the working tree); a ref is checked out into a temporary
worktree for the run. A checkout's interpreter is its ``.venv/bin/python``
when it has one, else this one (``PYTHONPATH`` then puts that checkout's
package first). Each round, in one process of that checkout, measures:

- ``process`` and ``enqueue``: ``run_noop_tasks`` from the checkout's own
  ``benchmarks/_harness.py`` (20,000 no-op tasks, 32 workers, one process, as
  ``redis_end_to_end.py`` does);
- ``redis_us``: the server's CPU (``INFO``) per task over that run, in µs;
- ``py_us``: this process's CPU per task over the processing, in µs (less
  sensitive than the rates to other programs sharing the machine);
- ``features``: the processing rate with a timeout, a context, one middleware
  and the result kept (``run_noop_tasks(..., features=True, keep_result=True)``;
  without the result where the checkout's harness has no ``keep_result``);
- ``dispatch32``: single ``dispatch`` calls, 32 in flight, per second;
- ``memory1``: in memory, ``await dispatch`` once per task while serving,
  tasks per second from the first dispatch to the last ack.

Only the public API (and ``run_noop_tasks``) of the checkout is used, so any
two versions compare.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

HERE = Path(__file__).resolve()


def interpreter(tree: Path) -> str:
    venv = tree / ".venv" / "bin" / "python"
    return str(venv) if venv.exists() else sys.executable


def one_round(tree: Path, url: str, tasks: int, workers: int, run: int) -> dict[str, float]:
    env = dict(os.environ, PYTHONPATH=f"{tree}{os.pathsep}{tree / 'benchmarks'}")
    out = subprocess.run(
        [interpreter(tree), str(HERE), "--child", url, str(tasks), str(workers), str(run)],
        cwd=tree,
        env=env,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    rates: dict[str, float] = json.loads(out.strip().splitlines()[-1])
    return rates


MEASURES = ("process", "enqueue", "redis_us", "py_us", "features", "dispatch32", "memory1")


def child(url: str, tasks: int, workers: int, run: int) -> None:
    # Runs under the checkout's interpreter, importing that checkout's code: its own
    # benchmarks/_harness.py first (sys.path[0] is this script's directory, the candidate's).
    sys.path.insert(0, str(Path.cwd() / "benchmarks"))
    import time
    from inspect import signature

    import redis
    import trio
    from _harness import run_noop_tasks

    from taskrunner import TaskRunner, TaskRunnerConfig
    from taskrunner.backends.memory import MemoryBackend
    from taskrunner.backends.redis import RedisBackend

    info = redis.Redis.from_url(url)

    def redis_cpu() -> float:
        cpu = info.info("cpu")
        return float(cpu["used_cpu_user"]) + float(cpu["used_cpu_sys"])

    def config() -> TaskRunnerConfig:
        return TaskRunnerConfig(consumer_group="ab", num_workers=workers, batch_size=workers)

    async def plain() -> dict[str, float]:
        backend = RedisBackend.from_url(url, queue=f"ab{run}")
        before, cpu = redis_cpu(), time.process_time()
        rates = await run_noop_tasks(TaskRunner(config(), backend), tasks)
        cpu = time.process_time() - cpu
        redis_us = (redis_cpu() - before) / tasks * 1e6
        await backend.aclose()
        return {
            "enqueue": rates.enqueue,
            "process": rates.process,
            "redis_us": redis_us,
            # The enqueue part is small and alike on both sides; all of it is counted.
            "py_us": cpu / tasks * 1e6,
        }

    async def features() -> float:
        backend = RedisBackend.from_url(url, queue=f"abf{run}")
        # With the result kept too, where the checkout has results (issue 14).
        has_results = "keep_result" in signature(run_noop_tasks).parameters
        kept = {"keep_result": True} if has_results else {}
        rates = await run_noop_tasks(TaskRunner(config(), backend), tasks, features=True, **kept)
        await backend.aclose()
        return rates.process

    async def noop(payload: object) -> None:
        pass

    async def dispatch32() -> float:
        backend = RedisBackend.from_url(url, queue=f"abd{run}")
        runner = TaskRunner(config(), backend)
        runner.task(name="noop")(noop)
        await runner.dispatch("noop", None)
        todo = iter(range(tasks))

        async def caller() -> None:
            for _ in todo:
                await runner.dispatch("noop", None)

        start = time.perf_counter()
        async with trio.open_nursery() as nursery:
            for _ in range(32):
                nursery.start_soon(caller)
        rate = tasks / (time.perf_counter() - start)
        await backend.aclose()
        info.delete(f"taskrunner:ab:abd{run}")
        return rate

    async def memory1() -> float:
        runner = TaskRunner(config(), MemoryBackend())
        done = trio.Event()
        count = 0

        @runner.task(name="noop")
        async def counted(payload: object) -> None:
            nonlocal count
            count += 1
            if count == tasks:
                done.set()

        async with trio.open_nursery() as nursery:
            await nursery.start(runner.serve)
            start = time.perf_counter()
            for _ in range(tasks):
                await runner.dispatch("noop", None)
            await done.wait()
            while runner.statistics().acked < tasks:  # noqa: ASYNC110 - no event to wait on
                await trio.sleep(0.001)
            rate = tasks / (time.perf_counter() - start)
            nursery.cancel_scope.cancel()
        return rate

    result = trio.run(plain)
    result["features"] = trio.run(features)
    result["dispatch32"] = trio.run(dispatch32)
    result["memory1"] = trio.run(memory1)
    print(json.dumps(result))


@contextmanager
def checkout(baseline: str) -> Iterator[Path]:
    """``baseline`` as a directory: itself if it is one, else a temporary worktree of that ref."""
    if Path(baseline).is_dir():
        yield Path(baseline).resolve()
        return
    repo = HERE.parent.parent
    with tempfile.TemporaryDirectory(prefix="ab-") as tmp:
        tree = Path(tmp) / "tree"
        subprocess.run(
            ["git", "worktree", "add", "--detach", str(tree), baseline],
            cwd=repo,
            check=True,
            capture_output=True,
        )
        try:
            yield tree
        finally:
            subprocess.run(
                ["git", "worktree", "remove", "--force", str(tree)], cwd=repo, check=False
            )


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        url, tasks, workers, run = sys.argv[2:6]
        child(url, int(tasks), int(workers), int(run))
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", default="HEAD", help="checkout path or git ref (A)")
    parser.add_argument("--candidate", type=Path, default=HERE.parent.parent, help="checkout B")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--tasks", type=int, default=20_000)
    parser.add_argument("--workers", type=int, default=32)
    args = parser.parse_args()

    from taskrunner.testing import running_server

    results: dict[str, list[dict[str, float]]] = {"A": [], "B": []}
    with checkout(args.baseline) as baseline, running_server() as server:
        trees = {"A": baseline, "B": args.candidate.resolve()}
        for n in range(args.rounds):
            order = "AB" if n % 2 == 0 else "BA"
            for name in order:
                rates = one_round(trees[name], server.url, args.tasks, args.workers, n)
                results[name].append(rates)
                shown = " ".join(
                    f"{m} {rates[m]:,.{1 if m.endswith('_us') else 0}f}" for m in MEASURES
                )
                print(f"  round {n + 1} {name}: {shown}", flush=True)
    print(f"ab: {args.tasks} no-op tasks, {args.workers} workers, {server.kind}")
    for name, tree in trees.items():
        print(f"  {name} = {tree}")
    for measure in MEASURES:
        a = statistics.median(r[measure] for r in results["A"])
        b = statistics.median(r[measure] for r in results["B"])
        unit = " us/task" if measure.endswith("_us") else "/s"
        digits = 2 if measure.endswith("_us") else 0
        print(
            f"  {measure:<10} A {a:>9,.{digits}f}{unit}  B {b:>9,.{digits}f}{unit}  B/A {b / a:.3f}"
        )
    plain = {k: statistics.median(r["process"] for r in results[k]) for k in results}
    for name in results:
        featured = statistics.median(r["features"] for r in results[name])
        print(f"  {name}: features / plain process {featured / plain[name]:.3f}")


if __name__ == "__main__":
    main()
