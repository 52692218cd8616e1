"""Crashes at named points of a workflow step's life (issue 28, section 5), shared by
tests/test_workflow_kill_points.py (MemoryBackend, MockClock) and
tests/redis/test_redis_workflow_kill_points.py (a real server, in process).

Theory of operation. Runners reach the store through a :class:`KillLink`, which crashes
its runner (its link cut, so calls in flight lose their replies, and its ``serve``
cancelled, so its running steps stop) at the first call that matches the armed
:class:`Point`: before the call is sent (it never applies), or after it applied (its
reply lost). A point names the call of one step's life it is about: the delivery
(``read``), the read of its parents' results (``step_inputs``), its run (a crash
inside the task), its retry (``defer``), its finish (``finish``: the script that counts
it, queues its dependents and acks it), a leader's move of its retry back to its queue
(``move_delayed``), a ``wf.cancel()`` and a running step's look at its stop request
(``cancel_requested``). Every point fires exactly once, on whichever runner reaches it
first; a supervisor starts a fresh runner in the crashed one's place.

What must hold at every point: every workflow ends with its result, every step
counted once (each record ends with every step final and none left), and every step
queued exactly once: one task id across all its runs, since a step reclaimed from a
crashed runner is the same task delivered again, while one queued twice has two.
"""

from __future__ import annotations

import itertools
import json
from collections import Counter, defaultdict
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

import attrs
import trio
from _fleet import make_runner
from test_workflows import WorkflowLink

from taskrunner import Backoff, TaskContext, TaskRunner, WorkflowHandle, chain, chord, group
from taskrunner._wire import decode_message
from taskrunner.backends import Backend, QueueEntry
from taskrunner.errors import BackendError

T = TypeVar("T")

PARTS = 3
FLAKY = "part.2"
"""The step that fails its first run (its retry goes through ``defer``)."""


@attrs.frozen
class Point:
    """Where to crash: at call ``call`` concerning step ``step`` (``None``: any)."""

    call: str
    applied: bool
    """Crash after the call applied (its reply lost), else before it is sent."""
    step: str | None = None
    crash: bool = True
    """Whether the runner crashes; else only the reply is lost and the runner, alive,
    tries again: the call applies twice."""

    @property
    def name(self) -> str:
        when = "reply-lost" if self.applied else "unsent"
        again = "" if self.crash else "-retried"
        return f"{self.call}-{when}" + (f"-{self.step}" if self.step else "") + again


RUN = "run"
"""A point's ``call`` for a crash inside the step's task, while it runs."""

POINTS = [
    Point("read", applied=True, step="part.1"),
    Point("step_inputs", applied=True, step="sink"),
    Point(RUN, applied=False, step="part.1"),
    Point(RUN, applied=False, step="sink"),
    Point("defer", applied=False, step=FLAKY),
    Point("defer", applied=True, step=FLAKY),
    Point("move_delayed", applied=True),
    Point("finish", applied=False, step="part.1"),
    Point("finish", applied=True, step="part.1"),
    Point("finish", applied=False, step="part.3"),  # the last part: it queues the sink
    Point("finish", applied=True, step="part.3"),
    Point("finish", applied=True, step="first"),  # a chain's: it queues the next step
    Point("read", applied=True, step="sink"),  # a dependent just queued
    Point("finish", applied=False, step="sink"),
    Point("finish", applied=True, step="sink"),  # the workflow ends in it
    # A reply lost on a link that lives on: the runner sends the finish again.
    Point("finish", applied=True, step="part.1", crash=False),
    Point("finish", applied=True, step="part.3", crash=False),
    Point("finish", applied=True, step="sink", crash=False),
]
"""The points of a step's life the runs go through (the cancel points: CANCEL_POINTS)."""

CANCEL_POINTS = [
    Point("cancel_workflow", applied=True),
    Point("cancel_requested", applied=True),
]


def _steps_of(name: str, call: Callable[[], Any], result: Any) -> set[str]:
    """The steps a call (or its result) concerns: empty for calls about none."""
    args = getattr(call, "args", ())
    if name == "finish":
        return {o.step for o in args[2] if o.step}
    if name == "step_inputs":
        return {args[2]}
    if name == "defer":
        return {str(json.loads(args[2]).get("step"))}
    if name in {"read", "read_many", "claim_stale"} and isinstance(result, Sequence):
        return {
            step
            for entry in result
            if isinstance(entry, QueueEntry)
            and entry.payload is not None
            and (step := decode_message(entry.payload).extras.step) is not None
        }
    return set()


def _finished(call: Callable[[], Any]) -> set[tuple[str, str]]:
    return {(o.workflow, o.step) for o in call.args[2] if o.workflow}  # type: ignore[attr-defined]


