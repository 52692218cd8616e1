"""Issue 25's fleet proofs: three ``taskrunner worker`` processes on a real Redis
Cluster (3 masters) through ``CLUSTER FAILOVER``, a SIGKILL of the group's master
and live resharding of the group's slot.

Real processes (``tests/apps/cluster_app.py``: ``cli_app`` plus a periodic and a
rate-limited task; lease TTL 1 s, block 0.1 s, reclaim 2 s), a real cluster
(``cluster-node-timeout`` 2000 ms), real time. The workers and this process are
pointed at one node's URL (``RedisBackend.from_url``, cluster detected). This
process dispatches plain (``record``), unique (``once``), delayed (``stamp``,
0.3 s ahead), result-keeping (``kept``) and rate-limited (``limited``) tasks from
five concurrent loops and counts as acknowledged every dispatch that returned;
the workers' leader fires ``beat`` every second. The tasks' side effects are
written to keys this test places on masters other than the group's, so killing
the group's master cannot take them. Checked:

- every acknowledged dispatch ran: 0 lost (the SIGKILL without ``min_replicas``
  measures and prints the loss instead); every kept result can be read;
- nothing pending at the end (``XPENDING`` 0, the delayed set empty);
- no tick of ``beat`` between its first and last fire is missing;
- dispatches are acknowledged, and delayed tasks start, again within the bound
  (5 s after a failover began; node timeout + 5 s after the SIGKILL);
- no worker exits before it is told to, and each exits 0 on SIGTERM;
- the lease is never believed by two instances at once (each worker samples
  ``runner.is_leader`` every 5 ms: ``cli_app``'s ``TASKRUNNER_TEST_LEADER_LOG``).
"""

from __future__ import annotations

import itertools
import json
import math
import os
import signal
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import attrs
import pytest
import redis
import trio
from test_cli import Worker, app_env, wait_for

from taskrunner import TaskRunner, TaskRunnerConfig, _keys
from taskrunner.backends.redis import RedisBackend
from taskrunner.backends.redis._cluster_slots import key_slot
from taskrunner.errors import BackendError
from taskrunner.testing import ClusterNode, ClusterProcess, running_cluster

pytestmark = pytest.mark.slow

GROUP = "fleet"
APP = "cluster_app:runner"
LOOPS = ("record", "once", "stamp", "kept", "limited")
DELAY = 0.3  # the delayed tasks' delay
RESUME_BOUND = 5.0
SIDE_EFFECTS = ("done", "ran", "beats", "limited")
"""``<queue>:<suffix>``: the lists the tasks push to (see ``cluster_app``)."""


@attrs.define
class Dispatched:
    """What this process dispatched, and when the dispatches were acknowledged."""

    acknowledged: dict[str, set[int]] = attrs.field(factory=lambda: {k: set() for k in LOOPS})
    results: dict[int, Any] = attrs.field(factory=dict)
    failed: int = 0
    ack_times: list[float] = attrs.field(factory=list)
    ended: float = math.nan
    """Wall time at which the dispatching stopped."""


def group_slot() -> int:
    return key_slot(_keys.group_root(GROUP, "cluster"))


def place_queue(cluster: ClusterProcess) -> str:
    """A queue name whose side-effect lists all live on masters other than the group's."""
    group_master = cluster.master_of_slot(group_slot()).port
    while True:
        queue = f"q{uuid.uuid4().hex[:8]}"
        owners = {cluster.master_of_slot(key_slot(f"{queue}:{s}")).port for s in SIDE_EFFECTS}
        if group_master not in owners:
            return queue


def checker(cluster: ClusterProcess) -> redis.RedisCluster:
    """A redis-py cluster client on a running node, for the checks."""
    node = next(n for n in cluster.nodes if n.running)
    return redis.RedisCluster(host="127.0.0.1", port=node.port)


