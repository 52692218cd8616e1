"""Reading a workflow's record on Redis, without I/O: the runner's backend
(``RedisWorkflows.read_workflow``) and the producers (``producer.workflow(id).status()``)
parse the same ``HGETALL`` reply (:func:`record_of`; the fields are listed in
:mod:`taskrunner.backends.redis._workflows`), then read the queued steps' progress
hashes (:func:`queued_task_ids`, :func:`with_progress`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from taskrunner._workflows import StepState, WorkflowState
from taskrunner.backends._protocols.workflows import StepRecord, WorkflowRecord
from taskrunner.backends.redis._events import progress_of

__all__ = ["queued_task_ids", "record_from", "record_of", "with_progress"]


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes | bytearray) else str(value)


def _bytes(value: Any) -> bytes:
    return value.encode() if isinstance(value, str) else bytes(value)


def record_of(workflow_id: str, reply: Any) -> WorkflowRecord | None:
    """A workflow's record from ``HGETALL`` of its hash (``None``: no record, or not
    one taskrunner wrote); the runner's backend and the producers read it so."""
    if not reply:
        return None
    if isinstance(reply, dict):
        fields = {_text(k): v for k, v in reply.items()}
    else:
        fields = {_text(reply[i]): reply[i + 1] for i in range(0, len(reply), 2)}
    if "state" not in fields:
        return None
    ids: list[str] = json.loads(fields["steps"])
    handler = _text(fields.get("handler", b""))
    if handler and f"t:{handler}" in fields:
        ids.append(handler)
    return record_from(workflow_id, fields, ids)


def record_from(workflow_id: str, fields: Mapping[str, Any], ids: Sequence[str]) -> WorkflowRecord:
    """A :class:`WorkflowRecord` of the record's ``fields`` (by name), with steps ``ids``."""
    steps = []
    for step in ids:
        node = json.loads(fields[f"g:{step}"])
        task_id = fields.get(f"t:{step}")
        result = fields.get(f"r:{step}")
        steps.append(
            StepRecord(
                id=step,
                task=node["task"],
                state=StepState(_text(fields[f"s:{step}"])),
                queue=node.get("queue"),
                parents=tuple(node["parents"]),
                task_id=_text(task_id) if task_id is not None else None,
                result=_bytes(result) if result is not None else None,
                on_failure=node.get("policy", "fail"),
            )
        )
    return WorkflowRecord(
        workflow_id=workflow_id,
        name=_text(fields["name"]),
        state=WorkflowState(_text(fields["state"])),
        steps=tuple(steps),
        sinks=tuple(json.loads(fields["sinks"])),
        failed_step=_text(fields.get("failed") or b""),
        reason=_text(fields.get("reason") or b""),
        created_at=float(_text(fields.get("created") or b"0")),
    )


def queued_task_ids(record: WorkflowRecord) -> dict[str, str]:
    """The task ids of a record's queued steps, by step id: whose progress to read."""
    return {s.id: s.task_id for s in record.steps if s.state is StepState.QUEUED and s.task_id}


def with_progress(record: WorkflowRecord, replies: Mapping[str, Any]) -> WorkflowRecord:
    """``record`` with its steps' progress, from ``HGETALL`` of their progress hashes
    (``replies`` by step id)."""
    found = {step: progress_of(reply) for step, reply in replies.items()}
    return attrs.evolve(
        record,
        steps=tuple(
            attrs.evolve(s, progress=found[s.id]) if found.get(s.id) else s for s in record.steps
        ),
    )
