"""Proof on a real server (issue 28, section 5): runner processes SIGKILLed at random
instants while they run chords, across many kills, then a fresh runner finishes; and
SIGKILLed at each named point of a step's life (the app's ``TASKRUNNER_TEST_KILL_AT``).

A kill lands anywhere: between a part's run and its finish, inside the finish's round
trip (the script ran, its reply unread, or it never arrived), between a sink's queueing
and its run. Each workflow must end ``SUCCEEDED`` with its sink's result, every part
counted once, and its sink queued exactly once (one task id across all its runs: a
sink killed while it runs is delivered again, the same task, but never queued twice).
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
import redis
import trio

from taskrunner import TaskRunner, TaskRunnerConfig, chord, group
from taskrunner.backends.redis import RedisBackend

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "apps"))
from workflow_kill_app import KILL_AT, tasks

pytestmark = pytest.mark.slow

APP = Path(__file__).resolve().parent.parent / "apps" / "workflow_kill_app.py"
ROOT = Path(__file__).resolve().parent.parent.parent
WORKFLOWS = 30
PARTS = 6
KILLS = 10


async def dispatch(url: str, name: str, count: int = WORKFLOWS) -> list[str]:
    async with RedisBackend.from_url(url) as backend:
        runner = TaskRunner(TaskRunnerConfig(consumer_group=name), backend)
        tasks(runner, None)
        ids = []
        for _ in range(count):
            wf = await runner.dispatch_workflow(
                chord(group(runner.step("part", {"i": i}) for i in range(PARTS)),
                      runner.step("sink"))
            )  # fmt: skip
            ids.append(wf.id)
        return ids


def start(url: str, name: str, kill_at: str = "") -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), env_path()])}
    env.pop(KILL_AT, None)
    if kill_at:
        env[KILL_AT] = kill_at
    return subprocess.Popen(
        [sys.executable, str(APP), url, name],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def env_path() -> str:
    return os.environ.get("PYTHONPATH", "")


def states(side: redis.Redis, name: str, ids: list[str]) -> list[str]:
    return [(side.hget(f"taskrunner:{name}:workflow:{i}", "state") or b"").decode() for i in ids]


def test_sigkilled_runners_leave_every_sink_queued_once(redis_url: str) -> None:
    name = f"wfk-{uuid.uuid4().hex[:8]}"
    side = redis.Redis.from_url(redis_url)
    rng = random.Random()
    ids = trio.run(dispatch, redis_url, name)
    kills = 0
    for _ in range(KILLS):
        runners = [start(redis_url, name) for _ in range(2)]
        time.sleep(rng.uniform(1.0, 2.5))  # past its start (about a second), mid-work
        for process in runners:
            time.sleep(rng.uniform(0, 0.2))
            process.send_signal(signal.SIGKILL)
            process.wait()
            kills += 1
        if all(s == "succeeded" for s in states(side, name, ids)):
            break
    fresh = start(redis_url, name)
    try:
        deadline = time.monotonic() + 45
        while time.monotonic() < deadline:
            if all(s == "succeeded" for s in states(side, name, ids)):
                break
            time.sleep(0.2)
    finally:
        fresh.send_signal(signal.SIGTERM)
        try:
            fresh.wait(timeout=15)
        except subprocess.TimeoutExpired:
            fresh.kill()
            fresh.wait()
    done_before_fresh = kills
    print(f"{kills} SIGKILLs before the fresh runner; {WORKFLOWS} chords of {PARTS} parts")
    assert done_before_fresh >= 2
    assert states(side, name, ids) == ["succeeded"] * WORKFLOWS
    for workflow_id in ids:
        record = {
            k.decode(): v
            for k, v in side.hgetall(f"taskrunner:{name}:workflow:{workflow_id}").items()
        }
        assert record["left"] == b"0"
        parts = [record[f"s:part.{i}"] for i in range(1, PARTS + 1)]
        assert parts == [b"succeeded"] * PARTS, "every part counted"
        runs = side.lrange(f"{name}:sink_runs:{workflow_id}", 0, -1)
        assert len(set(runs)) == 1, f"the sink of {workflow_id} was queued {len(set(runs))} times"
        assert b'"value":15' in record["r:sink"], record["r:sink"]


POINTS = [
    "read:1:part.2",  # delivered, the reply never acted on
    "run:0:part.2",
    "finish:0:part.2",  # ran, its finish never sent
    "finish:1:part.2",  # its finish applied (counted, acked), the reply never acted on
    "finish:0:part.6",
    "finish:1:part.6",
    "read:1:sink",  # a dependent just queued, delivered
    "step_inputs:1:sink",
    "run:0:sink",
    "finish:0:sink",
    "finish:1:sink",  # the workflow ends in it
]
"""``call:applied:step``: the named points (tests/_workflow_kills.py) a runner process
is SIGKILLed at, each in a run of its own."""


def wait_exit(process: subprocess.Popen[bytes], seconds: float) -> int | None:
    try:
        return process.wait(timeout=seconds)
    except subprocess.TimeoutExpired:
        return None


def test_runners_sigkilled_at_each_point_in_turn_lose_and_repeat_nothing(redis_url: str) -> None:
    """A runner armed with each point in turn, in the order of a step's life, SIGKILLs
    itself there (what one left half done, the next picks up); a fresh one finishes the
    rest: every chord ends ``SUCCEEDED`` with its sink's result, every part counted
    once, and every step queued once (one task id across its runs)."""
    name = f"wfp-{uuid.uuid4().hex[:8]}"
    side = redis.Redis.from_url(redis_url)
    ids = trio.run(dispatch, redis_url, name, 8)
    for point in POINTS:
        armed = start(redis_url, name, point)
        code = wait_exit(armed, 60)
        if code is None:
            armed.kill()
            armed.wait()
        assert code == -signal.SIGKILL, f"the runner never reached {point} (exit {code})"
    fresh = start(redis_url, name)
    try:
        deadline = time.monotonic() + 45
        while time.monotonic() < deadline:
            if all(s == "succeeded" for s in states(side, name, ids)):
                break
            time.sleep(0.2)
    finally:
        fresh.send_signal(signal.SIGTERM)
        if wait_exit(fresh, 15) is None:
            fresh.kill()
            fresh.wait()
    assert states(side, name, ids) == ["succeeded"] * len(ids)
    for workflow_id in ids:
        record = {
            k.decode(): v
            for k, v in side.hgetall(f"taskrunner:{name}:workflow:{workflow_id}").items()
        }
        assert record["left"] == b"0"
        for i in range(1, PARTS + 1):
            step = f"part.{i}"
            assert record[f"s:{step}"] == b"succeeded"
            runs = side.lrange(f"{name}:part_runs:{workflow_id}:{step}", 0, -1)
            assert set(runs) == {record[f"t:{step}"]}, f"{workflow_id}/{step} queued as {runs}"
        runs = side.lrange(f"{name}:sink_runs:{workflow_id}", 0, -1)
        assert set(runs) == {record["t:sink"]}, f"the sink of {workflow_id} was queued as {runs}"
        assert b'"value":15' in record["r:sink"], record["r:sink"]
