"""Cancelling a workflow, or one queued or delayed step of it, counted: the calls,
without I/O.

Theory of operation: ``lua/track.lua`` given ``'steps'`` (its ``ARGV[10]``) names a
queued or delayed step (``{'step', raw, workflow id, step id}``) instead of removing
it, since the key of the step's workflow record is not known before; the caller then
sends :func:`cancel_step_call`, ``lua/finish.lua``'s ``cancel_step`` operation with
nothing to ack, which takes the step off its queue and counts it cancelled under its
policy (the cancel cascade applied there) in one step, so its workflow never waits for
it. The runner's backend (``RedisWorkflows.cancel``) and the producers
(``Producer.cancel``, ``AsyncProducer.cancel``) send the same two calls.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from taskrunner import _keys
from taskrunner._keys import KeyLayout
from taskrunner._wire import TaskState
from taskrunner._workflows.keys import running_workflows, workflow_ends_key, workflow_key
from taskrunner.backends._protocols.tracking import Cancellation
from taskrunner.backends.redis._connection import CommandArg

__all__ = [
    "STEP_FLAG",
    "WORKFLOWS_MARK",
    "block_keys",
    "cancel_step_call",
    "cancel_workflow_call",
    "named_step",
    "step_cancellation",
    "workflow_keys",
]

WORKFLOWS_MARK = "\0workflows"
"""Where ``finish.lua``'s workflow block starts in its ``ARGV`` (no task id holds a NUL)."""
STEP_FLAG = "steps"
"""``lua/track.lua``'s ``ARGV[10]``: name a queued or delayed step instead of removing it."""

_STEP_CANCELS = {
    "queued": TaskState.QUEUED,
    "scheduled": TaskState.SCHEDULED,
    "running": TaskState.RUNNING,
}
"""What ``finish.lua``'s ``cancel_step`` replies, as a :class:`Cancellation`'s state."""


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes | bytearray) else str(value)


def workflow_keys(group: str, workflow_id: str, layout: KeyLayout) -> list[CommandArg]:
    """A workflow's record, result key and notice: three keys per operation of
    ``finish.lua``'s workflow block."""
    return [
        workflow_key(group, workflow_id, layout),
        _keys.result(group, workflow_id, layout),
        _keys.notify(group, workflow_id, layout),
    ]


def block_keys(group: str, layout: KeyLayout) -> list[CommandArg]:
    """The keys ``finish.lua``'s workflow block always reads, before its streams."""
    return [
        _keys.delayed_tasks(group, layout),
        _keys.delayed_index(group, layout),
        workflow_ends_key(group, layout),
        running_workflows(group, layout),
        _keys.paused(group, layout),
    ]


def named_step(reply: Any) -> tuple[bytes | None, str, str] | None:
    """``(raw, workflow id, step id)`` when ``lua/track.lua``'s cancel reply names a
    step (``{'step', ...}``), else ``None``."""
    if not reply or _text(reply[0]) != "step":
        return None
    _, raw, workflow, step = reply
    return (
        (bytes(raw) if isinstance(raw, bytes | bytearray) else None),
        _text(workflow),
        _text(step),
    )


def cancel_step_call(
    group: str,
    layout: KeyLayout,
    task_id: str,
    workflow_id: str,
    step: str,
    streams: Sequence[CommandArg],
    now: float,
) -> tuple[list[CommandArg], list[CommandArg]]:
    """``(KEYS, ARGV)`` of ``lua/finish.lua`` cancelling step ``step`` (task
    ``task_id``) of ``workflow_id`` and counting it: ``streams`` are the streams
    the step may be on (the first one is the script's ``KEYS[1]``, acking nothing),
    ``now`` unix seconds."""
    keys: list[CommandArg] = [
        streams[0],
        _keys.entry_index(group, layout),
        _keys.cancelled(group, layout),
        _keys.result_waiters(group, layout),
        *block_keys(group, layout),
        *streams,
        *workflow_keys(group, workflow_id, layout),
    ]
    args: list[CommandArg] = [
        group, "0", 0, WORKFLOWS_MARK, repr(now), len(streams),
        "cancel_step", step, task_id, 0,
    ]  # fmt: skip
    return keys, args


def cancel_workflow_call(
    group: str,
    layout: KeyLayout,
    workflow_id: str,
    own_stream: CommandArg,
    streams: Iterable[CommandArg],
    now: float,
) -> tuple[list[CommandArg], list[CommandArg]]:
    """``(KEYS, ARGV)`` of ``lua/finish.lua`` cancelling workflow ``workflow_id``
    (``wf.cancel()``): ``own_stream`` the backend's own (the script's ``KEYS[1]``,
    acking nothing), ``streams`` those its steps go to, ``now`` unix seconds."""
    ordered = sorted(set(streams), key=str)
    keys: list[CommandArg] = [
        own_stream,
        _keys.entry_index(group, layout),
        _keys.cancelled(group, layout),
        _keys.result_waiters(group, layout),
        *block_keys(group, layout),
        *ordered,
        *workflow_keys(group, workflow_id, layout),
    ]
    args: list[CommandArg] = [
        group, "0", 0, WORKFLOWS_MARK, repr(now), len(ordered), "cancel", "", "", 0,
    ]  # fmt: skip
    return keys, args


def step_cancellation(reply: Any, raw: bytes | None) -> Cancellation:
    """What ``cancel_step``'s reply says: ``queued``, ``scheduled`` or ``running``
    (asked to stop); anything else (finished meanwhile, or its entry gone: the
    leader's check counts it) cancelled nothing."""
    state = _STEP_CANCELS.get(_text(reply))
    if state is None:
        return Cancellation(state=None)
    return Cancellation(state=state, raw=raw)
