"""The wire: every document a Go fleet reads or writes, and the rules that build them.

Theory of operation. A Go fleet (soroosh-tanzadeh/taskrunner v0.4.1) and a
Python fleet can share one Redis, one stream and one consumer group. What they
share is four kinds of document, each built by one constructor here and read by
one reader here, so the bytes are decided in one place and pinned by golden
tests (tests/test_wire.py). This docstring is the specification of those bytes;
docs/go-interop.md says the same for users.

**The stream message** (:class:`TaskMessage`, :func:`new_message`,
:func:`encode_message`, :func:`decode_message`). A stream entry has one field,
``payload``, holding this JSON object (Go's ``TaskMessage``)::

    task_name            string   the task to run
    payload              any      the action's argument, as JSON
    unique               bool     whether a unique lock is held for this message
    unique_for           int64    the lock's lifetime in whole seconds (rounded up)
    unique_key           string   the lock key's suffix, see below
    unique_lock_value    string   the lock's token (ours: 32 hex digits; Go's: base64)
    reservation_timeout  int64    nanoseconds (Go's time.Duration)

The message id is the stream id, never serialised. Field order does not matter
(Go writes ``unique`` first, we write ``task_name`` first). Go writes
``unique_for`` from the task even when it is not unique; we write 0 there. On
read, a missing or ``null`` field takes Go's zero value, a whole-number float
is read as an int, and unknown fields are ignored.

**The unique lock** (:func:`unique_key_for`, :func:`unique_lock`). The message's
``unique_key`` is what Go writes: the suffix of the lock key. A task ``echo``
whose key function returns ``A-17`` carries ``"unique_key":"echo:A-17"`` and
locks ``taskrunner:unique:echo:A-17``; the worker releases
``taskrunner:unique:`` + ``unique_key``. A key function returning ``""`` (or
``None``) falls back to the task name, as Go's does: ``echo:echo``. A task with
no key function locks ``taskrunner:unique:echo``; Go writes ``""`` in its
messages for that case (and a Go worker then releases ``taskrunner:unique:``,
a bug of the Go library), so we read ``""`` as the task name, and write the
task name, which makes a Go worker release the right lock.

**The delayed member** (:class:`DelayedTask`, :func:`new_delayed`,
:func:`encode_delayed`, :func:`decode_delayed`). A member of
``taskrunner:<group>:delayed_tasks`` is Go's ``DelayedTask``:
``{"id": uuid4, "task": name, "time": int64, "payload": any}``. ``time`` is
the run-at time in whole seconds (Go reads it as int64 and refuses a
fraction); the member's score is the precise run-at time and may keep the
fraction (Go selects due members with ``ZRANGEBYSCORE``). Python schedules by
the score only and never reads ``time``. On the in-memory backend both are on
trio's clock. We add ``unique_key`` for unique tasks (the message's
``unique_key``, computed at dispatch from the payload as given, because the
scheduler only has its JSON); a member without it (Go's) has it computed from
the decoded payload when it is moved.

**The metrics fields** (:class:`TimingFields`, :func:`task_fields`,
:func:`schedule_fields`, :func:`timing_increment`, :func:`read_timing`). The
hash ``taskrunner:<group>:metrics`` holds, per task:

- ``<task>_sum``: whole milliseconds, an integer (Go reads it with
  ``Int64()`` and adds with ``HINCRBY``);
- ``<task>_count``: runs, an integer;
- ``<task>_sum_us``: ours, the same total in microseconds, which Go ignores.

Our writers keep ``_sum == _sum_us // 1000`` (:func:`add_timing`, applied
atomically by the backend). When that does not hold, someone else moved
``_sum`` since our last write (a Go worker adds whole milliseconds; a Go
leader's reset zeroes ``_sum`` and ``_count`` only; 0.1.0 left a float there):
the reader then takes ``_sum``, which counts everyone's runs, and the next
write re-bases ``_sum_us`` on it. So the sub-millisecond part only ever refines
``_sum`` by less than a millisecond in all, and is never stale. A float
``_sum`` left by 0.1.0 reads as its value and is cut to whole milliseconds by
the next write. The scheduler's passes use the same three fields under Go's
name, ``taskrunner:<group>:delayed_tasks_schedule``
(``taskrunner:<group>:delayed_tasks_schedule_sum`` and so on); the short
``delayed_tasks_schedule_sum`` / ``_count`` written by 0.1.0 are read too, and
added. A reset zeroes every field named here (:func:`reset_fields`).

**Adding to the wire.** Later features will add optional fields to the
message (an attempt count, trace context, result flags, ``dispatched_at``)
and maybe to the delayed member. Each goes here, as an attribute with a
default, written only when it has a non-default value, read with a default
when absent, and documented in the list below with what a Go worker does with
it. The rule every such field follows: **a Go worker that meets a message
using a feature it does not know must never lose it or run it twice.** Go's
``json.Unmarshal`` ignores unknown fields, so a new field is safe exactly when
running the message as if the field were absent is a correct (if plainer)
outcome. Therefore a new field never changes the meaning or the type of an
existing one (a type Go cannot decode sends the message down Go's failure
path, where a ``FailedTaskHandler`` may ack it: lost), never carries the
payload in another form, and is never needed to find or release a lock or to
bound the attempts (a Go worker counts deliveries). A feature that cannot meet
that rule uses its own task names or its own stream.

Optional fields in use (a Go worker ignores all of them):

- delayed member ``unique_key``: the precomputed message ``unique_key``. A Go
  leader ignores it and recomputes the key from the payload.
- metrics ``<task>_sum_us`` and ``taskrunner:<group>:delayed_tasks_schedule_sum_us``:
  see above.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

import attrs

from taskrunner import _keys
from taskrunner.errors import InvalidTaskPayload

if TYPE_CHECKING:
    from taskrunner._task import Task

__all__ = [
    "MAX_MESSAGE_BYTES",
    "SCHEDULE_TIMING_NAME",
    "UNIQUE_LOCK_PREFIX",
    "DelayedTask",
    "TaskMessage",
    "TimingFields",
    "TimingIncrement",
    "add_timing",
    "decode_delayed",
    "decode_message",
    "encode_delayed",
    "encode_message",
    "new_delayed",
    "new_message",
    "read_timing",
    "reservation_ns",
    "reset_fields",
    "schedule_fields",
    "schedule_timing",
    "schedule_timing_name",
    "task_fields",
    "task_names_in",
    "task_timing",
    "timing_increment",
    "unique_for_seconds",
    "unique_key_for",
    "unique_lock",
]

MAX_MESSAGE_BYTES = 8 * 1024 * 1024
"""Largest encoded message accepted at dispatch or decoded by a worker."""

_dumps = json.JSONEncoder(separators=(",", ":"), allow_nan=False, ensure_ascii=False).encode


# The stream message -----------------------------------------------------------------


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

    @property
    def reservation_timeout_seconds(self) -> float:
        return self.reservation_timeout / 1e9


def reservation_ns(seconds: float) -> int:
    """A reservation timeout as the wire's nanoseconds (Go's ``time.Duration``)."""
    return int(seconds * 1e9)


def unique_for_seconds(seconds: float) -> int:
    """A lock lifetime as the wire's whole seconds, rounded up so a lock never lives shorter."""
    return math.ceil(seconds)


