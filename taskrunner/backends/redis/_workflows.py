"""The :class:`~taskrunner.backends.WorkflowStore` protocol on Redis.

Theory of operation: a workflow's record is one hash
(``taskrunner:<group>:workflow:<id>``, in the group's slot in the cluster layout);
``lua/start_workflow.lua`` writes it and adds the roots to their streams in one step;
a step's finish is counted by ``lua/finish.lua``'s workflow block, in the script that
acks it (:func:`step_section` builds what that block reads, for the outcomes of a
batch that are steps; a batch without one sends nothing more); ``wf.cancel()`` is the
same script with no entry to ack and one ``cancel`` operation; the record is read with
one ``HGETALL`` and a step's inputs with ``lua/step_inputs.lua``.

A wide workflow starts in chunks (:data:`START_CHUNK`); ``runner.cancel`` of a queued
or delayed step is ``finish.lua``'s ``cancel_step`` (``lua/track.lua`` names the step
instead of removing it); the leader's check of uncounted steps is its ``audit``, one
call per workflow of the running workflows' index (``taskrunner:<group>:workflows``).

Fields of the record: ``state`` (``starting`` while a chunked start writes its steps),
``name``, ``keep`` (ms), ``created``, ``handler``, ``steps`` and ``sinks`` (JSON lists),
``left`` (steps not final), ``failed``, ``reason`` (set by the audit); per step
``g:<id>`` (its node: task, parents and their policies, children, policy, whether it
has a payload, queue), ``f:<id>`` (what ``lua/finish.lua`` reads of it, so a finish
decodes no JSON and reads no child's field before queueing a chain's next step:
:func:`finish_field`; emptied once the children it carries are queued), ``s:<id>`` (its state),
``n:<id>`` (parents not finished, read while it is pending: a step's one parent
queues it without counting it down), ``q:<id>`` (its stream's key), ``m:<id>`` (its
message, until queued), ``t:<id>`` (its task id once queued), ``r:<id>`` (its result
document once finished) and ``u:<id>`` (when the audit first found it nowhere).

A record written before ``f:`` fields existed is finished by its node's ``children``
and ``sole`` (``finish.lua``'s ``wf_finish_node``), as it was, so a workflow started
before an upgrade still ends after it; a worker of that earlier code finishes a
record written by this one by its node too (every other field is as it was), so a
fleet can be upgraded one worker at a time.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from taskrunner import _keys
from taskrunner._workflows import WorkflowGraph, WorkflowState
from taskrunner._workflows.inputs import ParentResult
from taskrunner._workflows.keys import running_workflows, workflow_ends_key, workflow_key
from taskrunner.backends._protocols.tracking import Cancellation, Outcome
from taskrunner.backends._protocols.workflows import StepSources, WorkflowRecord
from taskrunner.backends.redis._connection import CommandArg
from taskrunner.backends.redis._scripts import load_script
from taskrunner.backends.redis._state import _ms
from taskrunner.backends.redis._step_cancel import (
    STEP_FLAG,
    WORKFLOWS_MARK,
    block_keys,
    cancel_step_call,
    cancel_workflow_call,
    named_step,
    step_cancellation,
    workflow_keys,
)
from taskrunner.backends.redis._tracking import FINISH, RedisTracking, cancellation_of
from taskrunner.backends.redis._workflow_reads import (
    queued_task_ids,
    record_from,
    record_of,
    with_progress,
)

__all__ = [
    "START_CHUNK",
    "START_WORKFLOW",
    "STEP_INPUTS",
    "WORKFLOWS_MARK",
    "RedisWorkflows",
    "finish_field",
    "roots_of",
    "start_workflow_calls",
]

START_WORKFLOW = load_script("start_workflow.lua")
"""Write a workflow's record and queue its roots."""
STEP_INPUTS = load_script("step_inputs.lua")
"""Read what a step receives."""

_ENDS = ("succeeded", "failed", "cancelled")

START_CHUNK = 2000
"""Steps per ``start_workflow.lua`` call: a workflow of more steps starts in chunks, so
no one script holds the server for all of a 100,000-child group's ``XADD``s."""


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes | bytearray) else str(value)


def _pairs(reply: Any) -> dict[str, str]:
    flat = [_text(v) for v in reply]
    return dict(zip(flat[::2], flat[1::2], strict=True))


