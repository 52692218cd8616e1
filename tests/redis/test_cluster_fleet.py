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
- nothing failed for good: the dead-letter stream is empty. A run that the
  failover or the master's death cut off, or whose outcome died with the master,
  is delivered again and that delivery is an attempt: a task of one attempt would
  be failed without running, so the failover and SIGKILL tests' tasks have 3, and
  their side effects wait for a replica of the master they are written to
  (``_fleet_proof.CRASH_SAFE_APP``; ``WAIT`` counts per master);
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
import os
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import _fleet_proof
import pytest
import redis
from _fleet_proof import CRASH_SAFE_APP, Dispatched, stop_fleet_and_check_lease
from test_cli import Worker, app_env, wait_for

from taskrunner import _keys, _shards
from taskrunner.backends.redis._cluster_slots import key_slot
from taskrunner.testing import ClusterNode, ClusterProcess, running_cluster

pytestmark = pytest.mark.slow

GROUP = "fleet"
APP = "cluster_app:runner"
LOOPS = ("record", "once", "stamp", "kept", "limited")
RESUME_BOUND = 5.0
SIDE_EFFECTS = ("done", "ran", "beats", "limited")
"""``<queue>:<suffix>``: the lists the tasks push to (see ``cluster_app``)."""


def streams_of(shards: int) -> list[tuple[str, str]]:
    """``(root, consumer group)`` of every stream the group's messages live in: the
    group's own, and with ``shards > 1`` each shard's first (docs/sharding.md)."""
    own = (_keys.group_root(GROUP, "cluster"), GROUP)
    if shards == 1:
        return [own]
    tags = [_shards.shard_tag(GROUP, i, shards) for i in range(shards)]
    return [*((_shards.shard_root(GROUP, i, shards), t) for i, t in enumerate(tags)), own]


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


def dispatch(
    url: str, queue: str, seconds: float, disrupt: Callable[[], object], **options: Any
) -> tuple[Dispatched, float]:
    """:func:`_fleet_proof.dispatch` on one node's URL, from five loops."""
    return _fleet_proof.dispatch(url, queue, GROUP, LOOPS, seconds, disrupt, **options)


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


def dead_letters(cluster: ClusterProcess, queue: str, shards: int = 1) -> list[str]:
    """The reasons of the group's dead letters (every shard's)."""
    client = checker(cluster)
    try:
        return [
            fields[b"error"].decode()
            for root, _ in streams_of(shards)
            for _, fields in client.xrange(_keys.dead_letter(root, queue))
        ]
    finally:
        client.close()


def twice_and_dead(cluster: ClusterProcess, queue: str, shards: int = 1) -> tuple[int, int]:
    """Runs that ran more than once (from the tasks' side effects), and the group's
    dead letters (a delivery past its limit: here, a run reclaimed while its ack waited)."""
    client = checker(cluster)
    try:
        runs: Counter[tuple[str, int]] = Counter()
        for suffix in ("done", "limited"):
            for raw in client.lrange(f"{queue}:{suffix}", 0, -1):
                payload = json.loads(raw)
                runs[payload["kind"], payload["i"]] += 1
        for line in client.lrange(f"{queue}:ran", 0, -1):
            runs["stamp", int(line.split()[0])] += 1
        dead = sum(client.xlen(_keys.dead_letter(root, queue)) for root, _ in streams_of(shards))
    finally:
        client.close()
    return sum(count > 1 for count in runs.values()), dead


def stamp_starts(cluster: ClusterProcess, queue: str) -> list[float]:
    client = checker(cluster)
    try:
        return sorted(float(line.split()[2]) for line in client.lrange(f"{queue}:ran", 0, -1))
    finally:
        client.close()


def lost_after(
    cluster: ClusterProcess, queue: str, done: Dispatched, shards: int = 1
) -> dict[str, list[int]]:
    """Wait (bounded) for every acknowledged dispatch to run; what never did, by kind."""

    def missing() -> dict[str, list[int]]:
        return done.lost(ran(cluster, queue, done))

    try:
        wait_for(lambda: not any(missing().values()), "every acknowledged dispatch to run", 30)
    except AssertionError:
        pass
    lost = missing()
    if any(lost.values()):
        dead = dead_letters(cluster, queue, shards)
        print(f"dead letters: {dead}; no outcome: {done.no_outcome}")
    print(f"acknowledged: { {k: len(v) for k, v in done.acknowledged.items()} }")
    print(f"lost: { {k: len(v) for k, v in lost.items()} }")
    return lost