def new_message(task: Task, payload: Any, *, unique_key: str = "", token: str = "") -> TaskMessage:
    """The message that runs ``task`` once.

    Args:
        task: The registered task (its reservation timeout resolved).
        payload: The payload in its wire (JSON-ready) form.
        unique_key: For a unique task, :func:`unique_key_for` of the payload.
        token: For a unique task, the lock's token (random at dispatch).
    """
    if not task.unique:
        return TaskMessage(
            task_name=task.name,
            payload=payload,
            reservation_timeout=reservation_ns(task.reservation),
        )
    return TaskMessage(
        task_name=task.name,
        payload=payload,
        unique=True,
        unique_for=unique_for_seconds(task.unique_for),
        unique_key=unique_key,
        unique_lock_value=token,
        reservation_timeout=reservation_ns(task.reservation),
    )


def encode_message(message: TaskMessage) -> bytes:
    """The wire JSON of ``message``.

    Raises:
        InvalidTaskPayload: the payload is not JSON-serialisable, or too large.
    """
    doc = {
        "task_name": message.task_name,
        "payload": message.payload,
        "unique": message.unique,
        "unique_for": message.unique_for,
        "unique_key": message.unique_key,
        "unique_lock_value": message.unique_lock_value,
        "reservation_timeout": message.reservation_timeout,
    }
    try:
        data = _dumps(doc).encode()
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


