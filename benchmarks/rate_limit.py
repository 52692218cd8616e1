"""How close a fleet-wide rate limit gets to its allowed rate on a real server.

Three runners (each its own connection, one trio program) serve one task limited to
``--rate`` starts per ``--per`` seconds (per key with ``--keys K``: K keys, each
with the limit); ``--tasks`` no-op runs per key are dispatched up front, so the
limit is the only brake. Every start's time is recorded inside the action.
Reports, per key: the most starts seen in any window of ``per`` seconds (must
not exceed the limit; measured on the runners' clock, which may differ from the
server's by a few milliseconds, so a window of 0.99 ``per`` is checked too),
and the steady rate: the starts after the first window (whose burst of up to
``rate`` starts is free) over the time from that window's end to the last start,
as a ratio of the allowed rate (target >= 0.9). Also the
deferrals per run (how often a run was sent back to wait).

    python benchmarks/rate_limit.py [--rate 100] [--per 1.0] [--tasks 500] [--keys 1]
                                    [--runners 3] [--workers 16]
"""

from __future__ import annotations

import argparse
import bisect
import time
from typing import Any

import trio

from taskrunner import RateLimit, TaskRunner, TaskRunnerConfig
from taskrunner.backends.redis import RedisBackend
from taskrunner.testing import running_server


def most_in_any_window(starts: list[float], per: float) -> int:
    """The most starts in any half-open window ``[t, t + per)``."""
    ordered = sorted(starts)
    return max((bisect.bisect_left(ordered, t + per) - i for i, t in enumerate(ordered)), default=0)


def steady_rate(starts: list[float], per: float) -> float:
    """Starts per second after the first window: those at or after ``first + per``,
    over the time from ``first + per`` to the last start."""
    tail_from = min(starts) + per
    tail = [t for t in starts if t >= tail_from]
    span = max(tail, default=tail_from) - tail_from
    return len(tail) / span if span > 0 else float("nan")


async def one_run(url: str, args: argparse.Namespace) -> tuple[dict[str, list[float]], int]:
    keys = [f"k{i}" for i in range(args.keys)]
    starts: dict[str, list[float]] = {key: [] for key in keys}
    expected = args.tasks * len(keys)
    done = trio.Event()
    backends = [RedisBackend.from_url(url) for _ in range(args.runners)]
    runners = [
        TaskRunner(
            TaskRunnerConfig(
                consumer_group="bench_rate",
                host=f"bench{i}",
                num_workers=args.workers,
                delayed_poll_interval=0.1,
                block_duration=0.1,
            ),
            backend,
        )
        for i, backend in enumerate(backends)
    ]
    for runner in runners:

        @runner.task(
            name="limited",
            rate_limit=RateLimit(args.rate, per=args.per),
            rate_limit_key=(lambda p: p["key"]) if args.keys > 1 else None,
        )
        async def limited(payload: dict[str, Any]) -> None:
            starts[payload["key"]].append(time.monotonic())
            if sum(map(len, starts.values())) == expected:
                done.set()

    payloads = [{"key": key, "n": n} for n in range(args.tasks) for key in keys]
    await runners[0].dispatch_many("limited", payloads)
    async with trio.open_nursery() as nursery:
        for runner in runners:
            await nursery.start(runner.serve)
        await done.wait()
        nursery.cancel_scope.cancel()
    deferred = sum(r.statistics().deferred for r in runners)
    for backend in backends:
        await backend.aclose()
    return starts, deferred


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=int, default=100, help="starts allowed per window")
    parser.add_argument("--per", type=float, default=1.0, help="the window, in seconds")
    parser.add_argument("--tasks", type=int, default=500, help="runs per key")
    parser.add_argument("--keys", type=int, default=1, help="rate_limit_key values")
    parser.add_argument("--runners", type=int, default=3)
    parser.add_argument("--workers", type=int, default=16, help="pool size per runner")
    args = parser.parse_args()
    with running_server() as server:
        starts, deferred = trio.run(one_run, server.url, args)
    allowed = args.rate / args.per
    print(
        f"rate_limit: RateLimit({args.rate}, per={args.per:g}), {args.keys} key(s) x "
        f"{args.tasks} runs, {args.runners} runners x {args.workers} workers, {server.kind}"
    )
    for key, seen in starts.items():
        steady = steady_rate(seen, args.per)
        print(
            f"  {key}: most in any {args.per:g}s window {most_in_any_window(seen, args.per)} "
            f"(in 0.99 of one: {most_in_any_window(seen, args.per * 0.99)}; limit {args.rate}); "
            f"steady rate {steady:,.1f}/s of {allowed:,.1f}/s allowed: "
            f"ratio {steady / allowed:.3f}   target >= 0.9"
        )
    runs = sum(map(len, starts.values()))
    print(f"  deferrals: {deferred} ({deferred / runs:.2f} per run)")


if __name__ == "__main__":
    main()
