"""One way through dispatch (issue 23): a payload's way from ``TaskRunner`` to the backend
visits no module twice, and its JSON is encoded once.

The way is followed with ``sys.setprofile``: a stop is a call into a taskrunner module
that receives the payload or a form of it (what such a call returned: the wire form, a
key, the encoded bytes, the plan); calls within one module in a row are one stop. It
ends at the first backend call handed a form of the payload (``add``,
``acquire_lock``, ``add_delayed``). What the user's key functions and cattrs do is
not counted (they are not taskrunner's).
"""

from __future__ import annotations

import sys
import types
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import Any

import attrs
import pytest

from taskrunner import RateLimit, TaskRunner, TaskRunnerConfig
from taskrunner.backends.memory import MemoryBackend


@attrs.frozen
class Order:
    id: int
    item: str


WIRE = {"id": 1, "item": "x"}
"""The wire form of every payload dispatched here."""


class Way:
    """What one followed dispatch did."""

    def __init__(self, payload: Any) -> None:
        self.stops: list[str] = []
        self.encodes = 0
        self._ids = {id(payload)}
        self._keep: list[Any] = [payload]  # so no followed id is reused
        self._frames: set[int] = set()
        self.ended = False

    def _follows(self, value: Any) -> bool:
        if id(value) in self._ids:
            return True
        if isinstance(value, list | tuple):
            return any(id(v) in self._ids for v in value)
        return False

    def _follow(self, value: Any) -> None:
        if value is None or isinstance(value, bool):
            return
        self._ids.add(id(value))
        self._keep.append(value)
        if isinstance(value, tuple):
            for item in value:
                self._follow(item)
        elif attrs.has(type(value)) and type(value).__module__.startswith("taskrunner"):
            for field in attrs.fields(type(value)):
                self._follow(getattr(value, field.name))

    def profile(self, frame: types.FrameType, event: str, arg: Any) -> None:
        if self.ended:
            return
        module = frame.f_globals.get("__name__") or ""
        if event == "call":
            args = frame.f_locals
            if module == "json.encoder" and frame.f_code.co_name == "encode":
                doc = args.get("o")
                if doc == WIRE or (isinstance(doc, dict) and doc.get("payload") == WIRE):
                    self.encodes += 1
                return
            # A value object's generated __init__ (Enqueue, TaskMessage) is not a stop.
            if not module.startswith("taskrunner") or frame.f_code.co_filename.startswith("<"):
                return
            if not any(self._follows(value) for value in args.values()):
                return
            if module.startswith("taskrunner.backends"):
                self.ended = True
                return
            self._frames.add(id(frame))
            if not self.stops or self.stops[-1] != module:
                self.stops.append(module)
        elif event == "return" and id(frame) in self._frames:
            self._frames.discard(id(frame))
            self._follow(arg)


@contextmanager
def following(payload: Any) -> Iterator[Way]:
    way = Way(payload)
    sys.setprofile(way.profile)
    try:
        yield way
    finally:
        sys.setprofile(None)


def _runner() -> TaskRunner:
    runner = TaskRunner(TaskRunnerConfig(consumer_group="app"), MemoryBackend())

    @runner.task
    async def plain(payload: dict[str, Any]) -> None: ...

    @runner.task(name="typed")
    async def typed(payload: Order) -> None: ...

    @runner.task(name="unique", unique=True, unique_for=60.0, unique_key=lambda p: f"k-{p['id']}")
    async def unique(payload: dict[str, Any]) -> None: ...

    @runner.task(
        name="limited", rate_limit=RateLimit(10, per=1.0), rate_limit_key=lambda p: p["item"]
    )
    async def limited(payload: dict[str, Any]) -> None: ...

    return runner


