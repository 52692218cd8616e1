"""``taskrunner.prometheus``: the collector, its updater, and the ``/metrics`` server.

The HTTP tests use real sockets on 127.0.0.1 and real time (the backend is in
memory, so "real time" is a fraction of a second); the updater's error handling
runs on the autojump clock.
"""

from __future__ import annotations

import errno
import socket
from collections.abc import AsyncIterator, Mapping
from functools import partial

import prometheus_client
import pytest
import trio
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import CollectorRegistry

from taskrunner import TaskRunner, TaskRunnerConfig
from taskrunner.backends import QueueMetrics
from taskrunner.backends.memory import MemoryBackend
from taskrunner.errors import BackendError
from taskrunner.prometheus import REFRESH_TIMEOUT, RunnerCollector, answer, serve_metrics

GROUP = "prom"
Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def parse(exposition: str) -> Samples:
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(exposition)
        for sample in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples[(name, frozenset({"group": GROUP, **labels}.items()))]


def make_runner(backend: MemoryBackend) -> tuple[TaskRunner, trio.Event]:
    runner = TaskRunner(
        TaskRunnerConfig(consumer_group=GROUP, host="prom-1", block_duration=0.05), backend
    )
    done: list[str] = []
    all_done = trio.Event()

    async def note(name: str) -> None:
        done.append(name)
        if len(done) == 7:
            all_done.set()

    @runner.task(name="ok")
    async def ok(payload: int) -> None:
        await note("ok")

    @runner.task(name="boom", max_retry=1)
    async def boom(payload: int) -> None:
        await note("boom")
        raise ValueError("boom on purpose")

    return runner, all_done


async def http_get(port: int, target: str, method: str = "GET") -> tuple[str, dict[str, str], str]:
    """One request over a fresh connection; (status line, headers, body)."""
    with trio.fail_after(10):
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        async with stream:
            await stream.send_all(f"{method} {target} HTTP/1.1\r\nHost: test\r\n\r\n".encode())
            data = b""
            while chunk := await stream.receive_some(65536):
                data += chunk
    head, _, body = data.decode().partition("\r\n\r\n")
    status, *header_lines = head.split("\r\n")
    headers = {k.lower(): v.strip() for k, v in (line.split(":", 1) for line in header_lines)}
    return status, headers, body


@pytest.fixture
async def served() -> AsyncIterator[tuple[TaskRunner, int]]:
    """A runner that ran 5 good and 2 failing tasks, with 3 more left queued, and
    the port of its metrics server (refreshing every 0.05 s)."""
    backend = MemoryBackend(prefix="prom")
    runner, all_done = make_runner(backend)
    async with trio.open_nursery() as nursery:
        port = await nursery.start(
            lambda task_status: serve_metrics(
                runner, 0, refresh_interval=0.05, task_status=task_status
            )
        )
        async with trio.open_nursery() as fleet:
            await fleet.start(runner.serve)
            assert runner.is_leader  # the only instance: elected at start
            await runner.dispatch_many("ok", range(5))
            await runner.dispatch_many("boom", range(2))
            with trio.fail_after(10):
                await all_done.wait()
            runner.shutdown()  # graceful: serve returns once all 7 are acked
        # The metrics server keeps serving after the runner stopped.
        await runner.dispatch_many("ok", range(3))  # left in the queue
        await trio.sleep(1.2)  # a bulk-writer flush, then a refresh
        yield runner, port
        nursery.cancel_scope.cancel()


