"""The wire: every document a Go fleet reads or writes, and the rules that build them.

Theory of operation. A Go fleet (soroosh-tanzadeh/taskrunner v0.4.1) and a
Python fleet can share one Redis, one stream and one consumer group. What they
share is four kinds of document, each built by one constructor here and read by
one reader here, so the bytes are decided in one place and pinned by golden
tests (tests/test_wire.py). This docstring is the specification of those bytes;
docs/go-interop.md says the same for users. Each kind has a module of its own
(``message``, ``locks``, ``delayed``, ``metrics``; ``encoding`` holds the JSON
conventions they share, ``frames`` the splicing that encodes a payload once),
and everything is imported from ``taskrunner._wire``.

**The stream message** (``message``: :class:`TaskMessage`, :func:`new_message`,
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

**The unique lock** (``locks``: :func:`message_unique_key`, :func:`unique_lock`). The message's
``unique_key`` is what Go writes: the suffix of the lock key. A task ``echo``
whose key function returns ``A-17`` carries ``"unique_key":"echo:A-17"`` and
locks ``taskrunner:unique:echo:A-17``; the worker releases
``taskrunner:unique:`` + ``unique_key``. A key function returning ``""`` (or
``None``) falls back to the task name, as Go's does: ``echo:echo``. A task with
no key function locks ``taskrunner:unique:echo``; Go writes ``""`` in its
messages for that case (and a Go worker then releases ``taskrunner:unique:``,
a bug of the Go library), so we read ``""`` as the task name, and write the
task name, which makes a Go worker release the right lock.

**The delayed member** (``delayed``: :class:`DelayedTask`, :func:`new_delayed`,
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

**The metrics fields** (``metrics``: :class:`TimingFields`, :func:`task_fields`,
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

**The task catalog** (``catalog``: :class:`CatalogDocument`, :class:`CatalogTask`,
:func:`encode_catalog`, :func:`decode_catalog`,
:func:`served`). Ours alone: Go neither writes nor reads it. Each serving
instance keeps one document in the hash ``taskrunner:<group>:catalog``, under
its host::

    host       string   the instance's host
    instance   string   its instance id
    expires    float    unix seconds: the document counts until then
    tasks      list     one object per registered task:
      name                 string  the task
      stream               string  the stream the instance reads it from
      reservation_timeout  float   seconds (what its own dispatch writes, in ns)
      unique               bool
      unique_for           float   seconds (0 when not unique)
      keyed                bool    its lock key comes from a unique_key function
      keep_result          float   seconds; written only for tasks that keep results

A producer that knows a task only by name writes a message from a
:class:`CatalogTask` (:class:`TaskSettings` is what :func:`new_message` needs of a
task): Go's zero values for what it does not know, or the entry a live runner
published (``strict``), which gives the bytes the runner's own dispatch writes.

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
- message and delayed member ``attempts`` (int >= 0): attempts used by earlier
  entries of the task (a retry re-queued through the delayed set; a run
  re-queued to wait for a concurrency slot, a rate limit or a pause carries
  the attempts used before the delivery that waited, which is not one).
  Attempt number = ``attempts`` + delivery count, bounded by ``max_retry``. A
  Go worker bounds only its own deliveries of the entry.
- message ``id`` (str): the task's id when it is not the entry's stream id (a
  moved delayed member's ``id``; a retry keeps its task's).
- message and delayed member ``dispatched_at`` (float, the backend's clock):
  the first dispatch's time, when it is not the stream id's (delayed, retried).
- message and delayed member ``trace`` (an object of strings): the W3C trace
  context of the dispatch (``taskrunner.otel``).
- delayed member ``unique_lock_value`` (str): a unique retry's (or waiting
  run's) lock token. The move takes the lock if it is free or still held with
  it (so the run keeps its lock); a Go leader cannot take it and leaves the
  member until the lock expires (``unique_for``), then dispatches it afresh
  (without ``attempts``).
- delayed member ``queue`` (str): the queue whose stream the member moves to;
  absent means the default queue. A Go leader moves the member to its own
  stream, where a Go worker runs it (or a Python runner of that queue): flow
  control with several queues needs a Python leader (see docs/go-interop.md).
- delayed member ``unique_lock_value`` (str): a unique retry's lock token. The
  move takes the lock if it is free or still held with it (so the retry keeps
  its lock); a Go leader cannot take it and leaves the member until the lock
  expires (``unique_for``), then dispatches it afresh (without ``attempts``).
- message and delayed member ``schedule`` (string) and ``tick`` (float, unix
  seconds): the periodic schedule that fired the message and the tick it
  serves (issue 15), both present or both absent; a retry keeps them. A Go
  worker runs the message once, as any other; it does not record the run's
  outcome, so an ``overlap=False``
  schedule's in-flight mark then lasts until its ``in_flight_ttl`` and the
  schedule's last outcome is not updated.

A plain dispatch writes none of them: its bytes are the same as before.
- metrics ``<task>_sum_us`` and ``taskrunner:<group>:delayed_tasks_schedule_sum_us``:
  see above.
"""

