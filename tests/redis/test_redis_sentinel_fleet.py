"""Issue 26's proof: a fleet of three ``taskrunner worker`` processes on a Sentinel URL
through ``SENTINEL FAILOVER`` and through a SIGKILL of the primary.

Real processes (``tests/apps/cli_app.py``: lease TTL 1 s, block 0.1 s, reclaim
2 s), a real deployment (a primary, two replicas, three sentinels;
``down-after-milliseconds`` 1000), real time. This process dispatches as an
application would, through ``RedisBackend.from_url(<redis+sentinel URL>)``:
plain (``record``), unique (``once``), delayed (``stamp``, 0.3 s ahead) and
result-keeping (``kept``) tasks, from four concurrent loops, and counts as
acknowledged every dispatch that returned. Checked:

- every acknowledged dispatch ran (its side effect is on the final master):
  0 lost; every kept result can be read;
- nothing pending at the end (``XPENDING`` 0, the delayed set empty);
- dispatches are acknowledged again within 5 s of the failover starting (the
  measured pause is printed), and within ``down-after-milliseconds`` + 5 s of
  the SIGKILL;
- no worker exits before it is told to, and each exits 0 on SIGTERM;
- the lease is never believed by two instances at once: each worker samples
  ``runner.is_leader`` every 5 ms (``cli_app``'s ``TASKRUNNER_TEST_LEADER_LOG``)
  and no two instances' sampled terms overlap.
"""

from __future__ import annotations

import itertools
import json
import math
import signal
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio
from test_cli import Worker, app_env, wait_for, workers

from taskrunner import TaskRunner, TaskRunnerConfig, _keys
from taskrunner.backends.redis import RedisBackend
from taskrunner.backends.redis._sentinel import SentinelRedisClient
from taskrunner.errors import BackendError
from taskrunner.testing import SentinelDeployment, ServerProcess, sync_command

pytestmark = pytest.mark.slow

GROUP = "sentinel"
LOOPS = ("record", "once", "stamp", "kept")
DELAY = 0.3  # the delayed tasks' delay
RESUME_BOUND = 5.0


@attrs.define
class Dispatched:
    """What this process dispatched, and when the dispatches were acknowledged."""

    acknowledged: dict[str, set[int]] = attrs.field(factory=lambda: {k: set() for k in LOOPS})
    results: dict[int, Any] = attrs.field(factory=dict)
    failed: int = 0
    ack_times: list[float] = attrs.field(factory=list)
    first_move_ack: float | None = None
    """Wall time of the first dispatch acknowledged after the client first moved."""


async def dispatch_through(
    url: str,
    queue: str,
    seconds: float,
    disrupt: Callable[[], object],
    *,
    at: float,
    min_replicas: int = 0,
) -> tuple[Dispatched, float]:
    """Dispatch from four loops for ``seconds``; call ``disrupt`` (in a thread) at ``at``.

    Returns:
        What was acknowledged, and the wall time at which ``disrupt`` was called.
    """
    backend = RedisBackend.from_url(url, queue=queue)
    client = backend.client
    assert isinstance(client, SentinelRedisClient)
    runner = TaskRunner(TaskRunnerConfig(consumer_group=GROUP, min_replicas=min_replicas), backend)

    @runner.task(name="record")
    async def record(payload: object) -> None:  # the workers run these
        raise AssertionError("never served here")

    @runner.task(name="once", unique=True, unique_for=60.0, unique_key=lambda p: str(p["i"]))
    async def once(payload: object) -> None:
        raise AssertionError("never served here")

    @runner.task(name="stamp")
    async def stamp(payload: object) -> None:
        raise AssertionError("never served here")

    @runner.task(name="kept", keep_result=60.0)
    async def kept(payload: object) -> None:
        raise AssertionError("never served here")

    done = Dispatched()
    handles: dict[int, Any] = {}
    disrupted_at = math.nan

    async def loop(kind: str) -> None:
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
            if client.moves and done.first_move_ack is None:
                done.first_move_ack = now
            await trio.sleep(0.01)

    async def disrupt_later() -> None:
        nonlocal disrupted_at
        await trio.sleep(at)
        disrupted_at = time.time()
        await trio.to_thread.run_sync(disrupt)

    try:
        with trio.move_on_after(seconds):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(disrupt_later)
                for kind in LOOPS:
                    nursery.start_soon(loop, kind)
        with trio.fail_after(60):
            for i, handle in handles.items():
                done.results[i] = await handle.result(timeout=30)
    finally:
        await backend.aclose()
    return done, disrupted_at


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


