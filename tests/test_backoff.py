"""Retry delays (pure, no I/O): exponential with full jitter, capped."""

from __future__ import annotations

import random

import pytest

from taskrunner._execution.backoff import backoff_delay


class Highest(random.Random):
    """Jitter that always draws the top of its range."""

    def uniform(self, a: float, b: float) -> float:
        return b


@pytest.mark.parametrize(
    ("attempt", "base", "cap", "ceiling"),
    [
        (1, 0.05, 5.0, 0.05),
        (2, 0.05, 5.0, 0.1),
        (3, 0.05, 5.0, 0.2),
        (7, 0.05, 5.0, 3.2),
        (8, 0.05, 5.0, 5.0),  # 6.4, capped
        (100, 0.05, 5.0, 5.0),
        (0, 0.05, 5.0, 0.05),  # attempts below 1 count as the first
        (3, 0.1, 1.0, 0.4),
        (5, 0.1, 1.0, 1.0),
    ],
)
def test_the_ceiling_doubles_up_to_the_cap(
    attempt: int, base: float, cap: float, ceiling: float
) -> None:
    assert backoff_delay(attempt, base=base, cap=cap, rng=Highest()) == pytest.approx(ceiling)


def test_full_jitter_spreads_over_the_whole_range() -> None:
    rng = random.Random(3)
    delays = [backoff_delay(4, rng=rng) for _ in range(1000)]
    assert all(0 <= d <= 0.4 for d in delays)
    assert min(delays) < 0.04
    assert max(delays) > 0.36