def _node(graph: WorkflowGraph, step_id: str, queue: str | None) -> str:
    node = graph.step(step_id)
    children = graph.children.get(step_id, ())
    # The children whose one parent this step is, by whether they have a payload of
    # their own (a record's finish reads f:<id> instead; this is for a worker of the
    # code before it, and a record of that code is finished by it: see lua/finish.lua).
    sole = {c: graph.step(c).has_payload for c in children if graph.step(c).parents == (step_id,)}
    return json.dumps(
        {
            "handler": graph.handler is not None and step_id == graph.handler.id,
            "task": node.task,
            "parents": list(node.parents),
            "parent_policies": [graph.step(p).on_failure for p in node.parents],
            "children": list(children),
            "sole": sole,
            "policy": node.on_failure,
            "own": node.has_payload,
            "queue": queue,
        }
    )


def _token(value: bytes) -> bytes:
    return b"%d:%s" % (len(value), value)


def finish_field(
    graph: WorkflowGraph, step_id: str, messages: Mapping[str, bytes], streams: Mapping[str, str]
) -> bytes:
    """What ``lua/finish.lua`` reads of a step (its ``f:<id>`` field, so a finish decodes
    no JSON): length-prefixed tokens, its policy, then per child ``n`` and the child's
    id (a child that counts its parents down), or ``s``, the id, its stream's key, the
    header its entry carries (``step_parent``) and its message (a copy of its
    ``m:<id>``), for a child whose one parent this step is."""
    node = graph.step(step_id)
    parts = [_token(node.on_failure.encode())]
    for child in graph.children.get(step_id, ()):
        spec = graph.step(child)
        if spec.parents != (step_id,):
            parts += (_token(b"n"), _token(child.encode()))
            continue
        header = json.dumps({"step": step_id, "policy": node.on_failure, "own": spec.has_payload})
        parts += (
            _token(b"s"),
            _token(child.encode()),
            _token(streams[child].encode()),
            _token(header.encode()),
            _token(messages[child]),
        )
    return b"".join(parts)


StartCall = tuple[list[CommandArg], list[CommandArg]]
"""``(KEYS, ARGV)`` of one ``lua/start_workflow.lua`` call."""


def start_workflow_calls(
    record: str,
    index: str,
    graph: WorkflowGraph,
    messages: Mapping[str, bytes],
    queues: Mapping[str, str | None],
    streams: Mapping[str, str],
    keep: float,
    now: float,
    chunk: int = START_CHUNK,
) -> list[StartCall]:
    """The ``lua/start_workflow.lua`` calls that start a workflow, to send in order
    (pure): the record's key, the running workflows' index, each step's message, queue
    name (``None``: the backend's own) and stream key, ``keep`` (seconds), ``now``
    (unix seconds). Up to ``chunk`` steps it is one ``all`` call; past it, one ``part``
    call per ``chunk`` steps, then one ``go`` call per ``chunk`` roots (what a start
    cut off between two calls leaves: see the script). The runner's backend and the
    producers (``Producer.dispatch_workflow``) start a workflow with the same calls."""
    nodes = [*graph.steps, *([graph.handler] if graph.handler is not None else [])]
    head: list[CommandArg] = [
        _ms(keep),
        repr(now),
        graph.name,
        graph.handler.id if graph.handler is not None else "",
        json.dumps([n.id for n in graph.steps]),
        json.dumps(list(graph.sinks)),
        len(graph.steps),
    ]
    steps: list[CommandArg] = []
    roots: list[str] = []
    for node in nodes:
        root = not node.parents and (graph.handler is None or node.id != graph.handler.id)
        if root:
            roots.append(node.id)
        steps += [
            node.id,
            # its node and its finish field in one value (JSON holds no NUL)
            b"%s\0%s"
            % (
                _node(graph, node.id, queues.get(node.id)).encode(),
                finish_field(graph, node.id, messages, streams),
            ),
            messages[node.id],
            "1" if root else "0",
            len(node.parents),
            streams[node.id],
        ]

    def roots_keys(ids: Sequence[str]) -> list[CommandArg]:
        return [record, index, *sorted({streams[r] for r in ids})]

    if len(nodes) <= chunk:
        return [(roots_keys(roots), [*head, "all", *steps])]
    size = 6 * chunk
    calls: list[StartCall] = [
        ([record, index], [*head, "part", *steps[at : at + size]])
        for at in range(0, len(steps), size)
    ]
    for at in range(0, len(roots), chunk):
        ids = roots[at : at + chunk]
        calls.append((roots_keys(ids), [*head, "go", *ids]))
    return calls


def roots_of(reply: Any) -> dict[str, str]:
    """The roots' task ids by step id, from ``lua/start_workflow.lua``'s reply (a
    ``part`` call's is empty)."""
    return _pairs(reply)


