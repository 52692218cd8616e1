"""The operator commands as an operator runs them: subprocesses against a real server.

The application is ``tests/apps/cli_app.py`` (on ``PYTHONPATH``), configured
from the environment like a deployment. Each test gets its own queue; the
``redis_url`` fixture empties the server first. Long-lived workers write
their log to a file the test reads; every process is killed in ``finally``.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from taskrunner.testing import ServerProcess, free_port, sync_command

ROOT = Path(__file__).resolve().parent.parent
APPS = ROOT / "tests" / "apps"
APP = "cli_app:runner"
GROUP = "cli"
COMMAND_TIMEOUT = 30.0
CAT = '{"image": "cat.png"}'


def app_env(url: str, queue: str, group: str = GROUP) -> dict[str, str]:
    """The environment of a process running ``cli_app``."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(APPS), env.get("PYTHONPATH")]))
    env["TASKRUNNER_TEST_URL"] = url
    env["TASKRUNNER_TEST_QUEUE"] = queue
    env["TASKRUNNER_TEST_GROUP"] = group
    return env


def cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """Run ``python -m taskrunner ARGS`` to completion (bounded)."""
    return subprocess.run(
        [sys.executable, "-m", "taskrunner", *args],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=COMMAND_TIMEOUT,
        check=False,
    )


def ok(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, (result.returncode, result.stdout, result.stderr)
    return result.stdout


WAIT_LIMIT = 180.0
"""How long :func:`wait_for` waits by default: a hang bound, not a speed limit. A worker
process takes a few seconds of CPU to import and start serving, and with two copies of
this file at once on the 2-core machine (load 12) a start and a first task took more
than the 20 s and 30 s this was."""


def wait_for(predicate: Callable[[], Any], what: str, limit: float = WAIT_LIMIT) -> Any:
    deadline = time.monotonic() + limit
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {limit}s waiting for {what}")
        time.sleep(0.05)


class Worker:
    """One ``taskrunner worker`` process with its log in a file."""

    def __init__(self, env: dict[str, str], log: Path, *args: str, app: str = APP) -> None:
        self.log_path = log
        self._log = log.open("wb")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "taskrunner", "worker", app, *args],
            env=env,
            cwd=ROOT,
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )

    @property
    def pid(self) -> int:
        return self.process.pid

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_serving(self) -> str:
        """Wait until fetchers run; returns the instance id from the start-up line."""

        def serving() -> bool:
            if self.process.poll() is not None:
                raise AssertionError(f"worker exited early:\n{self.log()}")
            return "serving group" in self.log()

        wait_for(serving, "the worker to serve")
        match = re.search(r"instance ([0-9a-f]{32})", self.log())
        assert match, self.log()
        return match.group(1)

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 20.0) -> int:
        if self.process.poll() is None:
            self.process.send_signal(sig)
        return self.process.wait(timeout=timeout)

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=10)
        self._log.close()


@contextmanager
def workers(
    env: dict[str, str], tmp_path: Path, count: int = 1, *args: str
) -> Iterator[list[Worker]]:
    started: list[Worker] = []
    try:
        for i in range(count):
            started.append(Worker(env, tmp_path / f"worker-{i}.log", *args))
        yield started
    finally:
        for w in started:
            w.close()


@pytest.fixture
def queue() -> str:
    return f"q{uuid.uuid4().hex[:8]}"


@pytest.fixture
def env(redis_url: str, queue: str) -> dict[str, str]:
    return app_env(redis_url, queue)


def done(server: ServerProcess, queue: str) -> list[Any]:
    return [json.loads(x) for x in sync_command(server.port, "LRANGE", f"{queue}:done", 0, -1)]


def stats(env: dict[str, str], url: str, queue: str) -> dict[str, Any]:
    out = ok(cli(env, "stats", "--url", url, "--group", GROUP, "--queue", queue, "--json"))
    doc: dict[str, Any] = json.loads(out)
    return doc


