"""The comparison with the peers, in one run: arq, saq, streaq, taskiq and taskrunner.

    python benchmarks/peers/run.py [--tasks 20000] [--repeat 3] [--only saq,taskrunner]

The workload is streaq's published no-op benchmark: N tasks that do nothing,
enqueued, then processed by one worker process running ``--concurrency`` of
them at once. Each system runs in its own virtualenv under ``.venvs/`` (their
dependencies conflict), made here from the pinned ``requirements/<name>.txt``
and remade when that file changes; taskrunner is this checkout, run by the
interpreter running this script.

One Redis, started here on a free 127.0.0.1 port, serves every system. Each
round runs ``redis-benchmark`` (XADD pipelined 16 deep, and 50 clients one
request each: the ceilings), then for each system its ``each``, ``bulk`` and
``latency`` phases, each in a fresh driver process against a flushed server
(see ``_common``). Rounds interleave the systems, so the machine's noise falls
on all of them alike; the table is the median over rounds. The latency phase
sends at ``--latency-rate``, or at half the system's processing rate if that is
lower, so it measures start latency, not a growing backlog.

Writes ``results.json`` (``--output``), prints the table, and renders
``results.md`` and ``docs/images/peers.svg`` from it (``--no-docs`` to skip;
``chart.py`` renders them again from a results file).
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import os
import platform
import shlex
import shutil
import statistics
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import chart
from _common import PHASES, flush, info, latency_rate, redis_cpu
from _report import table_text

from taskrunner.testing import running_server

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
VENVS = HERE / ".venvs"
PEERS = ("arq", "saq", "streaq", "taskiq")
SYSTEMS = (*PEERS, "taskrunner")
CEILING_REQUESTS = {"xadd_p16": 200_000, "xadd_c50": 100_000}


def venv_python(name: str) -> str:
    """The interpreter of ``name``'s virtualenv, made (or remade) from its pinned requirements."""
    if name == "taskrunner":
        return sys.executable
    pins = (HERE / "requirements" / f"{name}.txt").read_text()
    venv = VENVS / name
    python = venv / "bin" / "python"
    stamp = venv / "pinned.txt"
    if python.exists() and stamp.exists() and stamp.read_text() == pins:
        return str(python)
    print(f"making the {name} virtualenv in {venv} ...", file=sys.stderr, flush=True)
    subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True)
    requirements = HERE / "requirements" / f"{name}.txt"
    pip = [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    installed = subprocess.run([*pip, "-r", str(requirements)], capture_output=True, text=True)
    if installed.returncode != 0:
        raise SystemExit(f"pip could not install {requirements}:\n{installed.stderr[-3000:]}")
    stamp.write_text(pins)
    return str(python)


def freeze(python: str) -> list[str]:
    """What ``pip freeze`` lists in that interpreter's environment."""
    out = subprocess.run(
        [python, "-m", "pip", "freeze", "--disable-pip-version-check"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return [line for line in out.splitlines() if line and not line.startswith("-e ")]


def run_phase(
    system: str, python: str, url: str, phase: str, args: argparse.Namespace, rate: float
) -> dict[str, Any]:
    """Run one phase of one system in a fresh driver process; its last output line.

    Raises:
        RuntimeError: the driver failed or overran ``--timeout``; the message has the
            end of its error output.
    """
    command = [
        python, str(HERE / f"drive_{system}.py"), "--url", url, "--phase", phase,
        "--tasks", str(args.tasks), "--concurrency", str(args.concurrency),
        "--latency-rate", str(rate), "--latency-seconds", str(args.latency_seconds),
    ]  # fmt: skip
    env = dict(os.environ, PYTHONPATH=str(ROOT) if system == "taskrunner" else "")
    try:
        done = subprocess.run(
            command, cwd=HERE, env=env, capture_output=True, text=True, timeout=args.timeout
        )
    except subprocess.TimeoutExpired as exc:
        raise RuntimeError(f"{system} {phase}: overran --timeout {args.timeout} s") from exc
    if done.returncode != 0:
        raise RuntimeError(f"{system} {phase}: exit {done.returncode}\n{done.stderr[-3000:]}")
    record: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return record


def redis_benchmark(tool: str, port: int, url: str) -> dict[str, float]:
    """The XADD ceilings, and the server CPU per XADD of the pipelined run."""
    xadd = ["xadd", "ceiling", "*", "payload", "x"]
    base = [tool, "-h", "127.0.0.1", "-p", str(port), "--csv"]
    rates = {}
    for key, extra in (("xadd_p16", ["-P", "16"]), ("xadd_c50", ["-c", "50"])):
        requests = CEILING_REQUESTS[key]
        before = redis_cpu(url)
        out = subprocess.run(
            [*base, "-n", str(requests), *extra, *xadd], check=True, capture_output=True, text=True
        ).stdout
        cpu = redis_cpu(url) - before
        rows = [row for row in csv.reader(io.StringIO(out)) if row and row[0] != "test"]
        if not rows:
            raise RuntimeError(f"no result row in redis-benchmark's output:\n{out}")
        rates[f"{key}_per_s"] = float(rows[0][1])
        rates[f"{key}_cpu_us"] = cpu / requests * 1e6
    return rates


def medians(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """Each phase's numbers, the median over the rounds that have that phase."""
    result: dict[str, Any] = {}
    for phase in PHASES:
        runs = [r[phase] for r in rounds if r.get(phase)]
        result[phase] = (
            {key: statistics.median(run[key] for run in runs) for key in runs[0]} if runs else None
        )
    return result


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


MEASURED = ("taskrunner", "benchmarks/peers/*.py", "benchmarks/peers/requirements")
"""What decides the numbers: a change here, not yet committed, makes the checkout dirty."""


def checkout() -> dict[str, Any]:
    """The commit of this checkout, and whether the measured files differ from it."""

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", *args], cwd=ROOT, capture_output=True, text=True, check=False
        ).stdout.strip()

    changed = git("status", "--porcelain", "--", *MEASURED)
    return {"commit": git("rev-parse", "--short", "HEAD"), "dirty": bool(changed)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=20_000)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--repeat", type=int, default=3, help="rounds; the table is the median")
    parser.add_argument("--only", default=",".join(SYSTEMS), help="comma-separated systems")
    parser.add_argument("--latency-rate", type=float, default=1_000.0, help="tasks/s")
    parser.add_argument("--latency-seconds", type=float, default=3.0)
    parser.add_argument("--timeout", type=float, default=900.0, help="most seconds per phase")
    parser.add_argument("--note", default="", help="a remark to keep with the results")
    parser.add_argument("--output", type=Path, default=HERE / "results.json")
    parser.add_argument("--no-docs", action="store_true", help="skip results.md and the chart")
    args = parser.parse_args()
    systems = [s.strip() for s in args.only.split(",") if s.strip()]
    unknown = sorted(set(systems) - set(SYSTEMS))
    if unknown:
        parser.error(f"--only: unknown system(s) {', '.join(unknown)}; known: {', '.join(SYSTEMS)}")

    pythons = {system: venv_python(system) for system in systems}
    tool = shutil.which("redis-benchmark")
    if tool is None:
        print("no redis-benchmark (Debian: redis-tools): no ceiling", file=sys.stderr)
    ceiling_rounds: list[dict[str, float]] = []
    rounds: dict[str, list[dict[str, Any]]] = {s: [] for s in systems}
    facts: dict[str, dict[str, Any]] = {}
    errors: dict[str, str] = {}
    with running_server() as server:
        server_info = {"kind": server.kind, "binary": server.binary}
        for number in range(1, args.repeat + 1):
            if tool:
                flush(server.url)
                ceiling_rounds.append(redis_benchmark(tool, server.port, server.url))
                flush(server.url)
            for system in systems:
                if system in errors:
                    continue
                try:
                    one = run_round(system, pythons[system], server.url, args, facts)
                except RuntimeError as exc:
                    errors[system] = str(exc)
                    print(f"round {number}: {exc}", file=sys.stderr, flush=True)
                    continue
                rounds[system].append(one)
                print(f"round {number}/{args.repeat}: {system} {brief(one)}", file=sys.stderr)
        server_info["version"] = info(server.url, "server")["redis_version"]

    results = {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": shlex.join(["python", "benchmarks/peers/run.py", *sys.argv[1:]]),
        "note": args.note,
        "params": {
            "tasks": args.tasks,
            "concurrency": args.concurrency,
            "repeat": args.repeat,
            "latency_rate": args.latency_rate,
            "latency_seconds": args.latency_seconds,
        },
        "machine": {
            "cores": os.cpu_count(),
            "cpu": cpu_model(),
            "os": platform.platform(),
            "python": platform.python_version(),
        },
        "redis": server_info,
        "checkout": checkout(),
        "ceiling": {
            "median": medians_flat(ceiling_rounds),
            "rounds": ceiling_rounds,
            "requests": CEILING_REQUESTS,
        },
        "systems": {
            system: {
                **facts.get(system, {}),
                "freeze": freeze(pythons[system]) if system != "taskrunner" else [],
                "median": medians(rounds[system]) if rounds[system] else None,
                "rounds": rounds[system],
                "error": errors.get(system),
            }
            for system in systems
        },
    }
    args.output.write_text(json.dumps(results, indent=2) + "\n")
    print(f"wrote {args.output}", file=sys.stderr)
    print(table_text(results))
    if not args.no_docs:
        chart.render(results)
    if errors:
        sys.exit(f"failed: {', '.join(sorted(errors))}")


def run_round(
    system: str, python: str, url: str, args: argparse.Namespace, facts: dict[str, Any]
) -> dict[str, Any]:
    """One round of one system: its three phases, each in a fresh driver process."""
    one: dict[str, Any] = {}
    for phase in PHASES:
        rate = args.latency_rate
        if phase == "latency":
            rate = latency_rate(args.latency_rate, one["each"]["process_per_s"])
        record = run_phase(system, python, url, phase, args, rate)
        one[phase] = record.pop("result")
        facts[system] = {k: v for k, v in record.items() if k not in ("system", "phase")}
    return one


def brief(one: dict[str, Any]) -> str:
    each, latency = one["each"], one["latency"]
    return (
        f"enqueue {each['enqueue_per_s']:,.0f}/s, process {each['process_per_s']:,.0f}/s, "
        f"Redis {each['redis_cpu_us_per_task']:.1f} us/task, "
        f"start p50 {latency['p50_ms']:.2f} ms p99 {latency['p99_ms']:.2f} ms"
    )


def medians_flat(rounds: list[dict[str, float]]) -> dict[str, float] | None:
    if not rounds:
        return None
    return {key: statistics.median(r[key] for r in rounds) for key in rounds[0]}


if __name__ == "__main__":
    main()
