"""The peers benchmark (``benchmarks/peers/``): its pure helpers, the taskrunner driver
against the test server, and the page's table and chart matching the committed results.

The peers' own drivers need their virtualenvs and are not run here (nor is ``run.py``);
what of them runs without their libraries (readings, tallies, medians, the report) is.
"""

from __future__ import annotations

import importlib
import json
import multiprocessing
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
PEERS = ROOT / "benchmarks" / "peers"
DRIVER_TIMEOUT = 60


@pytest.fixture
def peers(monkeypatch: pytest.MonkeyPatch) -> dict[str, ModuleType]:
    """The benchmark's modules, imported as its scripts import each other."""
    monkeypatch.syspath_prepend(str(PEERS))
    names = ("_common", "_report", "chart", "_thread_driver", "run")
    return {name: importlib.import_module(name) for name in names}


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
    assert list(results["systems"]) == [
        "arq", "saq", "streaq", "taskiq", "celery", "celery-threads", "dramatiq",
        "taskrunner", "taskrunner-kept",
    ]  # fmt: skip
    assert list(results["systems"]) == list(peers["run"].SYSTEMS)
    for name, system in results["systems"].items():
        assert system["error"] is None, name
        assert len(system["rounds"]) == results["params"]["repeat"], name
        assert system["versions"][system["package"]], name
        assert system["median"]["each"]["redis_calls_per_task"] >= 1, name
    assert results["ceiling"]["median"]["xadd_p16_per_s"] > 0
    assert results["params"]["tasks"] == 20_000
    assert results["params"]["concurrency"] == 32


def test_committed_results_keep_what_the_page_says(peers: dict[str, ModuleType]) -> None:
    """The systems said to keep a result left about a key per task in the run; those
    said to keep nothing left next to none."""
    systems = json.loads((PEERS / "results.json").read_text())["systems"]
    for name, system in systems.items():
        keys = system["median"]["each"]["redis_keys_per_task"]
        if system["stores"].startswith("nothing"):
            assert keys < 0.1, name
        else:
            assert keys >= 0.99, name
    kept = systems["taskrunner-kept"]
    assert kept["keep_result"] == peers["run"].KEEP_RESULT
    assert systems["taskrunner"]["keep_result"] is None
    calls = {name: systems[name]["median"]["each"]["redis_calls_per_task"] for name in systems}
    assert calls["taskrunner-kept"] > calls["taskrunner"]


def run_taskrunner_driver(redis_url: str, phase: str, *options: str) -> dict[str, Any]:
    out = subprocess.run(
        [
            sys.executable, str(PEERS / "drive_taskrunner.py"), "--url", redis_url,
            "--phase", phase, "--tasks", "300", "--latency-rate", "500",
            "--latency-seconds", "1", *options,
        ],
        cwd=PEERS, capture_output=True, text=True, check=True, timeout=DRIVER_TIMEOUT,
    ).stdout  # fmt: skip
    record: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    return record


def test_taskrunner_driver_keeps_results_when_asked(redis_url: str) -> None:
    """``--keep-result`` makes the driver's task keep its result: a key per task left after
    the run (the plain run leaves none), and more Redis commands per task."""
    plain = run_taskrunner_driver(redis_url, "each")
    kept = run_taskrunner_driver(redis_url, "each", "--keep-result", "3600")
    assert plain["keep_result"] is None
    assert kept["keep_result"] == 3600.0
    for record in (plain, kept):
        assert record["result"]["redis_commands"]["xadd"] == 1.0
    assert plain["result"]["redis_keys_per_task"] < 0.1
    assert kept["result"]["redis_keys_per_task"] >= 1.0
    assert kept["result"]["redis_calls_per_task"] > plain["result"]["redis_calls_per_task"]


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


COMMANDSTATS = """# Commandstats\r
cmdstat_xadd:calls=20003,usec=40110,usec_per_call=2.01,rejected_calls=0,failed_calls=0\r
cmdstat_info:calls=7,usec=310,usec_per_call=44.29,rejected_calls=0,failed_calls=0\r
cmdstat_client|setname:calls=2,usec=3,usec_per_call=1.50,rejected_calls=0,failed_calls=0\r
"""


def test_commandstats_are_read_per_command(peers: dict[str, ModuleType]) -> None:
    assert peers["_common"].parse_commandstats(COMMANDSTATS) == {
        "xadd": (20003, 40110),
        "info": (7, 310),
        "client|setname": (2, 3),
    }
    assert peers["_common"].parse_commandstats("# Commandstats\r\n") == {}