# Serving ---------------------------------------------------------------------


def test_worker_runs_cli_dispatches_and_drains_on_sigterm(
    redis_server: ServerProcess, redis_url: str, env: dict[str, str], queue: str, tmp_path: Path
) -> None:
    with workers(env, tmp_path) as (worker,):
        instance = worker.wait_serving()
        ids = [
            ok(cli(env, "dispatch", APP, "record", "--payload", json.dumps({"n": n}))).strip()
            for n in range(3)
        ]
        assert all(re.fullmatch(r"\d+-\d+", i) for i in ids), ids
        delayed = ok(cli(env, "dispatch", APP, "record", "--payload", '{"n": 3}', "--delay", "0.2"))
        at = (datetime.now(UTC) + timedelta(seconds=0.3)).isoformat()
        ok(cli(env, "dispatch", APP, "record", "--payload", '{"n": 4}', "--at", at))
        uuid.UUID(delayed.strip())  # a delayed task's id, not a stream id
        ok(cli(env, "dispatch", APP, "point", "--payload", '{"x": 1, "y": 2}'))
        wait_for(lambda: len(done(redis_server, queue)) == 6, "six tasks to run")
        assert sorted(d["n"] for d in done(redis_server, queue) if isinstance(d, dict)) == [
            0, 1, 2, 3, 4,
        ]  # fmt: skip
        assert [1, 2] in done(redis_server, queue)

        # A running task is drained, not abandoned, on SIGTERM.
        ok(cli(env, "dispatch", APP, "slow", "--payload", '{"seconds": 1.5, "n": "slow"}'))
        wait_for(lambda: "running" in _pending(redis_server, queue), "slow to start")
        started = time.monotonic()
        assert worker.stop(signal.SIGTERM) == 0, worker.log()
        assert time.monotonic() - started < 10
        log = worker.log()
    assert {"seconds": 1.5, "n": "slow"} in done(redis_server, queue)
    assert "SIGTERM received: shutting down gracefully" in log
    assert f"became leader of group {GROUP}" in log
    assert f"worker pid {worker.pid}" in log
    assert instance in log
    assert "Traceback" not in log
    after = stats(env, redis_url, queue)
    assert after["leader"] is None  # resigned
    assert after["instances"] == []  # heartbeat deleted
    assert after["queue"]["size"] == 0
    assert after["queue"]["groups"][0]["pending"] == 0  # acked, none left behind


def _pending(server: ServerProcess, queue: str) -> str:
    summary = sync_command(server.port, "XPENDING", f"taskrunner:{GROUP}:{queue}", GROUP)
    return "running" if summary and summary[0] else ""


def test_second_signal_stops_at_once(
    redis_server: ServerProcess, env: dict[str, str], queue: str, tmp_path: Path
) -> None:
    with workers(env, tmp_path) as (worker,):
        worker.wait_serving()
        ok(cli(env, "dispatch", APP, "slow", "--payload", '{"seconds": 30}'))
        wait_for(lambda: _pending(redis_server, queue), "slow to start")
        worker.process.send_signal(signal.SIGINT)
        wait_for(lambda: "shutting down gracefully" in worker.log(), "the first signal")
        started = time.monotonic()
        assert worker.stop(signal.SIGINT) == 0, worker.log()
        assert time.monotonic() - started < 5
        assert "received again: stopping now" in worker.log()
    # Cancelled, so not acked: it stays pending for another worker to reclaim.
    assert _pending(redis_server, queue)
    assert done(redis_server, queue) == []


