"""``taskrunner top``: one frame rendered to text from a real server, the pure parts,
and the command line (``--once``)."""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from collections.abc import Callable

import pytest
import trio
from rich.console import Console

from taskrunner import Stats, TaskRunner, TaskRunnerConfig
from taskrunner._schedules.view import ScheduleRow
from taskrunner._wire import task_names_in
from taskrunner.backends import ConsumerInfo, GroupInfo, QueueMetrics
from taskrunner.backends.redis import RedisBackend
from taskrunner.cli.top import read_snapshot, run_top
from taskrunner.cli.views import (
    FleetSnapshot,
    History,
    render_text,
    sparkline,
    top_line,
    top_view,
)

GROUP = "topg"


async def wait_until(predicate: Callable[[], bool], limit: float = 20) -> None:
    with trio.fail_after(limit):
        while not predicate():  # noqa: ASYNC110 (the counters come with no event)
            await trio.sleep(0.01)


async def test_one_frame_from_a_real_server(redis_url: str) -> None:
    backend = RedisBackend.from_url(redis_url, prefix="top")
    observer = RedisBackend.from_url(redis_url, prefix="top")
    runner = TaskRunner(
        TaskRunnerConfig(
            consumer_group=GROUP, host="top-host", block_duration=0.05, leader_lease_ttl=1.0
        ),
        backend,
    )

    @runner.task(name="resize_image")
    async def resize_image(payload: int) -> None:
        await trio.sleep(0.002)

    @runner.task(name="send_mail")
    async def send_mail(payload: int) -> None:
        pass

    history = History(size=10)
    async with backend, observer, trio.open_nursery() as nursery:
        await nursery.start(runner.serve)
        await wait_until(lambda: runner.is_leader)
        first = await read_snapshot(observer, GROUP)
        history.add(first.taken_at, first.total_runs, first.queue.queue_size)

        await runner.dispatch_many("resize_image", range(20))
        await runner.dispatch_many("send_mail", range(10))
        await wait_until(lambda: runner.statistics().acked == 30)
        # The bulk writer flushes timings once a second: read until all 30 runs are in
        # (a sleep of 1.3 s assumed a machine fast enough to keep to it).
        snapshot = await read_snapshot(observer, GROUP)
        with trio.fail_after(30):
            while sum(snapshot.runs.values()) < 30:
                await trio.sleep(0.05)
                snapshot = await read_snapshot(observer, GROUP)
        history.add(snapshot.taken_at, snapshot.total_runs, snapshot.queue.queue_size)
        text = render_text(top_view(snapshot, history, width=20), width=120)
        nursery.cancel_scope.cancel()

    assert snapshot.runs == {"resize_image": 20, "send_mail": 10}
    assert snapshot.leader == runner.instance_id
    assert snapshot.leader_host == "top-host"
    assert snapshot.instances == (("top-host", runner.instance_id),)
    assert snapshot.tuning_capacity is None
    assert snapshot.workers == 32  # nothing published: the default is assumed
    assert snapshot.stats.per_task_timing["resize_image"] >= 2.0

    def row(label: str) -> str:
        (line,) = [line for line in text.splitlines() if line.split()[:1] == label.split()[:1]]
        return line

    assert f"group {GROUP} on top:tasks" in text
    assert re.search(rf"leader\s+top-host \({runner.instance_id}\)", text)
    assert row("live instances").split()[-1] == "1"
    assert re.search(rf"top-host\s+{runner.instance_id} \(leader\)", text)
    assert re.search(r"tuning\s+none published", text)
    assert re.search(r"workers per instance\s+32", text)
    # Throughput: 30 runs between the two samples.
    rate = float(row("throughput").split()[2])
    span = snapshot.taken_at - first.taken_at
    assert rate == pytest.approx(30 / span, rel=0.01)
    # One rate so far: a single full-height block.
    assert re.search(r"throughput \(runs/s\)\s+[\d.]+\s+[\d.]+\s+█\s", text)
    assert re.search(r"queue length\s+0\s+0\s+▁▁", text)
    # Stats, per task, and the queue.
    assert re.search(r"predicted_wait_time\s+0\.000 ms", text)
    assert re.search(r"avg_timing\s+\d+\.\d+ ms", text)
    assert re.search(r"tps\s+[\d,.]+ tasks/s", text)
    assert re.search(r"resize_image\s+\d+\.\d+ ms\s+\(20 runs\)", text)
    assert re.search(r"send_mail\s+\d+\.\d+ ms\s+\(10 runs\)", text)
    assert re.search(r"queue_size\s+0", text)
    assert re.search(rf"group {GROUP}\s+pending 0, lag 0", text)
    assert f"{GROUP}_top-host_1" in text
    assert "group topg: queue 0, throughput" in top_line(snapshot, history)


