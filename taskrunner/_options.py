"""The options of a task: one :class:`TaskOptions`, shared by everything that makes a task.

Theory of operation. A task is its options plus a name and an action:
:class:`~taskrunner.Task` is a :class:`TaskOptions` with those two fields more,
so the options are declared, documented and validated in one place, here.
``TaskRunner.task`` and ``TaskRunner.periodic`` (whose keyword arguments stay
spelled out, for the reader and the type checker) build one ``TaskOptions``
when they are called, so a bad option is refused there, in the words a
``Task`` would use (``Task.max_retry must be an integer >= 0, got -1``); the
registry makes the task from it (``Task.with_options``). What a producer
knows of a task, its catalog entry, is a function of the options too
(:meth:`TaskOptions.catalog_task`): a runner publishes its tasks' entries, and
a producer that knows a task by name only writes the entry of the default
options (Go's zero values).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import attrs

from taskrunner._codec import ExtraKeys
from taskrunner._config import queue_name_problem
from taskrunner._execution.retry import DEFAULT_BACKOFF, Backoff
from taskrunner._flow.limits import RateLimit
from taskrunner._wire import CatalogTask

UniqueKey = Callable[[Any], "str | None"]
RateLimitKey = Callable[[Any], "str | None"]
ShardKey = Callable[[Any], Any]
"""``shard_key(payload) -> key``: a string or other JSON value naming what must stay in
one shard (e.g. ``lambda p: p["customer_id"]``); ``None`` or ``""``: no key."""

# The validators name the field as ``Task.<field>``: the options are a task's, and
# a user meets them as Task's fields (or the keyword arguments of ``task()``).


def _non_negative_int(instance: Any, attribute: attrs.Attribute[Any], value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"Task.{attribute.name} must be an integer >= 0, got {value!r}")


def _positive_seconds(instance: Any, attribute: attrs.Attribute[Any], value: float | None) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value < math.inf:
        raise ValueError(f"Task.{attribute.name} must be a number of seconds > 0, got {value!r}")


def _queue(instance: Any, attribute: attrs.Attribute[Any], value: object) -> None:
    problem = None if value is None else queue_name_problem(value)
    if problem is not None:
        raise ValueError(f"Task.{attribute.name} {problem}, got {value!r}")


def _max_concurrency(instance: Any, attribute: attrs.Attribute[Any], value: object) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
        raise ValueError(f"Task.{attribute.name} must be an integer >= 1 or None, got {value!r}")


def _rate_limit(instance: Any, attribute: attrs.Attribute[Any], value: object) -> None:
    if value is not None and not isinstance(value, RateLimit):
        raise ValueError(
            f"Task.{attribute.name} must be a RateLimit (e.g. RateLimit(10, per=1.0)) or None, "
            f"got {value!r}"
        )


def _extra_keys(instance: Any, attribute: attrs.Attribute[Any], value: str) -> None:
    if value not in ("forbid", "ignore"):
        raise ValueError(f"Task.{attribute.name} must be 'forbid' or 'ignore', got {value!r}")


def _retry_policy(instance: Any, attribute: attrs.Attribute[Any], value: object) -> None:
    if value is not None and not isinstance(value, Backoff):
        raise ValueError(f"Task.{attribute.name} must be a Backoff or None, got {value!r}")


def _exception_types(value: object) -> tuple[type[BaseException], ...]:
    # One class is accepted for a tuple of one, as in ``except`` clauses.
    if isinstance(value, type):
        return (value,)
    return tuple(value) if isinstance(value, list | tuple) else value  # type: ignore[return-value]


def _exception_classes(instance: Any, attribute: attrs.Attribute[Any], value: object) -> None:
    if not isinstance(value, tuple) or not all(
        isinstance(t, type) and issubclass(t, BaseException) for t in value
    ):
        raise ValueError(
            f"Task.{attribute.name} must be exception classes (a tuple of them), got {value!r}"
        )


def _finite_positive(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and 0 < value < math.inf


@attrs.frozen(kw_only=True)
class TaskOptions:
    """How a task runs: every field of :class:`~taskrunner.Task` but its name and action.

    Raises:
        ValueError: an option is invalid (the one-line message names it and its
            value), e.g. ``unique=True`` without ``unique_for > 0``.
    """

    max_retry: int = attrs.field(default=1, validator=_non_negative_int)
    """How many times the task may run in all (first run included); 0 means 1. Every
    attempt counts, retries through the delayed set and deliveries after a crash
    alike, so a run cut off by a crash uses one up too (see "The life of one run"
    in the docs)."""

    reservation_timeout: float | None = attrs.field(default=None, validator=_positive_seconds)
    """While the action runs longer than this, its message is refreshed every
    ``reservation_timeout`` so no other consumer reclaims it. Must be below the
    runner's ``reclaim_delay``; ``None`` (the default) means a third of it."""

    unique: bool = False
    """At most one message of this task (per unique key) queued or running at once."""

    unique_key: UniqueKey | None = None
    """``unique_key(payload) -> str | None`` picks the lock, ``taskrunner:unique:<task>:<key>``;
    ``""`` or ``None`` means the task name as key (as the Go library does). Without
    it, one lock per task name: ``taskrunner:unique:<task>``."""

    unique_for: float = 0.0
    """Lock lifetime in seconds (required > 0 when ``unique``); bounds how long a
    crashed worker can keep a lock."""

    timeout: float | None = attrs.field(default=None, validator=_positive_seconds)
    """Seconds an attempt may run; past it the run is cancelled and the attempt fails
    with :class:`~taskrunner.TaskTimeout`. ``None`` (the default) takes the runner's
    ``default_timeout``, which is off unless set. A plain ``def`` action's thread cannot
    be cancelled: its outcome is discarded when it returns, and its pool slot frees
    only then."""

    retry: Backoff | None = attrs.field(default=DEFAULT_BACKOFF, validator=_retry_policy)
    """How long to wait before the next attempt after a failed one: the next attempt
    goes through the delayed set (the failed entry is acked in the same atomic step).
    ``None`` leaves a failed attempt pending, to run again once reclaimed after
    ``reclaim_delay``. The default is ``Backoff(initial=1.0, factor=2.0,
    maximum=300.0, jitter=0.1)``."""

    permanent: tuple[type[BaseException], ...] = attrs.field(
        default=(), converter=_exception_types, validator=_exception_classes
    )
    """Exception types that make a failed attempt final: the message takes the failure
    path at once, whatever attempts are left (a bad request will not get better)."""

    extra_keys: ExtraKeys = attrs.field(default="forbid", validator=_extra_keys)
    """What keys of a typed payload that its class does not have do, at any depth:
    ``"forbid"`` (the default) refuses the payload, naming them, at dispatch and in
    the worker (the failure path); ``"ignore"`` drops them, e.g. while producers
    that send a new field roll out before the workers that know it."""

    keep_result: float | None = attrs.field(default=None, validator=_positive_seconds)
    """Keep each run's outcome for this many seconds: the return value when it
    succeeds, the error's type and text when it fails for the last time, or that it
    was cancelled. ``TaskHandle.result`` waits for it and ``TaskRunner.get_task``
    reports it until it expires. ``None`` (the default) keeps nothing and costs
    nothing per run."""

    queue: str | None = attrs.field(default=None, validator=_queue)
    """The queue its messages go to (``dispatch(..., queue=)`` overrides it);
    ``None``: the backend's queue (``tasks``)."""

    max_concurrency: int | None = attrs.field(default=None, validator=_max_concurrency)
    """At most this many runs at once across the whole fleet (the consumer group);
    ``None``: no limit. A run that finds every slot taken waits in the delayed
    set, not in a worker, and the wait is not an attempt. A crashed runner's
    slot frees after the task's reservation timeout."""

    rate_limit: RateLimit | None = attrs.field(default=None, validator=_rate_limit)
    """At most ``rate_limit.limit`` starts in any window of ``rate_limit.per``
    seconds across the fleet; a run over the limit waits in the delayed set
    (not an attempt)."""

    rate_limit_key: RateLimitKey | None = None
    """``rate_limit_key(payload) -> str | None``: a limit per key (``""`` or
    ``None``: the task's own limit), e.g. ``lambda p: p["domain"]``."""

    shard_key: ShardKey | None = None
    """``shard_key(payload) -> key`` (a string or other JSON value; ``None`` or ``""``:
    no key): in a sharded group (``TaskRunnerConfig.shards > 1``), dispatches with one
    key go to one shard, so they keep their order of dispatch and their uniqueness
    (docs/sharding.md). Without it a unique task is routed by its unique key, any other
    round-robin. No effect with ``shards=1``."""

    def __attrs_post_init__(self) -> None:
        if self.unique and not _finite_positive(self.unique_for):
            raise ValueError(
                f"Task.unique_for must be a finite number of seconds > 0 when unique=True, "
                f"got {self.unique_for!r}"
            )
        if self.unique_key is not None and not callable(self.unique_key):
            raise ValueError(f"Task.unique_key must be callable or None, got {self.unique_key!r}")
        if self.rate_limit_key is not None and not callable(self.rate_limit_key):
            raise ValueError(
                f"Task.rate_limit_key must be callable or None, got {self.rate_limit_key!r}"
            )
        if self.shard_key is not None and not callable(self.shard_key):
            raise ValueError(f"Task.shard_key must be callable or None, got {self.shard_key!r}")
        if self.rate_limit_key is not None and self.rate_limit is None:
            raise ValueError(f"Task.rate_limit_key needs a rate_limit, got None{self._of()}")

    def _of(self) -> str:
        """Whose options these are, for an error message (a Task names itself)."""
        return ""

    @property
    def limited(self) -> bool:
        """Whether a run must be admitted before it starts (a concurrency or rate limit)."""
        return self.max_concurrency is not None or self.rate_limit is not None

    @property
    def attempts(self) -> int:
        """Total runs allowed: ``max_retry``, with 0 meaning 1."""
        return max(1, self.max_retry)

    def catalog_task(self, name: str, stream: str) -> CatalogTask:
        """Task ``name`` with these options as the task catalog lists it, served from
        ``stream``: what a producer needs to write the message the runner's own
        dispatch would. The default options give Go's zero values (a reservation
        timeout of 0 while it is not resolved: the worker applies its own)."""
        return CatalogTask(
            name=name,
            stream=stream,
            reservation_timeout=self.reservation_timeout or 0.0,
            unique=self.unique,
            unique_for=self.unique_for if self.unique else 0.0,
            keyed=self.unique and self.unique_key is not None,
            keep_result=self.keep_result,
        )


OPTION_NAMES = tuple(field.name for field in attrs.fields(TaskOptions))
"""The names of the options, in their order."""


def option_values(options: TaskOptions) -> dict[str, Any]:
    """The options as keyword arguments (``Task(name=..., action=..., **values)``)."""
    return {name: getattr(options, name) for name in OPTION_NAMES}


DEFAULT_OPTIONS = TaskOptions()
"""The options of a task registered with none, or known by name only."""
