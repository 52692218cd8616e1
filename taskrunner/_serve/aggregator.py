"""The aggregator: metrics resets, worker tuning and the long-queue hook.

Theory of operation: one service per instance ticks every
:func:`~taskrunner._fleet.tuning.aggregator_interval` (half ``long_queue_threshold``,
60 s when it is 0). Each tick:

1. *Every instance* reads the capacity the leader published (if it is live)
   and, when tuning is on here, resizes its own pool to it, clamped to its own
   ``[min_workers, max_workers]`` (:func:`~taskrunner._fleet.tuning.follow_capacity`).
2. *Every instance* asks whether ``metrics_reset_interval`` has passed on its
   own reset clock. When it has, the leader zeroes the metrics hash and every
   instance moves its clock to now. Followers keeping the clock in step is
   what stops a newly elected leader from wiping the hash the moment it takes
   over (:func:`taskrunner._fleet.stats.should_reset_metrics`).
3. *The leader only* computes :class:`~taskrunner._fleet.stats.Stats`; when tuning
   is on and ``tuning_cooldown`` has passed since the pool last changed, it
   picks a capacity (:func:`~taskrunner._fleet.tuning.tune`),
   applies it at once and publishes it (TTL
   :func:`~taskrunner._fleet.tuning.tuning_ttl`) for the followers; and when the
   predicted wait exceeds ``long_queue_threshold`` it calls
   ``long_queue_hook(stats)`` (:func:`~taskrunner._fleet.stats.hook_due`).
4. *The leader only*, with ``target_wait`` set: turns the same prediction into
   the instance count an autoscaler should run
   (:func:`~taskrunner._fleet.scaling.instances_needed`, damped by
   :func:`~taskrunner._fleet.scaling.next_desired`) and publishes it on every
   tick, with the tuning value's TTL. A new leader starts from the value its
   predecessor published; an instance that is not the leader forgets its own.

The decisions are the pure functions of :mod:`taskrunner._fleet.tuning` and
:mod:`taskrunner._fleet.stats`; this module is the I/O shell around them. Nothing that goes wrong
in a tick is fatal: backend errors and hook exceptions are logged and the
next tick starts afresh. Leadership is read once per tick, so a leader that
loses its lease mid-tick may finish that tick's publish: harmless, since the
next leader's first decision overwrites it.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from typing import Protocol

import attrs
import trio

from taskrunner import _wire
from taskrunner._config import TaskRunnerConfig
from taskrunner._execution.hooks import call_hook_safely
from taskrunner._fleet.scaling import ScalingState, instances_needed, next_desired
from taskrunner._fleet.stats import Stats, compute_stats, hook_due, should_reset_metrics
from taskrunner._fleet.tuning import (
    aggregator_interval,
    follow_capacity,
    tune,
    tuning_on,
    tuning_ttl,
)
from taskrunner.backends import Backend
from taskrunner.errors import BackendError

__all__ = [
    "AggregatorHost",
    "AggregatorState",
    "run",
    "tick",
    "timing_statistics",
]

log = logging.getLogger(__name__)


class AggregatorHost(Protocol):
    """What the aggregator needs from the runner (``TaskRunner`` satisfies it)."""

    @property
    def config(self) -> TaskRunnerConfig:
        """The instance's configuration (group, threshold, hook, tuning limits)."""
        ...

    @property
    def backend(self) -> Backend:
        """Where the metrics hash and the published capacity live."""
        ...

    @property
    def is_leader(self) -> bool:
        """Whether this instance leads its group right now."""
        ...

    @property
    def capacity(self) -> int:
        """The current worker-pool capacity."""
        ...

    @property
    def task_names(self) -> list[str]:
        """The registered task names (whose metrics fields a reset zeroes)."""
        ...

    def resize(self, capacity: int) -> None:
        """Set the worker-pool capacity (>= 1)."""
        ...

    async def get_timing_statistics(self) -> Stats:
        """The group's :class:`Stats` as of now (may raise ``BackendError``)."""
        ...

    async def get_number_of_replications(self) -> int:
        """Live instances of the fleet, >= 1 (may raise ``BackendError``)."""
        ...


async def timing_statistics(
    backend: Backend,
    group: str,
    task_names: Iterable[str],
    workers: int,
    replication: int,
    *,
    queues: Sequence[str | None] = (None,),
) -> Stats:
    """Read the metrics hash and the streams' lengths and compute :class:`Stats`.

    The queue length is the sum of the lengths of ``queues``: a runner passes
    the queues it reads that are not paused, so work waiting on a pause is
    left out, and so is work waiting on a limit or a paused task, which waits
    in the delayed set, not in a stream. Such waits never grow the pool.

    Args:
        backend: Where the hash and the streams live.
        group: The consumer group (names the hash).
        task_names: The registered task names; only these enter the averages.
        workers: The current pool capacity (``num_workers`` before start).
        replication: Live instances (values below 1 count as 1).
        queues: The queues whose waiting entries count (``None``: the backend's).

    Raises:
        BackendError: a read failed.
    """
    metrics = await backend.read_metrics(group)
    queue_len = 0
    for queue in queues:
        queue_len += await backend.length(group, queue=queue)
    return compute_stats(
        metrics=metrics,
        group=group,
        task_names=task_names,
        queue_len=queue_len,
        workers=workers,
        replication=replication,
    )