def constructed_snapshot(**changes: object) -> FleetSnapshot:
    fields: dict[str, object] = {
        "group": "g",
        "stream": "taskrunner:tasks",
        "taken_at": 100.0,
        "metrics": {"a_sum": 30.0, "a_count": 10.0, "delayed_tasks_schedule_sum": 4.0},
        "stats": Stats(
            per_task_timing={"a": 3.0},
            predicted_wait_time=150.0,
            avg_timing=3.0,
            avg_schedule_timing=2.0,
            tps=666.7,
        ),
        "queue": QueueMetrics(
            queue_size=100,
            message_claim_delay_avg=2e6,
            message_claim_delay_std=1e6,
            message_claim_delay_max=9e6,
            message_claim_delay_last=1e6,
            groups=(
                GroupInfo(
                    name="g",
                    pending=4,
                    lag=96,
                    consumers=(ConsumerInfo(name="g_h_1", pending=4, idle=0.5),),
                ),
            ),
        ),
        "leader": None,
        "leader_host": None,
        "instances": (),
        "tuning_capacity": 12,
        "workers": 12,
    }
    fields.update(changes)
    return FleetSnapshot(**fields)  # type: ignore[arg-type]


def test_constructed_frame() -> None:
    history = History(size=4, window=1.0)
    for t, runs, queue in [(0, 0, 10), (1, 10, 50), (2, 40, 100), (3, 5, 100), (4, 25, 80)]:
        history.add(t, runs, queue)
    # size + 1 samples make size rates; 40 -> 5 is a metrics reset, counted as 0.
    assert history.throughput() == [10.0, 30.0, 0.0, 20.0]
    assert history.queue_sizes() == [50.0, 100.0, 100.0, 80.0]
    assert history.span == 4
    history.add(5, 25, 0)
    assert history.throughput() == [30.0, 0.0, 20.0, 0.0]
    text = render_text(top_view(constructed_snapshot(), history, width=10), width=110)
    assert re.search(r"leader\s+none \(no lease held\)", text)
    assert re.search(r"tuning\s+published capacity 12", text)
    assert re.search(r"claim delay \(ms\)\s+avg 2\.0, std 1\.0, max 9\.0, last 1\.0", text)
    assert re.search(r"group g\s+pending 4, lag 96", text)
    assert re.search(r"g_h_1\s+pending 4, idle 0\.5s", text)
    assert re.search(r"predicted_wait_time\s+150\.0 ms", text)
    assert re.search(r"a\s+3\.000 ms\s+\(10 runs\)", text)
    assert "delayed_tasks_schedule" not in text.replace("avg_schedule_timing", "")
    assert "periodic schedules" not in text, "no schedules, no table"


def test_a_frame_shows_the_periodic_schedules() -> None:
    row = ScheduleRow(
        name="cleanup",
        task="cleanup",
        spec="cron */5 * * * * (UTC)",
        catch_up="latest",
        overlap=False,
        next_fire=1748851500.0,
        last_fired=1748851200.0,
        last_fired_at=1748851200.01,
        last_outcome="succeeded",
        last_outcome_tick=1748851200.0,
        in_flight=None,
        declared_by="h",
    )
    text = render_text(
        top_view(constructed_snapshot(schedules=(row,)), History(), width=10), width=160
    )
    assert "periodic schedules" in text
    assert re.search(
        r"cleanup\s+cleanup\s+cron \*/5 \* \* \* \* \(UTC\)\s+2025-06-02 08:05:00\s+"
        r"2025-06-02 08:00:00\s+succeeded \(2025-06-02 08:00:00\)",
        text,
    ), text


