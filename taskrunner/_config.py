"""Runner configuration: one frozen, validated value object.

Every duration is in seconds (float). Validation happens in the constructor,
so a bad value fails where it is written, naming the field and the value.
"""

from __future__ import annotations

import math
import os
import socket
from collections.abc import Mapping
from typing import Any

import attrs

from taskrunner import _keys, _shards
from taskrunner._execution.hooks import Hook
from taskrunner._keys import KeyLayout
from taskrunner.backends._protocols.events import DEFAULT_EVENTS_MAXLEN


def _default_host() -> str:
    # Two live processes sharing a consumer name share a pending list, which
    # breaks reclaim; hostname plus pid keeps them apart by default.
    return f"{socket.gethostname()}-{os.getpid()}"


def _positive(instance: Any, attribute: attrs.Attribute[Any], value: float) -> None:
    if not 0 < value < math.inf:
        raise ValueError(f"{attribute.name} must be > 0 and finite, got {value!r}")


def _non_negative(instance: Any, attribute: attrs.Attribute[Any], value: float) -> None:
    if not 0 <= value < math.inf:
        raise ValueError(f"{attribute.name} must be >= 0 and finite, got {value!r}")


def is_utf8_text(value: str) -> bool:
    """Whether ``value`` has a UTF-8 form (no lone surrogate): what a backend can store."""
    try:
        value.encode()
    except UnicodeEncodeError:
        return False
    return True


def _name(instance: Any, attribute: attrs.Attribute[Any], value: str) -> None:
    if not isinstance(value, str):
        raise TypeError(f"{attribute.name} must be a string, got {value!r}")
    if not value or any(c.isspace() for c in value):
        raise ValueError(
            f"{attribute.name} must be a non-empty string without spaces, got {value!r}"
        )
    if not is_utf8_text(value):  # every key and consumer name is built from it
        raise ValueError(f"{attribute.name} must be valid UTF-8 text, got {value!r}")


def _group(instance: Any, attribute: attrs.Attribute[Any], value: str) -> None:
    problem = _keys.group_problem(value)
    if problem is not None:
        raise ValueError(f"{attribute.name} {problem}, got {value!r}")


def _key_layout(instance: Any, attribute: attrs.Attribute[Any], value: object) -> None:
    if value is not None and value not in _keys.KEY_LAYOUTS:
        raise ValueError(f"{attribute.name} must be 'go', 'cluster' or None, got {value!r}")


def _shard_count(instance: Any, attribute: attrs.Attribute[Any], value: object) -> None:
    _shards.check_shards(value, field=attribute.name)


def queue_name_problem(value: object) -> str | None:
    """Why ``value`` cannot name a queue, or ``None`` when it can: a non-empty string
    without spaces or ``:`` (it becomes the tail of a stream key, and the flow-control
    keys after the group's name use ``:``), with a UTF-8 form."""
    if not isinstance(value, str) or not value:
        return "must be a non-empty string"
    if any(c.isspace() for c in value) or ":" in value:
        return "must have no spaces and no ':'"
    if not is_utf8_text(value):
        return "must be valid UTF-8 text"
    return None


def _as_queues(value: object) -> object:
    # A mapping (weighted) is copied into a dict, a list or other sequence of
    # names (strict order) into a tuple; anything else goes to the validator.
    if isinstance(value, Mapping):
        return dict(value)
    if isinstance(value, list | tuple):
        return tuple(value)
    return value


def _queues(instance: Any, attribute: attrs.Attribute[Any], value: object) -> None:
    if value is None:
        return
    if not isinstance(value, tuple | dict):
        raise TypeError(
            "queues must be a tuple of queue names (strict priority) or a mapping of "
            f"queue names to weights, got {value!r}"
        )
    if not value:
        raise ValueError(f"queues must name at least one queue, got {value!r}")
    for name in value:
        problem = queue_name_problem(name)
        if problem is not None:
            raise ValueError(f"queues: a queue name {problem}, got {name!r}")
    if isinstance(value, tuple) and len(set(value)) != len(value):
        raise ValueError(f"queues must not name a queue twice, got {value!r}")
    if isinstance(value, dict):
        for name, weight in value.items():
            if isinstance(weight, bool) or not isinstance(weight, int) or weight < 1:
                raise ValueError(
                    f"queues: the weight of queue {name!r} must be an integer >= 1, got {weight!r}"
                )


def _callable_or_none(instance: Any, attribute: attrs.Attribute[Any], value: object) -> None:
    if value is not None and not callable(value):
        raise ValueError(f"{attribute.name} must be callable or None, got {value!r}")


