"""The worker tuner's rule, the aggregator's tuning decisions and timing helpers
(pure, no I/O)."""

from __future__ import annotations

import math
from typing import Any

import pytest

from taskrunner._config import TaskRunnerConfig
from taskrunner._fleet.tuning import (
    TuningDecision,
    aggregator_interval,
    compute_tuned_workers,
    cooldown_elapsed,
    follow_capacity,
    round_half_away_from_zero,
    tune,
    tuning_enabled,
    tuning_ttl,
)


def _tune(
    predicted_wait: float,
    *,
    capacity: int = 10,
    replicas: int = 1,
    min_workers: int = 1,
    max_workers: int = 100,
    desired: float = 100.0,
    tolerance: float = 10.0,
) -> TuningDecision:
    return compute_tuned_workers(
        capacity=capacity,
        replicas=replicas,
        min_workers=min_workers,
        max_workers=max_workers,
        predicted_wait=predicted_wait,
        desired=desired,
        tolerance=tolerance,
    )


@pytest.mark.parametrize(
    ("min_workers", "max_workers", "desired", "tolerance", "expected"),
    [
        (1, 10, 5.0, 1.0, True),
        (1, 1, 5.0, 0.0, True),  # min == max and tolerance 0 are allowed
        (0, 10, 5.0, 1.0, False),  # min_workers must be positive
        (5, 4, 5.0, 1.0, False),  # max below min
        (1, 10, 0.0, 1.0, False),  # no desired wait
        (1, 10, 5.0, -0.1, False),  # negative tolerance
        (1, 10, math.nan, 1.0, False),
        (1, 10, 5.0, math.nan, False),
    ],
)
def test_tuning_enabled(
    min_workers: int, max_workers: int, desired: float, tolerance: float, expected: bool
) -> None:
    enabled = tuning_enabled(
        min_workers=min_workers,
        max_workers=max_workers,
        desired_wait_time=desired,
        tolerance=tolerance,
    )
    assert enabled is expected


@pytest.mark.parametrize(
    ("predicted_wait", "expected"),
    [(120.0, 11), (80.0, 9), (151.0, 15), (49.0, 5)],
    ids=["above band, target d+t", "below band, target d-t", "far above", "far below"],
)
def test_spec_examples(predicted_wait: float, expected: int) -> None:
    assert _tune(predicted_wait).capacity == expected


@pytest.mark.parametrize(
    ("predicted_wait", "expected"),
    [
        (90.0, 10),  # d - t: inclusive lower edge
        (110.0, 10),  # d + t: inclusive upper edge
        (100.0, 10),
        (89.999, 10),  # just below: 10 * 89.999 / 90 rounds back to 10
        (110.001, 10),
        (80.9, 9),  # 10 * 80.9 / 90 = 8.99
        (150.0, 14),  # not > 1.5 d: target d + t, 13.6 -> 14
        (50.0, 6),  # not < 0.5 d: target d - t, 5.6 -> 6
    ],
)
def test_band_edges(predicted_wait: float, expected: int) -> None:
    assert _tune(predicted_wait).capacity == expected


@pytest.mark.parametrize(
    ("predicted_wait", "replicas", "expected"),
    [
        (45.0, 1, 5),  # 4.5: Go rounds half away from zero; round() would give 4
        (45.0, 2, 5),  # inner 20 * 45 / 100 = 9, then 9 / 2 = 4.5 -> 5
        (25.0, 1, 3),  # 2.5 -> 3, not 2
        (151.0, 3, 15),  # 45.3 -> 45, 45 / 3 = 15
        (120.0, 4, 11),  # 43.6 -> 44, 44 / 4 = 11
        (200.0, 3, 20),  # 60 / 3 = 20
    ],
)
def test_rounding_and_replication(predicted_wait: float, replicas: int, expected: int) -> None:
    assert _tune(predicted_wait, replicas=replicas).capacity == expected


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (0.0, 0),
        (0.4, 0),
        (0.5, 1),
        (1.5, 2),
        (2.5, 3),
        (4.5, 5),
        (0.49999999999999994, 0),  # floor(x + 0.5) would say 1
        (-0.5, -1),
        (-2.5, -3),
        (-2.4, -2),
        (1e20, 10**20),
    ],
)
def test_round_half_away_from_zero(value: float, expected: int) -> None:
    assert round_half_away_from_zero(value) == expected