@pytest.mark.parametrize(
    ("before", "after", "expected"),
    [
        # The readings' own INFO is not the system's work; a new command counts from 0.
        (
            {"xadd": (3, 9), "info": (2, 80)},
            {"xadd": (2003, 4009), "info": (4, 160), "xack": (500, 700)},
            {"xadd": 2.0, "xack": 0.5},
        ),
        # Most called first, then by name; a command not called in between is left out.
        (
            {"get": (5, 5)},
            {"get": (5, 5), "set": (1000, 1), "pexpire": (1000, 1), "evalsha": (10, 50)},
            {"pexpire": 1.0, "set": 1.0, "evalsha": 0.01},
        ),
    ],
)
def test_command_deltas_are_calls_per_task(
    peers: dict[str, ModuleType],
    before: dict[str, tuple[int, int]],
    after: dict[str, tuple[int, int]],
    expected: dict[str, float],
) -> None:
    deltas = peers["_common"].command_deltas(before, after, 1000)
    assert deltas == expected
    assert list(deltas) == list(expected)


@pytest.mark.parametrize(
    ("text", "keys"),
    [
        ("# Keyspace\r\n", 0),
        ("# Keyspace\r\ndb0:keys=20001,expires=20000,avg_ttl=3599000\r\n", 20001),
        ("# Keyspace\r\ndb0:keys=3,expires=0,avg_ttl=0\r\ndb2:keys=4,expires=1,avg_ttl=9\r\n", 7),
    ],
)
def test_keyspace_counts_the_keys_of_every_database(
    peers: dict[str, ModuleType], text: str, keys: int
) -> None:
    assert peers["_common"].parse_keyspace(text) == keys


def test_throughput_reports_commands_and_keys_per_task(peers: dict[str, ModuleType]) -> None:
    common = peers["_common"]
    tally = common.Tally(4, lambda: None)
    tally.first, tally.last = 10.0, 12.0
    result = common.throughput(
        4, 0.5, 9.0, tally, (1.0, 1.00002, 1.00006),
        ({"xadd": (1, 1)}, {"xadd": (5, 9), "setex": (4, 4), "info": (3, 3)}), 8,
    )  # fmt: skip
    assert result["process_per_s"] == 2.0
    assert result["redis_cpu_us_per_task"] == pytest.approx(15.0)
    assert result["redis_commands"] == {"setex": 1.0, "xadd": 1.0}
    assert result["redis_calls_per_task"] == 2.0
    assert result["redis_keys_per_task"] == 2.0


def _run_in_children(tally: Any, children: int, runs: int, sent: float) -> None:
    context = multiprocessing.get_context("fork")

    def work() -> None:
        for _ in range(runs):
            tally.ran(sent)

    processes = [context.Process(target=work) for _ in range(children)]
    for process in processes:
        process.start()
    for process in processes:
        process.join(DRIVER_TIMEOUT)
        assert process.exitcode == 0


def test_shared_tally_counts_the_runs_of_forked_processes(peers: dict[str, ModuleType]) -> None:
    """A Celery prefork pool runs the task in child processes: they all add to one count."""
    tally = peers["_thread_driver"].SharedTally(400)
    _run_in_children(tally, 4, 50, 0.0)
    assert tally.count == 200
    assert not tally.done.is_set()
    _run_in_children(tally, 4, 50, 0.0)
    assert tally.count == 400
    assert tally.done.is_set()
    assert 0 < tally.first <= tally.last
    assert tally.latencies == []


def test_shared_tally_keeps_the_latencies_of_forked_processes(
    peers: dict[str, ModuleType],
) -> None:
    tally = peers["_thread_driver"].SharedTally(30)
    sent = time.perf_counter()
    _run_in_children(tally, 3, 10, sent)
    assert tally.done.is_set()
    assert len(tally.latencies) == 30
    assert all(at == sent and 0 < lag < DRIVER_TIMEOUT for at, lag in tally.latencies)


def test_beside_stops_the_server_and_raises_the_phases_error(
    peers: dict[str, ModuleType],
) -> None:
    stopped = threading.Event()
    served: list[str] = []

    def serve() -> None:
        assert stopped.wait(DRIVER_TIMEOUT)
        served.append("stopped")

    def during() -> None:
        raise RuntimeError("12 of 20 tasks ran")

    with pytest.raises(RuntimeError, match="12 of 20"):
        peers["_thread_driver"].beside(serve, during, stopped.set)
    assert served == ["stopped"]


def test_enqueue_concurrently_enqueues_each_task_once(peers: dict[str, ModuleType]) -> None:
    calls: list[float] = []
    lock = threading.Lock()

    def enqueue(sent: float) -> None:
        with lock:
            calls.append(sent)

    peers["_thread_driver"].enqueue_concurrently(enqueue, 1000, 32)
    assert calls == [0.0] * 1000