# Types are checked by validators, not converters: only a validator knows the
# field's name, and the message must name it. So the seconds converter turns
# ints into floats and hands anything else on unchanged, for the validator to refuse.
def _as_float(value: float) -> float:
    # (bool is an int subclass, and True seconds is always a mistake: not converted.)
    if isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    return value


def _is_seconds(instance: Any, attribute: attrs.Attribute[Any], value: object) -> None:
    if not isinstance(value, float):
        raise TypeError(f"{attribute.name} must be a number of seconds, got {value!r}")


def _is_int(instance: Any, attribute: attrs.Attribute[Any], value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{attribute.name} must be an integer, got {value!r}")


def _is_bool(instance: Any, attribute: attrs.Attribute[Any], value: object) -> None:
    if not isinstance(value, bool):
        raise TypeError(f"{attribute.name} must be True or False, got {value!r}")


def _seconds(*, default: float, validator: Any) -> Any:
    return attrs.field(default=default, converter=_as_float, validator=[_is_seconds, validator])


def _count(*, default: int, validator: Any) -> Any:
    return attrs.field(default=default, validator=[_is_int, validator])


@attrs.frozen(kw_only=True)
class TaskRunnerConfig:
    """How one runner instance behaves. Every runner in a fleet shares the group.

    Raises:
        ValueError: a field is out of range; the message names the field and value.
        TypeError: a field has the wrong type (e.g. a string where seconds go).
    """

    consumer_group: str = attrs.field(validator=[_name, _group])
    """Consumer-group name; namespaces every key and metric of this fleet. It may not
    hold ``{`` or ``}``: the cluster key layout puts it in the hash tag ``{<group>}``."""

    host: str = attrs.field(factory=_default_host, validator=_name)
    """This process's identity in consumer names (``<group>_<host>_<fetcher>``) and
    heartbeats. Must be unique per live process; the default is ``<hostname>-<pid>``."""

    batch_size: int = _count(default=32, validator=_positive)
    """Most messages one fetcher read asks for (``XREADGROUP COUNT``)."""

    num_fetchers: int = _count(default=1, validator=_positive)
    """Concurrent fetchers, each its own consumer with a dedicated connection."""

    num_workers: int = _count(default=32, validator=_positive)
    """Initial worker-pool capacity: tasks that may run at once in this process."""

    min_workers: int = _count(default=0, validator=_non_negative)
    """Lower bound for the tuner; tuning is on only when this is > 0."""

    max_workers: int = _count(default=0, validator=_non_negative)
    """Upper bound for the tuner (>= ``min_workers`` when tuning)."""

    desired_wait_time: float = _seconds(default=0.0, validator=_non_negative)
    """Predicted queue wait the tuner aims for; 0 turns tuning off."""

    desired_wait_time_tolerance: float = _seconds(default=0.0, validator=_non_negative)
    """Half-width of the band around ``desired_wait_time`` in which the pool is left alone."""

    tuning_cooldown: float = _seconds(default=10.0, validator=_non_negative)
    """Least time between two pool-size changes made by the tuner."""

    target_wait: float | None = attrs.field(
        default=None,
        converter=attrs.converters.optional(_as_float),
        validator=attrs.validators.optional(_is_seconds),
    )
    """The predicted queue wait the fleet should stay under; with it, the leader publishes
    ``desired_instances`` for an autoscaler (docs/tuning.md, "Autoscaling"). ``None``
    (the default): off, nothing is computed or published."""

    max_instances: int | None = attrs.field(
        default=None, validator=attrs.validators.optional(_is_int)
    )
    """The most instances ``desired_instances`` ever asks for; ``None`` (the default): no
    fixed cap, but one decision asks for at most ``max(2 * live, live + 4)``."""

    scale_down_hold: float = _seconds(default=300.0, validator=_non_negative)
    """How long the need must stay below ``desired_instances`` before it steps down (at
    most halving per step); a higher need raises it at once."""

    block_duration: float = _seconds(default=1.0, validator=_positive)
    """How long a fetcher's read waits for new messages before looping."""

    long_queue_threshold: float = _seconds(default=0.0, validator=_non_negative)
    """Predicted wait above which ``long_queue_hook`` fires; also sets the aggregator
    tick (half of it, or 60 s when 0)."""

    long_queue_hook: Hook | None = attrs.field(default=None, validator=_callable_or_none)
    """Called as ``hook(stats)`` by the leader when the predicted wait is too long."""

    failed_task_handler: Hook | None = attrs.field(default=None, validator=_callable_or_none)
    """Called as ``handler(delivery, error)`` for messages that cannot succeed. Returning
    acks the message; raising leaves it pending. Without one, such messages go to the
    dead-letter stream."""

    on_error: Hook | None = attrs.field(default=None, validator=_callable_or_none)
    """Called as ``hook(error, delivery)`` for every error the runner reports (failed
    attempts, failure-path errors). A hook that raises is logged and ignored."""

    metrics_reset_interval: float = _seconds(default=86400.0, validator=_non_negative)
    """How often the leader zeroes the timing metrics; 0 never does."""

    reclaim_delay: float = _seconds(default=300.0, validator=_positive)
    """A message pending (not refreshed) longer than this is claimed by another consumer."""

    reclaim_interval: float | None = attrs.field(
        default=None,
        converter=attrs.converters.optional(_as_float),
        validator=attrs.validators.optional(_is_seconds),
    )
    """How often each fetcher looks for stale messages; default ``reclaim_delay / 2``."""

    delayed_poll_interval: float = _seconds(default=5.0, validator=_positive)
    """Longest the delayed-task scheduler sleeps between passes."""

    leader_lease_ttl: float = _seconds(default=5.0, validator=_positive)
    """Lifetime of the leader lease; renewed every half of it, and followers try
    to take it about as often."""

    shutdown_grace: float = _seconds(default=30.0, validator=_non_negative)
    """How long running tasks may take to finish once shutdown starts; also the
    longest the lifespan's exit may take."""

    default_timeout: float | None = attrs.field(
        default=None,
        converter=attrs.converters.optional(_as_float),
        validator=attrs.validators.optional(_is_seconds),
    )
    """The ``timeout`` of every task registered without one; ``None`` (the default):
    no timeout."""

    sync_threads: int | None = attrs.field(
        default=None, validator=attrs.validators.optional(_is_int)
    )
    """Most worker threads running plain ``def`` actions at once; ``None`` (the
    default): as many as the pool has slots (each thread holds its run's slot)."""

    queues: tuple[str, ...] | dict[str, int] | None = attrs.field(
        default=None, converter=_as_queues, validator=_queues
    )
    """The queues this runner reads, each its own stream (``<prefix>:<queue>``).

    ``None`` (the default): the backend's one queue (``tasks``), as before.
    A tuple of names is *strict priority*: a queue is read only when every
    queue before it is empty, ``("critical", "default", "low")``. A mapping of
    names to integer weights is *weighted*: while every queue has work, each
    gets a share of the reads in proportion to its weight, and none starves,
    ``{"critical": 6, "default": 3, "low": 1}``. Tasks (and dispatches) name
    their queue; one that names none goes to the backend's queue when it is
    named here, else to the first queue named here (:meth:`default_queue`), never
    to a stream this runner does not read."""

    key_layout: KeyLayout | None = attrs.field(default=None, validator=_key_layout)
    """How the backend names this group's keys (docs/redis-key-layout.md): ``"go"``,
    the Go library's layout, or ``"cluster"``, every key of the group under the hash
    tag ``{<group>}`` so they share one Redis Cluster slot (it works on a standalone
    server too, so a team can move before it shards). ``None`` (the default) is the
    backend's choice: ``"cluster"`` on a Redis Cluster, ``"go"`` elsewhere. ``"go"``
    on a cluster is refused when the runner meets its backend
    (:class:`~taskrunner._keys.KeyLayoutError`): the Go library's keys of one group
    cannot share a slot."""

    shards: int = attrs.field(default=1, validator=_shard_count)
    """How many shards each queue of the group is spread over (docs/sharding.md), from 1
    to 1024: each shard is a stream (with its delayed set, indexes, results and unique
    locks) under a hash tag of its own, so a Redis Cluster spreads one group over its
    masters. 1 (the default) is the layout of before, byte for byte. More than 1 takes
    the cluster key layout (``key_layout="go"`` is refused: a Go fleet cannot read a
    sharded group), and a group's shard count can only change while it is empty."""

    min_replicas: int = _count(default=0, validator=_non_negative)
    """Replicas that must hold a dispatched message before ``dispatch`` returns: each
    dispatch (``dispatch_many``, ``dispatch_delayed`` and ``schedule_for`` too) is
    followed by ``WAIT min_replicas replica_timeout`` on its connection, and raises
    :class:`~taskrunner.errors.NotReplicated` when fewer replicas confirmed it. 0
    (the default) waits for none and costs nothing. Needs a backend with replicas
    (``RedisBackend``); see ``docs/redis-sentinel.md``."""

    replica_timeout: float = _seconds(default=1.0, validator=_positive)
    """Longest a dispatch waits for ``min_replicas`` replicas, in seconds."""

    events: bool = attrs.field(default=False, validator=_is_bool)
    """Write the group's event stream (``taskrunner:<group>:events``: ``dispatched``,
    ``started``, ``succeeded``, ``failed``, ``retried``, ``cancelled``), read with
    :meth:`TaskRunner.events <taskrunner.TaskRunner.events>`; each event rides in a
    call made anyway (see ``docs/events.md``). Off by default, and then free."""

    events_maxlen: int = _count(default=DEFAULT_EVENTS_MAXLEN, validator=_positive)
    """The event stream's cap: it keeps about the last this many entries (``XADD ...
    MAXLEN ~``), each the events of one call (a dispatch, a batch of acks), so at least
    this many events."""

    def __attrs_post_init__(self) -> None:
        if self.reclaim_interval is not None and not 0 < self.reclaim_interval < math.inf:
            raise ValueError(
                f"reclaim_interval must be > 0 and finite, got {self.reclaim_interval!r}"
            )
        if self.sync_threads is not None and self.sync_threads < 1:
            raise ValueError(f"sync_threads must be >= 1, got {self.sync_threads!r}")
        if self.default_timeout is not None and not 0 < self.default_timeout < math.inf:
            raise ValueError(
                f"default_timeout must be > 0 and finite, got {self.default_timeout!r}"
            )
        if self.target_wait is not None and not 0 < self.target_wait < math.inf:
            raise ValueError(f"target_wait must be > 0 and finite, got {self.target_wait!r}")
        if self.max_instances is not None and self.max_instances < 1:
            raise ValueError(f"max_instances must be >= 1, got {self.max_instances!r}")
        if self.shards > 1 and self.key_layout == "go":
            raise ValueError(
                f"shards={self.shards} needs key_layout='cluster' or None, got 'go': the "
                "Go library's layout has one stream per queue, and a Go fleet cannot read "
                "a sharded group"
            )
        if self.max_workers and self.max_workers < self.min_workers:
            raise ValueError(
                f"max_workers must be >= min_workers ({self.min_workers}), got {self.max_workers!r}"
            )

    @property
    def requested_layout(self) -> KeyLayout | None:
        """The key layout to ask the backend for: ``key_layout``, or ``"cluster"`` for a
        sharded group (whose shards' tags only that layout has), on any server."""
        return "cluster" if self.shards > 1 else self.key_layout

    @property
    def queue_names(self) -> tuple[str, ...] | None:
        """The configured queues in priority order (by weight, heaviest first, when
        weighted), or ``None`` for the backend's one queue."""
        queues = self.queues
        if isinstance(queues, dict):
            return tuple(sorted(queues, key=lambda q: -queues[q]))
        return queues

    def default_queue(self, own: str) -> str | None:
        """The queue of a task registered without ``queue=`` (its dispatches, periodic
        ticks and retries), given the backend's own queue ``own``: ``None`` (that
        queue) when :attr:`queues` is ``None`` or names it, else the first queue
        :attr:`queues` names, as written, so such a task never goes to a stream this
        runner does not read."""
        if self.queues is None or own in self.queues:
            return None
        return next(iter(self.queues))

    def queue_of(self, task_queue: str | None, own: str) -> str | None:
        """The queue of a task whose own is ``task_queue``: it, else
        :meth:`default_queue` (``None``: the backend's own queue ``own``)."""
        return task_queue if task_queue is not None else self.default_queue(own)

    @property
    def queue_weights(self) -> tuple[int, ...] | None:
        """The weights of :attr:`queue_names`, in their order; ``None`` unless weighted."""
        if not isinstance(self.queues, dict):
            return None
        names = self.queue_names or ()
        return tuple(self.queues[q] for q in names)

    @property
    def effective_reclaim_interval(self) -> float:
        """Seconds between a fetcher's looks for stale messages."""
        if self.reclaim_interval is not None:
            return self.reclaim_interval
        return self.reclaim_delay / 2

    def consumer_name(self, fetcher_id: int) -> str:
        """The consumer name of fetcher ``fetcher_id`` (ids start at 1)."""
        return f"{self.consumer_group}_{self.host}_{fetcher_id}"


class ConfigHolder:
    """The one place a runner's parts read its configuration from.

    :meth:`TaskRunner.configure <taskrunner.TaskRunner.configure>` replaces
    :attr:`current`; every part (registry, dispatcher, worker, acker,
    scheduler, stream sharing) holds this object and reads ``current`` when
    it needs a field, so a new field reaches every part without anyone
    having to copy it over. While serving, ``current`` does not change.

    Args:
        config: The configuration to start with.
    """

    __slots__ = ("current",)

    def __init__(self, config: TaskRunnerConfig) -> None:
        self.current = config
        """The runner's configuration now."""