def _field(doc: dict[str, Any], name: str, kind: type, default: Any) -> Any:
    value = doc.get(name)
    if value is None:
        return default
    if kind is int and isinstance(value, float) and value.is_integer():
        value = int(value)
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise InvalidTaskPayload(f"field {name!r} should be {kind.__name__}, got {value!r}")
    return value


def _json_object(raw: bytes) -> dict[str, Any]:
    try:
        doc = json.loads(raw)
    except ValueError as exc:
        raise InvalidTaskPayload(f"not valid JSON: {exc}") from exc
    if not isinstance(doc, dict):
        raise InvalidTaskPayload(f"expected a JSON object, got {type(doc).__name__}")
    return doc


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
    doc = _json_object(raw)
    task_name = doc.get("task_name")
    if not isinstance(task_name, str) or not task_name:
        raise InvalidTaskPayload(
            f"field 'task_name' should be a non-empty string, got {task_name!r}"
        )
    return TaskMessage(
        task_name=task_name,
        payload=doc.get("payload"),
        unique=_field(doc, "unique", bool, False),
        unique_for=_field(doc, "unique_for", int, 0),
        unique_key=_field(doc, "unique_key", str, ""),
        unique_lock_value=_field(doc, "unique_lock_value", str, ""),
        reservation_timeout=_field(doc, "reservation_timeout", int, 0),
    )


# The unique lock ---------------------------------------------------------------------

UNIQUE_LOCK_PREFIX = f"{_keys.PREFIX}:unique:"
"""Every unique lock key starts with this; the rest is the message's ``unique_key``."""


def unique_key_for(task: Task, payload: Any) -> str:
    """The message ``unique_key`` of a unique ``task`` for ``payload``, as Go writes it.

    ``<task>:<key>`` with ``key`` what the task's key function returns for
    ``payload`` (what ``dispatch`` was given; a Go member's payload structured
    as the action receives it), the task name when it returns ``""`` or
    ``None``; just ``<task>`` when the task has no key function.

    Raises:
        InvalidTaskPayload: the key function raised or returned a non-string.
    """
    if task.unique_key is None:
        return task.name
    return f"{task.name}:{task.lock_key_for(payload) or task.name}"


def unique_lock(task_name: str, unique_key: str) -> str:
    """The lock key of a message: ``taskrunner:unique:`` + its ``unique_key``.

    An empty ``unique_key`` is what Go writes for a task without a key
    function, whose lock is ``taskrunner:unique:<task>``.
    """
    return UNIQUE_LOCK_PREFIX + (unique_key or task_name)


# The delayed member ------------------------------------------------------------------


@attrs.frozen(kw_only=True)
class DelayedTask:
    """A member of the delayed set (Go's ``DelayedTask``): run ``task`` with ``payload``.

    Its score in the set, not :attr:`time`, says when: Python never reads
    ``time``; it is there for Go.
    """

    id: str
    """A uuid4, which also keeps equal payloads apart in the set."""
    task: str
    time: int
    """The run-at time in whole seconds, rounded down: unix time on Redis (what
    Go reads), trio's clock on the in-memory backend."""
    payload: Any = None
    unique_key: str | None = None
    """Ours, for unique tasks: the message ``unique_key``, computed at dispatch."""


