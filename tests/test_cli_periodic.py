"""Issue 15 on a real server: three ``taskrunner worker`` processes fire a schedule while
their leader is SIGKILLed (and once stopped gracefully) around tick boundaries.

Real processes, a real server, real time (``tests/apps/periodic_app.py``: lease TTL
1 s, reclaim 2 s; the schedule ``beat`` ticks every second with ``catch_up="all"``).
Each round waits for a tick boundary, then kills the current leader (found through
the lease key, mapped to its process by the instance id each worker logs) a hair
before it, exactly on it, or a hair after it, so the kill falls around the fire,
and starts a replacement so three processes serve again. The last round stops
the leader with SIGTERM instead (a graceful handover). Checked, from the stream
itself (each fire is one entry carrying ``schedule`` and ``tick``):

- every tick between the first and the last fire was fired exactly once: no
  duplicate, none missing (``catch_up="all"`` fires the ticks due while no
  instance led);
- none before its tick (the entry id is the server's time when it was added),
  none later than the failover bound after it;
- every fired tick ran (at least once: a run whose process was killed before its
  ack is reclaimed and may run twice; that is delivery, not firing).
"""

from __future__ import annotations

import itertools
import json
import math
import re
import signal
import time
import uuid
from collections import Counter
from pathlib import Path

from test_cli import Worker, app_env, cli, ok, wait_for

from taskrunner import _keys
from taskrunner._wire import decode_message
from taskrunner.testing import ServerProcess, sync_command

GROUP = "periodic"
APP = "periodic_app:runner"
LEASE_TTL = 1.0
RECLAIM_DELAY = 2.0
SLACK = 0.5  # process scheduling on a busy machine
# The lease runs out at most one TTL after the kill; a follower tries every TTL/2
# (+10 % jitter) and its first try after that wins, then fires what is due.
FAILOVER_BOUND = LEASE_TTL + LEASE_TTL / 2 * 1.1 + SLACK
KILL_OFFSETS = [-0.01, 0.0, 0.003, 0.02, -0.002]
"""Where each SIGKILL falls, in seconds from a tick boundary."""


def lease_owner(server: ServerProcess) -> str | None:
    value = sync_command(server.port, "GET", _keys.leader(GROUP))
    return None if value is None else bytes(value).decode()


def fires(server: ServerProcess, queue: str) -> list[tuple[float, float]]:
    """(tick, when its entry was added) for every fire in the stream."""
    found = []
    for entry_id, fields in sync_command(
        server.port, "XRANGE", f"taskrunner:{GROUP}:{queue}", "-", "+"
    ):
        message = decode_message(dict(zip(fields[::2], fields[1::2], strict=True))[b"payload"])
        if message.schedule == "beat" and message.tick is not None:
            added_ms = int(entry_id.decode().split("-")[0])
            found.append((message.tick, added_ms / 1000))
    return found


def runs(server: ServerProcess, queue: str) -> list[float]:
    return [
        float(line.split()[0])
        for line in sync_command(server.port, "LRANGE", f"{queue}:beats", 0, -1)
    ]