@attrs.define(kw_only=True)
class AggregatorState:
    """What one instance's aggregator remembers between ticks (trio clock, seconds)."""

    last_reset: float
    """When this instance's reset clock last moved (its start, at first)."""

    last_change: float | None = None
    """When the aggregator last changed the pool capacity (tuned or followed), if ever."""

    scaling: ScalingState | None = None
    """The autoscaling decisions' state while this instance leads (``target_wait`` set);
    ``None`` otherwise, so a term starts from the published value."""


# The I/O shell ---------------------------------------------------------------


async def run(
    host: AggregatorHost, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
) -> None:
    """Tick until cancelled (see the module docstring for what a tick does).

    Calls ``task_status.started()`` at once; the first tick comes one
    interval later. Never raises except on cancellation.
    """
    config = host.config
    interval = aggregator_interval(config.long_queue_threshold)
    state = AggregatorState(last_reset=trio.current_time())
    task_status.started()
    while True:
        await trio.sleep(interval)
        await tick(host, state)


async def tick(host: AggregatorHost, state: AggregatorState) -> None:
    """One aggregator tick: follow, reset, and (leader) tune and report."""
    config = host.config
    group = config.consumer_group
    await _follow(host, state)

    now = trio.current_time()
    leader = host.is_leader
    if should_reset_metrics(
        now=now, last_reset=state.last_reset, interval=config.metrics_reset_interval
    ):
        if leader:
            try:
                await host.backend.reset_metrics(group, _wire.reset_fields(host.task_names, group))
                log.info("timing metrics of group %s reset", group)
            except BackendError as exc:
                # The clock stays put, so the next tick tries again.
                log.warning("timing metrics reset of group %s failed: %s", group, exc)
            else:
                state.last_reset = now
        else:
            state.last_reset = now

    if not leader:
        state.scaling = None
        return
    try:
        stats = await host.get_timing_statistics()
        replicas = await host.get_number_of_replications()
    except BackendError as exc:
        log.warning("timing statistics of group %s unavailable: %s", group, exc)
        return
    measured_with = host.capacity
    await _tune(host, state, stats, replicas)
    if config.target_wait is not None:
        await _publish_desired(host, state, stats, replicas, measured_with, config.target_wait)
    if hook_due(stats, config.long_queue_threshold):
        await call_hook_safely("long_queue_hook", config.long_queue_hook, stats)


async def _follow(host: AggregatorHost, state: AggregatorState) -> None:
    config = host.config
    if not tuning_on(config):
        return
    try:
        published = await host.backend.read_tuning(config.consumer_group)
    except BackendError as exc:
        log.warning("could not read the published pool capacity: %s", exc)
        return
    old = host.capacity
    new = follow_capacity(published, current=old, config=config)
    if new is None:
        return
    host.resize(new)
    state.last_change = trio.current_time()
    log.info("worker pool follows the published capacity: %d -> %d", old, new)


async def _publish_desired(
    host: AggregatorHost,
    state: AggregatorState,
    stats: Stats,
    replicas: int,
    measured_with: int,
    target_wait: float,
) -> None:
    config = host.config
    group = config.consumer_group
    try:
        if state.scaling is None:
            # A new term goes on from the predecessor's value, so a failover neither
            # jumps nor restarts the damping from nothing.
            state.scaling = ScalingState(desired=await host.backend.read_desired_instances(group))
        # The stats were taken with the capacity before this tick's tuning: the wait
        # scales inversely with the pool, so count it in the pool size of now.
        wait = stats.predicted_wait_time * measured_with / max(1, host.capacity)
        need = instances_needed(
            replicas=replicas,
            predicted_wait=wait,
            avg_timing=stats.avg_timing,
            target_wait=target_wait,
        )
        old = state.scaling.desired
        state.scaling = next_desired(
            now=trio.current_time(),
            state=state.scaling,
            need=need,
            replicas=replicas,
            max_instances=config.max_instances,
            hold=config.scale_down_hold,
        )
        desired = state.scaling.desired
        if desired is None:  # a NaN need before any value: nothing to say yet
            return
        if desired != old:
            log.info(
                "desired instances of group %s %s -> %d (predicted wait %.0f ms with %d live,"
                " need %g)",
                group,
                "none" if old is None else old,
                desired,
                wait,
                replicas,
                need,
            )
        await host.backend.publish_desired_instances(
            group, desired, tuning_ttl(config.long_queue_threshold)
        )
    except BackendError as exc:
        log.warning("could not publish the desired instances of group %s: %s", group, exc)


async def _tune(host: AggregatorHost, state: AggregatorState, stats: Stats, replicas: int) -> None:
    config = host.config
    now = trio.current_time()
    old = host.capacity
    decision = tune(
        now=now,
        last_change=state.last_change,
        config=config,
        capacity=old,
        replicas=replicas,
        predicted_wait=stats.predicted_wait_time,
    )
    if decision is None:
        return
    if decision.capacity != old:
        host.resize(decision.capacity)
        state.last_change = now
        log.info(
            "tuner resized the worker pool %d -> %d: %s", old, decision.capacity, decision.reason
        )
    try:
        # Published on every decision, changed or not, so the value stays live
        # for followers and an instance that joins later starts from it.
        await host.backend.publish_tuning(
            config.consumer_group, decision.capacity, tuning_ttl(config.long_queue_threshold)
        )
    except BackendError as exc:
        log.warning("could not publish the pool capacity %d: %s", decision.capacity, exc)