def new_delayed(
    task_name: str, payload: Any, run_at: float, *, id: str, unique_key: str | None = None
) -> DelayedTask:
    """The delayed member that runs ``task_name`` at ``run_at`` (the backend's seconds).

    Args:
        task_name: The task to run.
        payload: The payload in its wire (JSON-ready) form.
        run_at: The run-at time; also the member's score, which keeps the fraction.
        id: A fresh uuid4 string (a fixed one in tests).
        unique_key: For a unique task, :func:`unique_key_for` of the payload.
    """
    return DelayedTask(
        id=id, task=task_name, time=math.floor(run_at), payload=payload, unique_key=unique_key
    )


def encode_delayed(delayed: DelayedTask) -> bytes:
    """The member's JSON: Go's four fields, then ``unique_key`` when set.

    Raises:
        InvalidTaskPayload: the payload is not JSON-serialisable.
    """
    doc: dict[str, Any] = {
        "id": delayed.id,
        "task": delayed.task,
        "time": delayed.time,
        "payload": delayed.payload,
    }
    if delayed.unique_key is not None:
        doc["unique_key"] = delayed.unique_key
    try:
        return _dumps(doc).encode()
    except (TypeError, ValueError) as exc:
        raise InvalidTaskPayload(f"not JSON-serialisable: {exc}", task_name=delayed.task) from exc


def decode_delayed(raw: bytes) -> DelayedTask:
    """Parse a member of the delayed set (Go's, 0.1.0's or ours).

    A fractional ``time`` (0.1.0 wrote one) is read rounded down.

    Raises:
        InvalidTaskPayload: invalid JSON, not an object, or a field of the wrong type.
    """
    doc = _json_object(raw)
    task = doc.get("task")
    if not isinstance(task, str) or not task:
        raise InvalidTaskPayload(f"field 'task' should be a non-empty string, got {task!r}")
    moment = doc.get("time", 0)
    if isinstance(moment, bool) or not isinstance(moment, int | float) or not math.isfinite(moment):
        raise InvalidTaskPayload(f"field 'time' should be unix seconds, got {moment!r}")
    return DelayedTask(
        id=_field(doc, "id", str, ""),
        task=task,
        time=math.floor(moment),
        payload=doc.get("payload"),
        unique_key=_field(doc, "unique_key", str, None),
    )


# The metrics fields ------------------------------------------------------------------

SCHEDULE_TIMING_NAME = "delayed_tasks_schedule"
"""The reserved timing name under which the scheduler's passes are recorded.

The bulk writer writes them under Go's name (:func:`schedule_fields`); this
short form is also how 0.1.0 named the fields, still read. A task of this name
would share the scheduler's counters, so ``register`` refuses it.
"""


@attrs.frozen
class TimingFields:
    """The three metrics-hash fields of one timing name."""

    sum: str
    """``<name>_sum``: whole milliseconds (what Go reads)."""
    sum_us: str
    """``<name>_sum_us``: the same total in microseconds (ours; Go ignores it)."""
    count: str
    """``<name>_count``: runs."""


def task_fields(task_name: str) -> TimingFields:
    """The fields of a task: ``<task>_sum``, ``<task>_sum_us``, ``<task>_count``."""
    return TimingFields(f"{task_name}_sum", f"{task_name}_sum_us", f"{task_name}_count")


def schedule_timing_name(group: str) -> str:
    """Go's timing name for the scheduler: ``taskrunner:<group>:delayed_tasks_schedule``."""
    return f"{_keys.PREFIX}:{group}:{SCHEDULE_TIMING_NAME}"


def schedule_fields(group: str) -> TimingFields:
    """The scheduler's fields, named as Go names them:
    ``taskrunner:<group>:delayed_tasks_schedule_sum`` (and ``_sum_us``, ``_count``)."""
    return task_fields(schedule_timing_name(group))


_SHORT_SCHEDULE = task_fields(SCHEDULE_TIMING_NAME)
"""0.1.0's scheduler fields (it never wrote ``_sum_us``): read and reset, never written."""


@attrs.frozen(kw_only=True)
class TimingIncrement:
    """One timing name's runs of one flush, for ``SharedState.increment_metrics``."""

    fields: TimingFields
    micros: int
    """Total run time to add, in whole microseconds (>= 0)."""
    count: int
    """Runs to add (>= 1)."""


