"""The workflow counters of :mod:`taskrunner.prometheus`: workflows ended, by outcome.

Theory of operation: every workflow's end is counted by the backend in the atomic
step that ends it (:class:`~taskrunner.backends.WorkflowEnds`: a hash
``taskrunner:<group>:workflow_ends`` on Redis), so each is counted once, whichever
runner finished its last step or cancelled it, and however often a step's finish
was replayed. :class:`~taskrunner.prometheus.RunnerCollector` reads those counts
with the rest of its snapshot (one more round trip per refresh, off the hot path)
and exports them as counters named like the task counters
(``taskrunner_workflows_succeeded_total``...). They are the group's counts, the same
from every runner: aggregate them across instances with ``max``, not ``sum``.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

import prometheus_client
from prometheus_client.core import CounterMetricFamily

__all__ = ["WORKFLOW_OUTCOMES", "workflow_families"]

WORKFLOW_OUTCOMES: tuple[tuple[str, str], ...] = (
    ("succeeded", "Workflows of the group that ended succeeded (the group's count)."),
    ("failed", "Workflows of the group that ended failed (the group's count)."),
    ("cancelled", "Workflows of the group that were cancelled (the group's count)."),
)
"""Each outcome and the help text of its counter."""


def workflow_families(
    group: str, ends: Mapping[str, int] | None
) -> Iterator[prometheus_client.Metric]:
    """``taskrunner_workflows_<outcome>_total{group}`` for each outcome; without samples
    when ``ends`` is ``None`` (no snapshot yet, or a backend that keeps no workflows)."""
    for outcome, doc in WORKFLOW_OUTCOMES:
        family = CounterMetricFamily(f"taskrunner_workflows_{outcome}", doc, labels=["group"])
        if ends is not None:
            family.add_metric([group], ends.get(outcome, 0))
        yield family
