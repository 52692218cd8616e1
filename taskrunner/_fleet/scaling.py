"""The autoscaling rule: how many instances the fleet needs (``desired_instances``).

Theory of operation: with ``TaskRunnerConfig(target_wait=seconds)``, on each
aggregator tick the leader turns the predicted wait it already computes
(:class:`~taskrunner._fleet.stats.Stats`) into the number of instances an
autoscaler should run, and publishes it. Two pure steps:

1. :func:`instances_needed`, the *need*: the predicted wait is
   ``avg * queue_len / (capacity * instances)``, so at a fixed pool size it falls
   in proportion to the instance count, and ``ceil(instances * wait / target)``
   instances bring it under the target. The stream length counts the entries
   that run now as well as those that wait (an entry leaves the stream with its
   ack), so the need never drops below the instances whose slots are busy now,
   ``ceil(instances * min(1, wait / avg))``: a fleet that drained its backlog
   and keeps up with its load is not told to shrink below what the load keeps
   busy, which would only make the backlog (and the need) come back.
2. :func:`next_desired`, the *damping*: the need is bounded to
   ``[1, max_instances]`` and to at most ``max(2 * live, live + 4)`` per decision
   (so one wild reading cannot ask for a hundred instances); a higher need is
   taken at once; a lower one only once every need has stayed below the current
   value for ``scale_down_hold`` seconds, and then by one step to the highest
   need seen meanwhile, never below half the current value. Each step down
   starts a new hold. So the value goes up within one tick, comes down within
   ``hold * log2(high / low)`` (plus a tick per step), and never turns around
   while the need wobbles inside one hold.

Both take the clock reading and state as arguments and return values; the
aggregator (:mod:`taskrunner._serve.aggregator`) does the I/O.
"""

from __future__ import annotations

import math

import attrs

__all__ = [
    "ScalingState",
    "growth_bound",
    "instances_needed",
    "next_desired",
]

# Float noise must not turn an exact fit (wait == target) into one instance more.
_EPSILON = 1e-9


@attrs.frozen(kw_only=True)
class ScalingState:
    """What the leader remembers of its autoscaling decisions between ticks."""

    desired: int | None = None
    """The value published last; ``None`` before the first decision."""

    lower_since: float | None = None
    """Since when every need has been below :attr:`desired` (``None``: it is not)."""

    lower_peak: int = 0
    """The highest (bounded) need seen since :attr:`lower_since`."""


def instances_needed(
    *, replicas: int, predicted_wait: float, avg_timing: float, target_wait: float
) -> float:
    """The instances of the current pool size the fleet needs now (before damping).

    Args:
        replicas: Live instances (heartbeats); below 1 counts as 1.
        predicted_wait: :attr:`Stats.predicted_wait_time <taskrunner.Stats.predicted_wait_time>`
            in ms, computed for ``replicas`` instances of the current pool size.
        avg_timing: :attr:`Stats.avg_timing <taskrunner.Stats.avg_timing>` in ms; 0
            (nothing timed yet) counts as the 1 ms the prediction itself uses.
        target_wait: ``TaskRunnerConfig.target_wait`` in seconds (> 0).

    Returns:
        ``max(ceil(n * wait / target), ceil(n * min(1, wait / avg)))`` with ``n =
        max(1, replicas)``: 0 with nothing in the stream, ``inf`` for an infinite
        wait, NaN for a NaN one (the caller keeps its value then).
    """
    n = max(1, replicas)
    if math.isnan(predicted_wait):
        return math.nan
    if not predicted_wait > 0:
        return 0.0
    if math.isinf(predicted_wait):
        return math.inf
    by_wait = math.ceil(n * predicted_wait / (target_wait * 1000.0) - _EPSILON)
    avg = avg_timing if avg_timing > 0 else 1.0
    busy = math.ceil(n * min(1.0, predicted_wait / avg) - _EPSILON)
    return float(max(by_wait, busy))


def growth_bound(replicas: int, max_instances: int | None) -> int:
    """The most one decision may ask for: ``max(2 * n, n + 4)`` for ``n = max(1, replicas)``
    live instances, and never more than ``max_instances`` (when set)."""
    n = max(1, replicas)
    bound = max(2 * n, n + 4)
    return bound if max_instances is None else min(bound, max_instances)


def next_desired(
    *,
    now: float,
    state: ScalingState,
    need: float,
    replicas: int,
    max_instances: int | None,
    hold: float,
) -> ScalingState:
    """The damping rule: the new ``desired_instances`` (and what to remember for the next tick).

    Args:
        now: The current time in seconds (any clock, the one ``state`` was made on).
        state: What the previous decision returned (a fresh ``ScalingState()`` at first,
            or one seeded with the value a previous leader published).
        need: :func:`instances_needed`.
        replicas: Live instances (for :func:`growth_bound`).
        max_instances: ``TaskRunnerConfig.max_instances``.
        hold: ``TaskRunnerConfig.scale_down_hold`` in seconds.

    Returns:
        The next state; its :attr:`~ScalingState.desired` is the value to publish,
        always in ``[1, growth bound]`` (a stored value above ``max_instances``
        drops to it at once; one above the relative growth bound only comes down
        by the hold rule). A NaN ``need`` leaves ``state`` as it is.
    """
    if math.isnan(need):
        return state
    bound = growth_bound(replicas, max_instances)
    target = bound if need >= bound else max(1, math.ceil(need))
    current = state.desired
    if current is not None and max_instances is not None:
        current = min(current, max_instances)
    if current is None or target >= current:
        return ScalingState(desired=target)
    if state.lower_since is None:
        since, peak = now, target
    else:
        since, peak = state.lower_since, max(state.lower_peak, target)
    if now - since < hold:
        return ScalingState(desired=current, lower_since=since, lower_peak=peak)
    return ScalingState(desired=max(peak, math.ceil(current / 2)))
