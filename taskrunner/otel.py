"""OpenTelemetry tracing for a runner: a producer span per dispatch, a consumer span per run.

Needs the ``otel`` extra (``pip install 'trio-taskrunner[otel]'``, which brings
``opentelemetry-api``); off until :func:`instrument` is called, and
``import taskrunner`` never imports OpenTelemetry.

Theory of operation. :func:`instrument` hooks the runner in two places:

- its dispatcher: every ``dispatch``, ``dispatch_many`` (one span for the
  batch), ``dispatch_delayed`` and ``schedule_for`` runs inside a
  ``PRODUCER`` span, ``send <task>``, and the W3C trace context of that span
  (``traceparent``, and ``tracestate`` when set) is injected into the
  message's (or delayed member's) optional ``trace`` field. Retries carry it
  on, so every attempt of a task belongs to the trace of its dispatch;
- a middleware, placed outermost: every run is a ``CONSUMER`` span,
  ``process <task>``, whose parent is the context extracted from the
  message's ``trace`` (a message without one starts a trace of its own),
  with the task name, the message and task ids, the attempt and the
  outcome as attributes, and the exception recorded when the attempt
  fails. A plain ``def`` action runs in its thread under that span (trio
  copies the context into the thread).

A Go worker ignores the ``trace`` field; a message it dispatched has none.
Spans go to the global tracer provider unless one is passed.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import trio

try:
    from opentelemetry import propagate, trace
    from opentelemetry.trace import SpanKind, Status, StatusCode
except ImportError as exc:  # the extra is not installed
    raise ImportError(
        "taskrunner.otel needs opentelemetry-api: pip install 'trio-taskrunner[otel]'"
    ) from exc

import taskrunner
from taskrunner._execution.context import TaskContext
from taskrunner._execution.middleware import CallNext
from taskrunner._runner import TaskRunner
from taskrunner.errors import Retry, TaskTimeout

__all__ = ["OUTCOME", "instrument"]

OUTCOME = "taskrunner.outcome"
"""The attribute of a run's span saying how the attempt ended: ``success``, ``error``,
``timeout``, ``retry`` (the action raised ``Retry``) or ``cancelled`` (a hard shutdown)."""

_SYSTEM = "taskrunner"
_instrumented: weakref.WeakSet[TaskRunner] = weakref.WeakSet()


def instrument(runner: TaskRunner, *, tracer_provider: trace.TracerProvider | None = None) -> None:
    """Trace ``runner``'s dispatches and runs (see the module docstring).

    Call it before :meth:`TaskRunner.serve <taskrunner.TaskRunner.serve>`
    (the middleware is taken when ``serve`` starts). A second call on the same
    runner does nothing.

    Args:
        runner: The runner to trace.
        tracer_provider: Where spans go; the global provider by default.
    """
    if runner in _instrumented:
        return
    _instrumented.add(runner)
    tracer = trace.get_tracer(_SYSTEM, taskrunner.__version__, tracer_provider=tracer_provider)

    @contextmanager
    def dispatching(task_name: str) -> Iterator[dict[str, str] | None]:
        attributes = {
            "messaging.system": _SYSTEM,
            "messaging.operation.type": "send",
            "messaging.destination.name": runner.config.consumer_group,
            "taskrunner.task.name": task_name,
        }
        with tracer.start_as_current_span(
            f"send {task_name}", kind=SpanKind.PRODUCER, attributes=attributes
        ):
            carrier: dict[str, str] = {}
            propagate.inject(carrier)
            yield carrier or None

    async def trace_run(ctx: TaskContext, call_next: CallNext) -> Any:
        parent = propagate.extract(dict(ctx.trace)) if ctx.trace else None
        attributes: dict[str, str | int] = {
            "messaging.system": _SYSTEM,
            "messaging.operation.type": "process",
            "messaging.destination.name": runner.config.consumer_group,
            "messaging.message.id": ctx.message_id,
            "taskrunner.task.name": ctx.task_name,
            "taskrunner.task.id": ctx.task_id,
            "taskrunner.attempt": ctx.attempt,
            "taskrunner.max_attempts": ctx.max_attempts,
        }
        with tracer.start_as_current_span(
            f"process {ctx.task_name}",
            context=parent,
            kind=SpanKind.CONSUMER,
            attributes=attributes,
            record_exception=False,
            set_status_on_exception=False,
        ) as span:
            try:
                result = await call_next()
            except trio.Cancelled:
                if ctx.deadline is not None and trio.current_time() >= ctx.deadline:
                    task = runner.tasks.get(ctx.task_name)
                    seconds = (
                        task.timeout if task and task.timeout else runner.config.default_timeout
                    )
                    timeout = TaskTimeout(ctx.task_name, ctx.message_id, seconds or 0.0)
                    span.set_attribute(OUTCOME, "timeout")
                    span.record_exception(timeout)
                    span.set_status(Status(StatusCode.ERROR, "ran past its timeout"))
                else:
                    span.set_attribute(OUTCOME, "cancelled")
                raise
            except Retry:
                span.set_attribute(OUTCOME, "retry")
                raise
            except Exception as exc:
                span.set_attribute(OUTCOME, "error")
                span.record_exception(exc)
                span.set_status(Status(StatusCode.ERROR, f"{type(exc).__name__}: {exc}"))
                raise
            span.set_attribute(OUTCOME, "success")
            return result

    runner._dispatcher.tracer = dispatching
    runner._middlewares.insert(0, trace_run)
