"""Workflows on a real server: chain steps and a wide chord against plain tasks.

Two figures, each measured against plain tasks in the same process, rounds
interleaved (on a shared machine separate runs are not comparable), one runner of 32
workers throughout:

- chain steps per second over plain tasks per second: ``--chains`` chains of
  ``--length`` steps against as many no-op tasks that keep their results, as steps
  do; issue 28 asks for >= 0.75. Both are dispatched before ``serve`` starts, and
  both are timed from ``serve`` being ready to the last ack (as ``benchmarks/ab.py``
  times plain tasks): the rate of processing, not of dispatching (a chain is one
  ``dispatch_workflow`` call, plain tasks one ``dispatch_many``). A chain is
  sequential: only one of its steps is ever queued, so ``--chains`` must be well
  over the pool's 32 workers for the pool to stay full (the default, 1,000 chains,
  keeps about 30 steps waiting per worker; 50 chains left the pool idle between a
  step's ack and its successor's read, which measured latency rather than the cost
  of a step);
- a chord of ``--width`` children and a sink, from dispatch to its result, over
  ``dispatch_many`` of ``--width`` tasks plus their drain (from dispatch to the last
  ack); issue 28 asks for <= 1.25.

Each line also gives, per step or task while they are processed, the server commands
(``INFO commandstats``, a script's own commands included), the server's CPU and this
process's: the costs a loaded machine disturbs least. Plain
tasks cost nothing more with workflows built: a batch whose outcomes are no step
sends ``lua/finish.lua`` exactly the keys and arguments it did (checked by
``tests/redis/test_redis_workflows.py``), so the command count per task is main's.

    python benchmarks/workflows.py [--chains 1000] [--length 10] [--width 10000] [--rounds 2]
        [--baseline REF_OR_PATH] [--opcodes]

``--opcodes``: instead of timing, the Python bytecodes the serving process executes
per chain step and per plain task (``sys.settrace``, from ``serve`` starting to the last
ack, ``--chains`` chains against as many plain tasks as steps): what timing on a loaded
machine moves far less (the batch sizes still move it by a few percent).

``--baseline`` (a checkout's path or a git ref, as in ``benchmarks/ab.py``) measures
this tree and that one in one run: one server, the two alternating round by round
(A B, then B A), each round in a fresh process of that checkout's interpreter
running this script against that checkout's package, and reports each tree's median
figures and this tree's over the baseline's.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable
from pathlib import Path
from types import FrameType
from typing import Any

import attrs
import trio
from ab import checkout, interpreter

from taskrunner import TaskRunner, TaskRunnerConfig, chain, chord, group
from taskrunner.backends.redis import RedisBackend
from taskrunner.testing import running_server

WORKERS = 32
HERE = Path(__file__).resolve()


def _runner(url: str) -> tuple[TaskRunner, RedisBackend]:
    backend = RedisBackend.from_url(url, queue=f"bench{uuid.uuid4().hex[:6]}")
    config = TaskRunnerConfig(consumer_group=f"bench{uuid.uuid4().hex[:6]}", num_workers=WORKERS)
    return TaskRunner(config, backend), backend


@attrs.frozen
class Cost:
    """What ``n`` runs cost, each: server commands (``INFO commandstats``, a script's own
    commands included), server CPU (``INFO cpu``) and this process's CPU, in us."""

    commands: float
    server_us: float
    python_us: float

    def __str__(self) -> str:
        return (
            f"{self.commands:.1f} commands, server {self.server_us:.0f} us, "
            f"Python {self.python_us:.0f} us"
        )


async def _counters(backend: RedisBackend) -> tuple[int, float, float]:
    """The server's count of commands run so far, its CPU seconds and this process's."""
    info = await backend._client.execute("INFO", "commandstats")
    text = info.decode() if isinstance(info, bytes | bytearray) else str(info)
    commands = sum(
        int(field.split("=", 1)[1])
        for line in text.splitlines()
        if line.startswith("cmdstat_")
        for field in line.split(":", 1)[1].split(",")
        if field.startswith("calls=")
    )
    info = await backend._client.execute("INFO", "cpu")
    text = info.decode() if isinstance(info, bytes | bytearray) else str(info)
    cpu = dict(line.split(":", 1) for line in text.splitlines() if ":" in line)
    server = float(cpu["used_cpu_user"]) + float(cpu["used_cpu_sys"])
    return commands, server, time.process_time()


OPCODES: Counter[str] = Counter()
"""Bytecodes executed by function while :data:`COUNTING` (``--opcodes``)."""
COUNTING = [False]


def _count_opcodes(frame: FrameType, event: str, arg: object) -> Any:
    if event == "opcode":
        code = frame.f_code
        OPCODES[f"{Path(code.co_filename).name}:{code.co_firstlineno}({code.co_name})"] += 1
    return _count_opcodes


def _trace_frame(frame: FrameType, event: str, arg: object) -> Any:
    frame.f_trace_opcodes = True
    return _count_opcodes


