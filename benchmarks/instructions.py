"""Python instructions per task of a serving runner (on Redis), under callgrind.

The rates of ``ab.py`` move with whatever else the machine runs; the count of
instructions a run executes barely does. For each checkout this script fills
a stream with N no-op tasks (in a process of its own, not counted), then
serves them under ``valgrind --tool=callgrind`` until every one is acked and
reads the instructions the serving process executed. Serving ``--small`` and
``--large`` tasks and taking the difference over ``large - small`` leaves out
the start-up (imports, connecting, the first fetch): what remains is the cost
of one more task, the plain path's (no timeout, no context, no middleware, no
result kept, no events, one shard).

    python benchmarks/instructions.py [--baseline REF_OR_PATH] [--candidate PATH]
        [--small 1000] [--large 3000] [--workers 32] [--rounds 1] [--memory]
        [--keep-result | --features] [--profile | --opcodes]

``--keep-result`` and ``--features`` count the workloads of ``kept_results.py``
instead of the plain one: the task keeps its result (``keep_result=60``), and with
``--features`` it has a 30 s timeout and a ``TaskContext`` parameter too, and one
no-op middleware wraps every run.

``--baseline`` as in ``ab.py`` (a checkout's path or a git ref; default
``HEAD``). The two checkouts alternate, A B, then B A for a second round
with ``--rounds 2``. ``--profile`` prints, instead, the functions of the
serving process that ran most often per task (``cProfile``, the large run
only, not under callgrind): where a difference comes from; ``--opcodes`` the
bytecodes each function executed per task (``sys.settrace``), which timing
moves far less. ``--memory``: on a MemoryBackend instead (in the serving
process, so the dispatch of the tasks is counted too): no server whose speed
moves the batches, so the counts repeat closely on a busy machine.
Needs ``valgrind`` on the path (``apt-get install -y valgrind``).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from collections import Counter
from collections.abc import Awaitable, Callable
from pathlib import Path
from types import FrameType
from typing import Any

from ab import checkout, interpreter

from taskrunner import TaskContext  # read by the task's annotations (--features)

HERE = Path(__file__).resolve()
GROUP = "instr"
MEMORY = "memory"
"""The url that stands for a MemoryBackend (``--memory``)."""
WORKLOADS = ("plain", "keep", "features")
"""As in ``kept_results.py``: the no-op task; kept results; kept results with a
timeout, a context and one middleware."""


def register(runner: Any, workload: str, action: Callable[[], None]) -> None:
    """Register the ``noop`` task of ``workload`` on ``runner``, calling ``action``
    on each run (the same task in the filling and the serving process: the message
    carries the task's ``keep_result``)."""
    keep = None if workload == "plain" else 60.0
    if workload == "features":

        @runner.middleware
        async def passthrough(ctx: TaskContext, call_next: Callable[[], Awaitable[Any]]) -> Any:
            return await call_next()

        @runner.task(name="noop", timeout=30.0, keep_result=keep)
        async def noop_with_context(payload: object, ctx: TaskContext) -> None:
            action()

        return

    @runner.task(name="noop", keep_result=keep)
    async def noop(payload: object) -> None:
        action()


def child_env(tree: Path) -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=f"{tree}{os.pathsep}{tree / 'benchmarks'}")


def fill(url: str, queue: str, tasks: int, workload: str) -> None:
    import trio

    from taskrunner import TaskRunner, TaskRunnerConfig
    from taskrunner.backends.redis import RedisBackend

    async def main() -> None:
        backend = RedisBackend.from_url(url, queue=queue)
        runner = TaskRunner(TaskRunnerConfig(consumer_group=GROUP), backend)
        register(runner, workload, lambda: None)
        payloads = [None] * tasks
        for at in range(0, tasks, 10_000):
            await runner.dispatch_many("noop", payloads[at : at + 10_000])
        await backend.aclose()

    trio.run(main)


def serve(url: str, queue: str, tasks: int, workers: int, workload: str, mode: str) -> None:
    import trio

    from taskrunner import TaskRunner, TaskRunnerConfig
    from taskrunner.backends.memory import MemoryBackend
    from taskrunner.backends.redis import RedisBackend

    async def main() -> None:
        backend: Any = MemoryBackend() if url == MEMORY else RedisBackend.from_url(url, queue=queue)
        config = TaskRunnerConfig(consumer_group=GROUP, num_workers=workers, batch_size=workers)
        runner = TaskRunner(config, backend)
        done = trio.Event()
        count = 0

        def ran() -> None:
            nonlocal count
            count += 1
            if count == tasks:
                done.set()

        register(runner, workload, ran)

        if url == MEMORY:  # filled here, in this process (counted: the dispatch path too)
            await runner.dispatch_many("noop", [None] * tasks)
        async with trio.open_nursery() as nursery:
            await nursery.start(runner.serve)
            await done.wait()
            while runner.statistics().acked < tasks:  # noqa: ASYNC110 - no event to wait on
                await trio.sleep(0.001)
            nursery.cancel_scope.cancel()
        await backend.aclose()

    if mode == "count":
        trio.run(main)
        return
    if mode == "opcodes":
        opcodes_per_task(main, tasks)
        return
    import cProfile
    import pstats

    profiler = cProfile.Profile()
    profiler.runcall(trio.run, main)
    stats = pstats.Stats(profiler)
    rows = []
    for (file, line, name), (_, calls, own, total, _) in stats.stats.items():  # type: ignore[attr-defined]
        rows.append((calls / tasks, own, total, f"{Path(file).name}:{line}({name})"))
    rows.sort(reverse=True)
    print(json.dumps([r for r in rows if r[0] >= 0.5][:80]))


