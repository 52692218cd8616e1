"""What a dashboard watching a busy group costs the fleet: no-op throughput through
RedisBackend on a local server, with and without ``taskrunner dashboard`` polling.

Each round dispatches N no-op tasks and serves one runner (concurrency 32) until every
one is acked, as ``redis_end_to_end.py`` does, alternately with no dashboard and with
one: ``taskrunner dashboard`` in a process of its own (sampling every second, five
times as often as its default) and a poller process requesting the group page's
``/api/`` twin every ``--poll`` seconds (a browser with the page open, at twice the
default refresh rate). What the fleet pays for is the Redis server's work on the
dashboard's reads (summaries only: ``XLEN``, ``XINFO``, the metrics hash, ``SCAN`` for
heartbeats), and the CPU the two processes take from the machine. Target: with / without
>= 0.98. Also printed: the commands per second the dashboard alone sends the server
(the fleet stopped) and the CPU the two processes take, numbers the machine's noise
hardly moves.

    python benchmarks/dashboard_cost.py [--tasks N] [--repeat R] [--poll S]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import httpx
import trio
from _harness import run_noop_tasks

from taskrunner import TaskRunner, TaskRunnerConfig
from taskrunner.backends.redis import RedisBackend
from taskrunner.testing import free_port, running_server, sync_command

GROUP = "bench"

POLLER = """
import sys, time, httpx
url, every = sys.argv[1], float(sys.argv[2])
with httpx.Client(timeout=10) as http:
    while True:
        started = time.monotonic()
        http.get(url).raise_for_status()
        time.sleep(max(0.0, every - (time.monotonic() - started)))
"""


async def one_run(url: str, n: int, run: int) -> float:
    backend = RedisBackend.from_url(url)
    runner = TaskRunner(
        TaskRunnerConfig(consumer_group=GROUP, num_workers=32, batch_size=32), backend
    )
    rates = await run_noop_tasks(runner, n)
    assert await backend.length(GROUP) == 0, "entries left in the stream"
    await backend.aclose()
    return rates.process


class Watching:
    """``taskrunner dashboard`` and a poller of the group's page, for a ``with`` block."""

    def __init__(self, url: str, poll: float) -> None:
        self.url = url
        self.poll = poll
        self.processes: list[subprocess.Popen[bytes]] = []

    def __enter__(self) -> Watching:
        port = free_port()
        self.processes.append(
            subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "taskrunner",
                    "dashboard",
                    "--url",
                    self.url,
                    "--port",
                    str(port),
                    "--sample-interval",
                    "1",
                    "--log-level",
                    "warning",
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        )
        api = f"http://127.0.0.1:{port}/api/groups/{GROUP}"
        deadline = time.monotonic() + 30
        while True:
            try:
                httpx.get(api, timeout=2).raise_for_status()
                break
            except httpx.HTTPError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        self.processes.append(subprocess.Popen([sys.executable, "-c", POLLER, api, str(self.poll)]))
        return self

    def __exit__(self, *exc: object) -> None:
        for process in self.processes:
            process.terminate()
            process.wait(timeout=10)


def commands_processed(port: int) -> int:
    info = sync_command(port, "INFO", "stats").decode()
    (line,) = [x for x in info.splitlines() if x.startswith("total_commands_processed:")]
    return int(line.partition(":")[2])


def cpu_seconds(pid: int) -> float:
    """User and system CPU seconds used so far by process ``pid`` (Linux ``/proc``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def dashboard_alone(url: str, port: int, poll: float, seconds: float) -> tuple[float, float]:
    """The commands per second the dashboard alone sends the server (the fleet stopped),
    and the CPU share (of one core) the dashboard and the poller take meanwhile."""
    with Watching(url, poll) as watching:
        time.sleep(2)
        pids = [p.pid for p in watching.processes]
        before, cpu_before = commands_processed(port), sum(map(cpu_seconds, pids))
        time.sleep(seconds)
        after, cpu_after = commands_processed(port), sum(map(cpu_seconds, pids))
    return (after - before - 1) / seconds, (cpu_after - cpu_before) / seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=50_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--poll", type=float, default=1.0, help="seconds between page polls")
    args = parser.parse_args()
    without, with_ = [], []
    with running_server() as server:
        trio.run(one_run, server.url, 2_000, -1)  # warm up the server and the scripts
        for run in range(args.repeat):
            without.append(trio.run(one_run, server.url, args.tasks, run))
            with Watching(server.url, args.poll):
                time.sleep(2)  # the sampler and the poller in their stride
                with_.append(trio.run(one_run, server.url, args.tasks, run))
        own, cpu = dashboard_alone(server.url, server.port, args.poll, 10.0)
    plain, watched = statistics.median(without), statistics.median(with_)
    print(
        f"dashboard_cost: {args.tasks} no-op tasks, 32 workers, {server.kind}, "
        f"median of {args.repeat}, page polled every {args.poll:g}s, sampled every 1s"
    )
    print(f"  process without a dashboard: {plain:>10,.0f} tasks/s")
    print(f"  process with a dashboard:    {watched:>10,.0f} tasks/s")
    print(f"  ratio with / without: {watched / plain:.3f}   target >= 0.98")
    print(f"  the dashboard's own load on the server: {own:,.1f} commands/s")
    print(f"  the dashboard's and the poller's CPU: {cpu:.1%} of one core")


if __name__ == "__main__":
    main()
