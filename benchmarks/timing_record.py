"""How much does recording one task timing cost on the hot path?

Every task run ends with ``TimingRecorder.record(name, seconds)``. The Go
library's equivalent is a channel send, reported at ~1.2 us/op in its own
benchmarks. This script times ``record`` over ``REPS`` repetitions of
``CALLS`` calls cycling through a handful of task names, and, as the baseline
a straight port would give, a trio memory channel ``send_nowait`` of a
``(name, seconds)`` tuple (an unbounded buffer, no receiver: the cheapest a
channel can be). Both loops include the same Python ``for`` overhead, which
is timed separately and printed for reference; the garbage collector stays on,
as in production.

The Go figure comes from another machine and another language, so the ratio
against it is indicative only; the ratio against the channel, measured in the
same run, is the like-for-like one.

Run: ``python benchmarks/timing_record.py`` (or ``nox -s bench -- timing_record``).
"""

from __future__ import annotations

import math
import platform
import statistics
import time
from collections.abc import Callable, Sequence

import trio

from taskrunner._fleet.timings import TimingRecorder

GO_CHANNEL_SEND_NS = 1200.0
REPS = 10
CALLS = 1_000_000
TASK_NAMES = ("send_email", "resize_image", "charge_card", "sync_crm", "cleanup")
SECONDS = 0.0123


def _names() -> list[str]:
    # Built once, outside the timed loops, so the loop body is only the call.
    return list(TASK_NAMES * (CALLS // len(TASK_NAMES)))


def time_empty_loop(names: Sequence[str]) -> list[float]:
    results = []
    for _ in range(REPS):
        start = time.perf_counter_ns()
        for _name in names:
            pass
        results.append((time.perf_counter_ns() - start) / len(names))
    return results


def time_record(names: Sequence[str]) -> list[float]:
    results = []
    for _ in range(REPS):
        recorder = TimingRecorder()
        record = recorder.record
        start = time.perf_counter_ns()
        for name in names:
            record(name, SECONDS)
        results.append((time.perf_counter_ns() - start) / len(names))
        if recorder.pending() != len(names):
            raise AssertionError("record lost samples")
    return results


async def _time_send_nowait(names: Sequence[str]) -> list[float]:
    results = []
    for _ in range(REPS):
        send, receive = trio.open_memory_channel[tuple[str, float]](math.inf)
        with send, receive:
            send_nowait = send.send_nowait
            start = time.perf_counter_ns()
            for name in names:
                send_nowait((name, SECONDS))
            results.append((time.perf_counter_ns() - start) / len(names))
            if receive.statistics().current_buffer_used != len(names):
                raise AssertionError("send_nowait lost items")
    return results


def time_send_nowait(names: Sequence[str]) -> list[float]:
    return trio.run(_time_send_nowait, names)


def _line(label: str, samples: list[float], extra: str = "") -> str:
    median = statistics.median(samples)
    best = min(samples)
    return f"  {label:<34} median {median:8.1f} ns/op   best {best:8.1f} ns/op{extra}"


def main() -> None:
    names = _names()
    print(
        f"timing_record: {REPS} x {CALLS:,} calls, {len(TASK_NAMES)} task names,"
        f" Python {platform.python_version()} ({platform.machine()})"
    )
    runs: list[tuple[str, Callable[[Sequence[str]], list[float]]]] = [
        ("empty for loop (in both below)", time_empty_loop),
        ("TimingRecorder.record", time_record),
        ("trio send_nowait (naive port)", time_send_nowait),
    ]
    results = {label: fn(names) for label, fn in runs}
    record = statistics.median(results["TimingRecorder.record"])
    channel = statistics.median(results["trio send_nowait (naive port)"])
    print(_line("empty for loop (in both below)", results["empty for loop (in both below)"]))
    print(
        _line(
            "TimingRecorder.record",
            results["TimingRecorder.record"],
            f"   {GO_CHANNEL_SEND_NS / record:5.1f}x faster than Go's"
            f" {GO_CHANNEL_SEND_NS:.0f} ns/op",
        )
    )
    print(
        _line(
            "trio send_nowait (naive port)",
            results["trio send_nowait (naive port)"],
            f"   {GO_CHANNEL_SEND_NS / channel:5.1f}x faster than Go's"
            f" {GO_CHANNEL_SEND_NS:.0f} ns/op",
        )
    )
    print(f"  record vs send_nowait (medians): {channel / record:.2f}x faster")


if __name__ == "__main__":
    main()