def test_stats_json_matches_what_ran(
    redis_server: ServerProcess, redis_url: str, env: dict[str, str], queue: str, tmp_path: Path
) -> None:
    with workers(env, tmp_path) as (worker,):
        instance = worker.wait_serving()
        for n in range(5):
            ok(cli(env, "dispatch", APP, "record", "--payload", str(n)))
        ok(cli(env, "dispatch", APP, "point", "--payload", '{"x": 0, "y": 0}'))
        wait_for(lambda: len(done(redis_server, queue)) == 6, "six tasks to run")
        # Timings reach the hash within a second (the bulk writer).
        doc = wait_for(
            lambda: (d := stats(env, redis_url, queue))["tasks"].get("point", {}).get("runs") and d,
            "timings in the metrics hash",
        )
        human = ok(cli(env, "stats", "--url", redis_url, "--group", GROUP, "--queue", queue))
    assert doc["group"] == GROUP
    assert doc["stream"] == f"taskrunner:{GROUP}:{queue}"
    assert {name: t["runs"] for name, t in doc["tasks"].items()} == {"record": 5, "point": 1}
    assert doc["leader"]["instance_id"] == instance
    assert doc["leader"]["host"] is not None
    assert doc["leader"]["host"].endswith(f"-{worker.pid}")
    assert 0 < doc["leader"]["ttl"] <= 1.0
    assert [(i["instance_id"], i["leader"]) for i in doc["instances"]] == [(instance, True)]
    assert doc["replication"] == 1
    assert (doc["tuning_capacity"], doc["workers"], doc["workers_source"]) == (None, 32, "default")
    timing = doc["timing"]
    assert timing["avg_timing_ms"] > 0
    assert timing["tps"] == pytest.approx(1000 / timing["avg_timing_ms"] * 32)
    assert timing["predicted_wait_time_ms"] == 0  # nothing queued
    total = sum(t["total_ms"] for t in doc["tasks"].values())
    assert timing["avg_timing_ms"] == pytest.approx(total / 6)
    q = doc["queue"]
    assert q["size"] == 0
    (group,) = q["groups"]
    assert (group["name"], group["pending"], group["lag"]) == (GROUP, 0, 0)
    assert [c["name"] for c in group["consumers"]] == [f"{GROUP}_{doc['leader']['host']}_1"]
    assert q["claim_delay_ms"]["max"] >= q["claim_delay_ms"]["avg"] >= 0
    assert f"group {GROUP} on stream taskrunner:{GROUP}:{queue}" in human
    assert re.search(r"record\s+5\s", human), human
    assert instance in human
    assert "(leader)" in human


def test_stats_workers_option_and_published_capacity(
    redis_server: ServerProcess, redis_url: str, env: dict[str, str], queue: str
) -> None:
    # A group that served once (its first read created the consumer group) and has
    # no instance now. (A group not on the server at all is refused: test_first_errors.)
    sync_command(
        redis_server.port, "XGROUP", "CREATE", f"taskrunner:{GROUP}:{queue}", GROUP, "0", "MKSTREAM"
    )
    args = ("stats", "--url", redis_url, "--group", GROUP, "--queue", queue, "--json")
    doc = json.loads(ok(cli(env, *args, "--workers", "4")))
    assert (doc["workers"], doc["workers_source"]) == (4, "option")
    assert doc["leader"] is None
    assert doc["tasks"] == {}
    assert doc["queue"]["groups"] == [{"name": GROUP, "pending": 0, "lag": 0, "consumers": []}]
    sync_command(redis_server.port, "SET", f"taskrunner:{GROUP}:worker_tuning_capacity", 7)
    doc = json.loads(ok(cli(env, *args, "--workers", "4")))
    assert (doc["tuning_capacity"], doc["workers"], doc["workers_source"]) == (7, 7, "published")


def test_metrics_port_serves_prometheus(
    redis_server: ServerProcess, env: dict[str, str], queue: str, tmp_path: Path
) -> None:
    port = free_port()
    with workers(env, tmp_path, 1, "--metrics-port", str(port), "--workers", "3") as (worker,):
        worker.wait_serving()
        wait_for(lambda: "Prometheus metrics on" in worker.log(), "the metrics endpoint")
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as reply:
            body = reply.read().decode()
        assert "taskrunner" in body
        assert worker.stop() == 0, worker.log()
    assert "3 worker(s)" in worker.log()  # --workers applied through configure()


