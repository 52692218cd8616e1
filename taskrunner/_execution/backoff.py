"""Retry delays: exponential with full jitter, as a pure function."""

from __future__ import annotations

import random


def backoff_delay(
    attempt: int, *, base: float = 0.05, cap: float = 5.0, rng: random.Random | None = None
) -> float:
    """Seconds to wait before retry number ``attempt`` (1-based).

    Full jitter: uniform in ``[0, min(cap, base * 2 ** (attempt - 1))]``, so
    many instances that failed together do not retry together.
    """
    ceiling = min(cap, base * 2 ** max(0, attempt - 1))
    return (rng or random).uniform(0, ceiling)