def _read_call(name: str, point: Point) -> bool:
    return point.call == "read" and name in {"read", "read_many", "claim_stale"}


def matches(point: Point, name: str, call: Callable[[], Any], result: Any, applied: bool) -> bool:
    """Whether call ``name`` (``result``: its reply, ``None`` before it is sent) is where
    ``point`` crashes, before it is sent or (``applied``) after."""
    if point.applied is not applied:
        return False
    if name != point.call and not _read_call(name, point):
        return False
    if point.step is None:  # about no step: a call that did something
        return not applied or bool(result)
    return point.step in _steps_of(name, call, result)


def parse_point(text: str) -> Point:
    """A point from ``call:applied:step`` (``applied`` 1 or 0, ``step`` may be empty),
    as tests/apps/workflow_kill_app.py reads it from its environment."""
    call, applied, step = text.split(":")
    return Point(call, applied=applied == "1", step=step or None)


class KillLink(WorkflowLink):
    """A runner's link that crashes its runner at the fleet's armed point."""

    def __init__(self, backend: Backend, fleet: KillFleet) -> None:
        super().__init__(backend)  # type: ignore[arg-type]
        self.fleet = fleet
        self.scope = trio.CancelScope()
        self.finished: set[tuple[str, str]] = set()
        """The (workflow id, step) whose finish this link applied."""
        self.maybe_finished: set[tuple[str, str]] = set()
        """Those whose finish was in flight when the link was cut: applied or not (on a
        real server a call takes time, and the crash cuts replies on their way back)."""

    def crash(self) -> None:
        self.cut = True
        self.scope.cancel()
        self.fleet.crashes += 1

    def _matches(self, name: str, call: Callable[[], Any], result: Any, applied: bool) -> bool:
        point = self.fleet.armed
        return point is not None and not self.cut and matches(point, name, call, result, applied)

    async def _through(self, name: str, call: Callable[[], Awaitable[T]]) -> T:
        if self._matches(name, call, None, applied=False):
            self.fleet.fired()
            self.crash()
            raise BackendError(f"crashed: {name} not sent", maybe_applied=False)
        try:
            result = await super()._through(name, call)
        except BackendError as exc:
            if name == "finish" and exc.maybe_applied:
                self.maybe_finished.update(_finished(call))
            raise
        except BaseException:
            # Cancelled in flight (the crash cancels its runner, and a flush under way
            # with it): on a real server the script may have run with its reply unread.
            if name == "finish":
                self.maybe_finished.update(_finished(call))
            raise
        if name == "finish":  # applied: these runs will not be delivered again
            self.finished.update(_finished(call))
        if self._matches(name, call, result, applied=True):
            point = self.fleet.armed
            self.fleet.fired()
            if point is not None and not point.crash:
                raise BackendError(f"lost: no reply to {name}")
            self.crash()
            raise BackendError(f"crashed: no reply to {name}")
        return result


