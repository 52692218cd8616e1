"""The autoscaling rule (taskrunner._fleet.scaling): the need and the damping, as tables."""

from __future__ import annotations

import itertools
import math

import pytest

from taskrunner import TaskRunnerConfig
from taskrunner._fleet.scaling import ScalingState, growth_bound, instances_needed, next_desired

# instances_needed --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("replicas", "wait_ms", "avg_ms", "target_s", "need"),
    [
        (3, 0.0, 500.0, 5.0, 0.0),  # nothing in the stream
        (3, -1.0, 500.0, 5.0, 0.0),  # nonsense counts as nothing
        # Over the target: the wait falls with the instance count, ceil(n * w / t).
        (2, 10_000.0, 1000.0, 5.0, 4.0),
        (2, 10_001.0, 1000.0, 5.0, 5.0),
        (1, 60_000.0, 1000.0, 5.0, 12.0),
        (4, 5_000.0, 100.0, 5.0, 4.0),  # exactly at the target: no instance more
        (3, 15_000.0, 1000.0, 5.0, 9.0),
        # Under the target: the busy slots hold the floor, ceil(n * min(1, w / avg)).
        (4, 500.0, 1000.0, 5.0, 2.0),  # half the slots busy -> 2 of 4
        (4, 900.0, 1000.0, 5.0, 4.0),  # 90 % busy: keep all 4
        (4, 2000.0, 1000.0, 5.0, 4.0),  # every slot busy and a short queue: keep 4
        (4, 100.0, 1000.0, 5.0, 1.0),
        (10, 300.0, 1000.0, 5.0, 3.0),
        # Nothing timed yet: the prediction's 1 ms placeholder is the average.
        (2, 0.5, 0.0, 5.0, 1.0),
        (2, 3.0, 0.0, 5.0, 2.0),
        # replicas below 1 count as 1 (the leader itself is live).
        (0, 10_000.0, 1000.0, 5.0, 2.0),
        (3, math.inf, 1000.0, 5.0, math.inf),
    ],
)
def test_instances_needed(
    replicas: int, wait_ms: float, avg_ms: float, target_s: float, need: float
) -> None:
    assert (
        instances_needed(
            replicas=replicas, predicted_wait=wait_ms, avg_timing=avg_ms, target_wait=target_s
        )
        == need
    )


def test_instances_needed_nan() -> None:
    need = instances_needed(replicas=2, predicted_wait=math.nan, avg_timing=1.0, target_wait=1.0)
    assert math.isnan(need)


def test_the_need_does_not_depend_on_the_instance_count_for_one_backlog() -> None:
    # wait * n is the same backlog whatever n: more instances do not move the need.
    needs = {
        instances_needed(
            replicas=n, predicted_wait=60_000.0 / n, avg_timing=1000.0, target_wait=5.0
        )
        for n in range(1, 13)
    }
    assert needs == {12.0}


@pytest.mark.parametrize(
    ("replicas", "max_instances", "bound"),
    [(1, None, 5), (2, None, 6), (4, None, 8), (5, None, 10), (10, None, 20), (0, None, 5),
     (10, 12, 12), (10, 30, 20), (1, 1, 1)],
)  # fmt: skip
def test_growth_bound(replicas: int, max_instances: int | None, bound: int) -> None:
    assert growth_bound(replicas, max_instances) == bound


# next_desired ---------------------------------------------------------------------------

HOLD = 60.0
S = ScalingState