from taskrunner._wire.catalog import CatalogDocument as CatalogDocument
from taskrunner._wire.catalog import CatalogTask as CatalogTask
from taskrunner._wire.catalog import decode_catalog as decode_catalog
from taskrunner._wire.catalog import encode_catalog as encode_catalog
from taskrunner._wire.catalog import served as served
from taskrunner._wire.catalog import served_keep_result as served_keep_result
from taskrunner._wire.delayed import DelayedTask as DelayedTask
from taskrunner._wire.delayed import decode_delayed as decode_delayed
from taskrunner._wire.delayed import encode_delayed as encode_delayed
from taskrunner._wire.delayed import encode_delayed_around as encode_delayed_around
from taskrunner._wire.delayed import new_delayed as new_delayed
from taskrunner._wire.delayed import retry_delayed as retry_delayed
from taskrunner._wire.frames import PAYLOAD_MARK as PAYLOAD_MARK
from taskrunner._wire.frames import check_size as check_size
from taskrunner._wire.frames import frame_size as frame_size
from taskrunner._wire.frames import payload_bytes as payload_bytes
from taskrunner._wire.frames import plain_encoder as plain_encoder
from taskrunner._wire.locks import UNIQUE_LOCK_PREFIX as UNIQUE_LOCK_PREFIX
from taskrunner._wire.locks import message_unique_key as message_unique_key
from taskrunner._wire.locks import unique_lock as unique_lock
from taskrunner._wire.message import MAX_MESSAGE_BYTES as MAX_MESSAGE_BYTES
from taskrunner._wire.message import MessageExtras as MessageExtras
from taskrunner._wire.message import TaskMessage as TaskMessage
from taskrunner._wire.message import TaskSettings as TaskSettings
from taskrunner._wire.message import decode_message as decode_message
from taskrunner._wire.message import encode_message as encode_message
from taskrunner._wire.message import keeps_result_alone as keeps_result_alone
from taskrunner._wire.message import new_message as new_message
from taskrunner._wire.message import reservation_ns as reservation_ns
from taskrunner._wire.message import unique_for_seconds as unique_for_seconds
from taskrunner._wire.metrics import SCHEDULE_TIMING_NAME as SCHEDULE_TIMING_NAME
from taskrunner._wire.metrics import TimingFields as TimingFields
from taskrunner._wire.metrics import TimingIncrement as TimingIncrement
from taskrunner._wire.metrics import add_timing as add_timing
from taskrunner._wire.metrics import read_timing as read_timing
from taskrunner._wire.metrics import reset_fields as reset_fields
from taskrunner._wire.metrics import schedule_fields as schedule_fields
from taskrunner._wire.metrics import schedule_timing as schedule_timing
from taskrunner._wire.metrics import schedule_timing_name as schedule_timing_name
from taskrunner._wire.metrics import task_fields as task_fields
from taskrunner._wire.metrics import task_names_in as task_names_in
from taskrunner._wire.metrics import task_timing as task_timing
from taskrunner._wire.metrics import timing_increment as timing_increment
from taskrunner._wire.results import NOTIFY_TTL as NOTIFY_TTL
from taskrunner._wire.results import Removal as Removal
from taskrunner._wire.results import ResultDocument as ResultDocument
from taskrunner._wire.results import TaskState as TaskState
from taskrunner._wire.results import cancelled as cancelled
from taskrunner._wire.results import cancelled_head as cancelled_head
from taskrunner._wire.results import decode_result as decode_result
from taskrunner._wire.results import encode_result as encode_result
from taskrunner._wire.results import encode_succeeded as encode_succeeded
from taskrunner._wire.results import failed as failed
from taskrunner._wire.results import notify_ttl as notify_ttl
from taskrunner._wire.results import removal_of as removal_of
from taskrunner._wire.results import succeeded as succeeded

__all__ = [
    "MAX_MESSAGE_BYTES",
    "NOTIFY_TTL",
    "PAYLOAD_MARK",
    "SCHEDULE_TIMING_NAME",
    "UNIQUE_LOCK_PREFIX",
    "CatalogDocument",
    "CatalogTask",
    "DelayedTask",
    "MessageExtras",
    "Removal",
    "ResultDocument",
    "TaskMessage",
    "TaskSettings",
    "TaskState",
    "TimingFields",
    "TimingIncrement",
    "add_timing",
    "cancelled",
    "cancelled_head",
    "check_size",
    "decode_catalog",
    "decode_delayed",
    "decode_message",
    "decode_result",
    "encode_catalog",
    "encode_delayed",
    "encode_delayed_around",
    "encode_message",
    "encode_result",
    "encode_succeeded",
    "failed",
    "frame_size",
    "keeps_result_alone",
    "message_unique_key",
    "new_delayed",
    "new_message",
    "notify_ttl",
    "payload_bytes",
    "plain_encoder",
    "read_timing",
    "removal_of",
    "reservation_ns",
    "reset_fields",
    "retry_delayed",
    "schedule_fields",
    "schedule_timing",
    "schedule_timing_name",
    "served",
    "served_keep_result",
    "succeeded",
    "task_fields",
    "task_names_in",
    "task_timing",
    "timing_increment",
    "unique_for_seconds",
    "unique_lock",
]