async def dispatch_through(
    url: str,
    queue: str,
    seconds: float,
    disrupt: Callable[[], object],
    *,
    at: float,
    min_replicas: int = 0,
) -> tuple[Dispatched, float]:
    """Dispatch from five loops for ``seconds``; call ``disrupt`` (in a thread) at ``at``.

    Returns:
        What was acknowledged, and the wall time at which ``disrupt`` was called.
    """
    backend = RedisBackend.from_url(url, queue=queue)
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

    @runner.task(name="limited")
    async def limited(payload: object) -> None:
        raise AssertionError("never served here")

    done = Dispatched()
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
            done.acknowledged[kind].add(i)
            done.ack_times.append(time.time())
            await trio.sleep(pause)

    async def disrupt_later() -> None:
        nonlocal disrupted_at
        await trio.sleep(at)
        disrupted_at = time.time()
        await trio.to_thread.run_sync(disrupt)

    try:
        assert await backend.detect_cluster()
        with trio.move_on_after(seconds):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(disrupt_later)
                for kind in LOOPS:
                    nursery.start_soon(loop, kind)
        done.ended = time.time()
        with trio.fail_after(60):
            for i, handle in handles.items():
                try:
                    done.results[i] = await handle.result(timeout=30)
                except TimeoutError:
                    pass  # counted as lost below
    finally:
        await backend.aclose()
    return done, disrupted_at


def terms(prefix: Path) -> list[tuple[float, float, str]]:
    """Every instance's leadership terms as its process sampled them: ``(first, last,
    file)`` wall times at which ``runner.is_leader`` was seen true."""
    found = []
    for path in prefix.parent.glob(prefix.name + "-*"):
        for line in path.read_text().splitlines():
            first, last = line.split()
            found.append((float(first), float(last), path.name))
    return sorted(found)


def ran(cluster: ClusterProcess, queue: str, done: Dispatched) -> dict[str, set[int]]:
    """What the workers ran, by kind (from the tasks' side effects)."""
    client = checker(cluster)
    seen: dict[str, set[int]] = {kind: set() for kind in LOOPS}
    try:
        for suffix in ("done", "limited"):
            for raw in client.lrange(f"{queue}:{suffix}", 0, -1):
                payload = json.loads(raw)
                seen[payload["kind"]].add(payload["i"])
        seen["stamp"] = {int(line.split()[0]) for line in client.lrange(f"{queue}:ran", 0, -1)}
    finally:
        client.close()
    seen["kept"] = set(done.results)
    return seen


def stamp_starts(cluster: ClusterProcess, queue: str) -> list[float]:
    client = checker(cluster)
    try:
        return sorted(float(line.split()[2]) for line in client.lrange(f"{queue}:ran", 0, -1))
    finally:
        client.close()


def lost_after(cluster: ClusterProcess, queue: str, done: Dispatched) -> dict[str, list[int]]:
    """Wait (bounded) for every acknowledged dispatch to run; what never did, by kind."""

    def missing() -> dict[str, list[int]]:
        seen = ran(cluster, queue, done)
        return {kind: sorted(done.acknowledged[kind] - seen[kind]) for kind in LOOPS}

    try:
        wait_for(lambda: not any(missing().values()), "every acknowledged dispatch to run", 30)
    except AssertionError:
        pass
    lost = missing()
    if any(lost.values()):
        client = checker(cluster)
        try:
            dead = _keys.dead_letter(_keys.group_root(GROUP, "cluster"), queue)
            print(f"dead letters: {client.xrange(dead)}")
        finally:
            client.close()
    print(f"acknowledged: { {k: len(v) for k, v in done.acknowledged.items()} }")
    print(f"lost: { {k: len(v) for k, v in lost.items()} }")
    return lost


def check_fleet_after(
    cluster: ClusterProcess, queue: str, fleet: list[Worker], done: Dispatched, leader_log: Path
) -> None:
    """0 pending, no missing tick, no exits, no overlapping lease terms."""
    assert all(done.results[i] == {"doubled": 2 * i} for i in done.results)
    client = checker(cluster)
    try:
        stream = f"{_keys.group_root(GROUP, 'cluster')}:{queue}"
        wait_for(
            lambda: client.xpending(stream, GROUP)["pending"] == 0, "nothing pending", limit=20
        )
        wait_for(
            lambda: client.zcard(_keys.delayed_tasks(GROUP, "cluster")) == 0,
            "the delayed set to empty",
            limit=20,
        )
        ticks = sorted({float(b.split()[0]) for b in client.lrange(f"{queue}:beats", 0, -1)})
    finally:
        client.close()
    assert len(ticks) >= 3, f"beat fired {len(ticks)} times"
    gaps = [b - a for a, b in itertools.pairwise(ticks)]
    assert max(gaps) < 1.5, f"a tick of beat is missing: {ticks}"
    for worker in fleet:
        assert worker.process.poll() is None, f"a worker exited:\n{worker.log()}"
    for worker in fleet:
        assert worker.stop(signal.SIGTERM) == 0, worker.log()
    every = terms(leader_log)
    assert every, "no instance ever led"
    for (_, ended, _), (began, _, _) in itertools.pairwise(every):
        assert began > ended, f"two instances believed they held the lease: {every}"
    print(f"lease terms: {len(every)}; beat ticks: {len(ticks)}")


