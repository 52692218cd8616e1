"""The demo's screen: a live display of the fleet, the log lines around it, and the
summary, drawn with rich (the ``cli`` extra).

Theory of operation. :class:`Display` draws one
:class:`~taskrunner.cli.views.DemoFrame` per redraw: in place with
``rich.live.Live`` on a terminal (ten times a second), or one plain
``progress:`` line every half second otherwise, with the fleet's events
printed above it as they happen. While it draws, :func:`filtered_logs` keeps
the deliberate failures (the flaky task's, and the dead letters they lead to)
out of the log unless the level is DEBUG, and prints other log lines above a
live display instead of through it. :func:`summary` prints the end result.
:mod:`taskrunner.cli.demo` drives the fleet and imports this module only
when it runs, so the command line works without rich.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import TextIO

import trio
from rich.console import Console
from rich.live import Live
from rich.text import Text

from taskrunner import _wire, admin
from taskrunner._runner import TaskRunner
from taskrunner._serve import worker
from taskrunner.backends import Backend
from taskrunner.cli import demo_tasks, views
from taskrunner.errors import BackendError, InvalidTaskPayload

__all__ = ["Display", "console_for", "filtered_logs", "summary"]

log = logging.getLogger("taskrunner.cli.demo")
"""The demo's logger (its verbosity decides what the screen shows)."""


def console_for(out: TextIO, *, live: bool) -> Console:
    """The console the demo prints to."""
    if live:
        return Console(file=out, force_terminal=True)
    # Not a terminal: no colours or cursor codes, and wide enough for the tables.
    return Console(file=out, width=140, color_system=None, force_terminal=False)


class Display:
    """Draws :class:`~taskrunner.cli.views.DemoFrame` s: a live screen, or plain lines."""

    def __init__(self, console: Console, out: TextIO, *, live: bool) -> None:
        self.console = console
        self.out = out
        self.live: Live | None = None
        if live:
            self.live = Live(
                console=console,
                auto_refresh=False,  # redrawn from trio, never from rich's thread
                redirect_stdout=False,
                redirect_stderr=False,
            )
        self._printed_events = 0
        self._samples: list[tuple[float, int]] = []

    def _rate(self, now: float, attempts: int) -> float:
        self._samples.append((now, attempts))
        while len(self._samples) > 2 and now - self._samples[0][0] > 1.0:
            self._samples.pop(0)
        t0, a0 = self._samples[0]
        return (attempts - a0) / (now - t0) if now > t0 else 0.0

    def draw(
        self, runners: Sequence[TaskRunner], state: demo_tasks.RunState, elapsed: float
    ) -> None:
        stats = demo_tasks.snapshot(runners)
        frame = views.DemoFrame(
            expected=state.sent,
            planned=state.planned,
            dispatched=state.sent,
            refused=state.refused,
            done=demo_tasks.outcomes(stats),
            rate=self._rate(trio.current_time(), sum(s.completed + s.failed for s in stats)),
            elapsed=elapsed,
            runners=tuple(
                views.RunnerView(host=r.config.host, leader=r.is_leader, statistics=s)
                for r, s in zip(runners, stats, strict=True)
            ),
            stats=state.stats,
            events=tuple(state.events),
        )
        if self.live is not None:
            self.live.update(views.demo_view(frame), refresh=True)
            return
        for event in state.events[self._printed_events :]:
            print(f"event: {event}", file=self.out)
        self._printed_events = len(state.events)
        print(views.demo_line(frame), file=self.out, flush=True)

    async def run(self, runners: Sequence[TaskRunner], state: demo_tasks.RunState) -> None:
        """Redraw until cancelled: ten times a second on a live screen, else twice."""
        start = trio.current_time()
        interval = 0.1 if self.live is not None else 0.5
        while True:
            self.draw(runners, state, trio.current_time() - start)
            await trio.sleep(interval)

    def log(self, text: str) -> None:
        """Print a log line without tearing the display."""
        if self.live is not None:
            self.live.console.print(Text(text, style="dim"))


