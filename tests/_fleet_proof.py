"""What the fleet proofs on real deployments share (``tests/redis/test_cluster_fleet.py``,
``tests/redis/test_redis_sentinel_fleet.py``): the dispatching side, which counts as
acknowledged every dispatch that returned, and the checks made of the fleet at the end.

Each proof reads its deployment's side effects itself (a cluster client, or the
Sentinel's current master); what it reads is compared here.
"""

from __future__ import annotations

import itertools
import math
import signal
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import attrs
import trio
from test_cli import Worker

from taskrunner import TaskRunner, TaskRunnerConfig
from taskrunner.backends.redis import RedisBackend
from taskrunner.backends.redis._sentinel import SentinelRedisClient
from taskrunner.errors import BackendError

DELAY = 0.3
"""The delayed tasks' (``stamp``'s) delay."""

CRASH_SAFE_APP = {"TASKRUNNER_TEST_MAX_RETRY": "3", "TASKRUNNER_TEST_MIN_REPLICAS": "1"}
"""The workers' settings for a proof that kills a master: 3 attempts, and side effects
confirmed by a replica (``cli_app``'s ``MAX_RETRY`` and ``MIN_REPLICAS``). A run in
flight when the master dies is cut off (its own write fails) or its outcome dies with
the master; either way its message, safe on the promoted replica, is delivered again
and that delivery is an attempt. With one attempt it was failed without running: the
two "lost" dispatches of issue 26's CI rehearsal were such dead letters."""


@attrs.define
class Dispatched:
    """What this process dispatched, and when the dispatches were acknowledged."""

    kinds: tuple[str, ...]
    acknowledged: dict[str, set[int]] = attrs.field()
    results: dict[int, Any] = attrs.field(factory=dict)
    no_outcome: dict[int, str] = attrs.field(factory=dict)
    """Kept dispatches whose result could not be read in time: what the store knew."""
    failed: int = 0
    ack_times: list[float] = attrs.field(factory=list)
    ended: float = math.nan
    """Wall time at which the dispatching stopped."""
    first_move_ack: float | None = None
    """Wall time of the first dispatch acknowledged after the client first moved."""

    @acknowledged.default
    def _every_kind(self) -> dict[str, set[int]]:
        return {kind: set() for kind in self.kinds}

    def lost(self, seen: dict[str, set[int]]) -> dict[str, list[int]]:
        """The acknowledged dispatches missing from ``seen`` (what ran), by kind."""
        return {kind: sorted(self.acknowledged[kind] - seen[kind]) for kind in self.kinds}


def stub_tasks(runner: TaskRunner, kinds: Iterable[str]) -> None:
    """Register the fleet's tasks as this process dispatches them (the workers run them)."""

    async def never(payload: object) -> None:
        raise AssertionError("never served here")

    options: dict[str, dict[str, Any]] = {
        "once": {"unique": True, "unique_for": 60.0, "unique_key": lambda p: str(p["i"])},
        "kept": {"keep_result": 60.0},
    }
    for kind in kinds:
        runner.task(name=kind, **options.get(kind, {}))(never)