def resumed_after(times: list[float], since: float, until: float) -> float:
    """The longest pause among ``times`` from ``since`` to ``until`` (the disruption's
    cost; a stop before ``until`` counts as a pause up to it)."""
    after = [since, *(t for t in times if since <= t <= until), until]
    return max(b - a for a, b in itertools.pairwise(after))


@contextmanager
def fleet_on(
    cluster: ClusterProcess, tmp_path: Path, reclaim_delay: float = 2.0
) -> Iterator[tuple[str, list[Worker]]]:
    queue = place_queue(cluster)
    env = app_env(cluster.url, queue, group=GROUP)
    env["TASKRUNNER_TEST_RECLAIM_DELAY"] = str(reclaim_delay)
    env["TASKRUNNER_TEST_LEADER_LOG"] = str(tmp_path / "leader")
    fleet = [Worker(env, tmp_path / f"worker-{i}.log", "--workers", "8", app=APP) for i in range(3)]
    try:
        for worker in fleet:
            worker.wait_serving()
        yield queue, fleet
    finally:
        for worker in fleet:
            worker.close()


def server() -> str:
    return os.environ.get("TASKRUNNER_TEST_SERVER", "auto")


def test_manual_failover_under_a_fleet(tmp_path: Path) -> None:
    with (
        running_cluster(server(), masters=3, replicas=1) as cluster,
        fleet_on(cluster, tmp_path) as (queue, fleet),
    ):
        master = cluster.master_of_slot(group_slot())
        replica = cluster.replicas_of[master.port][0]
        done, started = trio.run(
            lambda: dispatch_through(
                cluster.url, queue, 6.0, lambda: cluster.failover(replica), at=1.5
            )
        )
        assert cluster.master_of_slot(group_slot()).port == replica.port
        lost = lost_after(cluster, queue, done)
        dispatch_pause = resumed_after(done.ack_times, started, done.ended)
        run_pause = resumed_after(stamp_starts(cluster, queue), started, done.ended)
        print(
            f"\nCLUSTER FAILOVER under a fleet: {sum(map(len, done.acknowledged.values()))} "
            f"dispatches acknowledged, {done.failed} refused; longest pause after the "
            f"failover began: dispatch {dispatch_pause:.3f}s, delayed runs {run_pause:.3f}s"
        )
        assert not any(lost.values()), f"acknowledged and lost: {lost}"
        assert dispatch_pause <= RESUME_BOUND
        assert run_pause <= RESUME_BOUND
        check_fleet_after(cluster, queue, fleet, done, tmp_path / "leader")


def sigkill_the_group_master(
    tmp_path: Path, *, replicas: int, min_replicas: int
) -> tuple[dict[str, list[int]], Dispatched]:
    with (
        running_cluster(server(), masters=3, replicas=replicas) as cluster,
        fleet_on(cluster, tmp_path) as (queue, fleet),
    ):
        master: ClusterNode = cluster.master_of_slot(group_slot())
        done, killed_at = trio.run(
            lambda: dispatch_through(
                cluster.url, queue, 10.0, master.kill, at=1.5, min_replicas=min_replicas
            )
        )
        wait_for(
            lambda: cluster.master_of_slot(group_slot()).port != master.port,
            "a replica to be promoted",
        )
        lost = lost_after(cluster, queue, done)
        bound = cluster.node_timeout_ms / 1000 + RESUME_BOUND
        dispatch_pause = resumed_after(done.ack_times, killed_at, done.ended)
        run_pause = resumed_after(stamp_starts(cluster, queue), killed_at, done.ended)
        print(
            f"\nSIGKILL of the group's master ({replicas} replicas each, min_replicas="
            f"{min_replicas}): {sum(map(len, done.acknowledged.values()))} dispatches "
            f"acknowledged, {done.failed} refused, {sum(map(len, lost.values()))} acknowledged "
            f"and lost; longest pause after the kill: dispatch {dispatch_pause:.3f}s, delayed "
            f"runs {run_pause:.3f}s (node timeout {cluster.node_timeout_ms} ms)"
        )
        assert dispatch_pause <= bound
        assert run_pause <= bound
        check_fleet_after(cluster, queue, fleet, done, tmp_path / "leader")
        if any(lost.values()):  # late (a retry's backoff), or lost: asked again at the end
            seen = ran(cluster, queue, done)
            late = {kind: [i for i in ids if i in seen[kind]] for kind, ids in lost.items()}
            lost = {kind: [i for i in ids if i not in seen[kind]] for kind, ids in lost.items()}
            print(f"ran after the first 30 s: {late}; never ran: {lost}")
        return lost, done