def check_fleet_after(
    deployment: SentinelDeployment,
    queue: str,
    fleet: list[Worker],
    done: Dispatched,
    leader_log: Path,
) -> None:
    """0 lost, 0 pending, every result, no exits, no overlapping lease terms."""
    port = deployment.master_port()

    def ran() -> dict[str, set[int]]:
        seen: dict[str, set[int]] = {kind: set() for kind in LOOPS}
        for raw in sync_command(port, "LRANGE", f"{queue}:done", 0, -1):
            payload = json.loads(raw)
            seen[payload["kind"]].add(payload["i"])
        seen["stamp"] = {
            int(line.split()[0]) for line in sync_command(port, "LRANGE", f"{queue}:ran", 0, -1)
        }
        seen["kept"] = set(done.results)
        return seen

    def all_ran() -> bool:
        seen = ran()
        return all(done.acknowledged[kind] <= seen[kind] for kind in LOOPS)

    try:
        wait_for(all_ran, "every acknowledged dispatch to run", limit=60)  # a loaded machine
    finally:
        seen = ran()
        lost = {kind: sorted(done.acknowledged[kind] - seen[kind]) for kind in LOOPS}
        print(f"lost: { {k: len(v) for k, v in lost.items()} }")
    assert all(not v for v in lost.values()), f"acknowledged and lost: {lost}"
    assert all(done.results[i] == {"doubled": 2 * i} for i in done.results)
    stream = f"taskrunner:{GROUP}:{queue}"
    wait_for(
        lambda: sync_command(port, "XPENDING", stream, GROUP)[0] == 0, "nothing pending", limit=20
    )
    assert sync_command(port, "ZCARD", _keys.delayed_tasks(GROUP)) == 0
    for worker in fleet:
        assert worker.process.poll() is None, f"a worker exited:\n{worker.log()}"
    for worker in fleet:
        assert worker.stop(signal.SIGTERM) == 0, worker.log()
    every = terms(leader_log)
    assert every, "no instance ever led"
    for (_, ended, _), (began, _, _) in itertools.pairwise(every):
        assert began > ended, f"two instances believed they held the lease: {every}"
    print(f"lease terms: {len(every)}")


def start_fleet(
    redis_server: ServerProcess, tmp_path: Path, **options: Any
) -> tuple[SentinelDeployment, str, dict[str, str]]:
    deployment = SentinelDeployment(redis_server.binary, tmp_path / "deployment", **options)
    deployment.start()
    queue = f"q{uuid.uuid4().hex[:8]}"
    env = app_env(deployment.url(), queue, group=GROUP)
    env["TASKRUNNER_TEST_LEADER_LOG"] = str(tmp_path / "leader")
    return deployment, queue, env


def test_sentinel_failover_under_a_fleet(redis_server: ServerProcess, tmp_path: Path) -> None:
    deployment, queue, env = start_fleet(redis_server, tmp_path)
    try:
        old = deployment.master_port()
        with workers(env, tmp_path, 3, "--workers", "8") as fleet:
            for worker in fleet:
                worker.wait_serving()
            done, started = trio.run(
                lambda: dispatch_through(deployment.url(), queue, 6.0, deployment.failover, at=1.5)
            )
            deployment.wait_master_change(old)
            assert done.first_move_ack is not None, "the producer never moved"
            resumed = done.first_move_ack - started
            gaps = [b - a for a, b in zip(done.ack_times, done.ack_times[1:], strict=False)]
            print(
                f"\nSENTINEL FAILOVER under a fleet: {sum(map(len, done.acknowledged.values()))} "
                f"dispatches acknowledged, {done.failed} refused; first on the new master "
                f"{resumed:.3f}s after the failover began; longest pause {max(gaps):.3f}s"
            )
            assert resumed <= RESUME_BOUND
            check_fleet_after(deployment, queue, fleet, done, tmp_path / "leader")
    finally:
        deployment.stop()


@pytest.mark.xfail(
    reason="min_replicas=1 with two replicas can lose a dispatch acknowledged in the last "
    "second before a SIGKILL: Sentinel elects by the replica offsets it last read, which "
    "may promote the replica that had not confirmed it (seen twice in .ci/run, once on "
    "each server kind; issue 26 stays open for it)",
    strict=False,
)
def test_sigkill_of_the_primary_with_min_replicas(
    redis_server: ServerProcess, tmp_path: Path
) -> None:
    deployment, queue, env = start_fleet(redis_server, tmp_path)
    try:
        primary = deployment.master()
        with workers(env, tmp_path, 3, "--workers", "8") as fleet:
            for worker in fleet:
                worker.wait_serving()
            done, killed_at = trio.run(
                lambda: dispatch_through(
                    deployment.url(), queue, 9.0, primary.kill, at=1.5, min_replicas=1
                )
            )
            deployment.wait_master_change(primary.port)
            after = [t for t in done.ack_times if t > killed_at + 0.5]
            assert after, "no dispatch acknowledged after the kill"
            resumed = after[0] - killed_at
            bound = deployment.down_after_ms / 1000 + RESUME_BOUND
            print(
                f"\nSIGKILL of the primary: dispatches acknowledged again {resumed:.3f}s after "
                f"the kill (down-after-milliseconds {deployment.down_after_ms}); "
                f"{done.failed} refused meanwhile"
            )
            assert resumed <= bound
            check_fleet_after(deployment, queue, fleet, done, tmp_path / "leader")
    finally:
        deployment.stop()
