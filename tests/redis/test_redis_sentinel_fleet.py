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
- nothing failed for good: the dead-letter stream is empty (a run that the
  master's death cut off, or whose outcome died with it, is delivered again
  and counts as an attempt: a task of one attempt would be failed without
  running, so the SIGKILL test's tasks have 3, and their side effects wait for
  a replica as the dispatches do; see ``cli_app``'s ``MAX_RETRY`` and
  ``MIN_REPLICAS``);
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

import json
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import _fleet_proof
import pytest
from _fleet_proof import (
    CRASH_SAFE_APP,
    Dispatched,
    assert_none_lost,
    runs_again,
    stop_fleet_and_check_lease,
)
from test_cli import Worker, app_env, wait_for, workers

from taskrunner import _keys
from taskrunner.testing import SentinelDeployment, ServerProcess, sync_command

pytestmark = pytest.mark.slow

GROUP = "sentinel"
LOOPS = ("record", "once", "stamp", "kept")
RESUME_BOUND = 5.0


def dispatch(
    url: str, queue: str, seconds: float, disrupt: Callable[[], object], **options: Any
) -> tuple[Dispatched, float]:
    """:func:`_fleet_proof.dispatch` on the Sentinel URL, from four loops."""
    return _fleet_proof.dispatch(url, queue, GROUP, LOOPS, seconds, disrupt, **options)


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
        return not any(done.lost(ran()).values())

    stream = f"taskrunner:{GROUP}:{queue}"

    def dead_letters() -> list[str]:
        entries = sync_command(port, "XRANGE", f"{stream}:dead", "-", "+")
        return [dict(zip(f[::2], f[1::2], strict=False))[b"error"].decode() for _, f in entries]

    try:
        wait_for(all_ran, "every acknowledged dispatch to run", limit=60)  # a loaded machine
    finally:
        lost = done.lost(ran())
        print(f"lost: { {k: len(v) for k, v in lost.items()} }")
    assert_none_lost(done, lost, dead_letters())
    delayed = _keys.delayed_tasks(GROUP)

    def settled() -> bool:
        pending = sync_command(port, "XPENDING", stream, GROUP)[0]
        return pending == 0 and sync_command(port, "ZCARD", delayed) == 0

    try:  # a run that failed an attempt waits out its backoff in the delayed set
        wait_for(settled, "nothing pending and the delayed set empty", limit=20)
    except AssertionError:
        print(f"still delayed: {sync_command(port, 'ZRANGE', delayed, 0, -1)}")
        raise
    assert not dead_letters(), f"failed for good: {dead_letters()}"
    done_list = sync_command(port, "LRANGE", f"{queue}:done", 0, -1)
    ran_list = sync_command(port, "LRANGE", f"{queue}:ran", 0, -1)
    again = runs_again(done_list, ran_list)
    print(f"runs made again (a first run's outcome lost or cut off): {again}")
    print(f"lease terms: {stop_fleet_and_check_lease(fleet, leader_log)}")


def start_fleet(
    redis_server: ServerProcess, tmp_path: Path, app: dict[str, str] | None = None
) -> tuple[SentinelDeployment, str, dict[str, str]]:
    """The deployment, a fresh queue, and the workers' environment (``app`` added to it)."""
    deployment = SentinelDeployment(redis_server.binary, tmp_path / "deployment")
    deployment.start()
    queue = f"q{uuid.uuid4().hex[:8]}"
    env = app_env(deployment.url(), queue, group=GROUP)
    env["TASKRUNNER_TEST_LEADER_LOG"] = str(tmp_path / "leader")
    env.update(app or {})
    return deployment, queue, env


def test_sentinel_failover_under_a_fleet(redis_server: ServerProcess, tmp_path: Path) -> None:
    deployment, queue, env = start_fleet(redis_server, tmp_path)
    try:
        old = deployment.master_port()
        with workers(env, tmp_path, 3, "--workers", "8") as fleet:
            for worker in fleet:
                worker.wait_serving()
            done, started = dispatch(deployment.url(), queue, 6.0, deployment.failover, at=1.5)
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


def test_sigkill_of_the_primary_with_min_replicas(
    redis_server: ServerProcess, tmp_path: Path
) -> None:
    deployment, queue, env = start_fleet(redis_server, tmp_path, CRASH_SAFE_APP)
    try:
        primary = deployment.master()
        with workers(env, tmp_path, 3, "--workers", "8") as fleet:
            for worker in fleet:
                worker.wait_serving()
            done, killed_at = dispatch(
                deployment.url(), queue, 9.0, primary.kill, at=1.5, min_replicas=1
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