RUNNER = "taskrunner._dispatch.api"  # TaskRunner.dispatch and the rest are defined there
DISPATCHER = "taskrunner._dispatch.dispatcher"
TASK = "taskrunner._task"
CODEC = "taskrunner._codec"
ENQUEUE = "taskrunner._dispatch.enqueue"
MESSAGE = "taskrunner._wire.message"
FRAMES = "taskrunner._wire.frames"
ENCODING = "taskrunner._wire.encoding"  # dumps_value: a payload's JSON, written once
LOCKS = "taskrunner._wire.locks"
DELAYED = "taskrunner._wire.delayed"

Call = Callable[[TaskRunner, Any], Awaitable[object]]


def _dispatch(name: str) -> Call:
    return lambda runner, payload: runner.dispatch(name, payload)


def _many(name: str) -> Call:
    return lambda runner, payload: runner.dispatch_many(name, [payload])


def _delayed(name: str) -> Call:
    return lambda runner, payload: runner.dispatch_delayed(name, payload, 5.0)


def _at(name: str) -> Call:
    return lambda runner, payload: runner.schedule_for(name, payload, 2_000_000_000.0)


def _order() -> Any:
    return Order(id=1, item="x")


def _dict() -> Any:
    return {"id": 1, "item": "x"}


@pytest.mark.parametrize(
    ("call", "make", "stops"),
    [
        (_dispatch("plain"), _dict, [RUNNER, DISPATCHER, TASK, ENQUEUE, FRAMES, ENCODING]),
        (_dispatch("typed"), _order, [RUNNER, DISPATCHER, TASK, CODEC, ENQUEUE, FRAMES, ENCODING]),
        (_dispatch("typed"), _dict, [RUNNER, DISPATCHER, TASK, CODEC, ENQUEUE, FRAMES, ENCODING]),
        (_dispatch("unique"), _dict, [RUNNER, DISPATCHER, TASK, ENQUEUE, LOCKS, MESSAGE]),
        (_dispatch("limited"), _dict, [RUNNER, DISPATCHER, TASK, ENQUEUE, FRAMES, ENCODING]),
        (_many("plain"), _dict, [RUNNER, DISPATCHER, TASK, ENQUEUE, FRAMES, ENCODING]),
        (_many("typed"), _order, [RUNNER, DISPATCHER, TASK, CODEC, ENQUEUE, FRAMES, ENCODING]),
        (_many("limited"), _dict, [RUNNER, DISPATCHER, TASK, ENQUEUE, FRAMES, ENCODING]),
        (_delayed("plain"), _dict, [RUNNER, DISPATCHER, TASK, ENQUEUE, FRAMES, DELAYED]),
        (_delayed("typed"), _order, [RUNNER, DISPATCHER, TASK, CODEC, ENQUEUE, FRAMES, DELAYED]),
        (
            _delayed("unique"),
            _dict,
            [RUNNER, DISPATCHER, TASK, ENQUEUE, LOCKS, FRAMES, DELAYED],
        ),
        (_at("limited"), _dict, [RUNNER, DISPATCHER, TASK, ENQUEUE, FRAMES, DELAYED]),
    ],
)
async def test_a_payload_visits_each_module_once_and_is_encoded_once(
    call: Call, make: Callable[[], Any], stops: list[str]
) -> None:
    runner = _runner()
    payload = make()
    with following(payload) as way:
        await call(runner, payload)
    assert way.ended, "the payload never reached the backend"
    assert way.stops == stops
    assert len(set(way.stops)) == len(way.stops)
    assert way.encodes == 1


def test_the_follower_sees_a_bounce() -> None:
    """The check can fail: a payload handed back to a module it left is seen."""
    runner = _runner()
    payload = _dict()
    task = runner.tasks["plain"]
    with following(payload) as way:
        task.dispatch_form(payload)
        runner._dispatcher._planner.entry(task, payload)
        task.lock_key_for(payload)  # back in _task, after _dispatch.enqueue and _wire
    assert way.stops == [TASK, ENQUEUE, FRAMES, ENCODING, TASK]
