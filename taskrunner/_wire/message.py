"""The stream message (Go's ``TaskMessage``): see the package docstring for its bytes."""

from __future__ import annotations

import math
from typing import Any, Protocol

import attrs

from taskrunner._wire.encoding import dumps, field, json_object, seconds_field
from taskrunner.errors import InvalidTaskPayload

MAX_MESSAGE_BYTES = 8 * 1024 * 1024
"""Largest encoded message accepted at dispatch or decoded by a worker."""


@attrs.frozen(kw_only=True)
class MessageExtras:
    """Our optional fields of a message (absent from a plain one; see the package
    docstring). Kept apart so a plain message costs nothing for them."""

    attempts: int = 0
    """Attempts used by earlier entries of this task (it is a re-queued retry)."""
    id: str = ""
    """The task's id when it is not this entry's stream id (moved from the delayed set)."""
    dispatched_at: float | None = None
    """When the task was first dispatched (the backend's clock), when that is not
    the stream id's time (a delayed dispatch, a retry)."""
    trace: dict[str, str] | None = None
    """The trace context the dispatch carried (W3C ``traceparent``, ``tracestate``)."""
    schedule: str | None = None
    """The periodic schedule that fired the message (``tick`` is then set too)."""
    tick: float | None = None
    """The tick the run serves, unix seconds in the backend's clock."""
    keep_result: float | None = None
    """Seconds to keep the task's result for (the task's ``keep_result``), when it
    keeps results."""
    workflow: str | None = None
    """The workflow the run is a step of (``step`` is then set too): its finish is
    counted in that workflow's record, in the same atomic step as its ack."""
    step: str | None = None
    """The step's id in its workflow."""
    step_inputs: bool = False
    """The step receives its parents' results (or, without a payload, needs its
    record's word on it): the worker reads them before the run. A first step given a
    payload has none to read."""
    inputs: Any = attrs.field(default=None, eq=False)
    """Never on the wire: ``ctx.parents`` of a step, as the worker read them before
    the run."""

    def __bool__(self) -> bool:
        return bool(
            self.attempts
            or self.id
            or self.dispatched_at is not None
            or self.trace
            or self.schedule is not None
            or self.keep_result is not None
            or self.workflow is not None
        )


@attrs.frozen(kw_only=True)
class TaskMessage:
    """The JSON document in a stream entry's ``payload`` field (Go's ``TaskMessage``).

    Field names and units are the Go library's: ``reservation_timeout`` in
    nanoseconds, ``unique_for`` in seconds. The message id is the stream id
    and is not serialised. Build one with :func:`new_message`.
    """

    task_name: str
    payload: Any = None
    unique: bool = False
    unique_for: int = 0
    unique_key: str = ""
    """The unique lock key's suffix, ``<task>:<key>`` (see the module docstring)."""
    unique_lock_value: str = ""
    reservation_timeout: int = 0
    extras: MessageExtras | None = None
    """Our optional fields; ``None`` for a plain message (Go's, or a plain dispatch)."""

    @property
    def attempts(self) -> int:
        """Attempts used by earlier entries of this task (0 unless it is a retry)."""
        return self.extras.attempts if self.extras is not None else 0

    @property
    def id(self) -> str:
        """The task's id when it is not the entry's stream id, else ``""``."""
        return self.extras.id if self.extras is not None else ""

    @property
    def dispatched_at(self) -> float | None:
        """The first dispatch's time when it is not the stream id's, else ``None``."""
        return self.extras.dispatched_at if self.extras is not None else None

    @property
    def trace(self) -> dict[str, str] | None:
        """The dispatch's trace context, if it was traced."""
        return self.extras.trace if self.extras is not None else None

    @property
    def schedule(self) -> str | None:
        """The periodic schedule that fired this message, if one did."""
        return self.extras.schedule if self.extras is not None else None

    @property
    def tick(self) -> float | None:
        """The tick the run serves (unix seconds), when a schedule fired it."""
        return self.extras.tick if self.extras is not None else None

    @property
    def keep_result(self) -> float | None:
        """Seconds to keep the task's result for, when it keeps results."""
        return self.extras.keep_result if self.extras is not None else None

    @property
    def workflow(self) -> str | None:
        """The workflow this run is a step of, if any."""
        return self.extras.workflow if self.extras is not None else None

    @property
    def reservation_timeout_seconds(self) -> float:
        return self.reservation_timeout / 1e9