class _LogFilter(logging.Filter):
    """Hides deliberate failures and, on a live screen, prints log lines above it.

    The flaky task's failures and the dead letters they lead to are expected
    and counted on screen, so their records are dropped unless the level is
    DEBUG.
    """

    def __init__(self, display: Display, handler: logging.Handler, *, verbose: bool) -> None:
        super().__init__()
        self.display = display
        self.handler = handler
        self.verbose = verbose

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        expected = isinstance(exc, demo_tasks.SimulatedFailure) or (
            record.name == worker.log.name
            and str(record.msg).startswith("message %s moved to the dead-letter stream")
        )
        if expected and not self.verbose:
            return False
        if self.display.live is not None:
            self.display.log(self.handler.format(record))
            return False
        return True


@contextmanager
def filtered_logs(display: Display) -> Iterator[None]:
    verbose = log.isEnabledFor(logging.DEBUG)
    # With no handler configured, warnings go to logging.lastResort: filter it too.
    handlers = list(logging.getLogger().handlers)
    if not handlers and logging.lastResort is not None:
        handlers = [logging.lastResort]
    installed = [(handler, _LogFilter(display, handler, verbose=verbose)) for handler in handlers]
    for handler, log_filter in installed:
        handler.addFilter(log_filter)
    try:
        yield
    finally:
        for handler, log_filter in installed:
            handler.removeFilter(log_filter)


# The summary ---------------------------------------------------------------------
async def summary(
    console: Console,
    backend: Backend,
    runners: Sequence[TaskRunner],
    state: demo_tasks.RunState,
    tasks: demo_tasks.DemoTasks,
) -> None:
    say = functools.partial(console.print, highlight=False, soft_wrap=True)
    stats = demo_tasks.snapshot(runners)
    rows = [
        views.RunnerView(host=r.config.host, leader=False, statistics=s)
        for r, s in zip(runners, stats, strict=True)
    ]
    say()
    wide = console.width >= 120  # the full table needs about 115 columns
    say(views.runners_table(rows, title="summary", mark_stopped=False, compact=not wide))
    totals = {c: sum(getattr(s, c) for s in stats) for c in views.STATISTICS_COLUMNS}
    done = demo_tasks.outcomes(stats)
    rate = done / state.elapsed if state.elapsed > 0 else 0.0
    info = await backend.group_info(demo_tasks.GROUP)
    say(
        f"dispatched: {state.sent} of {state.planned} ({state.delayed} delayed, "
        f"{state.refused} unique duplicates refused)"
    )
    say(
        f"outcomes: {done} of {state.sent} (completed {totals['completed']}, "
        f"dead-lettered {totals['dead_lettered']}, handled {totals['handled']})"
    )
    say(
        f"attempts: {totals['completed'] + totals['failed']} "
        f"({totals['failed']} failed, {totals['retried']} retried after reclaim)"
    )
    say(f"typed payloads: {tasks.orders} Order objects, {tasks.items} items")
    late = tasks.lateness / tasks.reports * 1000 if tasks.reports else 0.0
    say(f"delayed: {tasks.reports} of {state.delayed} ran, {late:.0f} ms after due on average")
    say(f"unique: {tasks.synced} ran, {state.refused} duplicates refused")
    say(f"leaders: {' -> '.join(state.leaders) or 'none'}")
    say(f"elapsed: {state.elapsed:.2f}s, throughput {rate:.0f} tasks/s")
    say(f"queue left: {await backend.length(demo_tasks.GROUP)} entries, {info.pending} pending")
    dead = await backend.dead_letters(demo_tasks.GROUP, count=1000)
    say(f"dead letters: {len(dead)}")
    for letter in dead[:5]:
        say(f"  {letter.message_id} ({_task_of(letter.payload)}): {letter.error}")
    if len(dead) > 5:
        say(f"  ... and {len(dead) - 5} more")
    try:
        say(views.stats_table(await runners[0].get_timing_statistics()))
        keys = await admin.list_keys(backend, demo_tasks.GROUP)
        say(views.keys_table(keys))
        flushed = await admin.flush(backend, demo_tasks.GROUP, confirm=True)
        say(f"keys: {len(keys)} listed, {len(flushed)} flushed")
    except BackendError as exc:
        say(f"could not read the final statistics or keys: {exc}")


def _task_of(payload: bytes | None) -> str:
    try:
        return _wire.decode_message(payload).task_name
    except InvalidTaskPayload:
        return "?"
