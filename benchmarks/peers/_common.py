"""What every driver shares: the command line, the tally its task calls, Redis
CPU and command readings, and the shape of the result it prints.

Each driver runs in its own virtualenv with only its system installed, so this
module uses the standard library alone. A driver runs the one phase that its
``--phase`` names (each phase in a fresh process, against an empty server):

- ``each``: enqueue N tasks one call per task (``--concurrency`` callers at
  once), then start the worker and time it until the N-th task has run;
- ``bulk``: the same with the system's bulk-enqueue call (skipped where it has
  none);
- ``latency``: with the worker running, send tasks at a steady rate, each
  carrying its send time, and record how long after that it started.

Every task is the same one-call body (:meth:`Tally.ran`), so the timing is taken
at the same place in every system: processing runs from the first task's start
to the N-th task's, and Redis CPU is read with ``INFO cpu`` before the enqueue,
after it, and right after the N-th task. ``INFO commandstats`` is read before
the enqueue and right after the N-th task too (which commands a system sends
per task), and ``INFO keyspace`` once the worker has lingered (how many keys a
system leaves behind per task: results and job records kept by default).
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import socket
import time
from collections.abc import Callable, Sequence
from typing import Any, Protocol
from urllib.parse import urlsplit

PHASES = ("each", "bulk", "latency")

WARMUP = 0.5
"""Seconds at the start of the latency phase whose tasks are not counted."""


class Tally:
    """Counts the runs of the benchmark task and calls ``on_done`` at the ``expected``-th.

    Args:
        expected: How many runs complete the phase.
        on_done: Called once, from the task that makes the count.
    """

    def __init__(self, expected: int, on_done: Callable[[], object]) -> None:
        self.expected = expected
        self.on_done = on_done
        self.count = 0
        self.first = 0.0
        self.last = 0.0
        self.latencies: list[tuple[float, float]] = []
        """``(sent, started - sent)`` for each task that carried a send time."""

    def ran(self, sent: float) -> None:
        """The task body: one call at the start of every run (``sent`` 0 for no timing)."""
        now = time.perf_counter()
        if sent:
            self.latencies.append((sent, now - sent))
        self.count += 1
        if self.count == 1:
            self.first = now
        if self.count == self.expected:
            self.last = now
            self.on_done()


class TallyView(Protocol):
    """What a phase's result reads of a tally (:class:`Tally`, or a tally shared by
    processes)."""

    @property
    def count(self) -> int: ...
    @property
    def first(self) -> float: ...
    @property
    def last(self) -> float: ...
    @property
    def latencies(self) -> list[tuple[float, float]]: ...


def parse_args(
    description: str, extra: Callable[[argparse.ArgumentParser], object] | None = None
) -> argparse.Namespace:
    """The driver's command line; ``extra`` adds a driver's own options."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--url", required=True, help="redis://127.0.0.1:PORT/0 (flushed!)")
    parser.add_argument("--phase", required=True, choices=PHASES)
    parser.add_argument("--tasks", type=int, default=20_000)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--latency-rate", type=float, default=1_000.0, help="tasks/s")
    parser.add_argument("--latency-seconds", type=float, default=3.0)
    if extra is not None:
        extra(parser)
    return parser.parse_args()


def command(url: str, *args: str) -> bytes:
    """Send one command on a fresh connection; return a status or bulk reply's bytes.

    Raises:
        RuntimeError: the server answered with an error, or with another kind of reply.
    """
    where = urlsplit(url)
    request = f"*{len(args)}\r\n".encode() + b"".join(
        f"${len(a.encode())}\r\n{a}\r\n".encode() for a in args
    )
    with socket.create_connection((where.hostname, where.port or 6379), timeout=10) as sock:
        sock.sendall(request)
        data = b""
        while b"\r\n" not in data:
            data += _recv(sock)
        head, _, rest = data.partition(b"\r\n")
        if head.startswith((b"+", b":")):
            return head[1:]
        if not head.startswith(b"$"):
            raise RuntimeError(f"reply to {args[0]}: {head.decode(errors='replace')}")
        size = int(head[1:])
        while len(rest) < size + 2:
            rest += _recv(sock)
        return rest[:size]


def _recv(sock: socket.socket) -> bytes:
    chunk = sock.recv(65536)
    if not chunk:
        raise RuntimeError("the server closed the connection")
    return chunk


def info(url: str, section: str) -> dict[str, str]:
    """One ``INFO`` section as a dict of its ``field:value`` lines."""
    lines = command(url, "INFO", section).decode().splitlines()
    return dict(line.split(":", 1) for line in lines if ":" in line and not line.startswith("#"))


def redis_cpu(url: str) -> float:
    """The server's CPU seconds so far: ``used_cpu_user + used_cpu_sys``."""
    cpu = info(url, "cpu")
    return float(cpu["used_cpu_user"]) + float(cpu["used_cpu_sys"])


Commands = dict[str, tuple[int, int]]
"""Per command, ``(calls, usec)`` so far, as ``INFO commandstats`` counts them."""

READING = "info"
"""The command the readings themselves send, left out of the counts."""


