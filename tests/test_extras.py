"""The optional dependencies stay optional: ``rich`` comes with the ``cli`` extra and
``prometheus-client`` with ``prometheus``.

``import taskrunner`` imports neither; ``taskrunner worker`` and ``taskrunner
dispatch`` run without them; the commands that need one say which extra to install,
in one line, and exit 1. Each test runs the command line in a subprocess whose
import system refuses both modules, as an install without the extras would.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from test_cli import COMMAND_TIMEOUT, GROUP, ROOT, app_env, wait_for

from taskrunner.testing import sync_command

OPTIONAL = ("rich", "prometheus_client")

# Runs the command line with every module in BLOCKED refused, as if not installed.
WITHOUT = """
import importlib.abc, sys

BLOCKED = set(sys.argv[1].split(","))


class Refuse(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in BLOCKED:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


sys.meta_path.insert(0, Refuse())
from taskrunner.cli import main

sys.exit(main(sys.argv[2:]))
"""


def without(blocked: tuple[str, ...], *args: str) -> list[str]:
    """The argv of ``taskrunner ARGS`` with ``blocked`` refused."""
    return [sys.executable, "-c", WITHOUT, ",".join(blocked), *args]


def run(env: dict[str, str] | None, argv: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        argv, env=env, cwd=ROOT, capture_output=True, text=True, timeout=COMMAND_TIMEOUT
    )


def test_import_taskrunner_imports_neither_rich_nor_prometheus_client() -> None:
    code = (
        "import sys, taskrunner, taskrunner.backends.memory, taskrunner.backends.redis, "
        "taskrunner.testing, taskrunner.cli, taskrunner.admin; "
        f"print([m for m in {OPTIONAL!r} if m in sys.modules])"
    )
    result = run(None, [sys.executable, "-c", code])
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def test_worker_and_dispatch_run_without_either(redis_url: str, tmp_path: Path) -> None:
    queue = "extras"
    env = app_env(redis_url, queue)
    log = tmp_path / "worker.log"
    with log.open("wb") as out:
        worker = subprocess.Popen(
            without(OPTIONAL, "worker", "cli_app:runner"),
            env=env,
            cwd=ROOT,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
        try:
            wait_for(lambda: "serving group" in log.read_text(), "the worker to serve")
            sent = run(
                env,
                without(OPTIONAL, "dispatch", "cli_app:runner", "record", "--payload", '{"n": 1}'),
            )
            assert sent.returncode == 0, sent.stderr
            assert sent.stdout.strip()
            port = int(redis_url.rsplit(":", 1)[1].split("/")[0])
            done = lambda: sync_command(port, "LRANGE", f"{queue}:done", 0, -1)  # noqa: E731
            (record,) = wait_for(done, "the task to run")
            assert json.loads(record) == {"n": 1}
            worker.send_signal(signal.SIGTERM)
            assert worker.wait(timeout=20) == 0, log.read_text()
        finally:
            worker.kill()
            worker.wait(timeout=10)
    assert GROUP in log.read_text()


@pytest.mark.parametrize(
    ("args", "module", "extra"),
    [
        (("top", "--url", "redis://127.0.0.1:1/0", "--group", "g", "--once"), "rich", "cli"),
        (("demo", "--backend", "memory", "--tasks", "10"), "rich", "cli"),
    ],
    ids=["top", "demo"],
)
def test_a_command_that_needs_rich_names_the_extra(
    args: tuple[str, ...], module: str, extra: str
) -> None:
    result = run(None, without(OPTIONAL, *args))
    assert result.returncode == 1, result
    assert "Traceback" not in result.stderr
    (line,) = result.stderr.splitlines()
    assert line == (
        f"taskrunner {args[0]}: error: {module} is not installed; it comes with the "
        f"{extra!r} extra: python -m pip install 'trio-taskrunner[{extra}]'"
    )


DASHBOARD = ("starlette", "hypercorn", "jinja2")


def test_import_taskrunner_imports_none_of_the_dashboard_extra() -> None:
    code = (
        "import sys, taskrunner, taskrunner.cli, taskrunner.admin; "
        f"print([m for m in {DASHBOARD!r} if m in sys.modules])"
    )
    result = run(None, [sys.executable, "-c", code])
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


@pytest.mark.parametrize("module", DASHBOARD)
def test_the_dashboard_names_its_extra(module: str) -> None:
    result = run(None, without((module,), "dashboard", "--url", "redis://127.0.0.1:1/0"))
    assert result.returncode == 1, result
    assert "Traceback" not in result.stderr
    (line,) = result.stderr.splitlines()
    assert line == (
        f"taskrunner dashboard: error: {module} is not installed; it comes with the "
        "'dashboard' extra: python -m pip install 'trio-taskrunner[dashboard]'"
    )


def test_metrics_port_names_the_prometheus_extra(redis_url: str) -> None:
    env = app_env(redis_url, "extras-metrics")
    result = run(env, without(OPTIONAL, "worker", "cli_app:runner", "--metrics-port", "9999"))
    assert result.returncode == 1, result
    assert "Traceback" not in result.stderr
    last = result.stderr.splitlines()[-1]
    assert last == (
        "taskrunner worker: error: cannot serve metrics on 127.0.0.1:9999: prometheus_client "
        "is not installed; it comes with the 'prometheus' extra: "
        "python -m pip install 'trio-taskrunner[prometheus]'"
    )
