"""The bulk writer: moves recorded task timings into the group's metrics hash.

Theory of operation: workers add each run time to a
:class:`~taskrunner._fleet.timings.TimingRecorder` (a synchronous, in-place
addition). Once per ``interval`` this service drains the recorder and, if it
holds anything, writes the whole batch with one
:meth:`~taskrunner.backends.SharedState.increment_metrics` call: one
:class:`~taskrunner._wire.TimingIncrement` per task name (total microseconds
and runs, for the Go-compatible ``<task>_sum`` / ``_sum_us`` / ``_count``
fields), however many runs were recorded; the scheduler's passes go to Go's
``taskrunner:<group>:delayed_tasks_schedule_*`` fields. The field names are
built once per name (:class:`FieldNames`). If the write fails the batch goes
back into the recorder (merged with what was recorded meanwhile), so an outage
delays timings but loses none, and memory stays bounded by the number of task
names.

A write is never interrupted by cancellation: each one runs shielded, bounded
by :data:`FLUSH_TIMEOUT`. That keeps a batch out of the ambiguous state of a
call cancelled half-way, where the store may or may not have applied it and
restoring could count it twice. Only the timeout itself can cut a write
short; the batch is then restored. So is the batch of a write that failed
with ``BackendError``, even one that may have reached the store (a
connection lost while waiting for the reply): delivery into the hash is
at-least-once, and in those rare, logged cases a batch can be counted twice.
Counting a batch twice skews an average slightly; losing timings at every
hiccup or shutdown would skew it every time.

A write the store refuses for good (``BackendError.retryable`` false: an
error reply such as a field that holds no number, or a key of another type)
is the exception: its batch is dropped, logged, not restored. The write is a
pipeline, not a transaction, so the other fields' increments have landed;
restoring the batch would count them again at every flush, forever.

Shutdown: the runner cancels this service after the workers have drained, so
the final flush, run shielded and bounded by :data:`FINAL_FLUSH_TIMEOUT`,
sees every timing recorded; samples it could not write are logged.
"""

from __future__ import annotations

import logging

import trio

from taskrunner import _wire
from taskrunner._execution.backoff import backoff_delay
from taskrunner._fleet.timings import TimingRecorder
from taskrunner.backends import Backend
from taskrunner.errors import BackendError

__all__ = ["FINAL_FLUSH_TIMEOUT", "FLUSH_TIMEOUT", "FieldNames", "flush", "run"]

log = logging.getLogger(__name__)

FLUSH_TIMEOUT = 5.0
"""Longest one periodic write may take before it is abandoned and its batch restored."""

FINAL_FLUSH_TIMEOUT = 5.0
"""Longest the shutdown flush (retries included) may take."""

_WARN_EVERY = 60
"""During an outage, warn on the first failed flush and then on every 60th."""


class FieldNames:
    """The metrics fields of each timing name of one group, built once per name.

    A flush runs every second for the same few names: looking their field names
    up beats formatting three strings per name each time.
    """

    def __init__(self, group: str) -> None:
        self._known = {_wire.SCHEDULE_TIMING_NAME: _wire.schedule_fields(group)}

    def __call__(self, name: str) -> _wire.TimingFields:
        fields = self._known.get(name)
        if fields is None:
            fields = self._known[name] = _wire.task_fields(name)
        return fields


async def flush(
    backend: Backend, group: str, recorder: TimingRecorder, names: FieldNames | None = None
) -> int:
    """Drain ``recorder`` and add the batch to the metrics hash in one call.

    Args:
        backend: Where the metrics hash lives.
        group: The consumer group (names the hash).
        recorder: The timings to move.
        names: The group's field names (:func:`run` keeps one; built if not given).

    Returns:
        How many samples were written (0 when there was nothing to write).

    Raises:
        BackendError: the write failed; the batch is back in ``recorder``,
            unless the failure is not ``retryable`` (then it is dropped).

    Cancellation: the batch is put back in ``recorder`` too. (Whether the
    store applied it is unknown at that point; :func:`run` avoids the
    question by never cancelling a write except on its own timeout.)
    """
    names = names or FieldNames(group)
    batch: dict[str, _wire.TimingIncrement] = {}
    for name, (sum_ms, count) in recorder.drain().items():
        increment = _wire.timing_increment(names(name), sum_ms, count)
        # None: no samples or a non-finite sum, which can never be written;
        # restoring it would poison every later batch, so it is dropped.
        if increment is not None:
            batch[name] = increment
    if not batch:
        return 0
    try:
        await backend.increment_metrics(group, list(batch.values()))
    except BackendError as exc:
        if exc.retryable:
            _restore(recorder, batch)
        raise
    except BaseException:
        _restore(recorder, batch)
        raise
    return sum(increment.count for increment in batch.values())