@pytest.mark.parametrize(
    ("now", "state", "need", "replicas", "max_instances", "expected"),
    [
        # The first decision takes the need at once, bounded to [1, growth bound].
        (0.0, S(), 3.0, 3, None, S(desired=3)),
        (0.0, S(), 0.0, 3, None, S(desired=1)),
        (0.0, S(), 2.4, 3, None, S(desired=3)),  # a fraction of an instance is one more
        (0.0, S(), 50.0, 3, None, S(desired=7)),  # at most max(2n, n + 4)
        (0.0, S(), 50.0, 3, 5, S(desired=5)),  # and never above max_instances
        (0.0, S(), math.inf, 10, None, S(desired=20)),
        # Up: at once, whatever the hold.
        (10.0, S(desired=3), 5.0, 3, None, S(desired=5)),
        (10.0, S(desired=3, lower_since=5.0, lower_peak=2), 4.0, 3, None, S(desired=4)),
        # Equal: kept, and a running hold ends.
        (10.0, S(desired=3, lower_since=5.0, lower_peak=2), 3.0, 3, None, S(desired=3)),
        # Down: the hold starts, the value stays.
        (10.0, S(desired=6), 2.0, 6, None, S(desired=6, lower_since=10.0, lower_peak=2)),
        # ... the highest need meanwhile is remembered ...
        (
            40.0,
            S(desired=6, lower_since=10.0, lower_peak=2),
            4.0,
            6,
            None,
            S(desired=6, lower_since=10.0, lower_peak=4),
        ),
        (
            69.9,
            S(desired=6, lower_since=10.0, lower_peak=4),
            1.0,
            6,
            None,
            S(desired=6, lower_since=10.0, lower_peak=4),
        ),
        # ... and after the hold it steps to that peak: one step, a fresh hold after it.
        (70.0, S(desired=6, lower_since=10.0, lower_peak=4), 1.0, 6, None, S(desired=4)),
        # A step never goes below half the current value.
        (70.0, S(desired=10, lower_since=10.0, lower_peak=1), 1.0, 10, None, S(desired=5)),
        (70.0, S(desired=5, lower_since=10.0, lower_peak=1), 1.0, 5, None, S(desired=3)),
        (70.0, S(desired=2, lower_since=10.0, lower_peak=1), 0.0, 2, None, S(desired=1)),
        # A published value above max_instances (another leader's config) drops at once.
        (10.0, S(desired=12), 3.0, 3, 8, S(desired=8, lower_since=10.0, lower_peak=3)),
        (10.0, S(desired=12), 9.0, 6, 8, S(desired=8)),  # growth bound 12, cap 8
        # One above the relative bound (an autoscaler slow to start them) comes down by the
        # hold rule like any lower need.
        (10.0, S(desired=20), 30.0, 3, None, S(desired=20, lower_since=10.0, lower_peak=7)),
        # A NaN need changes nothing.
        (10.0, S(desired=4, lower_since=5.0, lower_peak=2), math.nan, 4, None,
         S(desired=4, lower_since=5.0, lower_peak=2)),
        (10.0, S(), math.nan, 4, None, S()),
    ],
)  # fmt: skip
def test_next_desired(
    now: float,
    state: ScalingState,
    need: float,
    replicas: int,
    max_instances: int | None,
    expected: ScalingState,
) -> None:
    assert (
        next_desired(
            now=now,
            state=state,
            need=need,
            replicas=replicas,
            max_instances=max_instances,
            hold=HOLD,
        )
        == expected
    )


def test_a_zero_hold_steps_down_at_once() -> None:
    state = next_desired(
        now=5.0, state=S(desired=8), need=1.0, replicas=8, max_instances=None, hold=0.0
    )
    assert state == S(desired=4)


def test_a_wobbling_need_never_turns_the_value_around() -> None:
    """Needs that wobble between 4 and 6, a tick every 2 s for 10 minutes: the value goes up
    to 6 at the first tick and stays (every hold sees a 6 again before it ends)."""
    state = S(desired=4)
    published = []
    for tick in range(300):
        need = (4.0, 5.0, 6.0, 5.0)[tick % 4] if tick % 25 else 6.0
        state = next_desired(
            now=tick * 2.0, state=state, need=need, replicas=5, max_instances=None, hold=HOLD
        )
        published.append(state.desired)
    changes = [b for a, b in itertools.pairwise(published) if a != b]
    assert published[0] == 6
    assert changes == [], published


def test_down_from_high_to_low_within_the_documented_bound() -> None:
    """From 16 to a need of 1: halving steps, one hold each: 8, 4, 2, 1 after 4 holds."""
    state = S(desired=16)
    t = 0.0
    history: list[tuple[float, int | None]] = [(t, 16)]
    while state.desired != 1:
        t += 2.0
        state = next_desired(
            now=t, state=state, need=1.0, replicas=16, max_instances=None, hold=HOLD
        )
        if state.desired != history[-1][1]:
            history.append((t, state.desired))
    assert [d for _, d in history] == [16, 8, 4, 2, 1]
    assert t <= 4 * (HOLD + 2.0)


# The configuration -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("target_wait", 0, "target_wait must be > 0 and finite, got 0.0"),
        ("target_wait", -1.5, "target_wait must be > 0 and finite, got -1.5"),
        ("target_wait", math.inf, "target_wait must be > 0 and finite, got inf"),
        ("target_wait", math.nan, "target_wait must be > 0 and finite, got nan"),
        ("max_instances", 0, "max_instances must be >= 1, got 0"),
        ("scale_down_hold", -1, "scale_down_hold must be >= 0 and finite, got -1.0"),
    ],
)
def test_an_autoscaling_setting_out_of_range_names_the_field_and_the_value(
    field: str, value: float, message: str
) -> None:
    with pytest.raises(ValueError, match=f"^{field} ") as info:
        TaskRunnerConfig(consumer_group="g", **{field: value})
    assert str(info.value) == message


def test_autoscaling_is_off_by_default() -> None:
    config = TaskRunnerConfig(consumer_group="g")
    assert (config.target_wait, config.max_instances, config.scale_down_hold) == (None, None, 300.0)
    assert TaskRunnerConfig(consumer_group="g", target_wait=2).target_wait == 2.0