async def _serve_until_acked(
    runner: TaskRunner, backend: RedisBackend, n: int, dispatch: Callable[[], Awaitable[Any]]
) -> tuple[float, Cost]:
    """Seconds from ``serve`` being ready to ``n`` acks and the cost per ack (``dispatch``
    is called before ``serve`` starts; with :data:`COUNTING`, bytecodes are counted from
    ``serve`` starting)."""
    async with backend, trio.open_nursery() as nursery:
        await dispatch()
        before = await _counters(backend)
        if COUNTING[0]:
            sys.settrace(_trace_frame)
        await nursery.start(runner.serve)
        start = time.perf_counter()
        while runner.statistics().acked < n:  # noqa: ASYNC110 - the acker has no event
            await trio.sleep(0.001)
        elapsed = time.perf_counter() - start
        sys.settrace(None)
        after = await _counters(backend)
        nursery.cancel_scope.cancel()
    commands, server, python = (b - a for a, b in zip(before, after, strict=True))
    return elapsed, Cost(commands / n, server / n * 1e6, python / n * 1e6)


async def plain(url: str, n: int) -> tuple[float, Cost]:
    """Seconds to drain ``n`` result-keeping no-op tasks dispatched beforehand, and
    server commands per task."""
    runner, backend = _runner(url)

    @runner.task(name="noop", keep_result=60.0)
    async def noop(payload: object) -> int:
        return 1

    async def dispatch() -> None:
        for first in range(0, n, 10_000):
            await runner.dispatch_many("noop", [None] * min(10_000, n - first))

    return await _serve_until_acked(runner, backend, n, dispatch)


async def chains(url: str, count: int, length: int) -> tuple[float, Cost]:
    """Seconds until the ``count * length`` steps of ``count`` chains dispatched
    beforehand are acked, and server commands per step."""
    runner, backend = _runner(url)

    @runner.task(name="step")
    async def step(payload: object) -> int:
        return 1

    async def dispatch() -> None:
        for _ in range(count):
            await runner.dispatch_workflow(
                chain(runner.step("step", 0), *(runner.step("step") for _ in range(length - 1)))
            )

    return await _serve_until_acked(runner, backend, count * length, dispatch)


async def plain_with_dispatch(url: str, n: int) -> float:
    """Seconds from ``dispatch_many`` of ``n`` no-op tasks (serve running) to their last ack."""
    runner, backend = _runner(url)

    @runner.task(name="noop", keep_result=60.0)
    async def noop(payload: object) -> int:
        return 1

    async with backend, trio.open_nursery() as nursery:
        await nursery.start(runner.serve)
        start = time.perf_counter()
        for first in range(0, n, 10_000):
            await runner.dispatch_many("noop", [None] * min(10_000, n - first))
        while runner.statistics().acked < n:  # noqa: ASYNC110 - the acker has no event
            await trio.sleep(0.001)
        elapsed = time.perf_counter() - start
        nursery.cancel_scope.cancel()
    return elapsed


async def wide_chord(url: str, width: int) -> float:
    """Seconds from dispatching a chord of ``width`` children (serve running) to its result."""
    runner, backend = _runner(url)

    @runner.task(name="child")
    async def child(payload: int) -> int:
        return payload

    @runner.task(name="sink")
    async def sink(values: list[int]) -> int:
        return len(values)

    async with backend, trio.open_nursery() as nursery:
        await nursery.start(runner.serve)
        start = time.perf_counter()
        wf = await runner.dispatch_workflow(
            chord(group(runner.step("child", i) for i in range(width)), runner.step("sink"))
        )
        assert await wf.result(timeout=600) == width
        elapsed = time.perf_counter() - start
        nursery.cancel_scope.cancel()
    return elapsed


async def bench(url: str, args: argparse.Namespace) -> None:
    steps = args.chains * args.length
    chain_ratio, chord_ratio = [], []
    for r in range(args.rounds):
        base, base_cost = await plain(url, steps)
        took, step_cost = await chains(url, args.chains, args.length)
        chain_ratio.append(base / took)
        wide_base = await plain_with_dispatch(url, args.width)
        wide = await wide_chord(url, args.width)
        chord_ratio.append(wide / wide_base)
        print(
            f"round {r + 1}: plain {steps / base:,.0f}/s (per task: {base_cost}), "
            f"chain steps {steps / took:,.0f}/s (per step: {step_cost}), {base / took:.2f}x; "
            f"dispatch_many {args.width} + drain {wide_base:.2f}s, "
            f"chord of {args.width} {wide:.2f}s ({wide / wide_base:.2f}x)",
            flush=True,
        )
    print(
        f"{args.chains} chains of {args.length}, {WORKERS} workers, {args.rounds} round(s)\n"
        f"chain steps / plain tasks (median): {statistics.median(chain_ratio):.2f}x\n"
        f"chord / dispatch_many + drain (median): {statistics.median(chord_ratio):.2f}x"
    )