def check_fleet_after(
    cluster: ClusterProcess,
    queue: str,
    fleet: list[Worker],
    done: Dispatched,
    leader_log: Path,
    shards: int = 1,
) -> None:
    """0 pending, no dead letter, no missing tick, no exits, no overlapping lease terms
    (in every shard's stream and delayed set, with ``shards > 1``)."""
    assert all(done.results[i] == {"doubled": 2 * i} for i in done.results)
    client = checker(cluster)
    streams = streams_of(shards)
    try:
        wait_for(
            lambda: all(
                client.xpending(f"{root}:{queue}", group)["pending"] == 0 for root, group in streams
            ),
            "nothing pending",
            limit=20,
        )
        wait_for(
            lambda: all(
                client.zcard(_keys.delayed_tasks(group, "cluster")) == 0 for _, group in streams
            ),
            "the delayed set to empty",
            limit=20,
        )
        ticks = sorted({float(b.split()[0]) for b in client.lrange(f"{queue}:beats", 0, -1)})
    finally:
        client.close()
    dead = dead_letters(cluster, queue, shards)
    assert not dead, f"failed for good: {dead}"
    assert len(ticks) >= 3, f"beat fired {len(ticks)} times"
    gaps = [b - a for a, b in itertools.pairwise(ticks)]
    assert max(gaps) < 1.5, f"a tick of beat is missing: {ticks}"
    terms = stop_fleet_and_check_lease(fleet, leader_log)
    print(f"lease terms: {terms}; beat ticks: {len(ticks)}")


def resumed_after(times: list[float], since: float, until: float) -> float:
    """The longest pause among ``times`` from ``since`` to ``until`` (the disruption's
    cost; a stop before ``until`` counts as a pause up to it)."""
    after = [since, *(t for t in times if since <= t <= until), until]
    return max(b - a for a, b in itertools.pairwise(after))


@contextmanager
def fleet_on(
    cluster: ClusterProcess,
    tmp_path: Path,
    reclaim_delay: float = 2.0,
    app: dict[str, str] | None = None,
    shards: int = 1,
) -> Iterator[tuple[str, list[Worker]]]:
    """Three workers on a fresh queue (``app`` added to their environment) of a group
    of ``shards``."""
    queue = place_queue(cluster)
    env = app_env(cluster.url, queue, group=GROUP)
    env.update(app or {})
    env["TASKRUNNER_TEST_SHARDS"] = str(shards)
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


@pytest.mark.parametrize("shards", [1, 16], ids=["one-shard", "shards16"])
def test_manual_failover_under_a_fleet(tmp_path: Path, shards: int) -> None:
    """With ``shards=16`` the failed-over master holds the group's slot (the lease,
    limits, schedules) and about a third of the shards."""
    with (
        running_cluster(server(), masters=3, replicas=1) as cluster,
        fleet_on(cluster, tmp_path, app=CRASH_SAFE_APP, shards=shards) as (queue, fleet),
    ):
        master = cluster.master_of_slot(group_slot())
        replica = cluster.replicas_of[master.port][0]
        done, started = dispatch(
            cluster.url, queue, 6.0, lambda: cluster.failover(replica), at=1.5, shards=shards
        )
        assert cluster.master_of_slot(group_slot()).port == replica.port
        lost = lost_after(cluster, queue, done, shards)
        dispatch_pause = resumed_after(done.ack_times, started, done.ended)
        run_pause = resumed_after(stamp_starts(cluster, queue), started, done.ended)
        twice, dead = twice_and_dead(cluster, queue, shards)
        print(
            f"\nCLUSTER FAILOVER under a fleet ({shards} shard(s)): "
            f"{sum(map(len, done.acknowledged.values()))} "
            f"dispatches acknowledged, {done.failed} refused; longest pause after the "
            f"failover began: dispatch {dispatch_pause:.3f}s, delayed runs {run_pause:.3f}s; "
            f"{twice} ran twice, {dead} dead-lettered"
        )
        assert not any(lost.values()), f"acknowledged and lost: {lost}"
        assert dispatch_pause <= RESUME_BOUND
        assert run_pause <= RESUME_BOUND
        check_fleet_after(cluster, queue, fleet, done, tmp_path / "leader", shards)


