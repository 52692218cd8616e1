"""What a workflow step receives, read before it runs (one backend call, steps only).

Theory of operation: a step's message carries its workflow and step id
(``MessageExtras.workflow``, ``.step``); the worker's ``_prepare`` leaves the
payload of such a message undecoded, and :func:`step_payload` reads the
parents' results (:meth:`~taskrunner.backends.WorkflowStore.step_inputs`; a chain's
step, queued by its one parent's finish, carries that parent's result in its entry
instead, :attr:`~taskrunner.backends.QueueEntry.inputs`, and reads nothing),
turns them into the step's payload and ``ctx.parents``
(:func:`taskrunner._workflows.inputs.step_inputs`), and decodes the payload as
any other. A plain message pays one test for this (its ``extras`` is ``None``).
"""

from __future__ import annotations

from typing import Any

import attrs

from taskrunner._codec import decode_payload
from taskrunner._execution.context import TaskContext
from taskrunner._task import Task
from taskrunner._wire import TaskMessage
from taskrunner._wire.encoding import json_object
from taskrunner._workflows.inputs import MAX_INPUT_BYTES, ParentResult, step_inputs
from taskrunner.backends import StepSources, WorkflowStore
from taskrunner.errors import InvalidTaskPayload

__all__ = [
    "GENERAL",
    "STEP",
    "carried_sources",
    "carried_success",
    "step_context",
    "step_payload",
    "workflow_store",
]

STEP: Any = object()
"""``_prepare``'s payload of a step: read by :func:`step_payload` before it runs."""


def workflow_store(backend: object) -> WorkflowStore | None:
    """``backend`` as a :class:`~taskrunner.backends.WorkflowStore`, or ``None`` (the
    check is an ``isinstance`` of a runtime protocol, tens of microseconds: the worker
    makes it once per backend, not once per step)."""
    return backend if isinstance(backend, WorkflowStore) else None


_HEADERS: dict[bytes, tuple[str, str, bool]] = {}
"""Carried headers read so far (``step_parent``: a parent's step id, policy and whether
the child has a payload of its own), by their bytes: a workflow's shape repeats, so a
chain's headers are few (at most :data:`_HEADERS_KEPT` kept)."""
_HEADERS_KEPT = 4096


def _carried_header(header: bytes) -> tuple[str, str, bool]:
    parent = _HEADERS.get(header)
    if parent is None:
        fields = json_object(header)
        parent = (fields["step"], fields["policy"], bool(fields["own"]))
        if len(_HEADERS) >= _HEADERS_KEPT:
            _HEADERS.clear()
        _HEADERS[header] = parent
    return parent


def carried_sources(inputs: tuple[bytes, bytes]) -> StepSources:
    """What a step receives from the inputs carried in its entry
    (:attr:`~taskrunner.backends.QueueEntry.inputs`: its one parent's header and result)."""
    header, document = inputs
    step, policy, own = _carried_header(header)
    result = ParentResult(step=step, policy=policy, document=document)
    return StepSources(has_payload=own, parents=(result,))


GENERAL: Any = object()
""":func:`carried_success`'s answer when the general path decides."""


def carried_success(inputs: tuple[bytes, bytes]) -> Any:
    """The payload of a step given none whose entry carries its one parent's success:
    that parent's value, as :func:`~taskrunner._workflows.inputs.step_inputs` gives it
    (the common chain step, read without building its sources), else :data:`GENERAL`
    (a payload of its own, a failed or cancelled parent, an outsized document)."""
    header, document = inputs
    if _carried_header(header)[2] or len(document) > MAX_INPUT_BYTES:
        return GENERAL
    fields = json_object(document)
    if fields.get("state") != "succeeded":
        return GENERAL
    return fields.get("value")


async def step_payload(
    backend: object,
    store: WorkflowStore | None,
    group: str,
    task: Task,
    message: TaskMessage,
    carried: tuple[bytes, bytes] | None = None,
    *,
    with_parents: bool = True,
) -> tuple[TaskMessage, Any]:
    """The step's message (its ``extras.inputs``: ``ctx.parents``) and decoded payload;
    ``store`` is :func:`workflow_store` of ``backend``; ``carried``, the inputs its
    entry carries, if any (then nothing is read). ``with_parents=False``: the run
    builds no context (its action takes none, no middleware), so nothing reads
    ``ctx.parents`` and ``message`` is returned as it is (two copies fewer per step).

    Raises:
        InvalidTaskPayload: the backend keeps no workflows, the inputs are over their
            cap, or the payload does not decode.
        BackendError: the read failed (the entry stays pending and comes back).
    """
    extras = message.extras
    assert extras is not None
    assert extras.workflow is not None
    if carried is not None and not with_parents:
        # (nothing reads ctx.parents: a chain step's parent value is its payload)
        value = carried_success(carried)
        if value is not GENERAL:
            return message, decode_payload(value, task.payload_type, task.name, task.extra_keys)
    if carried is not None:
        sources = carried_sources(carried)
    elif store is None:
        raise InvalidTaskPayload(
            f"message is step {extras.step!r} of workflow {extras.workflow!r}, but "
            f"{type(backend).__name__} keeps no workflows",
            task_name=task.name,
        )
    else:
        sources = await store.step_inputs(group, extras.workflow, extras.step or "")
    inputs = step_inputs(
        extras.step or "", task.name, message.payload, sources.has_payload, sources.parents
    )
    payload = decode_payload(inputs.payload, task.payload_type, task.name, task.extra_keys)
    if with_parents:
        message = attrs.evolve(message, extras=attrs.evolve(extras, inputs=inputs.parents))
    return message, payload


def step_context(ctx: TaskContext, message: TaskMessage) -> TaskContext:
    """``ctx`` of a step's run: its workflow, its step id and ``ctx.parents``."""
    extras = message.extras
    assert extras is not None
    return attrs.evolve(
        ctx, workflow_id=extras.workflow, step=extras.step, parents=extras.inputs or {}
    )