async def test_scrape_over_http(served: tuple[TaskRunner, int]) -> None:
    runner, port = served
    status, headers, body = await http_get(port, "/metrics")
    assert status == "HTTP/1.1 200 OK"
    assert headers["content-type"] == prometheus_client.CONTENT_TYPE_LATEST
    assert int(headers["content-length"]) == len(body.encode())
    samples = parse(body)

    assert value(samples, "taskrunner_tasks_completed_total") == 5
    assert value(samples, "taskrunner_tasks_failed_total") == 2
    assert value(samples, "taskrunner_tasks_dead_lettered_total") == 2
    assert value(samples, "taskrunner_tasks_retried_total") == 0
    assert value(samples, "taskrunner_messages_acked_total") == 7
    assert value(samples, "taskrunner_messages_fetched_total") == 7
    assert value(samples, "taskrunner_messages_reclaimed_total") == 0
    assert value(samples, "taskrunner_pool_capacity") == runner.capacity == 32
    assert value(samples, "taskrunner_pool_running") == 0
    # It stopped serving (and resigned) only after the flag was 1; now it is 0.
    assert value(samples, "taskrunner_is_leader") == 0

    # One observation per attempt, failed ones included.
    assert value(samples, "taskrunner_task_duration_seconds_count", task="ok") == 5
    assert value(samples, "taskrunner_task_duration_seconds_count", task="boom") == 2
    assert value(samples, "taskrunner_task_duration_seconds_bucket", task="ok", le="+Inf") == 5
    assert value(samples, "taskrunner_task_duration_seconds_bucket", task="ok", le="60.0") == 5
    assert value(samples, "taskrunner_task_duration_seconds_sum", task="ok") < 1

    # From the backend snapshot.
    assert value(samples, "taskrunner_queue_size") == 3
    assert value(samples, "taskrunner_replicas") == 0  # its heartbeat went with serve
    assert value(samples, "taskrunner_group_pending") == 0
    assert value(samples, "taskrunner_group_lag") == 3
    stats = await runner.get_timing_statistics()
    assert set(stats.per_task_timing) == {"ok", "boom"}
    for task, ms in stats.per_task_timing.items():
        got = value(samples, "taskrunner_stats_task_avg_timing_seconds", task=task)
        assert got == pytest.approx(ms / 1000)
    assert value(samples, "taskrunner_stats_avg_timing_seconds") == pytest.approx(
        stats.avg_timing / 1000
    )
    assert value(samples, "taskrunner_stats_predicted_wait_seconds") > 0
    assert value(samples, "taskrunner_stats_tps") > 0
    assert value(samples, "taskrunner_claim_delay_max_seconds") >= value(
        samples, "taskrunner_claim_delay_avg_seconds"
    )
    consumers = [dict(labels) for name, labels in samples if name == "taskrunner_consumer_pending"]
    assert {"group": GROUP, "consumer": "prom_prom-1_1"} in consumers
    assert 0 <= value(samples, "taskrunner_snapshot_age_seconds") < 1
    assert value(samples, "taskrunner_snapshot_errors_total") == 0


async def test_other_paths_and_methods(served: tuple[TaskRunner, int]) -> None:
    _, port = served
    status, _, body = await http_get(port, "/")
    assert status == "HTTP/1.1 404 Not Found"
    assert "/metrics" in body
    assert (await http_get(port, "/metrics?name[]=x"))[0] == "HTTP/1.1 200 OK"
    status, headers, body = await http_get(port, "/metrics", method="HEAD")
    assert (status, body) == ("HTTP/1.1 200 OK", "")
    assert int(headers["content-length"]) > 0
    assert (await http_get(port, "/metrics", method="POST"))[0].startswith("HTTP/1.1 405")


async def test_oversized_or_silent_requests_are_cut_off(served: tuple[TaskRunner, int]) -> None:
    _, port = served
    with trio.fail_after(10):
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        async with stream:
            await stream.send_all(b"GET /metrics HTTP/1.1\r\n" + b"X: " + b"y" * 20000)
            reply = b""
            try:
                while chunk := await stream.receive_some(65536):
                    reply += chunk
            except trio.BrokenResourceError:
                pass  # closed with our unread bytes in its buffer: a reset may beat the 431
    assert reply == b"" or reply.startswith(b"HTTP/1.1 431 ")
    # The server still answers afterwards.
    assert (await http_get(port, "/metrics"))[0] == "HTTP/1.1 200 OK"


def test_answer_is_sans_io() -> None:
    registry = CollectorRegistry()
    assert answer(b"garbage\r\n\r\n", registry).startswith(b"HTTP/1.1 400 ")
    assert answer(b"GET /nope HTTP/1.0\r\n\r\n", registry).startswith(b"HTTP/1.1 404 ")
    ok = answer(b"GET /metrics HTTP/1.0\r\n\r\n", registry)
    assert ok.startswith(b"HTTP/1.1 200 OK\r\n")
    assert b"Connection: close\r\n" in ok