# keys and flush ------------------------------------------------------------------


def test_keys_lists_the_keys_and_flush_leaves_none(
    redis_server: ServerProcess, redis_url: str, env: dict[str, str], queue: str, tmp_path: Path
) -> None:
    redis = ("--url", redis_url, "--group", GROUP, "--queue", queue)
    with workers(env, tmp_path) as (worker,):
        worker.wait_serving()
        ok(cli(env, "dispatch", APP, "record", "--payload", "1"))
        ok(cli(env, "dispatch", APP, "once", "--payload", "1"))  # takes a unique lock
        ok(cli(env, "dispatch", APP, "record", "--payload", "2", "--delay", "600"))
        wait_for(lambda: len(done(redis_server, queue)) == 2, "two tasks to run")
        wait_for(
            lambda: sync_command(redis_server.port, "EXISTS", f"taskrunner:{GROUP}:metrics"),
            "the metrics hash",
        )
        doc = json.loads(ok(cli(env, "keys", *redis, "--json")))
        human = ok(cli(env, "keys", *redis))
        assert worker.stop() == 0
    names = {k["name"]: k for k in doc["keys"]}
    assert names[f"taskrunner:{GROUP}:{queue}"]["type"] == "stream"
    assert names[f"taskrunner:{GROUP}:delayed_tasks"]["size"] == 1
    assert names[f"taskrunner:{GROUP}:metrics"]["type"] == "hash"
    assert names[f"ring:taskrunner:{GROUP}:metrics:{queue}"]["type"] == "list"
    assert names[f"taskrunner:{GROUP}:catalog"]["type"] == "hash"
    leader = next(k for k in doc["keys"] if k["category"] == "leader keys")
    assert 0 < leader["ttl"] <= 1.0
    (heartbeat,) = (k for k in doc["keys"] if k["category"] == "replication")
    assert heartbeat["name"].endswith(f"-{worker.pid}")
    assert 0 < heartbeat["ttl"] <= 15
    counts = {c["category"]: (c["expected"], c["found"]) for c in doc["counts"]}
    assert counts == {
        "streams": ("1", 1),
        "ZSETs": ("0-1", 1),
        "leader keys": ("0-1", 1),
        "tuning keys": ("0-1", 0),
        "desired instance counts": ("0-1", 0),
        "metrics hashes": ("0-1", 1),
        "task catalogs": ("0-1", 1),
        "schedule states": ("0-1", 0),  # the app declares no schedule
        "schedule specs": ("0-1", 0),
        "replication": ("I", 1),
        "unique locks": ("U", 0),  # released when `once` finished
        "metric rings": ("0-1", 1),
        "dead-letter streams": ("0-1", 0),
        "delayed id indexes": ("0-1", 1),  # the delayed task, by its id
        "entry indexes": ("0-1", 0),
        "stop requests": ("0-1", 0),
        "results": ("R", 0),
        "result notices": ("<= R", 0),
        "result waiters": ("0-1", 0),
        "progress hashes": ("P", 0),
        "event streams": ("0-1", 0),  # the app does not ask for events
        "workflow records": ("W", 0),
        "workflow end counts": ("0-1", 0),
        "paused sets": ("0-1", 0),
        "concurrency slots": ("<= T", 0),
        "rate-limit logs": ("<= T", 0),
        "rate-limit paces": ("<= T", 0),
        "parked sets": ("<= T", 0),
        "shard counts": ("0-1", 0),
    }
    assert doc["total"] == len(doc["keys"]) == 8
    assert f"taskrunner:{GROUP}:delayed_tasks" in human
    assert "Key count" in human

    refused = cli(env, "flush", *redis)
    assert refused.returncode == 2
    assert len(refused.stderr.splitlines()) == 1
    assert "--yes" in refused.stderr
    assert (
        json.loads(ok(cli(env, "keys", *redis, "--json")))["total"] == 5
    )  # untouched (leader and heartbeat went with the worker)

    out = ok(cli(env, "flush", *redis, "--yes"))
    assert out.startswith("deleted 5 key(s)")
    assert f"taskrunner:{GROUP}:{queue}" in out
    # Not one key of the group is left, so the server no longer has the group.
    gone = cli(env, "keys", *redis, "--json")
    assert (gone.returncode, gone.stdout) == (1, ""), gone
    assert (
        gone.stderr == f"taskrunner keys: error: no group {GROUP!r} on this server; groups: none\n"
    )
    left = {k.decode() for k in sync_command(redis_server.port, "KEYS", "*")}
    assert left == {f"{queue}:done"}  # only the app's own list