def test_a_sharded_fleet_loses_nothing_and_runs_nothing_twice(tmp_path: Path) -> None:
    """``shards=16`` on 3 masters, no disruption: plain, unique, delayed, result-keeping
    and rate-limited tasks from five loops, the periodic ``beat`` every second, each
    kind spread over the 16 shards (and so over the 3 masters): every acknowledged
    dispatch ran once, every kept result is read by its sharded id."""
    shards = 16
    with (
        running_cluster(server(), masters=3, replicas=0) as cluster,
        fleet_on(cluster, tmp_path, shards=shards) as (queue, fleet),
    ):
        done, _ = dispatch(cluster.url, queue, 6.0, lambda: None, at=0.0, shards=shards)
        lost = lost_after(cluster, queue, done, shards)
        twice, dead = twice_and_dead(cluster, queue, shards)
        per_master = Counter(
            cluster.master_of_slot(key_slot(f"{root}:{queue}")).port
            for root, _ in streams_of(shards)[:-1]
        )
        print(
            f"\nA fleet on {shards} shards: {sum(map(len, done.acknowledged.values()))} "
            f"dispatches acknowledged, {done.failed} refused, shards per master "
            f"{sorted(per_master.values())}; {twice} ran twice, {dead} dead-lettered"
        )
        assert not any(lost.values()), f"acknowledged and lost: {lost}"
        assert (twice, dead) == (0, 0)
        assert len(per_master) == 3, "the shards are spread over every master"
        assert sorted(per_master.values()) == [5, 5, 6]
        check_fleet_after(cluster, queue, fleet, done, tmp_path / "leader", shards)


def sigkill_the_group_master(
    tmp_path: Path, *, replicas: int, min_replicas: int, shards: int = 1
) -> tuple[dict[str, list[int]], Dispatched]:
    with (
        running_cluster(server(), masters=3, replicas=replicas) as cluster,
        fleet_on(cluster, tmp_path, app=CRASH_SAFE_APP, shards=shards) as (queue, fleet),
    ):
        master: ClusterNode = cluster.master_of_slot(group_slot())
        done, killed_at = dispatch(
            cluster.url,
            queue,
            10.0,
            master.kill,
            at=1.5,
            min_replicas=min_replicas,
            shards=shards,
        )
        wait_for(
            lambda: cluster.master_of_slot(group_slot()).port != master.port,
            "a replica to be promoted",
        )
        lost = lost_after(cluster, queue, done, shards)
        bound = cluster.node_timeout_ms / 1000 + RESUME_BOUND
        dispatch_pause = resumed_after(done.ack_times, killed_at, done.ended)
        run_pause = resumed_after(stamp_starts(cluster, queue), killed_at, done.ended)
        print(
            f"\nSIGKILL of the group's master ({shards} shard(s), {replicas} replicas each, "
            f"min_replicas="
            f"{min_replicas}): {sum(map(len, done.acknowledged.values()))} dispatches "
            f"acknowledged, {done.failed} refused, {sum(map(len, lost.values()))} acknowledged "
            f"and lost; longest pause after the kill: dispatch {dispatch_pause:.3f}s, delayed "
            f"runs {run_pause:.3f}s (node timeout {cluster.node_timeout_ms} ms)"
        )
        assert dispatch_pause <= bound
        assert run_pause <= bound
        check_fleet_after(cluster, queue, fleet, done, tmp_path / "leader", shards)
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


@pytest.mark.parametrize("shards", [1, 16], ids=["one-shard", "shards16"])
def test_sigkill_of_the_group_master_with_min_replicas_loses_nothing(
    tmp_path: Path, shards: int
) -> None:
    lost, _ = sigkill_the_group_master(tmp_path, replicas=2, min_replicas=1, shards=shards)
    assert not any(lost.values()), f"acknowledged and lost: {lost}"


def shard_slots_on(cluster: ClusterProcess, master: ClusterNode, shards: int) -> list[int]:
    """The slots of the group's shards that ``master`` holds (none when ``shards`` is 1)."""
    if shards == 1:
        return []
    slots = (key_slot(_shards.shard_root(GROUP, i, shards)) for i in range(shards))
    return [slot for slot in slots if cluster.master_of_slot(slot).port == master.port]


