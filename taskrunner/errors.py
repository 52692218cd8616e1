"""Every exception taskrunner raises on purpose.

One root, :class:`TaskRunnerError`; each subclass is named by what went wrong
and says when it is raised. Data travels as attributes, not only in the
message, so callers can react without parsing text. Backend-specific errors
(Redis replies, lost connections) are translated to these at the backend
boundary.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


class TaskRunnerError(Exception):
    """Root of every taskrunner exception."""


class TaskNotFound(TaskRunnerError, LookupError):
    """No task with this name is registered on the runner.

    Raised by :meth:`TaskRunner.dispatch` (and the delayed variants) before
    anything is queued, and handed to the failure path when a worker reads a
    message naming a task it does not know. A producer created with
    ``strict=True`` (``taskrunner.producer``) raises it, before anything is
    queued, for a task that no live runner of its group serves on its stream.

    Attributes:
        task_name: The task.
        reason: What was looked up where, when not the runner's registry.
    """

    def __init__(self, task_name: str, reason: str | None = None) -> None:
        super().__init__(reason or f"no task named {task_name!r} is registered")
        self.task_name = task_name
        self.reason = reason


class InvalidTaskPayload(TaskRunnerError, ValueError):
    """A payload could not be encoded or decoded.

    Raised by :meth:`TaskRunner.dispatch` before anything is queued when the
    payload is not JSON-serialisable (or does not fit the action's typed
    payload), and handed to the failure path when a worker reads a stream
    entry it cannot decode (no ``payload`` field, invalid JSON, a JSON shape
    that is not a task message, an oversized payload; whatever the decoder
    raised is named in the reason), or one that names no registered task and
    was delivered more than three times (it is then not decoded again); also
    when its payload does not fit the typed payload.

    Attributes:
        reason: What is wrong, without the task name.
        task_name: The task, when known.
        problems: For a payload that does not fit a typed payload, one
            ``path: reason`` line per bad field (``items[2].size: missing
            required field``, ``colour: unknown field``); empty otherwise.
    """

    def __init__(
        self, reason: str, *, task_name: str | None = None, problems: Sequence[str] = ()
    ) -> None:
        if problems and task_name:  # a typed payload: "payload for 'resize' does not fit ..."
            message = f"payload for {task_name!r} {reason}"
        else:
            where = f" for task {task_name!r}" if task_name else ""
            message = f"invalid task payload{where}: {reason}"
        super().__init__(message)
        self.reason = reason
        self.task_name = task_name
        self.problems = tuple(problems)


class TaskAlreadyDispatched(TaskRunnerError):
    """A unique task was dispatched while its lock is held.

    Raised by :meth:`TaskRunner.dispatch` for a task registered with
    ``unique=True`` when an earlier dispatch with the same unique key has not
    reached its final outcome and its ``unique_for`` has not expired.
    """

    def __init__(self, task_name: str, lock_key: str) -> None:
        super().__init__(f"task {task_name!r} is already dispatched (lock {lock_key!r} is held)")
        self.task_name = task_name
        self.lock_key = lock_key


class TaskExecutionError(TaskRunnerError):
    """A task's action raised.

    Passed to the ``on_error`` hook for every failed attempt; the original
    exception is ``__cause__`` and :attr:`error`.
    """

    def __init__(self, task_name: str, message_id: str, attempt: int, error: BaseException) -> None:
        super().__init__(
            f"task {task_name!r} (message {message_id}, attempt {attempt}) raised "
            f"{type(error).__name__}: {error}"
        )
        self.task_name = task_name
        self.message_id = message_id
        self.attempt = attempt
        self.error = error


class TaskMaxRetryExceeded(TaskRunnerError):
    """A message used up its attempts.

    Passed to ``failed_task_handler`` (or recorded in the dead-letter entry)
    when a task's last allowed attempt failed ("failed after N attempt(s)"), or
    when a message is delivered again after its last attempt ("delivered N
    times without an outcome"; the message is then not run again). A delivery
    without an outcome is all the worker sees of a run whose process died
    mid-run, or of a run that finished but whose ack was lost (with a crashed
    master, say): it cannot tell which, so the reason says neither.
    ``last_error`` is the final attempt's exception when there was one;
    ``deliveries`` the delivery count of a message given up without an outcome.
    """

    def __init__(
        self,
        task_name: str,
        message_id: str,
        attempts: int,
        last_error: BaseException | None = None,
        *,
        deliveries: int | None = None,
    ) -> None:
        head = f"task {task_name!r} (message {message_id})"
        if deliveries is None:
            tail = f": {type(last_error).__name__}: {last_error}" if last_error else ""
            reason = f"{head} failed after {attempts} attempt(s){tail}"
        else:
            reason = (
                f"{head} delivered {deliveries} times without an outcome, past its "
                f"{attempts} attempt(s): not run again"
            )
        super().__init__(reason)
        self.task_name = task_name
        self.message_id = message_id
        self.attempts = attempts
        self.last_error = last_error
        self.deliveries = deliveries


class InvalidTaskResult(TaskRunnerError):
    """A task that keeps results returned a value that cannot be kept.

    The value could not be turned into JSON (through cattrs, for attrs classes
    and dataclasses): a type JSON cannot carry, a NaN, a cycle, or a document
    over the size limit. The run fails with this error on its final attempt
    (retrying would return the same value): it goes down the failure path, and
    the task's result records it as failed.

    Attributes:
        task_name: The task.
        value_type: The type of the value it returned (its qualified name).
        reason: Why it cannot be encoded.
    """

    def __init__(self, task_name: str, value: Any, reason: str) -> None:
        value_type = type(value).__qualname__
        super().__init__(
            f"task {task_name!r} returned a {value_type} that cannot be kept as JSON: {reason}"
        )
        self.task_name = task_name
        self.value_type = value_type
        self.reason = reason


class TaskFailed(TaskRunnerError):
    """The task waited on failed for good.

    Raised by ``TaskHandle.result`` when the task's last attempt failed (or it
    went down the failure path); the error is the one its result records.

    Attributes:
        task_id: The task.
        task_name: Its name ("" when not recorded).
        error_type: The type name of the error it failed with (``"ValueError"``).
        error: That error's text.
    """

    def __init__(self, task_id: str, task_name: str, error_type: str, error: str) -> None:
        name = f" ({task_name})" if task_name else ""
        super().__init__(f"task {task_id}{name} failed: {error_type}: {error}")
        self.task_id = task_id
        self.task_name = task_name
        self.error_type = error_type
        self.error = error


class ResultTimeout(TaskRunnerError, TimeoutError):
    """No outcome of the task came within the time a producer waited for it.

    Raised by the producers' ``handle.result(timeout)`` (``taskrunner.producer``),
    which run outside trio; a trio waiter (``TaskHandle.result``) gets
    ``trio.TooSlowError`` instead. It is a :class:`TimeoutError` too, so
    ``except TimeoutError`` catches it. The task may still run: waiting left
    nothing behind, and a later ``result`` may get it.

    Attributes:
        task_id: The task waited for.
        timeout: The seconds waited.
    """

    def __init__(self, task_id: str, task_name: str, timeout: float) -> None:
        name = f" ({task_name})" if task_name else ""
        super().__init__(f"no outcome for task {task_id}{name} within {timeout:g}s")
        self.task_id = task_id
        self.task_name = task_name
        self.timeout = timeout


class TaskCancelled(TaskRunnerError):
    """The task waited on was cancelled (``TaskRunner.cancel``) before it finished.

    Raised by ``TaskHandle.result``.

    Attributes:
        task_id: The task.
        task_name: Its name ("" when not recorded).
    """

    def __init__(self, task_id: str, task_name: str = "") -> None:
        name = f" ({task_name})" if task_name else ""
        super().__init__(f"task {task_id}{name} was cancelled")
        self.task_id = task_id
        self.task_name = task_name


class TaskTimeout(TaskRunnerError):
    """An attempt ran past its task's ``timeout``.

    The run was cancelled at its deadline (a sync action's thread cannot be:
    its outcome is discarded when it returns), and the attempt failed with
    this error: it is retried, or takes the failure path, like any other
    failed attempt. ``on_error`` gets it as the :attr:`TaskExecutionError.error`
    of that attempt.

    Attributes:
        task_name: The task.
        message_id: The stream id of the message.
        timeout: The timeout that ran out, in seconds.
    """

    def __init__(self, task_name: str, message_id: str, timeout: float) -> None:
        super().__init__(
            f"task {task_name!r} (message {message_id}) ran past its timeout of {timeout:g}s"
        )
        self.task_name = task_name
        self.message_id = message_id
        self.timeout = timeout


class Retry(TaskRunnerError):
    """Raised by an action to ask for another attempt, ``delay`` seconds from now.

    It counts as an attempt: on the last one (``max_retry``) the message takes
    the failure path, with :class:`TaskMaxRetryExceeded` whose ``last_error``
    is this. It is not reported to ``on_error`` (it is a request, not a
    failure). The next attempt goes through the delayed set, whatever the
    task's ``retry`` policy.

    Args:
        delay: Seconds until the next attempt; ``None`` takes the delay the
            task's retry policy gives (the default policy when it has none).

    Raises:
        ValueError: ``delay`` is negative or not a finite number.
    """

    def __init__(self, delay: float | None = None) -> None:
        if delay is not None and (
            isinstance(delay, bool)
            or not isinstance(delay, int | float)
            or not 0 <= delay < float("inf")
        ):
            raise ValueError(f"Retry.delay must be a finite number of seconds >= 0, got {delay!r}")
        super().__init__("retry requested" if delay is None else f"retry requested in {delay:g}s")
        self.delay = None if delay is None else float(delay)


class LifespanError(TaskRunnerError):
    """The runner's lifespan failed to start; ``serve`` did not start anything.

    Raised by :meth:`TaskRunner.serve` when the function registered with
    :meth:`TaskRunner.lifespan` raised before its ``yield`` (the exception is
    ``__cause__``), or yielded something other than a mapping or ``None``.
    Nothing was fetched.

    Attributes:
        lifespan: The lifespan's qualified name.
    """

    def __init__(self, lifespan: str, reason: str) -> None:
        super().__init__(f"lifespan {lifespan} failed to start: {reason}")
        self.lifespan = lifespan


class BackendError(TaskRunnerError):
    """The backend failed to carry out an operation (lost connection, bad reply).

    The runner retries queue operations with backoff when it sees this; user
    calls such as :meth:`TaskRunner.dispatch` let it propagate.

    Attributes:
        maybe_applied: False only when the operation certainly did not take
            effect (the store refused it, or it was never sent); True when that
            is unknown, e.g. the connection broke while waiting for the reply.
        retryable: Whether the same call may succeed later: True for failures
            of the link or of the store's state at the moment (connection lost,
            a server loading or failing over, out of memory); False when the
            store refused this very request for what it holds (an argument that
            cannot be encoded, an error reply such as ``WRONGTYPE``), which
            repeating it cannot fix. The runner's services drop such an
            operation (logged) instead of retrying it forever.
    """

    def __init__(
        self,
        message: str,
        *,
        detail: Any = None,
        maybe_applied: bool = True,
        retryable: bool = True,
    ) -> None:
        super().__init__(message)
        self.detail = detail
        self.maybe_applied = maybe_applied
        self.retryable = retryable


class NotReplicated(BackendError):
    """A dispatch reached the master but fewer replicas than ``min_replicas`` confirmed it.

    Raised by :meth:`TaskRunner.dispatch` (and ``dispatch_many``,
    ``dispatch_delayed``, ``schedule_for``) when
    ``TaskRunnerConfig(min_replicas=N)`` is set and ``WAIT`` counted fewer
    replicas within ``replica_timeout``. The message is queued on the master
    (``maybe_applied``), and may be lost if the master fails before a replica
    copies it: the dispatch is not acknowledged.

    Attributes:
        wanted: ``min_replicas``.
        confirmed: Replicas that confirmed within the timeout.
    """

    def __init__(self, wanted: int, confirmed: int, timeout: float) -> None:
        super().__init__(
            f"dispatch not replicated: min_replicas={wanted}, but WAIT counted "
            f"{confirmed} replica(s) within {timeout:g} s",
            maybe_applied=True,
            retryable=True,
        )
        self.wanted = wanted
        self.confirmed = confirmed


SHOWN_ARGUMENT_CHARS = 60
"""How much of a refused argument :class:`InvalidCommandArgument` shows."""


class InvalidCommandArgument(BackendError):
    """A backend call was refused before it was sent: an argument cannot be encoded.

    Raised by every backend (the in-memory one too, so both agree) for a string
    that has no UTF-8 form: one holding a lone surrogate such as ``"\\udc80"``,
    which JSON allows, so a message read from the stream can carry one into a
    unique-lock key or an error text. Nothing was sent: the call certainly did
    not take effect (``maybe_applied`` is False) and repeating it cannot
    succeed (``retryable`` is False).

    Attributes:
        command: What was refused: the Redis command (``"EVALSHA"``), or the
            method on the in-memory backend (``"release_lock"``).
        argument: Which argument: its position in the Redis command (the
            command name is 0), or the parameter's name in memory (``"key"``).
        value: The argument's ``repr``, cut to :data:`SHOWN_ARGUMENT_CHARS`
            characters of the string.
    """

    def __init__(self, command: str, argument: int | str, value: str, reason: str) -> None:
        shown = repr(value[:SHOWN_ARGUMENT_CHARS])
        if len(value) > SHOWN_ARGUMENT_CHARS:
            shown += f"... ({len(value)} characters)"
        where = f"argument {argument}" if isinstance(argument, int) else argument
        super().__init__(
            f"{command} {where} is not valid UTF-8 text ({reason}): {shown}",
            maybe_applied=False,
            retryable=False,
        )
        self.command = command
        self.argument = argument
        self.value = shown


class AlreadyServing(TaskRunnerError, RuntimeError):
    """:meth:`TaskRunner.serve` was called while it is already running on that runner.

    One runner serves once at a time; to run more fetchers or workers, raise
    ``num_fetchers`` / ``num_workers`` or create another runner.
    """


class WrongAsyncLibrary(TaskRunnerError, RuntimeError):
    """A :class:`~taskrunner.TaskRunner` coroutine was awaited outside trio.

    taskrunner runs on trio: raised at the start of the runner's ``async``
    methods (``dispatch``, ``serve``, ...) when they are awaited under asyncio
    (``asyncio.run(runner.dispatch(...))``) or another library. From asyncio
    code, dispatch with ``taskrunner.producer.AsyncProducer``; from sync code,
    with ``taskrunner.producer.Producer`` (the docs page "Dispatching from your
    application", ``docs/dispatching.md``, which the message names).

    Attributes:
        method: The method that was awaited (``"TaskRunner.dispatch"``).
        library: The async library that awaited it (``"asyncio"``), or ``None``
            when none was detected.
    """

    def __init__(self, method: str, library: str | None) -> None:
        under = f"under {library}" if library else "outside trio"
        super().__init__(
            f"{method}() was awaited {under}, but taskrunner runs on trio: await it inside "
            f"trio.run(), or use taskrunner.producer.AsyncProducer from asyncio code "
            f"(taskrunner.producer.Producer from sync code); see the docs page "
            f"'Dispatching from your application' (docs/dispatching.md)"
        )
        self.method = method
        self.library = library


class SharedStreamError(TaskRunnerError):
    """The runner would delete entries that another consumer group still needs.

    Raised by :meth:`TaskRunner.serve` at start when the group's stream is also
    read by other consumer groups (an explicit, shared ``prefix``) and the
    backend deletes entries on ack: an entry this group acks would be deleted
    before the others have read it. Pass ``delete_on_ack=False`` to the
    backend, or leave ``prefix`` at its default so each group has its own
    stream.
    """

    def __init__(self, stream: str, group: str, other_groups: tuple[str, ...]) -> None:
        super().__init__(
            f"stream {stream!r} is also read by consumer group(s) {', '.join(other_groups)}, "
            f"and group {group!r} deletes entries on ack, before they read them: "
            "pass delete_on_ack=False to the backend (or give each group its own stream)"
        )
        self.stream = stream
        self.group = group
        self.other_groups = other_groups


class DuplicateHost(TaskRunnerError):
    """Another live instance already serves with this ``host``.

    Raised by :meth:`TaskRunner.serve` at start when the heartbeat key
    ``taskrunner:replication:<host>`` holds another instance's id and that
    instance keeps renewing it; and at the end of a ``serve`` that stopped
    because another instance took its heartbeat key over while it ran. Two
    processes with one ``host`` share consumer names and pending lists, which
    breaks reclaim. Give each process its own ``host``.
    """

    def __init__(self, host: str, other_instance: str) -> None:
        super().__init__(
            f"host {host!r} is already served by live instance {other_instance}: "
            "give each process its own host (TaskRunnerConfig.host)"
        )
        self.host = host
        self.other_instance = other_instance