def test_medians_take_each_commands_median(peers: dict[str, ModuleType]) -> None:
    rounds = [
        {"each": {"process_per_s": v, "redis_commands": c}, "bulk": None, "latency": None}
        for v, c in [
            (1.0, {"xadd": 1.0, "set": 1.0}),
            (3.0, {"xadd": 1.0, "set": 1.0, "get": 0.5}),
            (2.0, {"xadd": 1.0, "set": 0.98}),
        ]
    ]
    median = peers["run"].medians(rounds)
    assert median["each"]["process_per_s"] == 2.0
    assert median["each"]["redis_commands"] == {"set": 1.0, "xadd": 1.0, "get": 0.0}
    assert median["bulk"] is None


def test_every_system_has_a_driver_and_pinned_requirements(peers: dict[str, ModuleType]) -> None:
    for name, system in peers["run"].SYSTEMS.items():
        assert (PEERS / f"drive_{system.driver}.py").exists(), name
        assert system.stores, name
        if system.package == "taskrunner":
            continue
        pins = (PEERS / "requirements" / f"{system.package}.txt").read_text().splitlines()
        wanted = [line for line in pins if line and not line.startswith("#")]
        assert wanted, name
        assert all("==" in line for line in wanted), (name, wanted)


@pytest.mark.parametrize(
    ("name", "system", "short", "keys"),
    [
        (
            "celery-threads",
            {
                "package": "celery", "variant": "threads pool", "versions": {"celery": "5.7.0"},
                "stores": "the result, 1 day (result_expires)",
            },
            "celery 5.7.0, threads pool",
            "1.0",
        ),
        (
            "dramatiq",
            {"package": "dramatiq", "variant": "", "versions": {"dramatiq": "2.2.1"}},
            "dramatiq 2.2.1",
            "0.0",
        ),
    ],
)  # fmt: skip
def test_labels_name_the_package_and_variant(
    peers: dict[str, ModuleType], name: str, system: dict[str, Any], short: str, keys: str
) -> None:
    assert peers["_report"].short_label(name, system) == short
    each = {"redis_keys_per_task": 1.0004 if system.get("stores") else 0.0005}
    assert peers["_report"].keys_cell(each) == keys


def test_facts_say_how_long_the_run_took_and_how_busy_the_machine_was(
    peers: dict[str, ModuleType],
) -> None:
    results = {
        "date": "2026-12-02T02:05:00+00:00",
        "command": "python benchmarks/peers/run.py",
        "note": "",
        "params": {
            "tasks": 20_000, "concurrency": 32, "repeat": 3, "latency_rate": 1000.0,
            "latency_seconds": 3.0,
        },
        "wall_seconds": 1500,
        "machine": {
            "cores": 2, "cpu": "AMD EPYC", "os": "Linux", "python": "3.11.7",
            "load_average": {"median": 6.04, "max": 9.0},
        },
        "redis": {"kind": "redis", "version": "7.0.15"},
        "checkout": {"commit": "abc1234", "dirty": False},
    }  # fmt: skip
    facts = peers["_report"].facts_markdown(results)
    assert "median of 3 rounds" in facts
    assert facts.endswith(
        "The run took 25 min, at a load average of 6.0 (the median as each system began).\n"
    )


def test_table_aligns_words_left_and_figures_right(peers: dict[str, ModuleType]) -> None:
    results = json.loads((PEERS / "results.json").read_text())
    rule = peers["_report"].table_markdown(results).splitlines()[1]
    assert rule == "|---|---:|---:|---:|---:|---:|---|---:|---:|"


def test_facts_say_when_the_run_was_stopped_early(peers: dict[str, ModuleType]) -> None:
    results = {
        "date": "2026-12-02T02:05:00+00:00",
        "command": "python benchmarks/peers/run.py",
        "note": "",
        "params": {
            "tasks": 20_000, "concurrency": 32, "repeat": 1, "latency_rate": 1000.0,
            "latency_seconds": 3.0,
        },
        "complete": False,
        "machine": {"cores": 2, "cpu": "AMD EPYC", "os": "Linux", "python": "3.11.7"},
        "redis": {"kind": "redis", "version": "7.0.15"},
        "checkout": {"commit": "abc1234", "dirty": False},
    }  # fmt: skip
    facts = peers["_report"].facts_markdown(results)
    assert "The run was stopped after 1 round of the rounds it was asked for" in facts
    results["complete"] = True
    assert "stopped" not in peers["_report"].facts_markdown(results)