def _restore(recorder: TimingRecorder, batch: dict[str, _wire.TimingIncrement]) -> None:
    # Exactly what was sent goes back (a negative sum was sent as 0).
    recorder.restore({name: (i.micros / 1000, i.count) for name, i in batch.items()})


async def run(
    backend: Backend,
    group: str,
    recorder: TimingRecorder,
    *,
    interval: float = 1.0,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Flush ``recorder`` into the metrics hash every ``interval`` seconds until cancelled.

    Calls ``task_status.started()`` at once. A failed flush (``BackendError``)
    is logged and its batch kept for the next one; nothing here is fatal to
    the runner.

    Args:
        backend: Where the metrics hash lives.
        group: The consumer group.
        recorder: The recorder the workers write to.
        interval: Seconds between flushes.

    Cancellation: the loop stops, then what is left is flushed once more,
    shielded, with retries, for at most :data:`FINAL_FLUSH_TIMEOUT` seconds;
    samples still unwritten after that are logged as lost. The cancellation
    is then re-raised.
    """
    task_status.started()
    names = FieldNames(group)
    failures = refusals = 0
    try:
        while True:
            await trio.sleep(interval)
            with trio.move_on_after(FLUSH_TIMEOUT, shield=True) as scope:
                try:
                    await flush(backend, group, recorder, names)
                except BackendError as exc:
                    if not exc.retryable:
                        refusals += 1
                        if refusals % _WARN_EVERY == 1:
                            _refused(exc, refusals)
                        continue
                    failures += 1
                    if failures % _WARN_EVERY == 1:
                        log.warning(
                            "timing metrics flush failed (%s); keeping %d sample(s) for the "
                            "next try (failure %d in a row)",
                            exc,
                            recorder.pending(),
                            failures,
                        )
                else:
                    if failures:
                        log.info("timing metrics flush recovered after %d failure(s)", failures)
                    failures = 0
            if scope.cancelled_caught:
                failures += 1
                log.warning(
                    "timing metrics flush took over %.1fs; abandoned it and kept its %d "
                    "sample(s) (they may be counted twice if the write landed)",
                    FLUSH_TIMEOUT,
                    recorder.pending(),
                )
    finally:
        await _final_flush(backend, group, recorder, names)


def _refused(exc: BackendError, refusals: int) -> None:
    log.warning(
        "timing metrics flush refused (%s); dropped that batch, since retrying cannot "
        "fix it (the fields the store accepted were counted; refusal %d)",
        exc,
        refusals,
    )


async def _final_flush(
    backend: Backend, group: str, recorder: TimingRecorder, names: FieldNames
) -> None:
    written = 0
    attempt = 0
    with trio.move_on_after(FINAL_FLUSH_TIMEOUT, shield=True):
        while recorder.pending():
            try:
                written += await flush(backend, group, recorder, names)
            except BackendError as exc:
                if not exc.retryable:
                    _refused(exc, 1)
                    continue
                attempt += 1
                if attempt == 1:
                    log.warning("final timing metrics flush failed (%s); retrying", exc)
                await trio.sleep(backoff_delay(attempt, base=0.1, cap=1.0))
    left = recorder.pending()
    if left:
        log.error(
            "%d timing sample(s) could not be written to the metrics hash of group %s "
            "at shutdown; they are lost",
            left,
            group,
        )
    elif written:
        log.debug("final timing metrics flush wrote %d sample(s)", written)
