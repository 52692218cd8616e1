"""OpenTelemetry: a producer span per dispatch, a consumer span per run, in one trace.

``taskrunner.otel.instrument(runner)`` (the ``otel`` extra) makes every dispatch a
``PRODUCER`` span whose trace context travels in the message, and every run a
``CONSUMER`` span, its child, with the task name, message id, attempt and
outcome, and the exception when an attempt fails. Retries stay in the trace of
their dispatch; the producer and the worker may be different processes.

Spans are collected in memory here (``opentelemetry-sdk``); in production,
configure the SDK with an exporter (OTLP...) and call ``instrument`` without a
provider. Run it with ``python examples/opentelemetry_tracing.py``.
"""

import logging

import trio
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import taskrunner.otel
from taskrunner import Backoff, TaskContext, TaskRunner, TaskRunnerConfig
from taskrunner.backends.memory import MemoryBackend


async def main() -> None:
    logging.basicConfig(level=logging.ERROR)
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))

    runner = TaskRunner(TaskRunnerConfig(consumer_group="mail"), MemoryBackend())
    sent = trio.Event()

    @runner.task(name="send_email", max_retry=3, retry=Backoff(initial=0.05, jitter=0))
    async def send_email(payload: dict[str, str], ctx: TaskContext) -> None:
        if ctx.attempt == 1:
            raise ConnectionError("SMTP server busy")
        sent.set()

    # --8<-- [start:instrument]
    taskrunner.otel.instrument(runner, tracer_provider=provider)
    # --8<-- [end:instrument]

    async with trio.open_nursery() as nursery:
        await nursery.start(runner.serve)
        await runner.dispatch("send_email", {"to": "ada@example.com"})
        with trio.fail_after(10):
            await sent.wait()
        runner.shutdown()

    spans = exporter.get_finished_spans()
    (send,) = [s for s in spans if s.name == "send send_email"]
    print(f"{send.name} ({send.kind.name})")
    for span in sorted((s for s in spans if s is not send), key=lambda s: s.start_time or 0):
        attributes = span.attributes or {}
        child = span.parent is not None and span.parent.span_id == send.context.span_id
        events = ", ".join(str((e.attributes or {})["exception.type"]) for e in span.events)
        print(
            f"  {span.name} ({span.kind.name}) attempt {attributes['taskrunner.attempt']}: "
            f"{attributes[taskrunner.otel.OUTCOME]}, child of the dispatch: {child}"
            + (f", recorded {events}" if events else "")
        )


if __name__ == "__main__":
    trio.run(main)
