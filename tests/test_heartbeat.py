"""The heartbeat, on trio's MockClock: the replication count it gives, and one live
instance per host (issue 10, point 6).

Two processes with one ``host`` share consumer names and pending lists. At
serve start a heartbeat key held by another instance is watched: renewed means
a live duplicate (refused), expired means a crashed predecessor (taken over).
While serving, a beat that finds another instance in the key stops this one.
"""

from __future__ import annotations

import logging

import pytest
import trio
import trio.testing

from taskrunner import DuplicateHost, TaskRunner, _keys
from taskrunner._serve.heartbeat import HEARTBEAT_TTL, Sighting, Verdict, holder_verdict
from taskrunner.backends.memory import MemoryBackend
from tests._fleet import Partition, make_runner, wait_until

FIRST = Sighting(holder="a", left=10.0, at=100.0)


@pytest.mark.parametrize(
    ("holder", "left", "now", "verdict"),
    [
        (None, 0.0, 101.0, Verdict.GONE),  # expired or deleted
        ("a", 9.0, 101.0, Verdict.WAIT),  # running down as expected
        ("a", 9.4, 101.0, Verdict.WAIT),  # within the tolerance
        ("a", 15.0, 101.0, Verdict.LIVE),  # renewed
        ("a", 9.6, 101.0, Verdict.LIVE),  # renewed with a short ttl
        ("b", 1.0, 101.0, Verdict.LIVE),  # rewritten by another instance
        ("a", float("inf"), 101.0, Verdict.LIVE),  # no expiry: never runs down
    ],
)
def test_holder_verdict(holder: str | None, left: float, now: float, verdict: Verdict) -> None:
    assert holder_verdict(FIRST, holder, left, now) is verdict


async def _serving(nursery: trio.Nursery, runner: TaskRunner) -> None:
    await nursery.start(runner.serve)


async def test_a_second_live_instance_of_a_host_is_refused(
    autojump_clock: trio.testing.MockClock,
) -> None:
    backend = MemoryBackend()
    first, second = make_runner(backend, host="h"), make_runner(backend, host="h")
    async with trio.open_nursery() as nursery:
        await _serving(nursery, first)
        started = trio.current_time()
        with pytest.raises(DuplicateHost, match=r"host 'h' is already served by live instance"):
            await second.serve()
        assert trio.current_time() - started <= 10.0 + 1.0, "refused within one renewal"
        assert await backend.heartbeat_holder("h") is not None
        assert (await backend.heartbeat_holder("h") or ("",))[0] == first.instance_id
        assert first.statistics().serving
        assert not second.statistics().serving
        nursery.cancel_scope.cancel()


async def test_a_restart_after_a_crash_waits_out_the_old_heartbeat(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    backend = MemoryBackend()
    await backend.heartbeat("h", "crashed-instance", HEARTBEAT_TTL)  # its last beat
    await trio.sleep(2)  # it died; the restart comes 2 s later
    restarted = make_runner(backend, host="h")
    with caplog.at_level(logging.INFO, "taskrunner._serve.heartbeat"):
        async with trio.open_nursery() as nursery:
            started = trio.current_time()
            await _serving(nursery, restarted)
            waited = trio.current_time() - started
            holder = await backend.heartbeat_holder("h")
            nursery.cancel_scope.cancel()
    assert HEARTBEAT_TTL - 2 - 0.01 <= waited <= HEARTBEAT_TTL - 2 + 1.0, waited
    assert holder is not None
    assert holder[0] == restarted.instance_id
    (waiting,) = [r.getMessage() for r in caplog.records if "waiting until" in r.getMessage()]
    assert "crashed-instance" in waiting
    assert "crashed predecessor" in waiting


async def _serve_noting(runner: TaskRunner, raised: list[DuplicateHost]) -> None:
    try:
        await runner.serve()
    except DuplicateHost as exc:
        raised.append(exc)


async def test_an_instance_whose_key_was_taken_over_stops_serving(
    autojump_clock: trio.testing.MockClock,
) -> None:
    backend = MemoryBackend()
    link = Partition(backend)
    stalled, newcomer = make_runner(link, host="h"), make_runner(backend, host="h")
    raised: list[DuplicateHost] = []
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_serve_noting, stalled, raised)
        await wait_until(lambda: stalled.statistics().serving)
        link.cut = True  # stalled past its heartbeat's lifetime...
        await trio.sleep(HEARTBEAT_TTL + 1)
        await _serving(nursery, newcomer)  # ...so a restart took the host over
        link.cut = False
        await wait_until(lambda: bool(raised), limit=11)  # the stalled one's next beat
        assert not stalled.statistics().serving
        assert newcomer.statistics().serving, "the key's holder carries on"
        holder = await backend.heartbeat_holder("h")
        nursery.cancel_scope.cancel()
    assert (raised[0].host, raised[0].other_instance) == ("h", newcomer.instance_id)
    assert holder is not None
    assert holder[0] == newcomer.instance_id


