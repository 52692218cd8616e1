"""Before and after in one run: the end-to-end Redis benchmark from two checkouts.

A change to the per-task path must cost at most 5% of processing throughput,
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
package first). Each round runs ``run_noop_tasks`` from that checkout's own
``benchmarks/_harness.py`` (20,000 no-op tasks, 32 workers, one process, as
``redis_end_to_end.py`` does).
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


def child(url: str, tasks: int, workers: int, run: int) -> None:
    # Runs under the checkout's interpreter, importing that checkout's code: its own
    # benchmarks/_harness.py first (sys.path[0] is this script's directory, the candidate's).
    sys.path.insert(0, str(Path.cwd() / "benchmarks"))
    import trio
    from _harness import run_noop_tasks

    from taskrunner import TaskRunner, TaskRunnerConfig
    from taskrunner.backends.redis import RedisBackend

    async def main() -> dict[str, float]:
        backend = RedisBackend.from_url(url, queue=f"ab{run}")
        config = TaskRunnerConfig(consumer_group="ab", num_workers=workers, batch_size=workers)
        rates = await run_noop_tasks(TaskRunner(config, backend), tasks)
        await backend.aclose()
        return {"enqueue": rates.enqueue, "process": rates.process}

    print(json.dumps(trio.run(main)))


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
                print(
                    f"  round {n + 1} {name}: process {rates['process']:>9,.0f}/s "
                    f"enqueue {rates['enqueue']:>9,.0f}/s",
                    flush=True,
                )
    print(f"ab: {args.tasks} no-op tasks, {args.workers} workers, {server.kind}")
    for name, tree in trees.items():
        print(f"  {name} = {tree}")
    for measure in ("process", "enqueue"):
        a = statistics.median(r[measure] for r in results["A"])
        b = statistics.median(r[measure] for r in results["B"])
        print(f"  {measure:<8} A {a:>9,.0f}/s  B {b:>9,.0f}/s  B/A {b / a:.3f}")


if __name__ == "__main__":
    main()