class RedisWorkflows(RedisTracking):
    """A :class:`~taskrunner.backends.WorkflowStore` on Redis (see the module docstring)."""

    def _workflow_keys(self, group: str, workflow_id: str) -> list[CommandArg]:
        return workflow_keys(group, workflow_id, self.key_layout)

    def _block_keys(self, group: str) -> list[CommandArg]:
        return block_keys(group, self.key_layout)

    def step_section(
        self, group: str, outcomes: Sequence[Outcome], first_document: int, queue: str | None
    ) -> tuple[list[CommandArg], list[CommandArg]]:
        """The keys and arguments ``finish.lua``'s workflow block reads for the steps
        among ``outcomes`` (``([], [])`` when none is a step: a plain batch pays one
        test per outcome). ``first_document`` is the ``ARGV`` index (1-based) of the
        first outcome's document; each outcome has seven values."""
        steps = [(i, o) for i, o in enumerate(outcomes) if o.workflow is not None]
        if not steps:
            return [], []
        streams = [self.stream_keys(group, queue).stream]
        own = self.stream_keys(group).stream
        if own not in streams:
            streams.append(own)
        keys: list[CommandArg] = [*self._block_keys(group), *streams]
        args: list[CommandArg] = [WORKFLOWS_MARK, repr(self.now()), len(streams)]
        # Once per call, not per step: the heads of each workflow's three keys (as
        # _workflow_keys names them).
        record, result, notice = (str(key) for key in self._workflow_keys(group, ""))
        for i, done in steps:
            workflow = done.workflow
            assert workflow is not None
            keys += (record + workflow, result + workflow, notice + workflow)
            index = first_document + 7 * i if done.document is not None else 0
            args += ("finish", done.step, done.step_state, index)
        return keys, args

    start_chunk: int = START_CHUNK
    """Steps per ``start_workflow.lua`` call of a wide workflow (see :data:`START_CHUNK`)."""

    async def start_workflow(
        self,
        group: str,
        workflow_id: str,
        graph: WorkflowGraph,
        messages: Mapping[str, bytes],
        queues: Mapping[str, str | None],
        keep: float,
    ) -> dict[str, str]:
        """The calls of :func:`start_workflow_calls` (chunked past :attr:`start_chunk`
        steps), in order; the roots' task ids from the ``all`` or ``go`` replies."""
        streams = {
            node.id: self.stream_keys(group, queues.get(node.id)).stream
            for node in [*graph.steps, *([graph.handler] if graph.handler is not None else [])]
        }
        started: dict[str, str] = {}
        for keys, args in start_workflow_calls(
            workflow_key(group, workflow_id, self.key_layout),
            running_workflows(group, self.key_layout),
            graph,
            messages,
            queues,
            streams,
            keep,
            self.now(),
            self.start_chunk,
        ):
            started.update(roots_of(await START_WORKFLOW(self._client, keys, args)))
        return started

    async def read_workflow(self, group: str, workflow_id: str) -> WorkflowRecord | None:
        """One ``HGETALL`` of the record; then, when a step is queued, one pipeline of
        ``HGETALL`` of the queued steps' progress hashes."""
        reply = await self._client.execute(
            "HGETALL", workflow_key(group, workflow_id, self.key_layout)
        )
        record = record_of(workflow_id, reply)
        if record is None:
            return None
        queued = queued_task_ids(record)
        if not queued:
            return record
        replies = await self._client.pipeline(
            [
                ("HGETALL", _keys.progress(group, task_id, self.key_layout))
                for task_id in queued.values()
            ]
        )
        return with_progress(record, dict(zip(queued, replies, strict=True)))

    _HEAD = ("state", "name", "sinks", "failed", "reason", "created")

    async def workflow_end(self, group: str, workflow_id: str) -> WorkflowRecord | None:
        """Two ``HMGET``s: the record's head, then its sinks' and failed step's fields."""
        key = workflow_key(group, workflow_id, self.key_layout)
        head = await self._client.execute("HMGET", key, *self._HEAD)
        if head[0] is None or _text(head[0]) not in _ENDS:
            return None
        fields = {name: value for name, value in zip(self._HEAD, head, strict=True)}
        ids: list[str] = json.loads(fields["sinks"])
        failed = _text(fields["failed"] or b"")
        if failed and failed not in ids:
            ids.append(failed)
        names = [f"{kind}:{step}" for step in ids for kind in "gstr"]
        values = await self._client.execute("HMGET", key, *names) if names else []
        fields.update((n, v) for n, v in zip(names, values, strict=True) if v is not None)
        return record_from(workflow_id, fields, [s for s in ids if f"g:{s}" in fields])

    async def workflow_state(self, group: str, workflow_id: str) -> WorkflowState | None:
        """One ``HGET`` of the record's ``state`` (``starting``, a chunked start being
        written, is ``RUNNING``: not over)."""
        state = await self._client.execute(
            "HGET", workflow_key(group, workflow_id, self.key_layout), "state"
        )
        if state is None:
            return None
        text = _text(state)
        return WorkflowState.RUNNING if text == "starting" else WorkflowState(text)

    async def workflow_ends(self, group: str) -> dict[str, int]:
        reply = await self._client.execute("HGETALL", workflow_ends_key(group, self.key_layout))
        found = {_text(reply[i]): int(_text(reply[i + 1])) for i in range(0, len(reply), 2)}
        return {state: found.get(state, 0) for state in _ENDS}

    async def step_inputs(self, group: str, workflow_id: str, step: str) -> StepSources:
        reply = await STEP_INPUTS(
            self._client, [workflow_key(group, workflow_id, self.key_layout)], [step]
        )
        if not reply:
            return StepSources(has_payload=True)
        node = json.loads(_text(reply[0]))
        failed, failed_doc, documents = _text(reply[1]), reply[2], reply[3:]
        if node.get("handler"):  # the on_failure step receives the failed step's
            doc = bytes(failed_doc) if failed_doc is not None and failed else None
            handed = (ParentResult(step=failed, policy="continue", document=doc),)
            return StepSources(has_payload=node["own"], parents=handed if failed else ())
        return StepSources(
            has_payload=node["own"],
            parents=tuple(
                ParentResult(
                    step=parent,
                    policy=policy,
                    document=bytes(doc) if doc is not None else None,
                )
                for parent, policy, doc in zip(
                    node["parents"], node["parent_policies"], documents, strict=True
                )
            ),
        )

    async def cancel(
        self, group: str, task_id: str, *, queues: Sequence[str] | None = None
    ) -> Cancellation:
        """``RedisTracking.cancel``, counting a queued or delayed step: ``lua/track.lua``
        names it, then ``lua/finish.lua``'s ``cancel_step`` takes it off its queue and
        counts it cancelled (its policy and the cascade applied) in one step, so its
        workflow never waits for it (:mod:`taskrunner.backends.redis._step_cancel`)."""
        reply = await self._track_cancel(group, task_id, queues, (STEP_FLAG,))
        named = named_step(reply)
        if named is None:
            return cancellation_of(reply)
        raw, workflow, step = named
        streams = [self.stream_keys(group, queue).stream for queue in queues or (None,)]
        keys, args = cancel_step_call(
            group, self.key_layout, task_id, workflow, step, streams, self.now()
        )
        return step_cancellation(await FINISH(self._client, keys, args), raw)

    async def audit_steps(self, group: str, grace: float) -> list[str]:
        """One ``ZRANGE`` of the running workflows' index, then one ``lua/finish.lua``
        call (``audit``) per workflow, atomic with what it looks at."""
        head = workflow_key(group, "", self.key_layout)
        members = await self._client.execute(
            "ZRANGE", running_workflows(group, self.key_layout), 0, -1
        )
        failed: list[str] = []
        for member in members or ():
            record = _text(member)
            if not record.startswith(head):
                continue  # not a record of this group's (never written by taskrunner)
            workflow_id = record[len(head) :]
            stream = self.stream_keys(group).stream
            keys: list[CommandArg] = [
                stream,
                _keys.entry_index(group, self.key_layout),
                _keys.cancelled(group, self.key_layout),
                _keys.result_waiters(group, self.key_layout),
                *self._block_keys(group),
                stream,
                *self._workflow_keys(group, workflow_id),
            ]
            args: list[CommandArg] = [
                group, "0", 0, WORKFLOWS_MARK, repr(self.now()), 1, "audit", "", repr(grace), 0,
            ]  # fmt: skip
            if _text(await FINISH(self._client, keys, args)) == "failed":
                failed.append(workflow_id)
        return failed

    async def cancel_workflow(self, group: str, workflow_id: str) -> bool:
        record = await self.read_workflow(group, workflow_id)
        if record is None or record.state.final:
            return False
        streams = {self.stream_keys(group, s.queue).stream for s in record.steps}
        keys, args = cancel_workflow_call(
            group, self.key_layout, workflow_id, self.stream_keys(group).stream, streams, self.now()
        )
        await FINISH(self._client, keys, args)
        after = await self.read_workflow(group, workflow_id)
        return after is not None and after.state is WorkflowState.CANCELLED
