"""How an action is called, read from its signature once (pure): a table."""

from __future__ import annotations

import functools
from typing import Any

import pytest

from taskrunner import Task, TaskContext
from taskrunner._execution.action import ActionShape, action_shape


async def payload_only(payload: dict[str, Any]) -> None: ...
async def second_positional(payload: dict[str, Any], ctx) -> None: ...  # type: ignore[no-untyped-def]
async def second_with_default(payload: dict[str, Any], retries: int = 3) -> None: ...
async def annotated_keyword(payload: Any, *, context: TaskContext) -> None: ...
async def annotated_default(
    payload: Any, flag: int = 0, ctx: TaskContext | None = None
) -> None: ...
async def annotated_second(payload: Any, ctx: TaskContext) -> None: ...
async def positional_only(payload: Any, ctx: TaskContext, /) -> None: ...
async def var_args(payload: Any, *rest: Any) -> None: ...
def sync_payload(payload: Any) -> None: ...
def sync_context(payload: Any, ctx: TaskContext) -> None: ...


class Callable:
    async def __call__(self, payload: Any, ctx: TaskContext) -> None: ...


@pytest.mark.parametrize(
    ("action", "shape"),
    [
        (payload_only, ActionShape(sync=False)),
        (second_positional, ActionShape(sync=False, context=1)),
        (second_with_default, ActionShape(sync=False)),  # unchanged: called with one argument
        (annotated_keyword, ActionShape(sync=False, context="context")),
        (annotated_default, ActionShape(sync=False, context="ctx")),
        (annotated_second, ActionShape(sync=False, context="ctx")),
        (positional_only, ActionShape(sync=False, context=1)),
        (var_args, ActionShape(sync=False)),
        (sync_payload, ActionShape(sync=True)),
        (sync_context, ActionShape(sync=True, context="ctx")),
        (Callable(), ActionShape(sync=False, context="ctx")),
        (functools.partial(second_positional), ActionShape(sync=False, context=1)),
        (print, ActionShape(sync=True)),
    ],
)
def test_action_shape(action: Any, shape: ActionShape) -> None:
    assert action_shape(action) == shape


def test_a_task_reads_its_shape_once() -> None:
    task = Task(name="t", action=sync_context)
    assert task.shape == ActionShape(sync=True, context="ctx")


async def context_first(ctx: TaskContext) -> None: ...
async def context_third(payload: Any, other: Any, ctx: TaskContext, /) -> None: ...


@pytest.mark.parametrize(
    ("action", "message"),
    [
        (context_first, "first parameter is the payload, but 'ctx'"),
        (context_third, "positional-only but not the second"),
        (42, "Task.action must be callable, got 42"),
    ],
)
def test_action_shape_refuses(action: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Task(name="t", action=action)