async def test_collector_in_a_custom_registry() -> None:
    backend = MemoryBackend(prefix="prom")
    runner, _ = make_runner(backend)
    registry = CollectorRegistry()
    collector = RunnerCollector(runner)
    registry.register(collector)
    with pytest.raises(ValueError, match="Duplicated timeseries"):
        registry.register(RunnerCollector(runner))  # describe() exposes the names

    before = parse(prometheus_client.generate_latest(registry).decode())
    assert value(before, "taskrunner_pool_capacity") == 32
    assert value(before, "taskrunner_is_leader") == 0
    # No snapshot yet: the backend-side families are there, without samples.
    assert not any(name == "taskrunner_queue_size" for name, _ in before)

    await runner.dispatch_many("ok", range(4))
    snapshot = await collector.refresh()
    assert snapshot.queue.queue_size == 4
    after = parse(prometheus_client.generate_latest(registry).decode())
    assert value(after, "taskrunner_queue_size") == 4
    # Nobody has read yet, so the consumer group does not exist: no per-group samples.
    assert not any(name == "taskrunner_group_lag" for name, _ in after)
    assert value(after, "taskrunner_replicas") == 0  # not serving: no heartbeat


class FlakyBackend(MemoryBackend):
    """A memory backend whose ``get_metrics`` fails while ``failure`` is set."""

    failure: Exception | None = None
    hang = False

    async def get_metrics(self, group: str, *, queue: str | None = None) -> QueueMetrics:
        if self.hang:
            await trio.sleep_forever()
        if self.failure is not None:
            raise self.failure
        return await super().get_metrics(group, queue=queue)


async def test_updater_survives_backend_errors(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    backend = FlakyBackend(prefix="prom")
    runner, _ = make_runner(backend)
    collector = RunnerCollector(runner, refresh_interval=1.0)
    registry = CollectorRegistry()
    registry.register(collector)

    def samples() -> Mapping[tuple[str, frozenset[tuple[str, str]]], float]:
        return parse(prometheus_client.generate_latest(registry).decode())

    async with trio.open_nursery() as nursery:
        await runner.dispatch("ok", 1)
        await nursery.start(collector.run_updater)
        good = collector.snapshot
        assert good is not None
        assert good.queue.queue_size == 1

        backend.failure = BackendError("connection refused")
        await runner.dispatch("ok", 2)
        await trio.sleep(2.5)
        assert collector.snapshot is good  # the last good one stays
        assert value(samples(), "taskrunner_queue_size") == 1
        assert value(samples(), "taskrunner_snapshot_errors_total") == 2
        assert "metrics refresh failed, keeping the last snapshot" in caplog.text

        backend.failure = RuntimeError("a backend that breaks its contract")
        await trio.sleep(1)
        assert value(samples(), "taskrunner_snapshot_errors_total") == 3

        backend.failure = None
        backend.hang = True  # a call that never returns fails after REFRESH_TIMEOUT
        await trio.sleep(REFRESH_TIMEOUT + 1.5)
        assert value(samples(), "taskrunner_snapshot_errors_total") == 4

        backend.hang = False
        await trio.sleep(1)
        assert collector.snapshot is not good
        assert value(samples(), "taskrunner_queue_size") == 2
        nursery.cancel_scope.cancel()


async def test_serve_metrics_reports_the_port_and_cleans_up() -> None:
    backend = MemoryBackend(prefix="prom")
    runner, _ = make_runner(backend)
    registry = CollectorRegistry()
    async with trio.open_nursery() as nursery:
        port = await nursery.start(
            lambda task_status: serve_metrics(runner, 0, registry=registry, task_status=task_status)
        )
        assert port > 0
        assert (await http_get(port, "/metrics"))[0] == "HTTP/1.1 200 OK"
        nursery.cancel_scope.cancel()
    # Cancelled: the collector left the caller's registry.
    assert prometheus_client.generate_latest(registry) == b""


async def test_a_busy_port_raises_oserror_and_leaves_nothing_behind() -> None:
    runner = TaskRunner(TaskRunnerConfig(consumer_group="g"), MemoryBackend())
    registry = CollectorRegistry()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        async with trio.open_nursery() as nursery:
            with pytest.raises(OSError, match=r"(?i)address already in use") as info:
                await nursery.start(partial(serve_metrics, runner, port, registry=registry))
    assert info.value.errno == errno.EADDRINUSE
    assert runner._worker.observers == []
    assert prometheus_client.generate_latest(registry) == b""


async def test_stopping_the_endpoint_removes_its_observer() -> None:
    runner = TaskRunner(TaskRunnerConfig(consumer_group="g"), MemoryBackend())
    for _ in range(3):
        async with trio.open_nursery() as nursery:
            await nursery.start(serve_metrics, runner, 0)
            assert len(runner._worker.observers) == 1
            nursery.cancel_scope.cancel()
    assert runner._worker.observers == []