# Errors: one line on stderr, non-zero exit -----------------------------------------


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["worker", "no_such_module:runner"], 1, "no module named 'no_such_module'"),
        (["worker", "cli_app:nope"], 1, "'cli_app' has no attribute 'nope'"),
        (["worker", "cli_app:not_a_runner"], 1, "is a int, not a TaskRunner"),
        (["worker", "cli_app"], 1, "not of the form 'module:attribute'"),
        (["worker"], 2, "required: MODULE:RUNNER"),
        (["worker", APP, "--workers", "0"], 2, "must be at least 1"),
        (["worker", APP, "--metrics-port", "70000"], 2, "port number"),
        (["dispatch", APP, "record", "--payload", "{"], 1, "--payload is not valid JSON"),
        (["dispatch", APP, "nope"], 1, "no task named 'nope'"),
        (["dispatch", APP, "point", "--payload", '{"x": "a"}'], 1, "does not fit Point"),
        (["dispatch", APP, "record", "--delay", "-1"], 2, "must be a number of seconds >= 0"),
        (["dispatch", APP, "record", "--at", "2030-01-01T00:00:00"], 2, "has no timezone"),
        (["dispatch", APP, "record", "--at", "x"], 2, "expected an ISO 8601 time"),
        (
            ["dispatch", APP, "record", "--delay", "1", "--at", "2030-01-01T00:00Z"],
            2,
            "not allowed",
        ),
        (["stats", "--group", "g"], 2, "required: --url"),
        (["stats", "--url", "http://x", "--group", "g"], 1, "invalid --url"),
        (["nope"], 2, "invalid choice"),
    ],
)
def test_bad_usage_is_one_line(
    env: dict[str, str], args: list[str], code: int, message: str
) -> None:
    result = cli(env, *args)
    assert result.returncode == code, result
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert message in lines[0]
    assert result.stdout == ""


def test_unique_task_dispatched_twice_is_refused(env: dict[str, str]) -> None:
    ok(cli(env, "dispatch", APP, "once", "--payload", "1"))
    result = cli(env, "dispatch", APP, "once", "--payload", "1")
    assert result.returncode == 1
    (line,) = result.stderr.splitlines()
    assert "task 'once' is already dispatched" in line


@pytest.mark.parametrize(
    "args",
    [
        ["worker", APP],
        ["dispatch", APP, "record"],
        ["dispatch", APP, "record", "--delay", "1"],
        ["stats", "--group", GROUP],
        ["keys", "--group", GROUP],
        ["flush", "--group", GROUP, "--yes"],
    ],
)
def test_unreachable_redis_is_one_line(args: list[str], queue: str) -> None:
    closed = f"redis://127.0.0.1:{free_port()}/0"
    env = app_env(closed, queue)
    if args[0] in ("stats", "keys", "flush"):
        args = [*args, "--url", closed]
    started = time.monotonic()
    result = cli(env, *args)
    assert result.returncode == 1, result
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert f"127.0.0.1:{closed.split(':')[2].split('/')[0]}" in lines[0]
    assert time.monotonic() - started < 15