def test_sigkill_of_the_group_master_measures_the_loss(tmp_path: Path) -> None:
    """Without ``min_replicas`` an acknowledged write may die with its master: the
    loss is measured and printed, not asserted (asynchronous replication)."""
    sigkill_the_group_master(tmp_path, replicas=1, min_replicas=0)


def test_sigkill_of_the_group_master_with_min_replicas_loses_nothing(tmp_path: Path) -> None:
    lost, _ = sigkill_the_group_master(tmp_path, replicas=2, min_replicas=1)
    assert not any(lost.values()), f"acknowledged and lost: {lost}"


def reshard(cluster: ClusterProcess, slot: int, target: ClusterNode) -> int:
    """Move ``slot`` to ``target`` as ``redis-cli --cluster reshard`` does, key by key
    (``MIGRATE`` one key every 10 ms, so the fleet meets ``ASK`` and ``TRYAGAIN`` for
    seconds), then ``SETSLOT ... NODE`` on every master. Returns the keys moved."""
    source = cluster.master_of_slot(slot)
    target.command("CLUSTER", "SETSLOT", slot, "IMPORTING", source.node_id)
    source.command("CLUSTER", "SETSLOT", slot, "MIGRATING", target.node_id)
    moved = 0
    while keys := source.command("CLUSTER", "GETKEYSINSLOT", slot, 1):
        source.command("MIGRATE", "127.0.0.1", target.port, "", 0, 5000, "KEYS", *keys)
        moved += len(keys)
        time.sleep(0.01)
    for node in (target, source, *cluster.masters_at_start):
        node.command("CLUSTER", "SETSLOT", slot, "NODE", target.node_id)
    return moved


@pytest.mark.xfail(
    reason="a rate-limited run acknowledged during a live resharding never ran, once, in "
    ".ci/run's valkey pass (the admission path under TRYAGAIN/ASK is not yet lossless); "
    "issue 25 stays open for it",
    strict=False,
)
def test_live_resharding_of_the_group_slot_under_a_fleet(tmp_path: Path) -> None:
    """While the slot migrates, a script whose keys are split between the two masters
    is answered ``TRYAGAIN`` and waited for (bounded); acknowledgements wait seconds.
    The workers' ``reclaim_delay`` (2 s elsewhere here, 300 s by default) is 10 s, so a
    run waiting for its ack is not reclaimed meanwhile: a second delivery of a
    ``max_retry=0`` task is taken for a poison message and dead-lettered."""
    with (
        running_cluster(server(), masters=3, replicas=1) as cluster,
        fleet_on(cluster, tmp_path, reclaim_delay=10.0) as (queue, fleet),
    ):
        source = cluster.master_of_slot(group_slot())
        target = next(m for m in cluster.masters_at_start if m.port != source.port)
        moved: list[int] = []
        began = time.time()
        done, started = trio.run(
            lambda: dispatch_through(
                cluster.url,
                queue,
                8.0,
                lambda: moved.append(reshard(cluster, group_slot(), target)),
                at=1.5,
            )
        )
        assert moved, "the resharding did not finish within the run"
        assert cluster.master_of_slot(group_slot()).port == target.port
        lost = lost_after(cluster, queue, done)
        dispatch_pause = resumed_after(done.ack_times, started, done.ended)
        print(
            f"\nLive resharding of the group's slot under a fleet: {moved[0]} keys moved "
            f"one by one; {sum(map(len, done.acknowledged.values()))} dispatches acknowledged, "
            f"{done.failed} refused; longest pause of dispatches {dispatch_pause:.3f}s "
            f"(run began {started - began:.1f}s after the fleet)"
        )
        assert not any(lost.values()), f"acknowledged and lost: {lost}"
        check_fleet_after(cluster, queue, fleet, done, tmp_path / "leader")
