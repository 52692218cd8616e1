"""What a step receives: its own payload or its parents' results, and ``ctx.parents``.

Pure: the worker reads the parents' result documents (one backend call) and this
module turns them into the step's payload and ``ctx.parents``:

- a step given a payload receives it; its parents' results come in
  ``ctx.parents``, by step id;
- a step given none receives its one parent's result (a chain), or the list of
  its parents' results in declared order (a chord, several ``after=``);
- a parent that failed under ``on_failure="continue"`` stands as a
  :class:`~taskrunner.StepFailed`; one that failed under ``"skip"`` is left out
  (a lone skipped parent gives ``None``).

What a step receives is capped (:data:`MAX_INPUT_BYTES` of result documents in
all): past it the step fails with an error naming the step and the size.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any

import attrs

from taskrunner._wire import TaskState, decode_result
from taskrunner._wire.encoding import json_object
from taskrunner._workflows.state import StepFailed
from taskrunner.errors import InvalidTaskPayload

__all__ = ["MAX_INPUT_BYTES", "ParentResult", "StepInputs", "step_inputs"]

MAX_INPUT_BYTES = 8 * 1024 * 1024
"""The most a step receives of its parents' results, in bytes of their documents."""

_LEFT_OUT = object()


@attrs.frozen(kw_only=True)
class ParentResult:
    """One parent's result as the worker read it."""

    step: str
    policy: str
    """The parent's ``on_failure``."""
    document: bytes | None
    """Its result document (``None``: none kept; it counts as ``None``)."""


@attrs.frozen(kw_only=True)
class StepInputs:
    """What the action receives."""

    payload: Any
    parents: Mapping[str, Any]


def _value(parent: ParentResult) -> Any:
    if parent.document is None:
        return None
    # A parent's success (nearly every input) needs its value alone: the rest of the
    # document (its times, attempts, task), which decode_result checks, is not read.
    fields = json_object(parent.document)
    if fields.get("state") == "succeeded":
        return fields.get("value")
    doc = decode_result(parent.document)
    if doc.state is TaskState.SUCCEEDED:
        return doc.value
    if parent.policy == "skip":
        return _LEFT_OUT
    if doc.state is TaskState.CANCELLED:
        return StepFailed(parent.step, "TaskCancelled", doc.error or "the step was cancelled")
    return StepFailed(parent.step, doc.error_type, doc.error)


def step_inputs(
    step: str,
    task_name: str,
    own_payload: Any,
    has_payload: bool,
    parents: Sequence[ParentResult],
) -> StepInputs:
    """The payload and ``ctx.parents`` of ``step`` (see the module docstring).

    Raises:
        InvalidTaskPayload: the parents' results exceed :data:`MAX_INPUT_BYTES`,
            or one is not a result document.
    """
    size = sum(len(p.document) for p in parents if p.document is not None)
    if size > MAX_INPUT_BYTES:
        raise InvalidTaskPayload(
            f"step {step!r} receives {size} bytes of its parents' results, over the "
            f"{MAX_INPUT_BYTES}-byte cap",
            task_name=task_name,
        )
    values = {p.step: _value(p) for p in parents}
    kept = {k: v for k, v in values.items() if v is not _LEFT_OUT}
    if has_payload:
        payload = own_payload
    elif not parents:
        payload = None
    elif len(parents) == 1:
        only = values[parents[0].step]
        payload = None if only is _LEFT_OUT else only
    else:
        payload = [values[p.step] for p in parents if values[p.step] is not _LEFT_OUT]
    return StepInputs(payload=payload, parents=MappingProxyType(kept))