def opcodes_per_task(main: Callable[[], Awaitable[None]], tasks: int) -> None:
    """Run ``main`` with every bytecode it executes counted, by function (the
    functions running when it starts, the event loop's own, are not counted)."""
    import trio

    counts: Counter[str] = Counter()

    def local(frame: FrameType, event: str, arg: object) -> Any:
        if event == "opcode":
            code = frame.f_code
            counts[f"{Path(code.co_filename).name}:{code.co_firstlineno}({code.co_name})"] += 1
        return local

    def start(frame: FrameType, event: str, arg: object) -> Any:
        frame.f_trace_opcodes = True
        return local

    async def traced() -> None:
        sys.settrace(start)
        try:
            await main()
        finally:
            sys.settrace(None)

    trio.run(traced)
    rows = [(n / tasks, where) for where, n in counts.most_common() if n / tasks >= 0.5]
    print(json.dumps([[round(sum(counts.values()) / tasks, 1), "(all)"], *rows]))


def instructions(tree: Path, url: str, queue: str, tasks: int, workers: int, workload: str) -> int:
    env = child_env(tree)
    python = interpreter(tree)
    if url != MEMORY:
        subprocess.run(
            [python, str(HERE), "--fill", url, queue, str(tasks), workload],
            cwd=tree,
            env=env,
            check=True,
        )
    with tempfile.TemporaryDirectory(prefix="instr-") as tmp:
        out = Path(tmp) / "callgrind.out"
        subprocess.run(
            [
                "valgrind",
                "--tool=callgrind",
                f"--callgrind-out-file={out}",
                python,
                str(HERE),
                "--serve",
                url,
                queue,
                str(tasks),
                str(workers),
                workload,
            ],
            cwd=tree,
            env=env,
            check=True,
            capture_output=True,
        )
        found = re.search(r"^(?:summary|totals): (\d+)", out.read_text(), re.MULTILINE)
    assert found is not None, "no instruction count in callgrind's output"
    return int(found.group(1))


def profile(
    tree: Path, url: str, queue: str, tasks: int, workers: int, workload: str, mode: str
) -> list[list[object]]:
    env = child_env(tree)
    python = interpreter(tree)
    if url != MEMORY:
        subprocess.run(
            [python, str(HERE), "--fill", url, queue, str(tasks), workload],
            cwd=tree,
            env=env,
            check=True,
        )
    out = subprocess.run(
        [python, str(HERE), "--serve", url, queue, str(tasks), str(workers), workload, f"--{mode}"],
        cwd=tree,
        env=env,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    rows: list[list[object]] = json.loads(out.strip().splitlines()[-1])
    return rows


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--fill":
        fill(sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5])
        return
    if len(sys.argv) > 1 and sys.argv[1] == "--serve":
        url, queue, tasks, workers, workload = sys.argv[2:7]
        mode = sys.argv[7][2:] if len(sys.argv) > 7 else "count"
        serve(url, queue, int(tasks), int(workers), workload, mode)
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", default="HEAD", help="checkout path or git ref (A)")
    parser.add_argument("--candidate", type=Path, default=HERE.parent.parent, help="checkout B")
    parser.add_argument("--small", type=int, default=1_000)
    parser.add_argument("--large", type=int, default=3_000)
    parser.add_argument("--workers", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--opcodes", action="store_true")
    parser.add_argument("--memory", action="store_true", help="a MemoryBackend, not Redis")
    kind = parser.add_mutually_exclusive_group()
    kind.add_argument("--keep-result", action="store_true", help="keep_result=60")
    kind.add_argument(
        "--features", action="store_true", help="timeout, context, middleware, keep_result"
    )
    args = parser.parse_args()
    workload = "features" if args.features else "keep" if args.keep_result else "plain"

    from taskrunner.testing import running_server

    with checkout(args.baseline) as baseline, running_server() as server:
        trees = {"A": baseline, "B": args.candidate.resolve()}
        url = MEMORY if args.memory else server.url
        if args.profile:
            for name, tree in trees.items():
                print(f"{name} = {tree}: calls per task, own s, total s ({args.large} tasks)")
                rows = profile(tree, url, f"p{name}", args.large, args.workers, workload, "profile")
                for calls, own, total, where in rows:
                    print(f"  {calls:7.2f} {own:8.3f} {total:8.3f}  {where}")
            return
        if args.opcodes:
            for name, tree in trees.items():
                print(f"{name} = {tree}: bytecodes per task, by function ({args.large} tasks)")
                rows = profile(tree, url, f"o{name}", args.large, args.workers, workload, "opcodes")
                for count, where in rows:
                    print(f"  {count:9.1f}  {where}")
            return
        per_task: dict[str, list[float]] = {"A": [], "B": []}
        for n in range(args.rounds):
            for name in "AB" if n % 2 == 0 else "BA":
                tree = trees[name]
                counts = [
                    instructions(tree, url, f"i{name}{n}s{size}", size, args.workers, workload)
                    for size in (args.small, args.large)
                ]
                cost = (counts[1] - counts[0]) / (args.large - args.small)
                per_task[name].append(cost)
                print(f"  round {n + 1} {name}: {counts} -> {cost:,.0f} instructions/task")
    where = "in memory (dispatch included)" if args.memory else "on Redis"
    print(
        f"instructions: {args.small} and {args.large} no-op tasks ({workload}), "
        f"{args.workers} workers, {where}"
    )
    for name, tree in trees.items():
        print(f"  {name} = {tree}")
    a = sum(per_task["A"]) / len(per_task["A"])
    b = sum(per_task["B"]) / len(per_task["B"])
    print(f"  per task: A {a:,.0f}  B {b:,.0f}  B/A {b / a:.3f}")


if __name__ == "__main__":
    main()
