"""The dashboard's pure decisions (rates, capacity changes, chart geometry, instances)
with tables, and the sampler on trio's MockClock."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
import trio
from _fleet import make_runner, serving

from taskrunner._wire import CatalogDocument, CatalogTask
from taskrunner.backends import Heartbeat
from taskrunner.backends.memory import MemoryBackend
from taskrunner.dashboard import Sampler
from taskrunner.dashboard._charts import HEIGHT, WIDTH, polyline, top_of
from taskrunner.dashboard._data import (
    CapacityChange,
    ConsumerRow,
    capacity_changes,
    host_of,
    instances_of,
)
from taskrunner.dashboard._sampler import Ring, Sample, rates, total_runs


def sample(at: float, runs: int = 0, queue: int = 0, capacity: int | None = None) -> Sample:
    return Sample(at=at, runs=runs, queue_length=queue, pending=0, lag=0, capacity=capacity)


@pytest.mark.parametrize(
    ("points", "expected"),
    [
        ([], []),
        ([(0, 0)], []),
        # Samples 2 s apart: each rate against the previous one.
        ([(0, 0), (2, 10), (4, 30)], [(2, 5.0), (4, 10.0)]),
        # Closer than the window: measured against an older sample, no zigzag.
        ([(0, 0), (1, 0), (2, 20), (3, 20), (4, 40)], [(1, 0.0), (2, 10.0), (3, 10.0), (4, 10.0)]),
        # A metrics reset (the total drops) counts as no runs, never negative.
        ([(0, 100), (2, 5)], [(2, 0.0)]),
        # Two samples at one instant: no division by zero.
        ([(5, 1), (5, 9)], [(5, 0.0)]),
    ],
)
def test_rates(points: list[tuple[float, int]], expected: list[tuple[float, float]]) -> None:
    assert rates([sample(at, runs) for at, runs in points]) == expected


def test_the_ring_keeps_the_newest() -> None:
    ring = Ring(size=3)
    for at in range(5):
        ring.add(sample(at))
    assert [s.at for s in ring.samples()] == [2, 3, 4]


def test_total_runs_counts_every_task_and_ignores_nonsense() -> None:
    metrics = {
        "a_sum": 10.0,
        "a_count": 4.0,
        "b_sum": 1.0,
        "b_count": 2.0,
        "c_sum": 1.0,
        "c_count": -3.0,
        "d_sum": 1.0,
        "d_count": float("nan"),
    }
    assert total_runs(metrics, "g") == 6


@pytest.mark.parametrize(
    ("capacities", "expected"),
    [
        ([], []),
        ([None, None], [(0, None)]),
        ([4, 4, 8, 8, None, 8], [(5, 8), (4, None), (2, 8), (0, 4)]),
    ],
)
def test_capacity_changes(
    capacities: list[int | None], expected: list[tuple[float, int | None]]
) -> None:
    samples = [sample(at, capacity=c) for at, c in enumerate(capacities)]
    assert capacity_changes(samples) == [CapacityChange(at=a, capacity=c) for a, c in expected]


@pytest.mark.parametrize(
    ("consumer", "host"),
    [
        ("g_alpha_1", "alpha"),
        ("g_my_host_12", "my_host"),
        ("g_alpha_x", "g_alpha_x"),  # not <group>_<host>_<n>
        ("other_alpha_1", "other_alpha_1"),
        ("g__1", "g__1"),
    ],
)
def test_host_of(consumer: str, host: str) -> None:
    assert host_of(consumer, "g") == host


def test_instances_join_catalog_consumers_and_heartbeats() -> None:
    catalog = [
        CatalogDocument(
            host="a", instance="ia", expires=9.0, tasks=(CatalogTask(name="t", stream="s"),)
        ),
        CatalogDocument(host="b", instance="ib", expires=9.0),
    ]
    consumers = [
        ConsumerRow(name="g_a_1", host="a", queue="tasks", pending=2, idle=0.5),
        ConsumerRow(name="g_a_1", host="a", queue="low", pending=5, idle=0.5),  # same, 2nd queue
        ConsumerRow(name="g_a_2", host="a", queue="tasks", pending=1, idle=0.5),
        ConsumerRow(name="g_go_1", host="go", queue="tasks", pending=4, idle=1.0),
    ]
    beats = [
        Heartbeat(host="a", instance_id="ia", ttl=9.0),
        Heartbeat(host="b", instance_id="other", ttl=9.0),  # b restarted: another holder
        Heartbeat(host="z", instance_id="iz", ttl=9.0),  # another group's
    ]
    found = instances_of(consumers, catalog, beats, leader="ia", pool=8)
    assert [(i.host, i.instance_id, i.alive, i.leader, i.running, i.consumers) for i in found] == [
        ("a", "ia", True, True, 8, 2),
        ("b", "ib", False, False, 0, 0),
        ("go", None, False, False, 4, 1),
    ]
    assert found[0].tasks == ("t",)
    assert {i.pool for i in found} == {8}


@pytest.mark.parametrize(
    ("series", "expected"),
    [
        ([], ""),
        ([(100.0, 0.0)], f"{WIDTH:.1f},{HEIGHT:.1f}"),
        # The newest point at the right edge; values scaled to the top (at least 1).
        ([(0.0, 2.0), (3600.0, 4.0)], f"0.0,{HEIGHT / 2:.1f} {WIDTH:.1f},0.0"),
        # Older than the hour: left out. Negative values sit on the axis.
        ([(-1.0, 1.0), (1800.0, -5.0), (3600.0, 0.5)], f"300.0,{HEIGHT:.1f} 600.0,60.0"),
    ],
)
def test_polyline(series: list[tuple[float, float]], expected: str) -> None:
    assert polyline(series) == expected


def test_top_of() -> None:
    assert top_of([]) == 1.0
    assert top_of([(0, 0.2)]) == 1.0
    assert top_of([(0, 3.0), (1, 7.5)]) == 7.5


def test_the_sampler_refuses_bad_settings() -> None:
    with pytest.raises(ValueError, match=r"^sample interval must be .* got 0$"):
        Sampler(MemoryBackend(), interval=0)
    with pytest.raises(ValueError, match=r"^history must be .* got 1$"):
        Sampler(MemoryBackend(), interval=5, history=1)


async def test_the_sampler_keeps_an_hour_of_every_group(autojump_clock: Any) -> None:
    backend = MemoryBackend()
    runner = make_runner(backend, host="h1")

    @runner.task("echo")
    async def echo(value: Any) -> None:
        await trio.sleep(0.01)

    sampler = Sampler(backend, interval=5.0, history=60.0)
    async with serving(runner), trio.open_nursery() as nursery:
        nursery.start_soon(sampler.run)
        await trio.sleep(0.1)
        assert sampler.running
        for n in range(50):
            await runner.dispatch("echo", n)
        await trio.sleep(30)
        kept = sampler.samples("g")
        assert 6 <= len(kept) <= 8
        assert [b.at - a.at for a, b in itertools.pairwise(kept)] == pytest.approx(
            [5.0] * (len(kept) - 1), abs=0.1
        )
        assert kept[-1].runs == 50
        assert max(rate for _, rate in rates(kept)) > 0
        await trio.sleep(300)
        assert len(sampler.samples("g")) == 13  # history / interval + 1, the newest
        nursery.cancel_scope.cancel()
    assert not sampler.running


async def test_a_watched_group_is_sampled_without_being_listed(autojump_clock: Any) -> None:
    backend = MemoryBackend()
    sampler = Sampler(backend, interval=1.0, history=10.0)
    sampler.watch("never-served")
    await sampler.tick()
    (only,) = sampler.samples("never-served")
    assert (only.runs, only.queue_length, only.capacity) == (0, 0, None)
    assert sampler.samples("unknown") == []