class TaskSettings(Protocol):
    """What a message takes from its task: a registered :class:`~taskrunner.Task`, or
    what a producer knows of a task by name (:class:`~taskrunner._wire.CatalogTask`)."""

    @property
    def name(self) -> str: ...

    @property
    def unique(self) -> bool: ...

    @property
    def unique_for(self) -> float:
        """The lock's lifetime in seconds (when unique)."""
        ...

    @property
    def reservation(self) -> float:
        """The reservation timeout in seconds; 0 (Go's zero value) when unknown."""
        ...

    @property
    def keep_result(self) -> float | None:
        """Seconds its results are kept for; ``None`` when it keeps none."""
        ...


def reservation_ns(seconds: float) -> int:
    """A reservation timeout as the wire's nanoseconds (Go's ``time.Duration``)."""
    return int(seconds * 1e9)


def unique_for_seconds(seconds: float) -> int:
    """A lock lifetime as the wire's whole seconds, rounded up so a lock never lives shorter."""
    return math.ceil(seconds)


def new_message(
    task: TaskSettings,
    payload: Any,
    *,
    unique_key: str = "",
    token: str = "",
    attempts: int = 0,
    id: str = "",
    dispatched_at: float | None = None,
    trace: dict[str, str] | None = None,
    schedule: str | None = None,
    tick: float | None = None,
    keep_result: float | None = None,
    workflow: str | None = None,
    step: str | None = None,
    step_inputs: bool = False,
) -> TaskMessage:
    """The message that runs ``task`` once.

    Args:
        task: The registered task (its reservation timeout resolved), or a
            producer's settings for a task it knows by name.
        payload: The payload in its wire (JSON-ready) form.
        unique_key: For a unique task, ``Task.message_unique_key`` of the payload.
        token: For a unique task, the lock's token (random at dispatch).
        attempts: Attempts used by earlier entries of the task (a retry).
        id: The task's id, when it is not the entry's stream id.
        dispatched_at: The first dispatch's time, when it is not the stream id's.
        trace: The dispatch's trace context, when traced.
        schedule: The periodic schedule firing it (with ``tick``, the tick it serves).
        tick: The tick it serves (unix seconds), with ``schedule``.
        keep_result: Seconds to keep the result for; ``None`` (the default)
            takes the task's ``keep_result``.
        workflow: The workflow the run is a step of (with ``step``, its step id).
        step: The step's id, with ``workflow``.
        step_inputs: The step's inputs are read before it runs (see ``MessageExtras``).
    """
    keep = task.keep_result if keep_result is None else keep_result
    extras = None
    if (
        attempts
        or id
        or dispatched_at is not None
        or trace
        or schedule is not None
        or keep is not None
        or workflow is not None
    ):
        extras = MessageExtras(
            attempts=attempts,
            id=id,
            dispatched_at=dispatched_at,
            trace=trace,
            schedule=schedule,
            tick=tick,
            keep_result=keep,
            workflow=workflow,
            step=step,
            step_inputs=step_inputs,
        )
    if not task.unique:
        return TaskMessage(
            task_name=task.name,
            payload=payload,
            reservation_timeout=reservation_ns(task.reservation),
            extras=extras,
        )
    return TaskMessage(
        task_name=task.name,
        payload=payload,
        unique=True,
        unique_for=unique_for_seconds(task.unique_for),
        unique_key=unique_key,
        unique_lock_value=token,
        reservation_timeout=reservation_ns(task.reservation),
        extras=extras,
    )