def parse_commandstats(text: str) -> Commands:
    """``INFO commandstats`` as ``{command: (calls, usec)}`` (``client|setname`` style
    names for subcommands, as Redis 7 reports them)."""
    commands: Commands = {}
    for line in text.splitlines():
        if not line.startswith("cmdstat_"):
            continue
        name, _, fields = line[len("cmdstat_") :].partition(":")
        values = dict(field.split("=", 1) for field in fields.split(",") if "=" in field)
        commands[name] = (int(values["calls"]), int(values["usec"]))
    return commands


def redis_commands(url: str) -> Commands:
    """The server's command counts so far (see :func:`parse_commandstats`)."""
    return parse_commandstats(command(url, "INFO", "commandstats").decode())


def command_deltas(before: Commands, after: Commands, n: int) -> dict[str, float]:
    """Calls per task of each command run between the two readings, most called first.

    The readings' own ``INFO`` is left out; the commands a script runs count as
    well as the script's own call (``INFO commandstats`` counts both), so this is
    what Redis executed per task, not how many requests the client sent."""
    deltas = {
        name: (calls - before.get(name, (0, 0))[0]) / n
        for name, (calls, _) in after.items()
        if name != READING and calls > before.get(name, (0, 0))[0]
    }
    return dict(sorted(deltas.items(), key=lambda item: (-item[1], item[0])))


def parse_keyspace(text: str) -> int:
    """How many keys ``INFO keyspace`` counts, over every database."""
    total = 0
    for line in text.splitlines():
        if line.startswith("db") and ":" in line:
            fields = dict(f.split("=", 1) for f in line.split(":", 1)[1].split(","))
            total += int(fields["keys"])
    return total


def redis_keys(url: str) -> int:
    """How many keys the server holds now."""
    return parse_keyspace(command(url, "INFO", "keyspace").decode())


def flush(url: str) -> None:
    command(url, "FLUSHALL")


def percentile(values: Sequence[float], q: float) -> float:
    """The nearest-rank ``q``-th percentile (0 < q <= 100) of ``values``.

    Raises:
        ValueError: ``values`` is empty.
    """
    if not values:
        raise ValueError("percentile of no values")
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)]


def throughput(
    n: int,
    enqueue_seconds: float,
    started: float,
    tally: TallyView,
    cpu: Sequence[float],
    commands: Sequence[Commands],
    keys: int,
) -> dict[str, Any]:
    """The result of an ``each`` or ``bulk`` phase.

    Args:
        n: Tasks enqueued and run.
        enqueue_seconds: How long enqueueing all of them took.
        started: ``perf_counter()`` when the worker was started.
        tally: The phase's tally, complete.
        cpu: Redis CPU seconds before the enqueue, after it, and after the N-th run.
        commands: Redis command counts before the enqueue and after the N-th run.
        keys: The keys on the server once the worker has lingered.
    """
    before, enqueued, processed = cpu
    counted, done = commands
    per_command = command_deltas(counted, done, n)
    return {
        "enqueue_per_s": n / enqueue_seconds,
        "process_per_s": n / (tally.last - tally.first),
        "process_from_start_per_s": n / (tally.last - started),
        "redis_cpu_us_per_task": (processed - before) / n * 1e6,
        "redis_cpu_enqueue_us_per_task": (enqueued - before) / n * 1e6,
        "redis_cpu_process_us_per_task": (processed - enqueued) / n * 1e6,
        "redis_calls_per_task": sum(per_command.values()),
        "redis_keys_per_task": keys / n,
        "redis_commands": per_command,
    }


def latency(tally: TallyView, sent: int, start: float, dispatch_seconds: float) -> dict[str, float]:
    """The result of a latency phase that sent ``sent`` tasks from ``start`` on.

    Tasks sent during the first :data:`WARMUP` seconds are left out.
    """
    kept = [lag for at, lag in tally.latencies if at >= start + WARMUP]
    return {
        "sent": sent,
        "started": tally.count,
        "counted": len(kept),
        "rate_per_s": sent / dispatch_seconds,
        "p50_ms": percentile(kept, 50) * 1e3,
        "p99_ms": percentile(kept, 99) * 1e3,
        "max_ms": max(kept) * 1e3,
    }


def latency_rate(wanted: float, process_per_s: float) -> float:
    """The latency phase's send rate: ``wanted``, or half the system's processing rate
    if that is lower (above its processing rate a queue only grows, and the delay
    measured is the backlog's, not the start latency)."""
    return min(wanted, process_per_s / 2)


def latency_schedule(rate: float, seconds: float) -> tuple[int, float]:
    """How many tasks the latency phase sends, and the gap between two."""
    return max(1, round(rate * seconds)), 1.0 / rate


def emit(system: str, phase: str, result: dict[str, Any] | None, facts: dict[str, Any]) -> None:
    """Print the driver's result as the last line of its output (``result`` is None
    for a bulk phase of a system without a bulk call)."""
    record = {"system": system, "phase": phase, "result": result, **facts}
    record["python"] = platform.python_version()
    print(json.dumps(record), flush=True)
