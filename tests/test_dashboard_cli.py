"""``taskrunner dashboard``: serves the pages on hypercorn's trio worker, never shows the
Redis password, takes its action token from --token or the environment, and fails in
one line on a bad URL or an unreachable server."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
from test_cli import COMMAND_TIMEOUT, ROOT, wait_for

from taskrunner.testing import free_port

PASSWORD = "s3cret-pw"


@contextmanager
def dashboard(
    url: str, tmp_path: Path, *args: str, env: dict[str, str] | None = None
) -> Iterator[tuple[str, Callable[[], str]]]:
    port = free_port()
    log = tmp_path / "dashboard.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "taskrunner",
                "dashboard",
                "--url",
                url,
                "--port",
                str(port),
                *args,
            ],
            cwd=ROOT,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
        try:
            wait_for(lambda: "serving on" in log.read_text(), "the dashboard to serve")
            yield f"http://127.0.0.1:{port}", log.read_text
            process.send_signal(signal.SIGTERM)
            assert process.wait(timeout=COMMAND_TIMEOUT) == 0, log.read_text()
        finally:
            process.kill()
            process.wait(timeout=10)


def test_it_serves_the_pages_and_never_shows_the_password(
    redis_server_factory: Callable[..., Any], tmp_path: Path
) -> None:
    server = redis_server_factory("--requirepass", PASSWORD, password=PASSWORD)
    url = f"redis://:{PASSWORD}@127.0.0.1:{server.port}/0"
    with dashboard(url, tmp_path) as (base, log):
        fleet = httpx.get(base + "/", timeout=10)
        assert fleet.status_code == 200
        assert f"redis://127.0.0.1:{server.port}/0" in fleet.text
        twin = httpx.get(base + "/api/", timeout=10)
        assert twin.json()["server"] == f"redis://127.0.0.1:{server.port}/0"
        assert httpx.get(base + "/static/live.js", timeout=10).status_code == 200
        for text in (fleet.text, twin.text, log()):
            assert PASSWORD not in text
    assert PASSWORD not in log()


def test_the_token_comes_from_the_environment(redis_url: str, tmp_path: Path) -> None:
    env = dict(os.environ, TASKRUNNER_DASHBOARD_TOKEN="token-from-the-env")
    with dashboard(redis_url, tmp_path, "--allow-actions", env=env) as (base, log):
        with httpx.Client(base_url=base, timeout=10) as http:
            login = http.get("/login")
            found = re.search(r'name="csrf" value="([^"]+)"', login.text)
            assert found
            csrf = found.group(1)
            wrong = http.post("/login", data={"csrf": csrf, "token": "guess-guess"})
            assert wrong.status_code == 403
            done = http.post("/login", data={"csrf": csrf, "token": "token-from-the-env"})
            assert done.status_code == 303
        assert "token-from-the-env" not in log()  # given, so never logged


def test_a_generated_token_is_logged_once(redis_url: str, tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "TASKRUNNER_DASHBOARD_TOKEN"}
    with dashboard(redis_url, tmp_path, "--allow-actions", env=env) as (_, log):
        lines = [line for line in log().splitlines() if "log in with the token" in line]
    assert len(lines) == 1
    assert len(lines[0].rsplit(" ", 1)[1]) >= 32


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "taskrunner", "dashboard", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=COMMAND_TIMEOUT,
        check=False,
    )


def test_an_unreachable_server_is_one_line_and_exit_1() -> None:
    port = free_port()
    result = run("--url", f"redis://:{PASSWORD}@127.0.0.1:{port}/0", "--port", str(free_port()))
    assert result.returncode == 1, result
    (line,) = result.stderr.splitlines()[-1:]
    assert line.startswith(f"taskrunner dashboard: error: Redis at redis://127.0.0.1:{port}/0: ")
    assert PASSWORD not in result.stderr


def test_a_bad_url_or_port_is_refused() -> None:
    bad = run("--url", "http://nowhere", "--port", "8000")
    assert bad.returncode == 1
    assert bad.stderr.splitlines()[-1].startswith("taskrunner dashboard: error: invalid --url: ")
    port = run("--url", "redis://127.0.0.1:1/0", "--port", "70000")
    assert port.returncode == 2
    assert "must be a port number in 1..65535, got 70000" in port.stderr
