"""Issue 5: three ``taskrunner worker`` processes, the leader SIGKILLed mid-schedule.

Real processes, a real server, real time (short timings from
``tests/apps/cli_app.py``: lease TTL 1 s, poll 0.5 s, reclaim 2 s, block
0.1 s). About 200 delayed tasks are scheduled over a few seconds, each with
its due time in its payload; the task works 0.2 s and then records
``index due started_at pid``, so the leader is usually killed with tasks in
flight. A third of the way in, the leader (found through the lease key, mapped to its
process by the instance id each worker logs at start-up) is killed with
SIGKILL, so it neither resigns nor acks. Checked:

- another process takes the lease; the failover time (kill -> new lease
  owner, measured by polling the key) is printed and bounded by the lease TTL
  plus one follower retry;
- every task ran, none before its due time; tasks run exactly once, except
  the few the killed process had fetched and not acked, which are reclaimed
  (at-least-once: they may run twice if the kill fell between run and ack);
- each started within ``delayed_poll_interval`` + the failover bound of its
  due time (the orphans within ``reclaim_delay`` + the reclaim interval of
  the kill).
"""

from __future__ import annotations

import json
import signal
import time
import uuid
from collections import Counter
from pathlib import Path

import trio
from test_cli import app_env, wait_for, workers

from taskrunner import TaskRunner, TaskRunnerConfig, _keys
from taskrunner.backends.redis import RedisBackend
from taskrunner.testing import ServerProcess, sync_command

GROUP = "fleet"
TASKS = 200
FIRST_DUE = 1.0  # seconds after scheduling
SPREAD = 4.0  # due times spread over [FIRST_DUE, FIRST_DUE + SPREAD)
KILL_AT = 2.5  # seconds after scheduling: about a third of the tasks are due
# The app's timings (tests/apps/cli_app.py)
LEASE_TTL = 1.0
POLL = 0.5
RECLAIM_DELAY = 2.0
RECLAIM_INTERVAL = RECLAIM_DELAY / 2
SLACK = 0.5  # process scheduling, fetch (block 0.1 s) and run on a busy machine
WORK = 0.2  # each task's run time: the leader is likely to be killed mid-run
WORKERS = "16"  # per process: 40 tasks/s x 0.2 s fit in two processes with room
# The lease runs out at most one TTL after the kill; a follower tries every
# TTL/2 (+10 % jitter) and its first try after that wins.
FAILOVER_BOUND = LEASE_TTL + LEASE_TTL / 2 * 1.1 + SLACK


async def schedule(url: str, queue: str, start: float) -> dict[int, float]:
    """Schedule the tasks (as any non-serving process would); returns index -> due."""
    runner = TaskRunner(
        TaskRunnerConfig(consumer_group=GROUP), RedisBackend.from_url(url, queue=queue)
    )

    @runner.task(name="stamp")
    async def stamp(payload: object) -> None:  # runs in the workers, not here
        raise AssertionError("never served here")

    due = {i: start + FIRST_DUE + SPREAD * i / TASKS for i in range(TASKS)}
    try:
        for i, when in due.items():
            await runner.schedule_for("stamp", {"index": i, "due": when, "work": WORK}, when)
    finally:
        await runner.backend.aclose()
    return due


def lease_owner(server: ServerProcess) -> str | None:
    value = sync_command(server.port, "GET", _keys.leader(GROUP))
    return None if value is None else bytes(value).decode()


def orphans(server: ServerProcess, queue: str, pid: int) -> set[int]:
    """Indices of the messages the (dead) process ``pid`` had fetched and not acked."""
    stream = f"taskrunner:{GROUP}:{queue}"
    pending = sync_command(server.port, "XPENDING", stream, GROUP, "-", "+", 1000)
    found = set()
    for entry_id, consumer, _idle, _count in pending:
        if not consumer.decode().endswith(f"-{pid}_1"):
            continue
        for _id, fields in sync_command(server.port, "XRANGE", stream, entry_id, entry_id):
            message = json.loads(dict(zip(fields[::2], fields[1::2], strict=True))[b"payload"])
            found.add(message["payload"]["index"])
    return found


