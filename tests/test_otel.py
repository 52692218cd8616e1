"""taskrunner.otel: a producer span per dispatch, a consumer span per run, its child,
with the run's attributes and exceptions; across processes through a real Redis; and
``import taskrunner`` without OpenTelemetry."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing
from _fleet import make_runner, serving, wait_until
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

import taskrunner.otel
from taskrunner import Backoff, Retry, TaskContext, TaskRunner, TaskRunnerConfig
from taskrunner._wire import decode_message
from taskrunner.backends.memory import MemoryBackend
from taskrunner.backends.redis import RedisBackend

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def exporter() -> Iterator[tuple[TracerProvider, InMemorySpanExporter]]:
    spans = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(spans))
    yield provider, spans
    provider.shutdown()


def by_name(spans: tuple[ReadableSpan, ...], name: str) -> list[ReadableSpan]:
    return [s for s in spans if s.name == name]


async def test_a_run_is_a_consumer_span_child_of_its_dispatch(
    exporter: tuple[TracerProvider, InMemorySpanExporter],
    autojump_clock: trio.testing.MockClock,
) -> None:
    provider, spans = exporter
    backend = MemoryBackend()
    runner = make_runner(backend)

    @runner.task(max_retry=3, retry=Backoff(initial=1, jitter=0), timeout=5.0)
    async def charge(payload: int, ctx: TaskContext) -> None:
        if ctx.attempt == 1:
            raise ConnectionError("processor down")
        if ctx.attempt == 2:
            await trio.sleep(10)  # past the timeout

    taskrunner.otel.instrument(runner, tracer_provider=provider)
    taskrunner.otel.instrument(runner, tracer_provider=provider)  # once is enough
    message_id = (await runner.dispatch("charge", 5)).id
    (send,) = spans.get_finished_spans()
    ((_, raw, _),) = backend._stream("g").entries.values()  # as queued, unread
    carried = decode_message(raw).trace
    assert carried is not None
    assert set(carried) == {"traceparent"}
    async with serving(runner):
        await wait_until(lambda: runner.statistics().completed == 1)
    runs = by_name(spans.get_finished_spans(), "process charge")
    assert send.kind is SpanKind.PRODUCER
    assert send.name == "send charge"
    assert send.attributes is not None
    assert send.attributes["taskrunner.task.name"] == "charge"
    assert [r.kind for r in runs] == [SpanKind.CONSUMER] * 3
    for run in runs:
        assert run.context is not None
        assert send.context is not None
        assert run.context.trace_id == send.context.trace_id, "one trace, retries included"
        assert run.parent is not None
        assert run.parent.span_id == send.context.span_id
    attributes = [dict(r.attributes or {}) for r in runs]
    assert [a["taskrunner.attempt"] for a in attributes] == [1, 2, 3]
    assert [a[taskrunner.otel.OUTCOME] for a in attributes] == ["error", "timeout", "success"]
    assert {a["taskrunner.task.name"] for a in attributes} == {"charge"}
    assert attributes[0]["messaging.message.id"] == message_id
    assert [r.status.status_code for r in runs] == [
        StatusCode.ERROR,
        StatusCode.ERROR,
        StatusCode.UNSET,
    ]
    (error,) = runs[0].events
    assert error.name == "exception"
    assert error.attributes is not None
    assert error.attributes["exception.type"] == "ConnectionError"
    assert error.attributes["exception.message"] == "processor down"
    timeout = runs[1].events[0].attributes or {}
    assert timeout["exception.type"] == "taskrunner.errors.TaskTimeout"


async def test_a_thread_action_and_a_retry_request_are_traced(
    exporter: tuple[TracerProvider, InMemorySpanExporter],
    autojump_clock: trio.testing.MockClock,
) -> None:
    provider, spans = exporter
    runner = make_runner(MemoryBackend())
    tracer = provider.get_tracer("app")
    inner_parents: list[int] = []

    @runner.task(max_retry=2)
    def resize(payload: None, ctx: TaskContext) -> None:
        with tracer.start_as_current_span("resize pixels") as span:
            inner_parents.append(span.parent.span_id if span.parent else 0)
        if ctx.attempt == 1:
            raise Retry(delay=0.5)

    taskrunner.otel.instrument(runner, tracer_provider=provider)
    await runner.dispatch("resize")
    async with serving(runner):
        await wait_until(lambda: runner.statistics().completed == 1)
    finished = spans.get_finished_spans()
    runs = by_name(finished, "process resize")
    assert [(r.attributes or {})[taskrunner.otel.OUTCOME] for r in runs] == ["retry", "success"]
    assert inner_parents == [r.context.span_id for r in runs if r.context], (
        "spans made in the thread are children of the run's"
    )


async def test_a_trace_crosses_a_real_redis_between_processes(
    redis_url: str, exporter: tuple[TracerProvider, InMemorySpanExporter]
) -> None:
    provider, spans = exporter
    queue = f"otel-{uuid.uuid4().hex[:8]}"
    produced = await trio.run_process(
        [sys.executable, str(ROOT / "tests" / "apps" / "otel_producer.py"), redis_url, queue],
        capture_stdout=True,
        capture_stderr=True,
        check=False,
    )
    assert produced.returncode == 0, produced.stderr.decode()
    sent: dict[str, Any] = json.loads(produced.stdout.decode().strip().splitlines()[-1])
    assert (sent["kind"], sent["name"]) == ("PRODUCER", "send traced")

    async with RedisBackend.from_url(redis_url, queue=queue) as backend:
        runner = TaskRunner(
            TaskRunnerConfig(consumer_group="traced", host="consumer", block_duration=0.1), backend
        )
        ran: list[int] = []

        @runner.task()
        async def traced(payload: dict[str, int]) -> None:
            ran.append(payload["n"])

        taskrunner.otel.instrument(runner, tracer_provider=provider)
        async with trio.open_nursery() as nursery:
            await nursery.start(runner.serve)
            with trio.fail_after(20):
                while not ran:  # noqa: ASYNC110
                    await trio.sleep(0.01)
            nursery.cancel_scope.cancel()
    (run,) = by_name(spans.get_finished_spans(), "process traced")
    assert run.kind is SpanKind.CONSUMER
    assert run.context is not None
    assert run.context.trace_id == sent["trace_id"]
    assert run.parent is not None
    assert run.parent.span_id == sent["span_id"]
    assert run.parent.is_remote, "the parent came from the other process, through the message"
    assert (run.attributes or {})["messaging.message.id"] == sent["message_id"]


def test_import_taskrunner_imports_no_opentelemetry() -> None:
    # (taskrunner.backends.redis and the CLI, which imports it, are left out: redis-py
    # itself imports OpenTelemetry when it is installed, for its own instrumentation.)
    code = (
        "import sys, taskrunner, taskrunner.backends.memory, taskrunner.testing, "
        "taskrunner.admin; "
        "print([m for m in sys.modules if m.startswith('opentelemetry')])"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


WITHOUT_OTEL = """
import importlib.abc, sys


class Refuse(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] == "opentelemetry":
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


sys.meta_path.insert(0, Refuse())
import taskrunner, taskrunner.backends.redis, taskrunner.cli
try:
    import taskrunner.otel
except ImportError as exc:
    print(exc)
"""


def test_without_the_extra_only_taskrunner_otel_needs_it() -> None:
    result = subprocess.run(
        [sys.executable, "-c", WITHOUT_OTEL], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == (
        "taskrunner.otel needs opentelemetry-api: pip install 'trio-taskrunner[otel]'"
    )


async def test_without_instrument_a_message_carries_no_trace(
    autojump_clock: trio.testing.MockClock,
) -> None:
    backend = MemoryBackend()
    runner = make_runner(backend)

    @runner.task()
    async def plain(payload: None) -> None: ...

    await runner.dispatch("plain")
    (entry,) = await backend.read("g", "peek", 1, 0)
    assert b"trace" not in (entry.payload or b"")
