"""A producer process for tests/test_otel.py: dispatches one traced task to a real Redis
and prints its producer span as JSON (``python otel_producer.py URL QUEUE``)."""

from __future__ import annotations

import json
import sys

import trio
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import taskrunner.otel
from taskrunner import TaskRunner, TaskRunnerConfig
from taskrunner.backends.redis import RedisBackend


async def main(url: str, queue: str) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    async with RedisBackend.from_url(url, queue=queue) as backend:
        runner = TaskRunner(TaskRunnerConfig(consumer_group="traced", host="producer"), backend)

        @runner.task()
        async def traced(payload: dict[str, int]) -> None: ...

        taskrunner.otel.instrument(runner, tracer_provider=provider)
        message_id = (await runner.dispatch("traced", {"n": 1})).id
    (span,) = exporter.get_finished_spans()
    context = span.get_span_context()
    print(
        json.dumps(
            {
                "message_id": message_id,
                "trace_id": context.trace_id,
                "span_id": context.span_id,
                "kind": span.kind.name,
                "name": span.name,
            }
        )
    )


if __name__ == "__main__":
    trio.run(main, sys.argv[1], sys.argv[2])
