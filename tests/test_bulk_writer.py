"""The bulk writer as a module: a flaky MemoryBackend, on MockClock."""

from __future__ import annotations

import logging
import math

import pytest
import trio
import trio.testing
from _flaky import GROUP, FlakyBackend

from taskrunner._fleet.timings import TimingRecorder
from taskrunner._serve import bulk_writer
from taskrunner.errors import BackendError


async def test_flushes_once_per_interval_pre_aggregated(
    autojump_clock: trio.testing.MockClock,
) -> None:
    backend = FlakyBackend()
    recorder = TimingRecorder()
    async with trio.open_nursery() as nursery:
        await nursery.start(bulk_writer.run, backend, GROUP, recorder)
        for _ in range(3):
            recorder.record("a", 0.1)
        recorder.record("b", 0.0004)
        await trio.sleep(0.5)
        assert await backend.read_metrics(GROUP) == {}
        await trio.sleep(0.6)  # t = 1.1: one flush
        assert backend.increment_calls == [{"a_sum": (300_000, 3), "b_sum": (400, 1)}]
        await trio.sleep(3)  # nothing recorded: no calls
        assert len(backend.increment_calls) == 1
        recorder.record("a", 0.2)
        await trio.sleep(1)
        nursery.cancel_scope.cancel()
    assert await backend.read_metrics(GROUP) == {
        "a_sum": 500, "a_sum_us": 500_000, "a_count": 4,
        "b_sum": 0, "b_sum_us": 400, "b_count": 1,
    }  # fmt: skip
    assert len(backend.increment_calls) == 2


async def test_failed_flush_restores_the_batch(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    backend = FlakyBackend()
    backend.fail_increments = 3
    recorder = TimingRecorder()
    caplog.set_level(logging.INFO, "taskrunner._serve.bulk_writer")
    async with trio.open_nursery() as nursery:
        await nursery.start(bulk_writer.run, backend, GROUP, recorder)
        recorder.record("a", 0.01)
        await trio.sleep(1.5)  # first flush failed
        assert recorder.pending() == 1
        recorder.record("a", 0.02)
        await trio.sleep(1)  # second failed, now holding both
        assert recorder.pending() == 2
        await trio.sleep(2)  # third failed, fourth succeeds
        assert recorder.pending() == 0
        nursery.cancel_scope.cancel()
    metrics = await backend.read_metrics(GROUP)
    assert metrics == {"a_sum": 30, "a_sum_us": 30_000, "a_count": 2}
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1, "an outage warns once, not once a second"
    assert "connection lost" in warnings[0].getMessage()
    assert any("recovered after 3 failure(s)" in r.getMessage() for r in caplog.records)


async def test_final_flush_on_cancel(autojump_clock: trio.testing.MockClock) -> None:
    backend = FlakyBackend()
    recorder = TimingRecorder()
    with trio.CancelScope() as scope:
        async with trio.open_nursery() as nursery:
            await nursery.start(bulk_writer.run, backend, GROUP, recorder)
            for _ in range(5):
                recorder.record("a", 0.001)
            await trio.sleep(0.3)
            scope.cancel()
    assert scope.cancelled_caught
    assert await backend.read_metrics(GROUP) == {"a_sum": 5, "a_sum_us": 5000, "a_count": 5}
    assert recorder.pending() == 0


async def test_final_flush_retries_a_transient_failure(
    autojump_clock: trio.testing.MockClock,
) -> None:
    backend = FlakyBackend()
    recorder = TimingRecorder()
    async with trio.open_nursery() as nursery:
        await nursery.start(bulk_writer.run, backend, GROUP, recorder)
        recorder.record("a", 0.5)
        backend.fail_increments = 2
        nursery.cancel_scope.cancel()
    assert await backend.read_metrics(GROUP) == {"a_sum": 500, "a_sum_us": 500_000, "a_count": 1}


async def test_final_flush_is_bounded_and_reports_what_it_lost(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    backend = FlakyBackend()
    backend.fail_increments = -1
    recorder = TimingRecorder()
    async with trio.open_nursery() as nursery:
        await nursery.start(bulk_writer.run, backend, GROUP, recorder)
        recorder.record("a", 0.5)
        recorder.record("b", 0.5)
        start = trio.current_time()
        nursery.cancel_scope.cancel()
    took = trio.current_time() - start
    assert bulk_writer.FINAL_FLUSH_TIMEOUT <= took < bulk_writer.FINAL_FLUSH_TIMEOUT + 1.5
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert errors == [
        "2 timing sample(s) could not be written to the metrics hash of group g "
        "at shutdown; they are lost"
    ]


async def test_a_write_in_flight_is_not_cut_by_cancellation(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # Cancelling while a write is in flight must neither lose the batch nor
    # write it twice: the write completes, and the final flush finds nothing.
    backend = FlakyBackend()
    backend.increment_delay = 0.5
    recorder = TimingRecorder()
    async with trio.open_nursery() as nursery:
        await nursery.start(bulk_writer.run, backend, GROUP, recorder)
        recorder.record("a", 0.1)
        await trio.sleep(1.2)  # the write started at t = 1.0 and is in flight
        assert backend.increment_calls == []
        nursery.cancel_scope.cancel()
    assert backend.increment_calls == [{"a_sum": (100_000, 1)}]
    assert await backend.read_metrics(GROUP) == {"a_sum": 100, "a_sum_us": 100_000, "a_count": 1}


async def test_a_stalled_write_is_abandoned_and_its_batch_kept(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    backend = FlakyBackend()
    backend.increment_delay = 3600.0
    recorder = TimingRecorder()
    async with trio.open_nursery() as nursery:
        await nursery.start(bulk_writer.run, backend, GROUP, recorder)
        recorder.record("a", 0.1)
        await trio.sleep(1 + bulk_writer.FLUSH_TIMEOUT + 0.1)
        assert recorder.pending() == 1
        assert any("abandoned it" in r.getMessage() for r in caplog.records)
        backend.increment_delay = 0.0
        await trio.sleep(1)
        assert recorder.pending() == 0
        nursery.cancel_scope.cancel()
    assert await backend.read_metrics(GROUP) == {"a_sum": 100, "a_sum_us": 100_000, "a_count": 1}


async def test_flush_drops_unwritable_entries_instead_of_restoring_them() -> None:
    backend = FlakyBackend()
    recorder = TimingRecorder()
    recorder.record("bad", math.inf)
    recorder.record("good", 0.001)
    backend.fail_increments = 1
    with pytest.raises(BackendError):
        await bulk_writer.flush(backend, GROUP, recorder)
    assert recorder.drain() == {"good": (pytest.approx(1.0), 1)}
    recorder.record("bad", math.nan)
    assert await bulk_writer.flush(backend, GROUP, recorder) == 0
    assert recorder.pending() == 0
    assert backend.increment_calls == []
