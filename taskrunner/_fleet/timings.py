"""The timing hot path: record run times in memory, hand them to the bulk writer.

Theory of operation: every task run ends with one :meth:`TimingRecorder.record`
call. It must cost next to nothing and never wait, so it neither touches Redis
nor queues a message: it adds the sample in place to a per-task ``[sum_ms,
count]`` pair, which makes it one dict lookup and two additions. Once a second
the bulk writer calls :meth:`TimingRecorder.drain`, which swaps the pairs out
for a fresh dict, turns them into metrics-hash increments
(:func:`taskrunner._wire.timing_increment`) and writes them in one call; if that
flush fails it gives the batch back with :meth:`TimingRecorder.restore`, so a
Redis outage delays timings but loses none (memory stays bounded by the number
of task names, however long the outage). On shutdown the writer drains and
flushes once more.

No locks: trio runs every task of a run on one thread, and neither ``record``
nor ``drain`` contains a checkpoint, so each runs to completion without
another task interleaving. A recorder must not be shared with other threads
(``trio.to_thread`` workers included).
"""

from __future__ import annotations

from collections.abc import Mapping

from taskrunner._wire import SCHEDULE_TIMING_NAME

__all__ = ["TimingRecorder"]


class TimingRecorder:
    """Per-task run times, pre-aggregated in memory until the next flush."""

    __slots__ = ("_totals",)

    def __init__(self) -> None:
        # task name -> [sum in ms, count]. A list, not a tuple, so a record
        # updates it in place instead of allocating a new pair every time.
        self._totals: dict[str, list[float]] = {}

    def record(self, task_name: str, seconds: float) -> None:
        """Add one run of ``task_name`` that took ``seconds``.

        Synchronous and allocation-free once the task name has been seen:
        safe to call from a ``finally`` block, even in a cancelled task.
        Milliseconds are kept as floats, so sub-millisecond runs still count.
        """
        try:
            totals = self._totals[task_name]
        except KeyError:
            # try/except rather than .get(): on the hit path, the only one
            # that matters after the first run, it skips a comparison.
            self._totals[task_name] = [seconds * 1000.0, 1]
            return
        totals[0] += seconds * 1000.0
        totals[1] += 1

    def record_schedule(self, seconds: float) -> None:
        """Add one delayed-task scheduler pass that took ``seconds``.

        Kept under the reserved name
        :data:`~taskrunner._wire.SCHEDULE_TIMING_NAME`, which the bulk writer
        flushes to Go's ``taskrunner:<group>:delayed_tasks_schedule_*`` fields.
        """
        self.record(SCHEDULE_TIMING_NAME, seconds)

    def pending(self) -> int:
        """How many samples have been recorded (or restored) since the last drain."""
        return sum(int(totals[1]) for totals in self._totals.values())

    def drain(self) -> dict[str, tuple[float, int]]:
        """Take everything recorded so far and start afresh.

        Returns:
            ``{name: (sum_ms, count)}`` for every name with at least one
            sample since the last drain (the scheduler's under
            :data:`~taskrunner._wire.SCHEDULE_TIMING_NAME`). The caller owns
            the batch: flush it, or :meth:`restore` it if the flush fails.
        """
        totals, self._totals = self._totals, {}
        return {name: (pair[0], int(pair[1])) for name, pair in totals.items()}

    def restore(self, drained: Mapping[str, tuple[float, int]]) -> None:
        """Put back a drained batch whose flush failed.

        It is merged with whatever was recorded since the drain, so the next
        :meth:`drain` carries both and nothing is counted twice or lost.
        """
        for name, (sum_ms, count) in drained.items():
            totals = self._totals.get(name)
            if totals is None:
                self._totals[name] = [sum_ms, count]
            else:
                totals[0] += sum_ms
                totals[1] += count