def encode_message(message: TaskMessage) -> bytes:
    """The wire JSON of ``message``.

    Raises:
        InvalidTaskPayload: the payload is not JSON-serialisable, or too large.
    """
    doc: dict[str, Any] = {
        "task_name": message.task_name,
        "payload": message.payload,
        "unique": message.unique,
        "unique_for": message.unique_for,
        "unique_key": message.unique_key,
        "unique_lock_value": message.unique_lock_value,
        "reservation_timeout": message.reservation_timeout,
    }
    extras = message.extras
    if extras is not None:
        if extras.attempts:
            doc["attempts"] = extras.attempts
        if extras.id:
            doc["id"] = extras.id
        if extras.dispatched_at is not None:
            doc["dispatched_at"] = extras.dispatched_at
        if extras.trace:
            doc["trace"] = extras.trace
        if extras.schedule is not None:
            doc["schedule"] = extras.schedule
            doc["tick"] = extras.tick
        if extras.keep_result is not None:
            doc["keep_result"] = extras.keep_result
        if extras.workflow is not None:
            doc["workflow"] = extras.workflow
            doc["step"] = extras.step
            if extras.step_inputs:
                doc["step_inputs"] = True
    try:
        data = dumps(doc).encode()
    except (TypeError, ValueError) as exc:
        raise InvalidTaskPayload(
            f"not JSON-serialisable: {exc}", task_name=message.task_name
        ) from exc
    if len(data) > MAX_MESSAGE_BYTES:
        raise InvalidTaskPayload(
            f"encoded message is {len(data)} bytes, over the {MAX_MESSAGE_BYTES}-byte limit",
            task_name=message.task_name,
        )
    return data


_KEEP_ONLY: dict[float, MessageExtras] = {}
"""The extras of messages that carry ``keep_result`` alone, by its value: frozen, so
one is shared by every message with that value (a few values per process)."""
_KEEP_ONLY_KEPT = 256


def _keep_only(keep: float) -> MessageExtras:
    extras = MessageExtras(keep_result=keep)
    if len(_KEEP_ONLY) < _KEEP_ONLY_KEPT:
        _KEEP_ONLY[keep] = extras
    return extras


def keeps_result_alone(extras: MessageExtras | None) -> bool:
    """Whether a message with ``extras`` says nothing beyond its ``keep_result``, if
    that (no id, attempts, dispatch time, schedule or workflow): how nearly every
    message of a task that keeps results is decoded, its extras shared by value."""
    return extras is None or _KEEP_ONLY.get(extras.keep_result) is extras  # type: ignore[arg-type]


def decode_message(raw: bytes | None) -> TaskMessage:
    """Parse a stream entry's ``payload`` field.

    Decoded by hand rather than through cattrs: it runs once per task on the
    hot path, must accept Go's documents (``null`` for empty strings, extra
    fields), and must turn every malformed input into an error naming it.

    Raises:
        InvalidTaskPayload: no field, over :data:`MAX_MESSAGE_BYTES`, invalid JSON,
            or a document that is not a task message.
    """
    if raw is None:
        raise InvalidTaskPayload("stream entry has no 'payload' field")
    if len(raw) > MAX_MESSAGE_BYTES:
        raise InvalidTaskPayload(
            f"entry is {len(raw)} bytes, over the {MAX_MESSAGE_BYTES}-byte limit"
        )
    doc = json_object(raw)
    task_name = doc.get("task_name")
    if not isinstance(task_name, str) or not task_name:
        raise InvalidTaskPayload(
            f"field 'task_name' should be a non-empty string, got {task_name!r}"
        )
    extras = None
    if "workflow" in doc and doc.keys() <= _STEP_FIELDS:
        # A workflow's step as every step is written (start_workflow, finish.lua): its
        # few extras taken as they are when they have their exact types.
        extras = _step_extras(doc)
        if extras is None:
            extras = extras_of(doc) or None
    elif (
        "attempts" in doc
        or "id" in doc
        or "dispatched_at" in doc
        or "trace" in doc
        or "schedule" in doc
        or "workflow" in doc
    ):
        extras = extras_of(doc) or None
    elif "keep_result" in doc:
        # Every message of a task that keeps results carries this extra alone: taken
        # as it is when it is a number of seconds (extras_of decides anything else).
        keep = doc["keep_result"]
        if type(keep) in (int, float) and 0 < keep < math.inf:
            extras = _KEEP_ONLY.get(keep)
            if extras is None:
                extras = _keep_only(float(keep))
        else:
            extras = extras_of(doc) or None
    # Each field is taken as it is when it has its exact type (as every message
    # has), else read by ``field``: defaults for null or missing, whole floats,
    # refusals.
    unique = doc.get("unique")
    if type(unique) is not bool:
        unique = field(doc, "unique", bool, False)
    unique_for = doc.get("unique_for")
    if type(unique_for) is not int:
        unique_for = field(doc, "unique_for", int, 0)
    unique_key = doc.get("unique_key")
    if type(unique_key) is not str:
        unique_key = field(doc, "unique_key", str, "")
    lock_value = doc.get("unique_lock_value")
    if type(lock_value) is not str:
        lock_value = field(doc, "unique_lock_value", str, "")
    reservation = doc.get("reservation_timeout")
    if type(reservation) is not int:
        reservation = field(doc, "reservation_timeout", int, 0)
    return TaskMessage(
        task_name=task_name,
        payload=doc.get("payload"),
        unique=unique,
        unique_for=unique_for,
        unique_key=unique_key,
        unique_lock_value=lock_value,
        reservation_timeout=reservation,
        extras=extras,
    )


