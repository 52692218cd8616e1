"""How a fetcher of several queues shares one read among them: strict or weighted priority.

Theory of operation (the fetcher that acts on it is
:mod:`taskrunner._serve.fetcher`, the read itself
:meth:`~taskrunner.backends.MessageQueue.read_many`). Before each read a
fetcher has reserved some pool slots; the plan says how many of them each
queue gets first (its *quota*) and in which order the queues fill whatever
the quotas left unused (a queue with fewer entries than its quota gives the
rest away, so no slot idles while any queue has work):

- *strict* (``queues=("critical", "default", "low")``): no quotas, and the
  queues in priority order, so a queue is read only when every queue before
  it is empty;
- *weighted* (``queues={"critical": 6, "default": 3, "low": 1}``): the slots
  are dealt one by one by smooth weighted round robin (nginx's: each turn
  every queue gains its weight, the one with the most credit gets the slot
  and pays the sum of the weights), keeping each queue's credit from one
  read to the next. While every queue has work, each gets its weight's share
  of the reads however few slots a read has (one at a time when the pool is
  full), and every queue with a weight gets a turn within one round of the
  weights: none starves. The order for the rest is the weights', heaviest
  first.

Paused queues take no part. Pure: no I/O; the round robin's credit is the
only state, held by one :class:`WeightedShares` per fetcher. Table-tested in
``tests/test_priorities.py``.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import NamedTuple

__all__ = ["ReadPlan", "WeightedShares", "read_plan"]


class ReadPlan(NamedTuple):
    """What one read asks :meth:`~taskrunner.backends.MessageQueue.read_many` for."""

    queues: tuple[str, ...]
    """The queues to read, in the order that fills what the quotas leave."""
    quotas: tuple[int, ...]
    """How many entries each of :attr:`queues` gets first."""


class WeightedShares:
    """Smooth weighted round robin over a fixed set of queues (see the module docstring).

    Args:
        names: The queues, heaviest first.
        weights: Their weights (integers >= 1), in the same order.
    """

    def __init__(self, names: Sequence[str], weights: Sequence[int]) -> None:
        if len(names) != len(weights):
            raise ValueError(f"one weight per queue: {names!r}, {weights!r}")
        self.weights = dict(zip(names, weights, strict=True))
        self.credit = dict.fromkeys(names, 0)

    def deal(self, slots: int, active: Sequence[str]) -> dict[str, int]:
        """Deal ``slots`` among the ``active`` queues, one at a time.

        Returns:
            How many slots each active queue got.
        """
        total = sum(self.weights[q] for q in active)
        dealt = dict.fromkeys(active, 0)
        for _ in range(slots if total else 0):
            for q in active:
                self.credit[q] += self.weights[q]
            best = max(active, key=lambda q: self.credit[q])  # first of the heaviest on ties
            self.credit[best] -= total
            dealt[best] += 1
        return dealt


def read_plan(
    names: Sequence[str],
    slots: int,
    paused: Collection[str],
    shares: WeightedShares | None,
) -> ReadPlan:
    """The plan of one read of ``slots`` entries over the queues ``names``.

    Args:
        names: The runner's queues in priority order (heaviest first when weighted).
        slots: How many entries the read may return in all.
        paused: Queues not to read.
        shares: The fetcher's round robin when weighted; ``None`` for strict order.
    """
    active = tuple(q for q in names if q not in paused)
    if shares is None:
        return ReadPlan(queues=active, quotas=(0,) * len(active))
    dealt = shares.deal(slots, active)
    return ReadPlan(queues=active, quotas=tuple(dealt[q] for q in active))