# docs/operations.md ---------------------------------------------------------------


def test_the_documented_application_module(
    redis_server: ServerProcess, redis_url: str, tmp_path: Path
) -> None:
    """The first ``sh`` block of docs/operations.md creates app/tasks.py; serve it with the
    ``taskrunner`` console script from that directory, as the page does."""
    page = (ROOT / "docs" / "operations.md").read_text()
    section = page.split("## The application module", 1)[1]
    block = re.search(r"^```sh\n(.*?)^```$", section, re.MULTILINE | re.DOTALL)
    assert block
    subprocess.run(["sh", "-c", block.group(1)], cwd=tmp_path, check=True, timeout=10)
    assert (tmp_path / "app" / "tasks.py").is_file()
    script = str(Path(sys.executable).with_name("taskrunner"))
    env = {**os.environ, "REDIS_URL": redis_url}
    log = tmp_path / "worker.log"
    with log.open("wb") as out:
        worker = subprocess.Popen(
            [script, "worker", "app.tasks:runner", "--workers", "8"],
            cwd=tmp_path,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
        try:
            wait_for(lambda: "serving group thumbnails" in log.read_text(), "the worker")
            dispatched = subprocess.run(
                [script, "dispatch", "app.tasks:runner", "make_thumbnail", "--payload", CAT],
                cwd=tmp_path,
                env=env,
                capture_output=True,
                text=True,
                timeout=COMMAND_TIMEOUT,
                check=False,
            )
            assert dispatched.returncode == 0, dispatched.stderr
            wait_for(lambda: "thumbnail for cat.png" in log.read_text(), "the task to run")
            worker.send_signal(signal.SIGTERM)
            assert worker.wait(timeout=20) == 0, log.read_text()
        finally:
            worker.kill()
            worker.wait(timeout=10)
    assert "8 worker(s)" in log.read_text()


def test_metrics_port_in_use_fails_cleanly(env: dict[str, str]) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = cli(env, "worker", APP, "--metrics-port", str(port))
    assert result.returncode == 1, result
    assert "Traceback" not in result.stderr
    last = result.stderr.splitlines()[-1]
    assert last.startswith(f"taskrunner worker: error: cannot serve metrics on 127.0.0.1:{port}")


# Resolving module:attribute (in process) ---------------------------------------------


def test_resolve_reports_what_went_wrong(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from taskrunner.cli.imports import ImportTargetError, load_runner, resolve

    (tmp_path / "pkg_ok").mkdir()
    (tmp_path / "pkg_ok" / "__init__.py").write_text("")
    (tmp_path / "pkg_ok" / "mod.py").write_text("class Holder:\n    value = 7\n")
    (tmp_path / "needs_dep.py").write_text("import surely_not_installed_dep\n")
    (tmp_path / "raises.py").write_text("raise RuntimeError('config missing')\n")
    monkeypatch.chdir(tmp_path)  # the current directory is searched, as the CLI does
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    assert resolve("pkg_ok.mod:Holder.value") == 7

    def error(target: str) -> str:
        with pytest.raises(ImportTargetError) as info:
            load_runner(target)
        assert "\n" not in str(info.value)
        return str(info.value)

    assert "'pkg_ok.mod:Holder' has no attribute 'nope'" in error("pkg_ok.mod:Holder.nope")
    assert "no module named 'pkg_ok.other'" in error("pkg_ok.other:x")
    assert error("needs_dep:x") == (
        "importing module 'needs_dep' failed at needs_dep.py, line 1: ModuleNotFoundError: "
        "No module named 'surely_not_installed_dep'"
    )
    assert error("raises:x") == (
        "importing module 'raises' failed at raises.py, line 1: RuntimeError: config missing"
    )
    assert "not a valid 'module:attribute'" in error("pkg ok:x")
    assert "is a int, not a TaskRunner" in error("pkg_ok.mod:Holder.value")
