"""The peers benchmark (``benchmarks/peers/``): its pure helpers, the taskrunner driver
against the test server, and the page's table and chart matching the committed results.

The peers' own drivers need their virtualenvs and are not run here; ``run.py`` is.
"""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parent.parent
PEERS = ROOT / "benchmarks" / "peers"
DRIVER_TIMEOUT = 60


@pytest.fixture
def peers(monkeypatch: pytest.MonkeyPatch) -> dict[str, ModuleType]:
    """The benchmark's modules, imported as its scripts import each other."""
    monkeypatch.syspath_prepend(str(PEERS))
    return {name: importlib.import_module(name) for name in ("_common", "_report", "chart")}


@pytest.mark.parametrize(
    ("values", "q", "expected"),
    [
        ([5.0], 50, 5.0),
        ([5.0], 99, 5.0),
        ([float(v) for v in range(1, 101)], 50, 50.0),
        ([float(v) for v in range(1, 101)], 99, 99.0),
        ([float(v) for v in range(100, 0, -1)], 100, 100.0),
        ([3.0, 1.0, 2.0, 4.0], 50, 2.0),
        ([3.0, 1.0, 2.0, 4.0], 75, 3.0),
        ([3.0, 1.0, 2.0, 4.0], 76, 4.0),
    ],
)
def test_percentile_is_the_nearest_rank(
    peers: dict[str, ModuleType], values: list[float], q: float, expected: float
) -> None:
    assert peers["_common"].percentile(values, q) == expected


def test_percentile_of_nothing_is_refused(peers: dict[str, ModuleType]) -> None:
    with pytest.raises(ValueError, match="no values"):
        peers["_common"].percentile([], 50)


@pytest.mark.parametrize(
    ("wanted", "process_per_s", "expected"),
    [
        (1_000.0, 40_000.0, 1_000.0),
        (1_000.0, 2_000.0, 1_000.0),
        (1_000.0, 1_999.0, 999.5),
        (1_000.0, 331.0, 165.5),
    ],
)
def test_latency_rate_stays_below_half_the_processing_rate(
    peers: dict[str, ModuleType], wanted: float, process_per_s: float, expected: float
) -> None:
    assert peers["_common"].latency_rate(wanted, process_per_s) == expected


def test_tally_signals_once_at_the_expected_count(peers: dict[str, ModuleType]) -> None:
    calls: list[int] = []
    tally = peers["_common"].Tally(3, lambda: calls.append(tally.count))
    for sent in (0.0, 0.0, 0.0, 0.0):
        tally.ran(sent)
    assert calls == [3]
    assert tally.first <= tally.last
    assert tally.latencies == []


def test_latency_leaves_out_the_warm_up(peers: dict[str, ModuleType]) -> None:
    common = peers["_common"]
    tally = common.Tally(4, lambda: None)
    start = 100.0
    # (sent, lag): the first one was sent during the warm-up and is the slowest.
    tally.latencies = [(start, 0.9), (start + 0.5, 0.001), (start + 0.6, 0.002), (start + 1, 0.003)]
    tally.count = 4
    result = common.latency(tally, 4, start, 2.0)
    assert result["counted"] == 3
    assert result["p50_ms"] == pytest.approx(2.0)
    assert result["max_ms"] == pytest.approx(3.0)
    assert result["rate_per_s"] == 2.0


@pytest.mark.parametrize(
    ("latency", "cell"),
    [
        (
            {"p50_ms": 0.2, "p99_ms": 0.5, "rate_per_s": 1_000.0, "sent": 3, "started": 3},
            "0.20 / 0.50",
        ),
        (
            {"p50_ms": 262.9, "p99_ms": 501.0, "rate_per_s": 165.4, "sent": 5, "started": 5},
            "262.90 / 501.00 (at 165/s)",
        ),
        (
            {"p50_ms": 1.0, "p99_ms": 2.0, "rate_per_s": 990.0, "sent": 9, "started": 7},
            "1.00 / 2.00, 2 never started",
        ),
    ],
)
def test_latency_cell_says_when_the_rate_was_lowered(
    peers: dict[str, ModuleType], latency: dict[str, float], cell: str
) -> None:
    assert peers["_report"].latency_cell(latency, 1_000.0) == cell


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        ([0.2, 0.5], (-1, 0)),
        ([0.00037, 0.25], (-4, 0)),
        ([0.05, 1.3], (-2, 1)),
        ([0.001], (-3, 0)),
    ],
)
def test_chart_axis_spans_whole_decades_up_to_one(
    peers: dict[str, ModuleType], values: list[float], expected: tuple[int, int]
) -> None:
    assert peers["chart"].decades(values) == expected


def test_committed_table_and_chart_are_rendered_from_the_committed_results(
    peers: dict[str, ModuleType], tmp_path: Path
) -> None:
    """results.md and docs/images/peers.svg are what chart.py makes of results.json."""
    results = json.loads((PEERS / "results.json").read_text())
    peers["chart"].render(results, chart=tmp_path / "peers.svg", markdown=tmp_path / "results.md")
    assert (tmp_path / "results.md").read_text() == (PEERS / "results.md").read_text()
    svg = (ROOT / "docs" / "images" / "peers.svg").read_text()
    assert (tmp_path / "peers.svg").read_text() == svg


def test_committed_results_cover_every_system(peers: dict[str, ModuleType]) -> None:
    results = json.loads((PEERS / "results.json").read_text())
    assert list(results["systems"]) == ["arq", "saq", "streaq", "taskiq", "taskrunner"]
    for name, system in results["systems"].items():
        assert system["error"] is None, name
        assert len(system["rounds"]) == results["params"]["repeat"], name
        assert system["versions"][name], name
    assert results["ceiling"]["median"]["xadd_p16_per_s"] > 0


@pytest.mark.parametrize("phase", ["each", "bulk", "latency"])
def test_taskrunner_driver_runs_each_phase(redis_url: str, phase: str) -> None:
    out = subprocess.run(
        [
            sys.executable, str(PEERS / "drive_taskrunner.py"), "--url", redis_url,
            "--phase", phase, "--tasks", "300", "--latency-rate", "500",
            "--latency-seconds", "1",
        ],
        cwd=PEERS, capture_output=True, text=True, check=True, timeout=DRIVER_TIMEOUT,
    ).stdout  # fmt: skip
    record = json.loads(out.strip().splitlines()[-1])
    assert record["system"] == "taskrunner"
    assert record["phase"] == phase
    result = record["result"]
    if phase == "latency":
        assert result["sent"] == result["started"] == 500
        assert 0 < result["p50_ms"] <= result["p99_ms"] <= result["max_ms"]
    else:
        assert result["enqueue_per_s"] > 0
        assert result["process_per_s"] > 0
        assert result["redis_cpu_us_per_task"] > 0


@pytest.mark.parametrize(
    ("command", "shown"),
    [
        ("python benchmarks/peers/run.py", "python benchmarks/peers/run.py"),
        (
            "python benchmarks/peers/run.py --note 'a busy machine' --repeat 1",
            "python benchmarks/peers/run.py --repeat 1",
        ),
        (
            "python benchmarks/peers/run.py --note='a busy machine' --only saq,taskrunner",
            "python benchmarks/peers/run.py --only saq,taskrunner",
        ),
    ],
)
def test_facts_show_the_command_without_its_note(
    peers: dict[str, ModuleType], command: str, shown: str
) -> None:
    assert peers["_report"].rerun_command(command) == shown