async def count_opcodes(url: str, args: argparse.Namespace) -> dict[str, float]:
    """Bytecodes per plain task and per chain step while served (``--opcodes``)."""
    steps = args.chains * args.length
    COUNTING[0] = True
    figures = {}
    for name, served in (
        ("task_opcodes", lambda: plain(url, steps)),
        ("step_opcodes", lambda: chains(url, args.chains, args.length)),
    ):
        OPCODES.clear()
        await served()
        figures[name] = sum(OPCODES.values()) / steps
    return figures


async def one_round(url: str, args: argparse.Namespace) -> dict[str, float]:
    """One round's figures (a ``--child``'s: this process imports one checkout)."""
    if args.opcodes:
        return await count_opcodes(url, args)
    steps = args.chains * args.length
    base, base_cost = await plain(url, steps)
    took, step_cost = await chains(url, args.chains, args.length)
    wide_base = await plain_with_dispatch(url, args.width)
    wide = await wide_chord(url, args.width)
    return {
        "plain": steps / base,
        "chain": steps / took,
        "chain_ratio": base / took,
        "chord_ratio": wide / wide_base,
        "step_commands": step_cost.commands,
        "step_server_us": step_cost.server_us,
        "step_python_us": step_cost.python_us,
        "task_server_us": base_cost.server_us,
        "task_python_us": base_cost.python_us,
    }


def compare(url: str, args: argparse.Namespace, candidate: Path, baseline: Path) -> None:
    """This tree and ``baseline`` alternating on one server (see the module docstring)."""
    trees = {"baseline": baseline, "candidate": candidate}
    figures: dict[str, list[dict[str, float]]] = {name: [] for name in trees}
    child = [str(a) for a in (args.chains, args.length, args.width, int(args.opcodes))]
    for r in range(args.rounds):
        order = list(trees) if r % 2 == 0 else list(reversed(trees))
        for name in order:
            tree = trees[name]
            env = dict(os.environ, PYTHONPATH=f"{tree}{os.pathsep}{HERE.parent}")
            out = subprocess.run(
                [interpreter(tree), str(HERE), "--child", url, *child],
                cwd=tree,
                env=env,
                check=True,
                capture_output=True,
                text=True,
            ).stdout
            figures[name].append(json.loads(out.strip().splitlines()[-1]))
            print(f"round {r + 1} {name}: {json.dumps(figures[name][-1])}", flush=True)
    medians = {
        name: {key: statistics.median(f[key] for f in rows) for key in rows[0]}
        for name, rows in figures.items()
    }
    print(f"{args.chains} chains of {args.length}, {WORKERS} workers, {args.rounds} round(s)")
    if args.opcodes:
        for name, m in medians.items():
            print(
                f"{name}: {m['task_opcodes']:,.0f} bytecodes per plain task, "
                f"{m['step_opcodes']:,.0f} per chain step "
                f"({m['step_opcodes'] / m['task_opcodes']:.2f}x)"
            )
        b, c = medians["baseline"], medians["candidate"]
        print(
            f"candidate / baseline: per plain task {c['task_opcodes'] / b['task_opcodes']:.3f}x, "
            f"per chain step {c['step_opcodes'] / b['step_opcodes']:.3f}x"
        )
        return
    for name, m in medians.items():
        print(
            f"{name}: plain {m['plain']:,.0f}/s, chain steps {m['chain']:,.0f}/s, "
            f"chain steps / plain tasks {m['chain_ratio']:.2f}x, chord / dispatch_many + "
            f"drain {m['chord_ratio']:.2f}x; per step {m['step_commands']:.1f} commands, "
            f"server {m['step_server_us']:.0f} us, Python {m['step_python_us']:.0f} us; "
            f"per plain task server {m['task_server_us']:.0f} us, "
            f"Python {m['task_python_us']:.0f} us"
        )
    b, c = medians["baseline"], medians["candidate"]
    print(
        f"candidate / baseline: chain steps/s {c['chain'] / b['chain']:.2f}x, plain "
        f"tasks/s {c['plain'] / b['plain']:.2f}x, Python per step "
        f"{c['step_python_us'] / b['step_python_us']:.2f}x, server per step "
        f"{c['step_server_us'] / b['step_server_us']:.2f}x"
    )


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        url, chains_, length, width, opcodes = sys.argv[2:7]
        ns = argparse.Namespace(
            chains=int(chains_), length=int(length), width=int(width), opcodes=opcodes == "1"
        )
        print(json.dumps(trio.run(one_round, url, ns)))
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--chains", type=int, default=1000)
    parser.add_argument("--length", type=int, default=10)
    parser.add_argument("--width", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--server", default="auto")
    parser.add_argument("--baseline", default=None, help="a checkout's path or a git ref")
    parser.add_argument("--opcodes", action="store_true", help="count bytecodes, not time")
    args = parser.parse_args()
    with running_server(args.server) as server:
        if args.baseline is None and args.opcodes:
            print(json.dumps(trio.run(count_opcodes, server.url, args)))
            return
        if args.baseline is None:
            trio.run(bench, server.url, args)
            return
        with checkout(args.baseline) as baseline:
            compare(server.url, args, HERE.parent.parent, baseline)


if __name__ == "__main__":
    main()