_STEP_FIELDS = frozenset(
    (
        "task_name",
        "payload",
        "unique",
        "unique_for",
        "unique_key",
        "unique_lock_value",
        "reservation_timeout",
        "keep_result",
        "workflow",
        "step",
        "step_inputs",
    )
)
"""The fields of a step's message as taskrunner writes it (no id, attempts, trace...)."""


def _step_extras(doc: dict[str, Any]) -> MessageExtras | None:
    """The extras of a step's message whose fields are :data:`_STEP_FIELDS`, or ``None``
    when one has another type than it is written with (:func:`extras_of` decides)."""
    workflow, step = doc["workflow"], doc.get("step")
    keep, inputs = doc.get("keep_result"), doc.get("step_inputs", False)
    if (
        type(workflow) is str
        and type(step) is str
        and type(inputs) is bool
        and (keep is None or (type(keep) in (int, float) and 0 < keep < math.inf))
    ):
        return MessageExtras(
            keep_result=None if keep is None else float(keep),
            workflow=workflow,
            step=step,
            step_inputs=inputs,
        )
    return None


def extras_of(doc: dict[str, Any]) -> MessageExtras:
    """Our optional fields of a message or delayed member, read with their defaults.

    Raises:
        InvalidTaskPayload: one has the wrong type (or ``attempts`` is negative).
    """
    attempts = field(doc, "attempts", int, 0)
    if attempts < 0:
        raise InvalidTaskPayload(f"field 'attempts' should be >= 0, got {attempts!r}")
    dispatched_at = doc.get("dispatched_at")
    if dispatched_at is not None and (
        isinstance(dispatched_at, bool)
        or not isinstance(dispatched_at, int | float)
        or not math.isfinite(dispatched_at)
    ):
        raise InvalidTaskPayload(f"field 'dispatched_at' should be seconds, got {dispatched_at!r}")
    trace = doc.get("trace")
    if trace is not None and not (
        isinstance(trace, dict)
        and all(isinstance(k, str) and isinstance(v, str) for k, v in trace.items())
    ):
        raise InvalidTaskPayload(f"field 'trace' should be an object of strings, got {trace!r}")
    return MessageExtras(
        attempts=attempts,
        id=field(doc, "id", str, ""),
        dispatched_at=None if dispatched_at is None else float(dispatched_at),
        trace=trace or None,
        schedule=field(doc, "schedule", str, None),
        tick=_tick(doc),
        keep_result=seconds_field(doc, "keep_result"),
        workflow=field(doc, "workflow", str, None),
        step=field(doc, "step", str, None),
        step_inputs=field(doc, "step_inputs", bool, False),
    )


def _tick(doc: dict[str, Any]) -> float | None:
    value = doc.get("tick")
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise InvalidTaskPayload(f"field 'tick' should be unix seconds, got {value!r}")
    return float(value)