def test_leader_sigkilled_mid_schedule(
    redis_server: ServerProcess, redis_url: str, tmp_path: Path
) -> None:
    queue = f"q{uuid.uuid4().hex[:8]}"
    env = app_env(redis_url, queue, group=GROUP)
    with workers(env, tmp_path, 3, "--workers", WORKERS) as fleet:
        by_instance = {w.wait_serving(): w for w in fleet}
        first_leader = wait_for(lambda: lease_owner(redis_server), "a leader")
        assert first_leader in by_instance
        leader = by_instance[first_leader]

        start = time.time()
        due = trio.run(schedule, redis_url, queue, start)
        assert time.time() - start < FIRST_DUE, "scheduling took too long for the plan"

        time.sleep(max(0.0, start + KILL_AT - time.time()))
        killed_at = time.time()
        leader.process.send_signal(signal.SIGKILL)
        leader.process.wait(timeout=10)
        lost = orphans(redis_server, queue, leader.pid)

        def new_owner() -> str | None:
            owner = lease_owner(redis_server)
            return owner if owner not in (None, first_leader) else None

        second_leader = wait_for(new_owner, "a new leader", limit=10)
        failover = time.time() - killed_at
        print(
            f"\nfailover: {failover:.3f}s from SIGKILL to a new lease owner "
            f"(lease TTL {LEASE_TTL}s, follower retry ~{LEASE_TTL / 2}s, bound {FAILOVER_BOUND}s); "
            f"{len(lost)} message(s) orphaned by the kill"
        )
        assert second_leader in by_instance
        assert failover <= FAILOVER_BOUND

        ran_key = f"{queue}:ran"
        wait_for(
            lambda: (
                {
                    int(r.split()[0])
                    for r in sync_command(redis_server.port, "LRANGE", ran_key, 0, -1)
                }
                == set(due)
            ),
            "every task to run",
            limit=start + FIRST_DUE + SPREAD + RECLAIM_DELAY + RECLAIM_INTERVAL + 10 - time.time(),
        )
        # Nothing left behind: delayed set empty, every message acked.
        wait_for(
            lambda: (
                sync_command(redis_server.port, "XPENDING", f"taskrunner:{GROUP}:{queue}", GROUP)[0]
                == 0
            ),
            "the reclaimed messages to be acked",
        )
        assert sync_command(redis_server.port, "ZCARD", _keys.delayed_tasks(GROUP)) == 0
        survivors = [w for w in fleet if w is not leader]
        for w in survivors:
            assert w.stop(signal.SIGTERM) == 0, w.log()
        new_leader_log = by_instance[second_leader].log()

    assert f"this instance ({second_leader}) became leader of group {GROUP}" in new_leader_log
    runs = [r.split() for r in sync_command(redis_server.port, "LRANGE", ran_key, 0, -1)]
    counts = Counter(int(index) for index, *_ in runs)
    assert set(counts) == set(due)
    duplicates = {i for i, n in counts.items() if n > 1}
    assert duplicates <= lost, f"ran more than once without being orphaned: {duplicates - lost}"
    assert max(counts.values()) <= 2
    lateness = {}
    for index, due_text, ran_text, _pid in runs:
        i, ran_at = int(index), float(ran_text)
        assert float(due_text) == due[i]
        assert ran_at >= due[i], f"task {i} ran {due[i] - ran_at:.3f}s early"
        lateness[i] = max(lateness.get(i, 0.0), ran_at - due[i])
    bound = POLL + FAILOVER_BOUND
    # An orphan is reclaimed once idle for reclaim_delay (its last refresh was at most
    # a reservation_timeout / 2 before the kill), at a fetcher's next stale check.
    orphan_bound = RECLAIM_DELAY + RECLAIM_INTERVAL + SLACK
    late = {i: s for i, s in lateness.items() if i not in lost and s > bound}
    late |= {
        i: s for i, s in lateness.items() if i in lost and due[i] + s - killed_at > orphan_bound
    }
    taken_over_at = killed_at + failover

    def worst(low: float, high: float) -> float:
        return max(
            (s for i, s in lateness.items() if low <= due[i] < high and i not in lost),
            default=0.0,
        )

    before, during = worst(0, killed_at - 0.05), worst(killed_at - 0.05, taken_over_at)
    after = worst(taken_over_at, float("inf"))
    rerun = sorted(round(due[i] + lateness[i] - killed_at, 3) for i in lost)
    print(
        f"lateness over {TASKS} tasks (bound {bound}s): due before the kill max {before:.3f}s, "
        f"due while no leader max {during:.3f}s, due after the takeover max {after:.3f}s; "
        f"{len(lost)} orphan(s) rerun {rerun}s after the kill (bound {orphan_bound}s); "
        f"duplicates {sorted(duplicates)}"
    )
    assert not late, f"ran too late: {late}"
    assert before <= POLL + SLACK  # the live leader wakes at the earliest due time
