"""``taskrunner demo`` end to end, and the command line's argument errors."""

from __future__ import annotations

import io
import re
import subprocess
import sys

import pytest

from taskrunner import _cli, _demo

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


def test_demo_every_task_reaches_an_outcome() -> None:
    result = run_cli("demo", "--tasks", "200", "--seed", "7")
    out = result.stdout
    assert result.returncode == 0, result.stderr
    assert "dispatched: 200 of 200" in out
    outcomes = re.search(
        r"^outcomes: (\d+) of 200 \(completed (\d+), dead-lettered (\d+), handled (\d+)\)$",
        out,
        re.MULTILINE,
    )
    assert outcomes, out
    done, completed, dead, handled = map(int, outcomes.groups())
    assert done == completed + dead + handled == 200
    total = summary_row(out, "total")
    assert (total["completed"], total["dead_lettered"]) == (completed, dead)
    assert total["acked"] == 200
    assert total["fetched"] == total["completed"] + total["failed"]
    runners = [summary_row(out, f"demo-{i}") for i in (1, 2, 3)]
    assert sum(r["completed"] for r in runners) == completed
    assert all(r["capacity"] >= 8 for r in runners)  # demo-1 grew from 4 to 16
    assert "queue left: 0 entries, 0 pending" in out
    assert "typed payloads: 30 Order objects, 60 items" in out
    assert f"dead letters: {dead}" in out
    assert out.splitlines()[-1] == "OK: all 200 tasks reached a final outcome"
    # Not a terminal: periodic plain lines, no cursor movement.
    assert re.search(r"^progress: \d+/200 outcomes", out, re.MULTILINE)
    assert "\x1b[" not in out


def test_demo_stall_exits_non_zero_with_one_clear_line() -> None:
    # Dispatching alone takes ~0.2 s and a retry comes after 0.5 s: 0.1 s cannot do.
    result = run_cli("demo", "--tasks", "200", "--timeout", "0.1")
    assert result.returncode == 1
    stalled = [line for line in result.stderr.splitlines() if line.startswith("STALLED")]
    assert len(stalled) == 1
    assert re.fullmatch(
        r"STALLED: only \d+ of 200 tasks reached a final outcome within --timeout 0.1s", stalled[0]
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
    assert _cli.build_parser().parse_args(argv).log_level == level


def test_plan_adds_up() -> None:
    for total in (1, 7, 200, 600, 1001):
        assert sum(_demo.plan(total).values()) == total


async def test_live_display_redraws_in_place() -> None:
    out, err = io.StringIO(), io.StringIO()
    options = _demo.DemoOptions(tasks=40, timeout=30, seed=3)
    assert await _demo.run_demo(options, out, err, live=True) == 0
    text = out.getvalue()
    assert "\x1b[5F\x1b[J" in text  # moved up over the 5-line block and cleared it
    assert "[################################] 40/40 (100%)" in text
    assert text.splitlines()[-1] == "OK: all 40 tasks reached a final outcome"
    assert err.getvalue() == ""
