"""Each run gets its own copy of the context variables, as a trio task of its own did.

A worker of the crew runs one message after another (``taskrunner._serve.crew``):
what one run sets in a :class:`contextvars.ContextVar` must not be seen by the next
run on the same worker, and a task spawned by a run inherits that run's values.
"""

from __future__ import annotations

import contextvars

import trio
import trio.testing
from _fleet import make_runner, serving, wait_until

from taskrunner._serve.crew import run_in
from taskrunner.backends.memory import MemoryBackend

REQUEST: contextvars.ContextVar[str] = contextvars.ContextVar("REQUEST", default="unset")


async def test_a_value_set_by_one_run_is_not_seen_by_the_next(
    autojump_clock: trio.testing.MockClock,
) -> None:
    runner = make_runner(MemoryBackend(), num_workers=1)  # one worker runs both, in turn
    seen: list[tuple[str, str]] = []

    @runner.task()
    async def tag(payload: str) -> None:
        seen.append((payload, REQUEST.get()))
        REQUEST.set(payload)
        await trio.sleep(1)
        seen.append((payload, REQUEST.get()))

    for name in ("first", "second", "third"):
        await runner.dispatch("tag", name)
    async with serving(runner):
        await wait_until(lambda: len(seen) == 6)
    assert seen == [
        ("first", "unset"),
        ("first", "first"),
        ("second", "unset"),
        ("second", "second"),
        ("third", "unset"),
        ("third", "third"),
    ]


async def test_a_run_that_sets_a_value_after_runs_that_set_none_does_not_leak_it(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # Runs that set nothing run in the worker's own context; the first that sets a
    # value must not pass it on (the worker then gives each run a copy of its own).
    runner = make_runner(MemoryBackend(), num_workers=1)
    seen: list[tuple[str, str]] = []

    @runner.task()
    async def tag(payload: str) -> None:
        seen.append((payload, REQUEST.get()))
        if payload.startswith("set"):
            REQUEST.set(payload)
        await trio.sleep(1)

    for name in ("read", "read again", "set", "after", "set twice", "last"):
        await runner.dispatch("tag", name)
    async with serving(runner):
        await wait_until(lambda: len(seen) == 6)
    assert seen == [
        ("read", "unset"),
        ("read again", "unset"),
        ("set", "unset"),
        ("after", "unset"),
        ("set twice", "unset"),
        ("last", "unset"),
    ]


async def test_a_value_replaced_by_an_equal_object_is_not_seen_by_the_next_run(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # The worker's check compares by identity: an equal list set by one run is
    # still a change, not the object the next run must see.
    tags: contextvars.ContextVar[list[str]] = contextvars.ContextVar("tags")
    original: list[str] = []
    tags.set(original)  # before serve: every worker's context starts with it
    runner = make_runner(MemoryBackend(), num_workers=1)
    seen: list[bool] = []

    @runner.task()
    async def tag(payload: str) -> None:
        seen.append(tags.get() is original)
        tags.set([])  # equal to the original, another object
        await trio.sleep(1)

    for name in ("first", "second"):
        await runner.dispatch("tag", name)
    async with serving(runner):
        await wait_until(lambda: len(seen) == 2)
    assert seen == [True, True]


async def test_a_task_a_run_spawns_inherits_its_values(
    autojump_clock: trio.testing.MockClock,
) -> None:
    runner = make_runner(MemoryBackend(), num_workers=1)
    seen: list[str] = []

    @runner.task()
    async def spawn(payload: str) -> None:
        REQUEST.set(payload)

        async def child() -> None:
            seen.append(REQUEST.get())

        async with trio.open_nursery() as nursery:
            nursery.start_soon(child)

    await runner.dispatch("spawn", "mine")
    async with serving(runner):
        await wait_until(lambda: bool(seen))
    assert seen == ["mine"]
    assert REQUEST.get() == "unset", "nothing leaks out to serve's caller"


async def test_run_in_steps_the_coroutine_in_its_context_and_passes_cancellation_through(
    autojump_clock: trio.testing.MockClock,
) -> None:
    seen: list[str] = []

    async def body(name: str) -> None:
        REQUEST.set(name)
        try:
            await trio.sleep(1)
            seen.append(REQUEST.get())
            await trio.sleep(10)
        finally:
            seen.append(f"finally {REQUEST.get()}")

    assert run_in(contextvars.copy_context(), _returns_at_once()) is None, "no step: no generator"
    with trio.move_on_after(5) as scope:
        rest = run_in(contextvars.copy_context(), body("inner"))
        assert rest is not None
        await rest
    assert scope.cancelled_caught
    assert seen == ["inner", "finally inner"]
    assert REQUEST.get() == "unset"


async def _returns_at_once() -> None:
    REQUEST.set("gone")
