"""The comparison with the peers, in one run: arq, saq, streaq, taskiq, Celery, Dramatiq
and taskrunner.

    python benchmarks/peers/run.py [--tasks 20000] [--repeat 3] [--only saq,taskrunner]

The workload is streaq's published no-op benchmark: N tasks that do nothing,
enqueued, then processed by one worker process running ``--concurrency`` of
them at once. Each system runs in its own virtualenv under ``.venvs/`` (their
dependencies conflict), made here from the pinned ``requirements/<name>.txt``
and remade when that file changes; taskrunner is this checkout, run by the
interpreter running this script. Some systems are measured twice (:data:`SYSTEMS`):
Celery with its prefork pool and with its threads pool, and taskrunner plain and
with ``keep_result``, the work the peers that keep results do by default.

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
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
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
KEEP_RESULT = 3600
"""taskrunner's ``keep_result`` in its second column: arq's default, an hour."""


@dataclass(frozen=True)
class System:
    """One column of the comparison.

    Attributes:
        package: The distribution measured: its version names the column, and
            ``requirements/<package>.txt`` pins its virtualenv ("taskrunner": this
            checkout, no virtualenv).
        driver: Runs it: ``drive_<driver>.py``.
        options: The driver's own options, for this column.
        variant: What sets this column apart from the package's other one, if any.
        stores: What the system keeps in Redis for each task by default, after the
            task has run (from its documentation and source; the measured keys per
            task are beside it in the table).
    """

    package: str
    driver: str
    options: tuple[str, ...] = ()
    variant: str = ""
    stores: str = ""


SYSTEMS = {
    "arq": System("arq", "arq", stores="the result, 1 h (keep_result)"),
    "saq": System("saq", "saq", stores="the job and its result, 10 min (Job.ttl)"),
    "streaq": System("streaq", "streaq", stores="the result, 5 min (the task's ttl)"),
    "taskiq": System("taskiq", "taskiq", stores="nothing (no result backend)"),
    "celery": System(
        "celery", "celery", ("--pool", "prefork"), "prefork pool",
        "the result, 1 day (result_expires)",
    ),
    "celery-threads": System(
        "celery", "celery", ("--pool", "threads"), "threads pool",
        "the result, 1 day (result_expires)",
    ),
    "dramatiq": System("dramatiq", "dramatiq", stores="nothing (no result backend)"),
    "taskrunner": System("taskrunner", "taskrunner", stores="nothing (no keep_result)"),
    "taskrunner-kept": System(
        "taskrunner", "taskrunner", ("--keep-result", str(KEEP_RESULT)),
        f"keep_result={KEEP_RESULT}", f"the result, {KEEP_RESULT // 3600} h (keep_result)",
    ),
}  # fmt: skip
"""Every column, in the table's order."""

CEILING_REQUESTS = {"xadd_p16": 200_000, "xadd_c50": 100_000}


def venv_python(name: str) -> str:
    """The interpreter of package ``name``'s virtualenv, made (or remade) from its pinned
    requirements."""
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
    column = SYSTEMS[system]
    command = [
        python, str(HERE / f"drive_{column.driver}.py"), "--url", url, "--phase", phase,
        "--tasks", str(args.tasks), "--concurrency", str(args.concurrency),
        "--latency-rate", str(rate), "--latency-seconds", str(args.latency_seconds),
        *column.options,
    ]  # fmt: skip
    ours = column.package == "taskrunner"
    env = dict(os.environ, PYTHONPATH=str(ROOT) if ours else "")
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
    """Each phase's numbers, the median over the rounds that have that phase.

    A number that is a table of numbers (the calls per task of each Redis command)
    has the median of each of its entries, 0 in a round without that entry.
    """
    result: dict[str, Any] = {}
    for phase in PHASES:
        runs = [r[phase] for r in rounds if r.get(phase)]
        result[phase] = (
            {key: median_of(run[key] for run in runs) for key in runs[0]} if runs else None
        )
    return result