def reshard(cluster: ClusterProcess, slot: int, target: ClusterNode, pace: float) -> int:
    """Move ``slot`` to ``target`` as ``redis-cli --cluster reshard`` does, key by key
    (``MIGRATE`` one key every ``pace`` seconds, so the fleet meets ``ASK`` and
    ``TRYAGAIN`` for seconds), then ``SETSLOT ... NODE`` on every master. Returns the
    keys moved."""
    source = cluster.master_of_slot(slot)
    target.command("CLUSTER", "SETSLOT", slot, "IMPORTING", source.node_id)
    source.command("CLUSTER", "SETSLOT", slot, "MIGRATING", target.node_id)
    moved = 0
    while keys := source.command("CLUSTER", "GETKEYSINSLOT", slot, 1):
        source.command("MIGRATE", "127.0.0.1", target.port, "", 0, 5000, "KEYS", *keys)
        moved += len(keys)
        time.sleep(pace)
    for node in (target, source, *cluster.masters_at_start):
        node.command("CLUSTER", "SETSLOT", slot, "NODE", target.node_id)
    return moved


@pytest.mark.parametrize(
    ("pace", "shards"),
    [(0.01, 1), (0.05, 1), (0.01, 16), (0.05, 16)],
    ids=["key-every-10ms", "key-every-50ms", "key-every-10ms-shards16", "key-every-50ms-shards16"],
)
def test_live_resharding_of_the_group_slot_under_a_fleet(
    tmp_path: Path, pace: float, shards: int
) -> None:
    """While the slot migrates, a script whose keys are split between the two masters,
    or that names a key the slot does not hold, is answered ``TRYAGAIN`` (bounded waits),
    for as long as the migration lasts; acknowledgements wait seconds. The workers'
    ``reclaim_delay`` (2 s elsewhere here, 300 s by default) is 10 s, so a run waiting
    for its ack is kept refreshed until the ack lands: reclaimed, a second delivery of a
    ``max_retry=0`` task would be taken for a poison message and dead-lettered (and a
    task with retries left would run twice): 46 to 191 runs of the 50 ms (and a 100 ms)
    migration were, before the worker kept a finished run tracked (tests/test_slow_acks.py).

    A migration at one key every 50 ms (8 to 13 s here) outlasts the client's waits
    for ``TRYAGAIN`` (about 4.5 s) twice over: the rate-limited runs' admissions fail,
    and so do the deferrals that follow. Before the gate kept such a run (refreshed)
    until the backend took it back (tests/test_gate_failures.py), it was left pending
    and dead-lettered unstarted on its reclaim: 24 lost in one run.

    With ``shards=16`` the group's slot (lease, limits, schedules) moves first, then the
    slot of a shard on the same master (its stream, delayed set, results, unique locks),
    so both kinds of key meet ``ASK`` and ``TRYAGAIN`` under the fleet."""
    with (
        running_cluster(server(), masters=3, replicas=1) as cluster,
        fleet_on(cluster, tmp_path, reclaim_delay=10.0, shards=shards) as (queue, fleet),
    ):
        source = cluster.master_of_slot(group_slot())
        target = next(m for m in cluster.masters_at_start if m.port != source.port)
        slots = [group_slot(), *shard_slots_on(cluster, source, shards)[:1]]
        moved: list[int] = []
        migrated_in: list[float] = []

        def migrate() -> None:
            at = time.time()
            moved.append(sum(reshard(cluster, slot, target, pace) for slot in slots))
            migrated_in.append(time.time() - at)

        began = time.time()
        done, started = dispatch(cluster.url, queue, 8.0, migrate, at=1.5, shards=shards)
        assert moved, "the resharding did not finish within the run"
        assert {cluster.master_of_slot(slot).port for slot in slots} == {target.port}
        lost = lost_after(cluster, queue, done, shards)
        dispatch_pause = resumed_after(done.ack_times, started, done.ended)
        logs = "".join(worker.log() for worker in fleet)
        twice, dead = twice_and_dead(cluster, queue, shards)
        print(
            f"\nLive resharding of {len(slots)} slot(s) under a fleet of {shards} shard(s): "
            f"{moved[0]} keys moved one every {pace * 1000:.0f} ms in {migrated_in[0]:.1f}s; "
            f"{sum(map(len, done.acknowledged.values()))} dispatches acknowledged, "
            f"{done.failed} refused; longest pause of dispatches {dispatch_pause:.3f}s "
            f"(run began {started - began:.1f}s after the fleet); the gate's admissions "
            f"failed {logs.count('could not admit')} times, its deferrals "
            f"{logs.count('could not defer')} times; {twice} ran twice, {dead} dead-lettered"
        )
        assert not any(lost.values()), f"acknowledged and lost: {lost}"
        # A run is kept refreshed until its ack lands, however long the migration.
        assert (twice, dead) == (0, 0), "a run whose ack waited was reclaimed"
        check_fleet_after(cluster, queue, fleet, done, tmp_path / "leader", shards)
