"""Lease timing (pure, no I/O): the intervals and how long a term is trusted."""

from __future__ import annotations

import random

import pytest

from taskrunner._fleet.lease import lease_intervals, term_valid_until, validity_margin


def test_lease_intervals_are_about_half_the_ttl() -> None:
    rng = random.Random(1)
    for _ in range(100):
        renew, retry = lease_intervals(5, rng)
        assert 2.25 <= renew <= 2.5
        assert 2.25 <= retry <= 2.75


@pytest.mark.parametrize(
    ("ttl", "margin"),
    [
        (5.0, 0.25),  # capped at a quarter of a second
        (100.0, 0.25),
        (2.0, 0.1),  # 5 % of a short lease
        (1.0, 0.05),
        (0.1, 0.005),
    ],
)
def test_validity_margin(ttl: float, margin: float) -> None:
    assert validity_margin(ttl) == pytest.approx(margin)


@pytest.mark.parametrize(
    ("sent", "ttl", "valid_until"),
    [
        (0.0, 5.0, 4.75),
        (100.0, 5.0, 104.75),  # counted from when the request was sent
        (10.0, 1.0, 10.95),
    ],
)
def test_a_term_ends_before_the_store_expires_the_lease(
    sent: float, ttl: float, valid_until: float
) -> None:
    assert term_valid_until(sent, ttl) == pytest.approx(valid_until)
    assert term_valid_until(sent, ttl) < sent + ttl