def median_of(values: Iterable[Any]) -> Any:
    """The median of numbers, or entry by entry of tables of numbers."""
    values = list(values)
    if not isinstance(values[0], dict):
        return statistics.median(values)
    entries = sorted({entry for table in values for entry in table})
    medians = {entry: statistics.median(t.get(entry, 0.0) for t in values) for entry in entries}
    return dict(sorted(medians.items(), key=lambda item: (-item[1], item[0])))


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

    pythons = {system: venv_python(SYSTEMS[system].package) for system in systems}
    freezes = {s: freeze(p) if p != sys.executable else [] for s, p in pythons.items()}
    tool = shutil.which("redis-benchmark")
    if tool is None:
        print("no redis-benchmark (Debian: redis-tools): no ceiling", file=sys.stderr)
    run = Collected(rounds={s: [] for s in systems}, freezes=freezes, started=time.monotonic())
    with running_server() as server:
        run.server = {
            "kind": server.kind,
            "binary": server.binary,
            "version": info(server.url, "server")["redis_version"],
        }
        for number in range(1, args.repeat + 1):
            if tool:
                flush(server.url)
                run.ceiling_rounds.append(redis_benchmark(tool, server.port, server.url))
                flush(server.url)
            for system in systems:
                if system in run.errors:
                    continue
                run.loads.append(os.getloadavg()[0])
                try:
                    one = run_round(system, pythons[system], server.url, args, run.facts)
                except RuntimeError as exc:
                    run.errors[system] = str(exc)
                    print(f"round {number}: {exc}", file=sys.stderr, flush=True)
                    continue
                run.rounds[system].append(one)
                print(f"round {number}/{args.repeat}: {system} {brief(one)}", file=sys.stderr)
            if number < args.repeat:
                # Each round's results as they stand, in case the run cannot finish.
                args.output.write_text(json.dumps(run.results(args, number), indent=2) + "\n")

    results = run.results(args, args.repeat)
    args.output.write_text(json.dumps(results, indent=2) + "\n")
    print(f"wrote {args.output}", file=sys.stderr)
    print(table_text(results))
    if not args.no_docs:
        chart.render(results)
    if run.errors:
        sys.exit(f"failed: {', '.join(sorted(run.errors))}")


@dataclass
class Collected:
    """What a run has measured so far."""

    rounds: dict[str, list[dict[str, Any]]]
    """Per system, each finished round's phases."""
    freezes: dict[str, list[str]]
    started: float
    """``time.monotonic()`` at the start, for the run's wall time."""
    ceiling_rounds: list[dict[str, float]] = field(default_factory=list)
    facts: dict[str, dict[str, Any]] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)
    server: dict[str, str] = field(default_factory=dict)
    loads: list[float] = field(default_factory=list)
    """The 1-minute load average as each system's round began: how busy the machine was."""

    def results(self, args: argparse.Namespace, done: int) -> dict[str, Any]:
        """The results file after ``done`` of the ``--repeat`` rounds."""
        return {
            "date": datetime.now(UTC).isoformat(timespec="seconds"),
            "command": shlex.join(["python", "benchmarks/peers/run.py", *sys.argv[1:]]),
            "note": args.note,
            "params": {
                "tasks": args.tasks,
                "concurrency": args.concurrency,
                "repeat": done,
                "latency_rate": args.latency_rate,
                "latency_seconds": args.latency_seconds,
            },
            "complete": done == args.repeat,
            "wall_seconds": round(time.monotonic() - self.started),
            "machine": {
                "cores": os.cpu_count(),
                "cpu": cpu_model(),
                "os": platform.platform(),
                "python": platform.python_version(),
                "load_average": {
                    "median": statistics.median(self.loads) if self.loads else None,
                    "max": max(self.loads, default=None),
                },
            },
            "redis": self.server,
            "checkout": checkout(),
            "ceiling": {
                "median": medians_flat(self.ceiling_rounds),
                "rounds": self.ceiling_rounds,
                "requests": CEILING_REQUESTS,
            },
            "systems": {
                system: {
                    **self.facts.get(system, {}),
                    "package": SYSTEMS[system].package,
                    "variant": SYSTEMS[system].variant,
                    "stores": SYSTEMS[system].stores,
                    "freeze": self.freezes[system],
                    "median": medians(rounds) if rounds else None,
                    "rounds": rounds,
                    "error": self.errors.get(system),
                }
                for system, rounds in self.rounds.items()
            },
        }


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
        f"Redis {each['redis_cpu_us_per_task']:.1f} us and {each['redis_calls_per_task']:.1f} "
        "commands a task, "
        f"start p50 {latency['p50_ms']:.2f} ms p99 {latency['p99_ms']:.2f} ms"
    )


def medians_flat(rounds: list[dict[str, float]]) -> dict[str, float] | None:
    if not rounds:
        return None
    return {key: statistics.median(r[key] for r in rounds) for key in rounds[0]}


if __name__ == "__main__":
    main()