@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [
        ({"predicted_wait": 1000.0, "max_workers": 12}, 12),  # wants 100
        ({"predicted_wait": 1.0, "min_workers": 4}, 4),  # wants 0
        ({"predicted_wait": 1.0}, 1),  # 0.1 rounds to 0, clamped to min 1
        ({"predicted_wait": math.inf, "max_workers": 40}, 40),
        (
            {"predicted_wait": 1e308, "capacity": 10**6, "max_workers": 40},
            40,
        ),  # scaled overflows to inf
    ],
)
def test_clamped_to_min_and_max(kwargs: dict[str, float], expected: int) -> None:
    assert _tune(**kwargs).capacity == expected  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("capacity", "min_workers", "expected"),
    [
        (10, 1, 9),
        (100, 1, 90),
        (15, 1, 13),  # int(13.5): truncation, not rounding
        (1, 1, 1),  # int(0.9) = 0, floored at min
        (10, 10, 10),
        (10, 5, 9),
        (7, 7, 7),
    ],
)
@pytest.mark.parametrize("predicted_wait", [0.0, -3.0])
def test_nothing_waiting_shrinks_ten_percent(
    predicted_wait: float, capacity: int, min_workers: int, expected: int
) -> None:
    decision = _tune(predicted_wait, capacity=capacity, min_workers=min_workers)
    assert decision.capacity == expected
    assert "nothing waiting" in decision.reason


def test_out_of_range_cur_is_brought_back_into_range() -> None:
    assert _tune(100.0, capacity=50, max_workers=20).capacity == 20  # in band, but above max
    assert _tune(100.0, capacity=2, min_workers=5).capacity == 5
    assert _tune(0.0, capacity=50, max_workers=20).capacity == 20  # shrink 10% would give 45


@pytest.mark.parametrize(
    ("predicted_wait", "desired", "tolerance"),
    [
        (0.001, 5.0, 10.0),  # d - t < 0: the band starts at 0
        (3.0, 5.0, 10.0),
        (15.0, 5.0, 10.0),  # inclusive upper edge
        (1e-300, 5.0, 5.0),  # d - t == 0
    ],
)
def test_lower_band_clamped_at_zero_never_targets_zero(
    predicted_wait: float, desired: float, tolerance: float
) -> None:
    # With t >= d the below-band target max(0, d - t) would be 0; no positive
    # prediction is below a band that starts at 0, so it keeps capacity instead of
    # dividing by zero.
    decision = _tune(predicted_wait, desired=desired, tolerance=tolerance)
    assert decision.capacity == 10
    assert "within" in decision.reason


def test_above_a_band_starting_at_zero_still_scales() -> None:
    # d 5, t 10: band [0, 15]; predicted_wait 20 is above it and > 1.5 d, so the target is d
    assert _tune(20.0, desired=5.0, tolerance=10.0).capacity == 40


@pytest.mark.parametrize(
    ("kwargs", "reason_part"),
    [
        ({"capacity": 0}, "not positive"),
        ({"capacity": -3}, "not positive"),
        ({"replicas": 0}, "replication"),
        ({"predicted_wait": math.nan}, "NaN"),
        ({"min_workers": 0}, "disabled"),
        ({"max_workers": 0}, "disabled"),
        ({"desired": 0.0}, "disabled"),
        ({"tolerance": -1.0}, "disabled"),
        ({"desired": math.nan}, "disabled"),
    ],
)
def test_invalid_input_passes_cur_through(kwargs: dict[str, float], reason_part: str) -> None:
    args: dict[str, float] = {"predicted_wait": 1000.0, **kwargs}
    decision = _tune(**args)  # type: ignore[arg-type]
    capacity = int(kwargs.get("capacity", 10))
    assert decision.capacity == capacity
    assert reason_part in decision.reason


def test_decision_reason_explains_the_change() -> None:
    decision = _tune(151.0)
    capacity, reason = decision  # a plain (int, str) tuple as well
    assert capacity == 15
    assert "above" in reason
    assert "target 100" in reason
    assert "10 -> 15" in reason