def dispatch(
    url: str,
    queue: str,
    group: str,
    kinds: tuple[str, ...],
    seconds: float,
    disrupt: Callable[[], object],
    *,
    at: float,
    min_replicas: int = 0,
    shards: int = 1,
) -> tuple[Dispatched, float]:
    """Dispatch to ``url`` from one loop a kind for ``seconds``; call ``disrupt`` (in a
    thread) at ``at``. Then read every kept result (one missing after 30 s is recorded in
    :attr:`Dispatched.no_outcome` and counts as lost).

    A Redis Cluster node's URL is told by its cluster mode (detected); a Sentinel URL
    by its client, whose moves to a new master give :attr:`Dispatched.first_move_ack`.
    ``shards`` is the group's (the workers' ``TASKRUNNER_TEST_SHARDS``).

    Returns:
        What was acknowledged, and the wall time at which ``disrupt`` was called.
    """

    async def run() -> tuple[Dispatched, float]:
        backend = RedisBackend.from_url(url, queue=queue)
        client = backend.client
        if url.startswith("redis+sentinel"):
            assert isinstance(client, SentinelRedisClient)
        else:
            assert await backend.detect_cluster()

        def moved() -> bool:
            return isinstance(client, SentinelRedisClient) and client.moves > 0

        config = TaskRunnerConfig(consumer_group=group, min_replicas=min_replicas, shards=shards)
        runner = TaskRunner(config, backend)
        stub_tasks(runner, kinds)
        done = Dispatched(kinds)
        handles: dict[int, Any] = {}
        disrupted_at = math.nan

        async def loop(kind: str) -> None:
            pause = 0.04 if kind == "limited" else 0.01  # ~25/s against a limit of 20/s
            for i in range(1, 1_000_000):
                try:
                    if kind == "stamp":
                        await runner.dispatch_delayed(
                            "stamp", {"index": i, "due": time.time() + DELAY, "work": 0}, DELAY
                        )
                    elif kind == "kept":
                        handles[i] = await runner.dispatch("kept", {"n": i})
                    else:
                        await runner.dispatch(kind, {"kind": kind, "i": i})
                except BackendError:
                    done.failed += 1  # not acknowledged: not counted
                    await trio.sleep(0.05)
                    continue
                now = time.time()
                done.acknowledged[kind].add(i)
                done.ack_times.append(now)
                if done.first_move_ack is None and moved():
                    done.first_move_ack = now
                await trio.sleep(pause)

        async def disrupt_later() -> None:
            nonlocal disrupted_at
            await trio.sleep(at)
            disrupted_at = time.time()
            await trio.to_thread.run_sync(disrupt)

        try:
            with trio.move_on_after(seconds):
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(disrupt_later)
                    for kind in kinds:
                        nursery.start_soon(loop, kind)
            done.ended = time.time()
            with trio.fail_after(60):
                for i, handle in handles.items():
                    try:
                        done.results[i] = await handle.result(timeout=30)
                    except trio.TooSlowError:  # the store may not know the id: counted as lost
                        done.no_outcome[i] = repr(await runner.get_task(handle.id))
        finally:
            await backend.aclose()
        return done, disrupted_at

    return trio.run(run)


def assert_none_lost(done: Dispatched, lost: dict[str, list[int]], dead: list[str]) -> None:
    """Every acknowledged dispatch ran, and every kept result is the task's."""
    assert not any(lost.values()), (
        f"acknowledged and lost: {lost}; kept without an outcome: {done.no_outcome}; "
        f"dead letters: {dead}"
    )
    assert all(done.results[i] == {"doubled": 2 * i} for i in done.results)


def runs_again(done_list: list[bytes], ran_list: list[bytes]) -> int:
    """Runs made more than once, from the side effects: ``<queue>:done`` (and
    ``:limited``) payloads, and ``<queue>:ran`` lines (``stamp``'s, by index)."""
    stamps = {line.split()[0] for line in ran_list}
    return len(done_list) - len(set(done_list)) + len(ran_list) - len(stamps)


def terms(prefix: Path) -> list[tuple[float, float, str]]:
    """Every instance's leadership terms as its process sampled them (``cli_app``'s
    ``TASKRUNNER_TEST_LEADER_LOG``): ``(first, last, file)`` wall times at which
    ``runner.is_leader`` was seen true, so each lies within a real term."""
    found = []
    for path in prefix.parent.glob(prefix.name + "-*"):
        for line in path.read_text().splitlines():
            first, last = line.split()
            found.append((float(first), float(last), path.name))
    return sorted(found)


def stop_fleet_and_check_lease(fleet: list[Worker], leader_log: Path) -> int:
    """No worker exited before it was told to; each exits 0 on SIGTERM; the lease was
    never believed by two instances at once. Returns the number of lease terms."""
    for worker in fleet:
        assert worker.process.poll() is None, f"a worker exited:\n{worker.log()}"
    for worker in fleet:
        assert worker.stop(signal.SIGTERM) == 0, worker.log()
    every = terms(leader_log)
    assert every, "no instance ever led"
    for (_, ended, _), (began, _, _) in itertools.pairwise(every):
        assert began > ended, f"two instances believed they held the lease: {every}"
    return len(every)