def test_throughput_is_measured_over_a_window() -> None:
    # Refreshes every 0.5 s, runs counted once a second (the bulk writer's flush).
    history = History(size=10, window=2.0)
    for i in range(8):
        history.add(i * 0.5, 100 * (i // 2), 0)
    rates = history.throughput()
    # Less than 2 s of samples yet: measured from the oldest.
    assert rates[:3] == pytest.approx([0.0, 100.0, 66.67], abs=0.01)
    assert rates[3:] == [100.0, 100.0, 100.0, 100.0]  # steady, no zigzag


def test_sparkline_and_task_names() -> None:
    assert sparkline([]) == ""
    assert sparkline([0, 0]) == "▁▁"
    assert sparkline([0, 1, 2, 3, 4, 5, 6, 7]) == "▁▂▃▄▅▆▇█"
    assert sparkline([1, 2, 3, 4], width=2) == "▆█"
    assert sparkline([float("nan"), 5]) == "▁█"
    metrics = {
        "a_sum": 1.0,
        "a_sum_us": 1000.0,
        "a_count": 1.0,
        "b_sum": 2.0,
        "c_count": 1.0,
        "delayed_tasks_schedule_sum": 1.0,
        "taskrunner:g:delayed_tasks_schedule_sum": 1.0,
        "taskrunner:g:delayed_tasks_schedule_count": 1.0,
    }
    assert task_names_in(metrics, "g") == ["a", "b", "c"]


def top_args(url: str, **changes: object) -> argparse.Namespace:
    values: dict[str, object] = {
        "url": url,
        "group": GROUP,
        "prefix": "taskrunner",
        "queue": "tasks",
        "interval": 0.1,
        "workers": None,
        "once": True,
    }
    values.update(changes)
    return argparse.Namespace(**values)


async def idle_group(redis_url: str) -> None:
    """A group that served once (its first read created the consumer group) and has no
    instance now. (A group not on the server at all is refused: test_first_errors.)"""
    async with RedisBackend.from_url(redis_url) as backend:
        stream = backend.stream_keys(GROUP).stream
        await backend.client.execute("XGROUP", "CREATE", stream, GROUP, "0", "MKSTREAM")


async def test_once_prints_one_frame(redis_url: str) -> None:
    await idle_group(redis_url)
    console = Console(record=True, width=100, color_system=None)
    assert await run_top(top_args(redis_url, workers=7), console) == 0
    text = console.export_text()
    assert f"group {GROUP} on taskrunner:tasks" in text
    assert re.search(r"workers per instance\s+7", text)
    assert re.search(r"leader\s+none \(no lease held\)", text)


def test_cli_once_and_errors(redis_url: str) -> None:
    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "taskrunner", "top", *args],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

    trio.run(idle_group, redis_url)
    ok = run("--url", redis_url, "--group", GROUP, "--once")
    assert ok.returncode == 0, ok.stderr
    assert f"group {GROUP} on taskrunner:{GROUP}:tasks" in ok.stdout  # the group's own stream
    assert "\x1b[" not in ok.stdout  # not a terminal: plain text

    bad = run("--url", "http://nope", "--group", GROUP, "--once")
    assert bad.returncode == 1
    assert bad.stderr.startswith("taskrunner top: error: invalid --url")
    assert len(bad.stderr.splitlines()) == 1

    # Nothing listens on port 1.
    down = run("--url", "redis://127.0.0.1:1/0", "--group", GROUP, "--once")
    assert down.returncode == 1
    assert down.stderr.startswith("taskrunner top: error: Redis at redis://127.0.0.1:1/0")
    assert len(down.stderr.splitlines()) == 1