@attrs.define
class KillFleet:
    """The runners on one store, what their steps did, and the armed point."""

    backend: Backend
    armed: Point | None
    config: dict[str, Any]
    crashes: int = 0
    fired_at: float | None = None
    completed: Counter[tuple[str, str]] = attrs.Factory(Counter)
    """Runs that returned, by (workflow id, step)."""
    completed_on: list[tuple[KillLink | None, tuple[str, str]]] = attrs.Factory(list)
    """Each run that returned: the link of its runner, and its (workflow id, step)."""
    task_ids: defaultdict[tuple[str, str], set[str]] = attrs.Factory(lambda: defaultdict(set))
    """The task ids each step ran as, by (workflow id, step)."""
    inputs: dict[str, Any] = attrs.Factory(dict)
    """What each workflow's sink received."""
    flaky_failed: set[str] = attrs.Factory(set)
    hosts: itertools.count[int] = attrs.Factory(lambda: itertools.count(1))

    def fired(self) -> None:
        assert self.fired_at is None
        self.fired_at = trio.current_time()
        self.armed = None

    def runner(self, backend: Backend) -> TaskRunner:
        runner = make_runner(backend, host=f"kill{next(self.hosts)}", **self.config)
        link = backend if isinstance(backend, KillLink) else None

        def ran(ctx: TaskContext) -> None:
            assert ctx.workflow_id is not None
            assert ctx.step is not None
            self.task_ids[ctx.workflow_id, ctx.step].add(ctx.task_id)
            point = self.armed
            if link is not None and point is not None and point.call == RUN:
                if point.step == ctx.step:
                    self.fired()
                    link.crash()

        async def done(ctx: TaskContext, value: T) -> T:
            await trio.sleep(0.05)  # a crash in the run lands here
            assert ctx.workflow_id is not None
            assert ctx.step is not None
            self.completed[ctx.workflow_id, ctx.step] += 1
            self.completed_on.append((link, (ctx.workflow_id, ctx.step)))
            return value

        @runner.task("part", max_retry=10, retry=Backoff(initial=1, factor=1, jitter=0))
        async def part(payload: dict[str, int], ctx: TaskContext) -> int:
            ran(ctx)
            assert ctx.workflow_id is not None
            if ctx.step == FLAKY and ctx.workflow_id not in self.flaky_failed:
                self.flaky_failed.add(ctx.workflow_id)
                raise RuntimeError("first run of the flaky part")
            return await done(ctx, payload["i"])

        @runner.task("first", max_retry=10)
        async def first(payload: int, ctx: TaskContext) -> list[int]:
            ran(ctx)
            return await done(ctx, [payload])

        @runner.task("sink", max_retry=10)
        async def sink(payload: Any, ctx: TaskContext) -> Any:
            ran(ctx)
            assert ctx.workflow_id is not None
            self.inputs[ctx.workflow_id] = payload
            return await done(ctx, payload)

        @runner.task("hold", max_retry=10)
        async def hold(payload: Any, ctx: TaskContext) -> None:
            ran(ctx)
            await trio.sleep(3600)  # until cancelled

        return runner

    async def serve_one(self, nursery: trio.Nursery) -> KillLink:
        link = KillLink(self.backend, self)
        runner = self.runner(link)

        async def serve() -> None:
            with link.scope:
                await runner.serve()

        nursery.start_soon(serve)
        return link

    async def supervise(self, nursery: trio.Nursery, size: int) -> None:
        """Keep ``size`` runners serving: a crashed one is replaced a second later."""
        links = [await self.serve_one(nursery) for _ in range(size)]
        while True:
            await trio.sleep(0.2)
            for i, link in enumerate(links):
                if link.cut:
                    await trio.sleep(1.0)
                    links[i] = await self.serve_one(nursery)


def chord_of(runner: TaskRunner) -> Any:
    return chord(
        group(runner.step("part", {"i": i}) for i in range(1, PARTS + 1)), runner.step("sink")
    )


def chain_of(runner: TaskRunner) -> Any:
    return chain(runner.step("first", 7), runner.step("sink"))


async def dispatch(client: TaskRunner, count: int) -> list[tuple[WorkflowHandle, Any]]:
    """``count`` chords and ``count`` chains, each with the result it must end with."""
    handles = []
    for _ in range(count):
        handles.append((await client.dispatch_workflow(chord_of(client)), [1, 2, 3]))
        handles.append((await client.dispatch_workflow(chain_of(client)), [7]))
    return handles


async def check_every_workflow(
    fleet: KillFleet, store: Any, group_name: str, handles: list[tuple[WorkflowHandle, Any]]
) -> None:
    """Every workflow ended with its result, every step counted and queued once."""
    for wf, expected in handles:
        assert await wf.result(timeout=120) == expected, wf.id
        assert fleet.inputs[wf.id] == expected
        record = await store.read_workflow(group_name, wf.id)
        assert record is not None
        assert {s.state.value for s in record.steps} == {"succeeded"}, record
        for step in record.steps:
            ids = fleet.task_ids[wf.id, step.id]
            assert ids == {step.task_id}, f"{wf.id}/{step.id} queued as {sorted(ids)}"
    ends = await store.workflow_ends(group_name)
    assert ends == {"succeeded": len(handles), "failed": 0, "cancelled": 0}, ends


def check_completions(fleet: KillFleet, point: Point) -> None:
    """Every step's run returned once, but those a crashed runner ran to their end and
    never finished (their finish not applied: the one the point held back, or others
    waiting in the runner's batch of acks), which are delivered again: twice. A run
    whose finish was in flight at the crash (its reply cut) returned once or twice."""
    unsure = {
        key
        for link, key in fleet.completed_on
        if link is not None and link.cut and key in link.maybe_finished - link.finished
    }
    lost = {
        key
        for link, key in fleet.completed_on
        if link is not None and link.cut and key not in link.finished and key not in unsure
    }
    assert all(fleet.completed[key] == 2 for key in lost), (lost, fleet.completed)
    assert all(fleet.completed[key] in (1, 2) for key in unsure), (unsure, fleet.completed)
    assert all(runs == 1 for key, runs in fleet.completed.items() if key not in lost | unsure), (
        lost,
        unsure,
        fleet.completed,
    )
    if point.call == "finish" and not point.applied:
        assert point.step in {step for _, step in lost}
