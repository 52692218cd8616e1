"""Lease timing: when a leader renews, when a follower knocks, and when a term ends.

Theory of operation (see :mod:`taskrunner._serve.leadership` for the keeper
that acts on it). A lease of ``ttl`` seconds is renewed every ``ttl / 2`` and
followers try to take it about as often, each with jitter so a fleet started
together does not knock in lockstep. A term is never trusted up to the
store's expiry: every acquire or renew that succeeds makes the term valid
until (when the request was *sent*) + ``ttl`` - a margin, which is never
later than the moment the store expires the key, whatever the round trip
took. The margin is room for the two clocks running at slightly different
rates.

Pure: no I/O, table-tested in ``tests/test_lease.py``.
"""

from __future__ import annotations

import random

__all__ = ["lease_intervals", "term_valid_until", "validity_margin"]


def lease_intervals(ttl: float, rng: random.Random | None = None) -> tuple[float, float]:
    """(renew interval, follower retry interval) for a lease of ``ttl`` seconds.

    Both about ``ttl / 2`` with +-10 % jitter, so a fleet started together
    does not knock in lockstep.
    """
    r = rng or random
    return ttl / 2 * r.uniform(0.9, 1.0), ttl / 2 * r.uniform(0.9, 1.1)


def validity_margin(ttl: float) -> float:
    """How long before the store's expiry a leader considers its term over
    (room for clock-rate differences between this process and the store)."""
    return min(0.25, ttl * 0.05)


def term_valid_until(sent: float, ttl: float) -> float:
    """Until when a term is certainly still ours, after an acquire or renew
    of a ``ttl``-second lease that was sent at ``sent`` succeeded."""
    return sent + ttl - validity_margin(ttl)