def timing_increment(fields: TimingFields, sum_ms: float, count: int) -> TimingIncrement | None:
    """What a flush adds for ``count`` runs that took ``sum_ms`` milliseconds in all.

    Returns:
        ``None`` when nothing can be written: no runs, or a sum that is not
        finite (it would poison the hash and fail every later flush). A
        negative sum (a clock that went backwards) counts as 0.
    """
    if count <= 0 or not math.isfinite(sum_ms):
        return None
    return TimingIncrement(fields=fields, micros=round(max(0.0, sum_ms) * 1000.0), count=count)


def add_timing(stored_sum: float | None, stored_us: float | None, micros: int) -> tuple[int, int]:
    """The new ``(_sum, _sum_us)`` after adding ``micros`` (pure; the backends' rule).

    ``stored_sum`` is cut to whole milliseconds (a 0.1.0 float). If
    ``stored_us`` is missing or disagrees with it (``stored_us // 1000 !=
    stored_sum``: a Go worker, a Go reset or 0.1.0 moved ``_sum``), it is
    re-based to ``stored_sum * 1000`` first. The Redis backend runs the same
    rule in Lua (``lua/add_timings.lua``), atomically.
    """
    whole_ms = math.floor(stored_sum) if stored_sum is not None else 0
    if stored_us is None or stored_us // 1000 != whole_ms:
        base_us = whole_ms * 1000
    else:
        base_us = int(stored_us)
    total_us = base_us + micros
    return total_us // 1000, total_us


def read_timing(metrics: Mapping[str, float], fields: TimingFields) -> tuple[float, float]:
    """``(sum_ms, count)`` of one timing name from a metrics hash as read.

    ``_sum_us / 1000`` when it agrees with ``_sum`` (to the millisecond), else
    ``_sum`` itself (a float left by 0.1.0 is taken as it is). Missing fields
    are 0.
    """
    sum_ms = metrics.get(fields.sum, 0.0)
    sum_us = metrics.get(fields.sum_us)
    if sum_us is not None and sum_us // 1000 == sum_ms:
        sum_ms = sum_us / 1000.0
    return sum_ms, metrics.get(fields.count, 0.0)


def task_timing(metrics: Mapping[str, float], task_name: str) -> tuple[float, float]:
    """``(sum_ms, count)`` of a task (see :func:`read_timing`)."""
    return read_timing(metrics, task_fields(task_name))


def schedule_timing(metrics: Mapping[str, float], group: str) -> tuple[float, float]:
    """``(sum_ms, count)`` of the scheduler's passes: Go's fields plus 0.1.0's short ones."""
    go_ms, go_count = read_timing(metrics, schedule_fields(group))
    old_ms, old_count = read_timing(metrics, _SHORT_SCHEDULE)
    return go_ms + old_ms, go_count + old_count


def reset_fields(task_names: Iterable[str], group: str) -> list[str]:
    """Every metrics field a reset sets to 0.

    Each task's ``_sum``, ``_sum_us`` and ``_count``, in the order given
    (duplicates dropped), then the scheduler's under Go's names and 0.1.0's
    short ones. Fields of tasks not given (another deployment's) are left
    alone, as the Go library does.
    """
    names: dict[str, None] = {}
    for fields in [*map(task_fields, task_names), schedule_fields(group)]:
        names.update(dict.fromkeys((fields.sum, fields.sum_us, fields.count)))
    names.update(dict.fromkeys((_SHORT_SCHEDULE.sum, _SHORT_SCHEDULE.count)))
    return list(names)


def task_names_in(metrics: Mapping[str, float], group: str) -> list[str]:
    """Task names with a ``<task>_sum`` or ``<task>_count`` field in a metrics hash,
    sorted, the scheduler's (either name) excluded."""
    names = {field.rpartition("_")[0] for field in metrics if field.endswith(("_sum", "_count"))}
    names.discard(SCHEDULE_TIMING_NAME)
    names.discard(schedule_timing_name(group))
    return sorted(names)