def test_leader_killed_around_tick_boundaries_fires_each_tick_once(
    redis_server: ServerProcess, redis_url: str, tmp_path: Path
) -> None:
    queue = f"q{uuid.uuid4().hex[:8]}"
    env = app_env(redis_url, queue, group=GROUP)
    logs = (tmp_path / f"worker-{i}.log" for i in range(100))
    fleet: dict[str, Worker] = {}

    def start() -> None:
        worker = Worker(env, next(logs), app=APP)
        fleet[worker.wait_serving()] = worker

    killed: list[tuple[str, float, float]] = []  # (how, offset, when)
    try:
        for _ in range(3):
            start()
        wait_for(lambda: len(fires(redis_server, queue)) >= 2, "the first fires")
        plan = [("SIGKILL", offset) for offset in KILL_OFFSETS] + [("SIGTERM", 0.0)]
        for how, offset in plan:
            leader_id = wait_for(lambda: lease_owner(redis_server), "a leader", limit=10)
            leader = fleet.pop(leader_id)
            boundary = math.floor(time.time()) + 1.0
            time.sleep(max(0.0, boundary + offset - time.time()))
            when = time.time()
            if how == "SIGKILL":
                leader.process.send_signal(signal.SIGKILL)
                leader.process.wait(timeout=10)
            else:
                assert leader.stop(signal.SIGTERM) == 0, leader.log()
            killed.append((how, offset, when))
            leader.close()
            wait_for(
                lambda leader_id=leader_id: lease_owner(redis_server) not in (None, leader_id),
                "a new leader",
                limit=10,
            )
            start()
            time.sleep(1.5)  # a tick or two under the new leader
        last_round = time.time()
        time.sleep(2.0)
        fired = fires(redis_server, queue)
        fired_ticks = {tick for tick, _ in fired}
        wait_for(
            lambda: set(runs(redis_server, queue)) >= fired_ticks,
            "every fired tick to run",
            limit=RECLAIM_DELAY + 10,
        )
        for worker in fleet.values():
            assert worker.stop(signal.SIGTERM) == 0, worker.log()
    finally:
        for worker in fleet.values():
            worker.close()
    run_before_stop = fired_ticks
    fired = fires(redis_server, queue)  # with the ticks fired while we waited

    counts = Counter(tick for tick, _ in fired)
    duplicates = {tick: n for tick, n in counts.items() if n > 1}
    ticks = sorted(counts)
    missing = [a + step for a, b in itertools.pairwise(ticks) for step in range(1, int(b - a))]
    lateness = {tick: added - tick for tick, added in fired}
    ran = Counter(runs(redis_server, queue))
    print(
        f"\n{len(fired)} fires of {len(ticks)} ticks over {ticks[-1] - ticks[0]:.0f}s, "
        f"{sum(n - 1 for n in duplicates.values())} duplicates, {len(missing)} missing; "
        f"leader stopped {len(killed)} times ({[(h, o) for h, o, _ in killed]}); "
        f"latest fire {max(lateness.values()):.3f}s after its tick (bound {FAILOVER_BOUND}s); "
        f"runs: {sum(ran.values())}, ticks run twice {sorted(t for t, n in ran.items() if n > 1)}"
    )
    assert duplicates == {}, f"ticks fired more than once: {duplicates}"
    assert missing == [], f"ticks never fired: {missing}"
    assert ticks[-1] >= last_round, "the schedule stopped firing"
    early = {tick: late for tick, late in lateness.items() if late < 0}
    assert early == {}, f"ticks fired before they were due: {early}"
    late = {tick: late for tick, late in lateness.items() if late > FAILOVER_BOUND}
    assert late == {}, f"ticks fired later than {FAILOVER_BOUND}s after they were due: {late}"
    assert run_before_stop <= set(ran) <= set(ticks), "every fired tick ran, nothing else did"


def test_schedules_command_shows_a_served_schedule(
    redis_server: ServerProcess, redis_url: str, tmp_path: Path
) -> None:
    queue = f"q{uuid.uuid4().hex[:8]}"
    env = app_env(redis_url, queue, group=GROUP)
    redis = ("--url", redis_url, "--group", GROUP, "--queue", queue)
    worker = Worker(env, tmp_path / "worker.log", app=APP)
    try:
        worker.wait_serving()
        wait_for(lambda: len(runs(redis_server, queue)) >= 2, "two beats to run")
        time.sleep(0.2)  # the second run's outcome is recorded after its ack
        doc = json.loads(ok(cli(env, "schedules", *redis, "--json")))
        human = ok(cli(env, "schedules", *redis))
        assert worker.stop(signal.SIGTERM) == 0, worker.log()
    finally:
        worker.close()
    (row,) = doc["schedules"]
    assert (row["name"], row["task"], row["spec"], row["catch_up"]) == (
        "beat",
        "beat",
        "every 1s",
        "all",
    )
    assert row["last_outcome"] == "succeeded"
    assert row["next_fire"] == row["last_fired"] + 1
    assert human.splitlines()[0].split() == [
        "SCHEDULE", "TASK", "SPEC", "NEXT", "FIRE", "LAST", "FIRED", "LAST", "OUTCOME"
    ]  # fmt: skip
    assert re.match(
        r"beat\s+beat\s+every 1s\s+\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\s+", human.splitlines()[1]
    )
    missing = cli(env, "schedules", "--url", redis_url, "--group", "nope")
    assert missing.returncode == 1
    assert "no group 'nope' on this server" in missing.stderr