async def test_serve_raises_once_drained_when_the_host_is_taken_over(
    autojump_clock: trio.testing.MockClock,
) -> None:
    backend = MemoryBackend()
    runner = make_runner(backend, host="h", shutdown_grace=60)
    finished = trio.Event()

    @runner.task(name="slow")
    async def slow(payload: None) -> None:
        await trio.sleep(15)  # still running at the next beat, 10 s in
        finished.set()

    raised: list[DuplicateHost] = []
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_serve_noting, runner, raised)
        await wait_until(lambda: runner.statistics().serving)
        await runner.dispatch("slow")
        await wait_until(lambda: runner.statistics().running == 1)
        key = _keys.replication("h")
        backend._strings[key] = ("intruder", trio.current_time() + 60)  # a plain SET
        await wait_until(lambda: bool(raised), limit=30)
    assert finished.is_set(), "the running task was drained, not cancelled"
    assert runner.statistics().acked == 1
    assert [str(e) for e in raised] == [
        "host 'h' is already served by live instance intruder: "
        "give each process its own host (TaskRunnerConfig.host)"
    ]


async def test_the_worker_command_exits_1_with_one_line(
    autojump_clock: trio.testing.MockClock,
) -> None:
    import io

    from taskrunner.cli.worker import serve_worker

    backend = MemoryBackend()
    first, second = make_runner(backend, host="h"), make_runner(backend, host="h")
    err = io.StringIO()
    async with trio.open_nursery() as nursery:
        await _serving(nursery, first)
        assert await serve_worker(second, stderr=err) == 1
        nursery.cancel_scope.cancel()
    (line,) = err.getvalue().splitlines()
    assert line.startswith("taskrunner worker: error: host 'h' is already served by live")


async def test_replication_count_is_cached_and_a_crashed_key_expires(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """The count's 10 s cache and the 15 s life of a crashed instance's key, on the mock
    clock (tests/test_fleet.py counts joins and leaves on every backend)."""
    backend = MemoryBackend()
    links = [Partition(backend) for _ in range(3)]
    runners = [make_runner(link) for link in links]
    assert await runners[0].get_number_of_replications() == 0  # not serving yet
    async with trio.open_nursery() as outer:
        await outer.start(runners[0].serve)
        assert await runners[0].get_number_of_replications() == 1
        await outer.start(runners[1].serve)
        await outer.start(runners[2].serve)
        assert await runners[0].get_number_of_replications() == 1  # cached for 10 s
        await trio.sleep(10)
        assert await runners[0].get_number_of_replications() == 3
        links[2].cut = True  # a crash: its key is not deleted, it expires in 15 s
        await trio.sleep(10)
        assert await runners[0].get_number_of_replications() == 3
        await trio.sleep(10)
        assert await runners[0].get_number_of_replications() == 2
        outer.cancel_scope.cancel()
