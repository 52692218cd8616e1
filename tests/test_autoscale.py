"""desired_instances: the aggregator's publish (a fake host), and a fleet whose size follows it.

The fleet simulation runs real runners on one MemoryBackend under trio's MockClock,
with a simulated autoscaler that polls the published value, as KEDA polls a metric, and
starts or stops instances to match it, while the load steps up and down.
"""

from __future__ import annotations

import itertools
import logging
import random
import re
from typing import Any

import httpx
import prometheus_client
import pytest
import trio
import trio.testing
from _flaky import GROUP, add_runs
from _fleet import make_runner
from prometheus_client import CollectorRegistry
from test_aggregator import FakeHost, config
from test_top import constructed_snapshot

from taskrunner import TaskRunner, _keys, admin
from taskrunner._fleet.stats import Stats
from taskrunner._fleet.tuning import tuning_ttl
from taskrunner._serve import aggregator
from taskrunner._serve.aggregator import timing_statistics
from taskrunner.backends.memory import MemoryBackend
from taskrunner.cli.views import History, render_text, top_line, top_view
from taskrunner.dashboard import create_app
from taskrunner.errors import BackendError
from taskrunner.prometheus import RunnerCollector


class FleetHost(FakeHost):
    """A fake host whose statistics count its replication (as a runner's do)."""

    async def get_timing_statistics(self) -> Stats:
        return await timing_statistics(
            self.backend, GROUP, self.task_names, self.capacity, self.replication
        )


def scaling(**overrides: Any) -> dict[str, Any]:
    # No tuner here (min_workers 0), unless a test turns it on.
    values: dict[str, Any] = {"min_workers": 0, "max_workers": 0, "desired_wait_time": 0.0}
    values.update(target_wait=5.0, scale_down_hold=60.0, long_queue_threshold=4.0)
    values.update(overrides)
    return values


async def test_the_leader_publishes_the_need_with_the_tuning_ttl(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "taskrunner._serve.aggregator")
    backend = MemoryBackend()
    host = FleetHost(backend, config(**scaling(), num_workers=4), replication=2)
    # avg 1 s, 60 in the stream, 2 x 4 slots: a predicted wait of 7.5 s; 2 * 7.5 / 5 -> 3.
    await add_runs(backend, work=(10_000.0, 10))
    await backend.add(GROUP, [b"x"] * 60)
    async with trio.open_nursery() as nursery:
        await nursery.start(aggregator.run, host)
        await trio.sleep(2.1)  # the first tick, at 2 s
        assert await backend.read_desired_instances(GROUP) == 3
        assert backend.ttl(_keys.desired_instances(GROUP)) == pytest.approx(tuning_ttl(4.0) - 0.1)
        nursery.cancel_scope.cancel()
    assert host.resizes == []  # the tuner is off: the pool is left alone
    (line,) = [r.getMessage() for r in caplog.records if "desired instances" in r.getMessage()]
    assert "none -> 3" in line
    assert "with 2 live" in line


async def test_off_or_a_follower_publishes_nothing(autojump_clock: trio.testing.MockClock) -> None:
    backend = MemoryBackend()
    off = FleetHost(backend, config(**scaling(target_wait=None)))
    follower = FleetHost(backend, config(**scaling()), leader=False)
    await add_runs(backend, work=(10_000.0, 10))
    await backend.add(GROUP, [b"x"] * 60)
    async with trio.open_nursery() as nursery:
        await nursery.start(aggregator.run, off)
        await nursery.start(aggregator.run, follower)
        await trio.sleep(30)
        nursery.cancel_scope.cancel()
    assert await backend.read_desired_instances(GROUP) is None
    assert _keys.desired_instances(GROUP) not in backend.keys()


async def test_a_new_leader_goes_on_from_the_published_value(
    autojump_clock: trio.testing.MockClock,
) -> None:
    backend = MemoryBackend()
    await backend.publish_desired_instances(GROUP, 8, 600.0)
    host = FleetHost(backend, config(**scaling(), num_workers=4), replication=4)
    await add_runs(backend, work=(1000.0, 1))
    await backend.add(GROUP, [b"x"] * 4)  # a need of 1 instance (4 of 16 slots busy)
    state = aggregator.AggregatorState(last_reset=0.0)
    await aggregator.tick(host, state)
    # Not a jump from 8 to 1: the hold starts, the value stays.
    assert await backend.read_desired_instances(GROUP) == 8
    assert state.scaling is not None
    assert state.scaling.lower_since == trio.current_time()
    host.is_leader = False
    await aggregator.tick(host, state)
    assert state.scaling is None, "a follower forgets its term's state"