@pytest.mark.parametrize(
    ("threshold", "ttl", "interval"),
    [
        (0.0, 120.0, 60.0),  # two ticks, or followers would miss the value
        (10.0, 20.0, 5.0),
        (20.0, 20.0, 10.0),
        (30.0, 30.0, 15.0),
        (600.0, 600.0, 300.0),
        (-5.0, 120.0, 60.0),  # nonsense threshold: never a busy loop
    ],
)
def test_ttl_and_aggregator_interval(threshold: float, ttl: float, interval: float) -> None:
    assert tuning_ttl(threshold) == ttl
    assert aggregator_interval(threshold) == interval


@pytest.mark.parametrize(
    ("now", "last_change", "cooldown", "expected"),
    [
        (100.0, None, 10.0, True),  # never changed
        (100.0, 95.0, 10.0, False),
        (100.0, 90.0, 10.0, True),  # exactly the cooldown: allowed
        (100.0, 89.0, 10.0, True),
        (100.0, 100.0, 0.0, True),  # no cooldown
        (100.0, 105.0, 10.0, False),  # clock behind the last change
    ],
)
def test_cooldown_elapsed(
    now: float, last_change: float | None, cooldown: float, expected: bool
) -> None:
    assert cooldown_elapsed(now=now, last_change=last_change, cooldown=cooldown) is expected


# The aggregator's decisions ----------------------------------------------------------


def config(**overrides: Any) -> TaskRunnerConfig:
    values: dict[str, Any] = {
        "consumer_group": "g",
        "num_workers": 10,
        "min_workers": 2,
        "max_workers": 20,
        "desired_wait_time": 0.1,
        "desired_wait_time_tolerance": 0.01,
        "tuning_cooldown": 10.0,
        "long_queue_threshold": 2.0,
    }
    values.update(overrides)
    return TaskRunnerConfig(**values)


@pytest.mark.parametrize(
    ("published", "current", "overrides", "expected"),
    [
        (None, 10, {}, None),
        (10, 10, {}, None),
        (12, 10, {}, 12),
        (50, 10, {}, 20),  # clamped to this instance's max
        (1, 10, {}, 2),  # and min
        (0, 10, {}, 2),
        (-3, 10, {}, 2),
        (50, 20, {}, None),  # clamped value is the current one
        (12, 10, {"min_workers": 0}, None),  # tuning off here: ignore the fleet
        (12, 10, {"desired_wait_time": 0.0}, None),
        (12, 10, {"max_workers": 0, "min_workers": 0}, None),
    ],
)
def test_follow_capacity(
    published: int | None, current: int, overrides: dict[str, Any], expected: int | None
) -> None:
    assert follow_capacity(published, current=current, config=config(**overrides)) == expected


@pytest.mark.parametrize(
    ("predicted_wait", "expected"),
    # The spec's examples: capacity 10, replicas 1, d 100 ms, t 10 ms.
    [(120.0, 11), (80.0, 9), (151.0, 15), (49.0, 5), (100.0, 10), (0.0, 9)],
)
def test_tune_converts_seconds_to_ms(predicted_wait: float, expected: int) -> None:
    decision = tune(
        now=100.0,
        last_change=None,
        config=config(),
        capacity=10,
        replicas=1,
        predicted_wait=predicted_wait,
    )
    assert decision is not None
    assert decision.capacity == expected


@pytest.mark.parametrize(
    ("last_change", "now", "allowed"),
    [(None, 0.0, True), (90.0, 99.9, False), (90.0, 100.0, True), (90.0, 150.0, True)],
)
def test_tune_respects_the_cooldown(last_change: float | None, now: float, allowed: bool) -> None:
    decision = tune(
        now=now,
        last_change=last_change,
        config=config(),
        capacity=10,
        replicas=1,
        predicted_wait=500.0,
    )
    assert (decision is not None) is allowed


def test_tune_off_without_tuning_config() -> None:
    decision = tune(
        now=0,
        last_change=None,
        config=config(min_workers=0),
        capacity=10,
        replicas=1,
        predicted_wait=1e6,
    )
    assert decision is None