async def test_the_need_counts_in_the_pool_size_the_tuner_just_chose(
    autojump_clock: trio.testing.MockClock,
) -> None:
    backend = MemoryBackend()
    # avg 1 s, 80 in the stream, 1 x 4 slots: 20 s predicted; the tuner (max 8) goes to 8
    # at once, so the need is counted with 8 slots: 10 s -> 2 instances, not 4.
    cfg = config(
        **scaling(
            min_workers=1, max_workers=8, desired_wait_time=1.0, desired_wait_time_tolerance=0.1
        ),
        num_workers=4,
    )
    host = FleetHost(backend, cfg, replication=1)
    await add_runs(backend, work=(1000.0, 1))
    await backend.add(GROUP, [b"x"] * 80)
    await aggregator.tick(host, aggregator.AggregatorState(last_reset=0.0))
    assert host.capacity == 8
    assert await backend.read_desired_instances(GROUP) == 2


class LosesPublishes(MemoryBackend):
    """A memory backend whose first ``fails`` desired-instance publishes are lost."""

    fails = 1

    async def publish_desired_instances(self, group: str, count: int, ttl: float) -> None:
        if self.fails:
            self.fails -= 1
            raise BackendError("connection lost")
        await super().publish_desired_instances(group, count, ttl)


async def test_a_failed_publish_is_logged_and_the_next_tick_publishes(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    backend = LosesPublishes()
    host = FleetHost(backend, config(**scaling(), num_workers=4), replication=2)
    await add_runs(backend, work=(10_000.0, 10))
    await backend.add(GROUP, [b"x"] * 60)
    state = aggregator.AggregatorState(last_reset=0.0)
    await aggregator.tick(host, state)
    assert await backend.read_desired_instances(GROUP) is None
    assert "could not publish the desired instances of group g" in caplog.text
    await aggregator.tick(host, state)
    assert await backend.read_desired_instances(GROUP) == 3


# A fleet that follows its own number --------------------------------------------------

WORKERS = 2
TASK_SECONDS = 1.0
POLL = 5.0
"""How often the simulated autoscaler reads the value (KEDA's pollingInterval)."""
HOLD = 60.0


async def test_the_fleet_follows_a_step_up_and_down_without_flapping(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Load 3/s, then 11/s, then 3/s again (each give or take 2 a second), of 1 s tasks on
    pools of 2: about 2, 6 and 2 instances keep up. The published number rises within
    30 s of the step up, comes back within three holds of the step down, turns around at
    most once in a phase, only after the step up's overshoot (with no hold it flaps
    between 1 and 2 in the first phase), and the fleet's size follows it."""
    backend = MemoryBackend()
    settings = {
        "num_workers": WORKERS,
        "target_wait": 5.0,
        "scale_down_hold": HOLD,
        "long_queue_threshold": 4.0,  # a tick every 2 s
        "shutdown_grace": 5.0,
    }

    async def sleep_a_second(payload: object) -> None:
        await trio.sleep(TASK_SECONDS)

    def new_runner() -> TaskRunner:
        runner = make_runner(backend, **settings)
        runner.task(name="work")(sleep_a_second)
        return runner

    producer = new_runner()  # dispatches only; never serves
    rate = 3
    published: list[tuple[float, int | None]] = []
    sizes: list[tuple[float, int]] = []

    async with trio.open_nursery() as nursery:
        fleet: list[trio.CancelScope] = []

        async def serve(scope: trio.CancelScope) -> None:
            with scope:
                await new_runner().serve()

        def scale_to(count: int) -> None:
            while len(fleet) < count:
                scope = trio.CancelScope()
                fleet.append(scope)
                nursery.start_soon(serve, scope)
            while len(fleet) > count:
                fleet.pop().cancel()  # a graceful stop: the runner drains its pool
            if not sizes or sizes[-1][1] != count:
                sizes.append((trio.current_time(), count))

        async def load() -> None:
            # Batches between the ticks (which fall on whole seconds here): a batch added
            # at the very instant of a tick, while the one before finishes, would read
            # as every slot busy, which no real load keeps in step with the ticks.
            await trio.sleep(0.37)
            rng = random.Random(27)
            while True:
                # The rate on average, give or take 2 a second: the noise a real load has.
                await producer.dispatch_many("work", [None] * (rate + rng.randint(-2, 2)))
                await trio.sleep(1.0)

        async def autoscaler() -> None:
            while True:
                value = await backend.read_desired_instances(GROUP)
                if not published or published[-1][1] != value:
                    published.append((trio.current_time(), value))
                if value is not None:
                    scale_to(value)
                await trio.sleep(POLL)

        scale_to(1)
        nursery.start_soon(load)
        nursery.start_soon(autoscaler)
        await trio.sleep(200)
        low = published[-1][1]
        rate, up_at = 11, trio.current_time()
        await trio.sleep(400)
        high = published[-1][1]
        backlog_high = await backend.length(GROUP)
        rate, down_at = 3, trio.current_time()
        await trio.sleep(400)
        backlog_low = await backend.length(GROUP)
        final = published[-1][1]
        nursery.cancel_scope.cancel()

    values = [v for _, v in published]
    history = [f"{t:.0f}:{v}" for t, v in published]
    assert low == 2, history
    assert 6 <= (high or 0) <= 7, history
    # Back to the low phase's count, or one above it: from above, a hold that saw the
    # noise fill a third instance's slots once keeps it (hysteresis of one instance).
    assert final in (2, 3), history
    # The fleet keeps up in every phase: the stream holds about what runs, no backlog.
    assert backlog_high <= 3 * 11, (backlog_high, history)
    assert backlog_low <= 3 * 3, (backlog_low, history)
    # Follows within a bounded time: up within 30 s of the step ...
    first_up = next(t for t, v in published if t > up_at and (v or 0) >= 6)
    assert first_up - up_at <= 30, history
    # ... down within three holds (and the ticks and polls around them).
    back = next(t for t, v in published if t > down_at and (v or 0) <= 3)
    assert back - down_at <= 3 * HOLD + 30, history
    # Without flapping: within each phase the value moves one way, then holds.
    for start, end in ((0, up_at), (up_at, down_at), (down_at, 1e9)):
        phase = [v or 0 for t, v in published if start <= t < end]
        turns = sum(
            1 for a, b, c in zip(phase, phase[1:], phase[2:], strict=False) if (b - a) * (c - b) < 0
        )
        assert turns <= 1 if start == up_at else turns == 0, (start, history)
    assert len(values) <= 12, history
    # The fleet's size followed the value at each poll.
    assert [c for _, c in sizes] == [v for v in values if v is not None], (sizes, history)
    assert all(b - a >= POLL - 1e-9 for a, b in itertools.pairwise(t for t, _ in sizes))


# Where the number is shown ------------------------------------------------------------


async def test_admin_prometheus_and_the_dashboard_show_the_published_number(
    autojump_clock: trio.testing.MockClock,
) -> None:
    backend = MemoryBackend()
    runner = make_runner(backend, target_wait=5.0)
    registry = CollectorRegistry()
    collector = RunnerCollector(runner)
    registry.register(collector)

    def gauge() -> list[tuple[dict[str, str], float]]:
        return [
            (sample.labels, sample.value)
            for family in registry.collect()
            if family.name == "taskrunner_desired_instances"
            for sample in family.samples
        ]

    async def dashboard() -> tuple[dict[str, Any], str]:
        transport = httpx.ASGITransport(app=create_app(backend))
        async with httpx.AsyncClient(transport=transport, base_url="http://dash") as http:
            return (await http.get("/api/groups/g")).json(), (await http.get("/groups/g")).text

    assert await admin.desired_instances(backend, GROUP) is None
    await collector.refresh()
    assert gauge() == [], "no sample while nothing is published"
    doc, _ = await dashboard()
    assert doc["desired_instances"] is None

    await backend.publish_desired_instances(GROUP, 7, 60.0)
    assert await admin.desired_instances(backend, GROUP) == 7
    await collector.refresh()
    assert gauge() == [({"group": GROUP}, 7.0)]
    assert "taskrunner_desired_instances" in prometheus_client.generate_latest(registry).decode()
    doc, page = await dashboard()
    assert doc["desired_instances"] == 7
    assert doc["live_instances"] == 0
    assert re.search(r'id="desired-instances"[^>]*>7<', page), page

    # A runner without target_wait does not read it: off costs no read.
    plain = RunnerCollector(make_runner(backend))
    snapshot = await plain.refresh()
    plain.close()
    assert snapshot.desired_instances is None


def test_top_shows_the_published_number() -> None:
    history = History(size=4)
    history.add(0.0, 0, 0)
    text = render_text(top_view(constructed_snapshot(), history, width=10), width=110)
    assert re.search(r"desired instances\s+none published", text), text
    snapshot = constructed_snapshot(desired_instances=5)
    text = render_text(top_view(snapshot, history, width=10), width=110)
    assert re.search(r"desired instances\s+5\b", text), text
    assert "0 instance(s) (5 desired), paused:" in top_line(snapshot, history)
    assert "0 instance(s), paused:" in top_line(constructed_snapshot(), history)
