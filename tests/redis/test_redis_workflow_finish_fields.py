"""A step's finish field (``f:<step>``): what ``lua/finish.lua`` reads of a step instead
of its node, so a chain's step is counted and its successor queued without decoding
JSON or reading the successor's fields; and a record written before finish fields
existed (none in it) still finishes, by its node, as it did."""

from __future__ import annotations

import json
import sys
import uuid
from pathlib import Path
from typing import Any

from _fleet import serving

from taskrunner import Workflow, chain
from taskrunner._wire import encode_result, succeeded
from taskrunner._workflows.graph import compile_graph
from taskrunner._workflows.keys import workflow_key
from taskrunner.backends import Outcome
from taskrunner.backends.redis import RedisBackend
from taskrunner.backends.redis._workflows import finish_field

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from test_workflows import runner_with_tasks


def group_name() -> str:
    return f"wff-{uuid.uuid4().hex[:8]}"


def tokens(field: bytes) -> list[bytes]:
    """The field's length-prefixed tokens (as ``finish.lua``'s ``wf_tokens`` reads them)."""
    out, at = [], 0
    while at < len(field):
        colon = field.index(b":", at)
        stop = colon + 1 + int(field[at:colon])
        out.append(field[colon + 1 : stop])
        at = stop
    return out


def test_a_finish_field_names_each_child_and_carries_a_sole_childs_entry() -> None:
    dag = (
        Workflow("w")
        .step("a", "fetch", {"url": "a"}, on_failure="continue")
        .step("b:1", "echo", 5, after=["a"])  # a's only: carried in a's field
        .step("c", "merge", after=["a", "b:1"])  # two parents: counted down
    )
    graph = compile_graph(dag)
    messages = {"a": b"ma", "b:1": b'{"m": "b 1"}', "c": b"mc"}
    streams = {"a": "s:a", "b:1": "s:b", "c": "s:c"}
    assert tokens(finish_field(graph, "a", messages, streams)) == [
        b"continue",
        b"s",
        b"b:1",
        b"s:b",
        json.dumps({"step": "a", "policy": "continue", "own": True}).encode(),
        b'{"m": "b 1"}',
        b"n",
        b"c",
    ]
    assert tokens(finish_field(graph, "b:1", messages, streams)) == [b"fail", b"n", b"c"]
    assert tokens(finish_field(graph, "c", messages, streams)) == [b"fail"]


async def _calls(backend: RedisBackend) -> dict[str, int]:
    text = bytes(await backend._client.execute("INFO", "commandstats")).decode()
    calls = {}
    for line in text.splitlines():
        if line.startswith("cmdstat_"):
            name, fields = line[len("cmdstat_") :].split(":", 1)
            calls[name] = int(fields.split(",")[0].split("=")[1])
    return calls


async def test_a_chain_steps_finish_reads_the_record_once(redis_url: str) -> None:
    """The finish of a chain's step: one HMGET of the record (its state, the workflow's
    and its finish field), its count, the successor's XADD, the drop of the successor's
    message and one HSET; no other read of the record."""
    name = group_name()
    async with RedisBackend.from_url(redis_url) as backend:
        runner, _ = runner_with_tasks(backend, consumer_group=name)
        wf = await runner.dispatch_workflow(
            chain(runner.step("resize", {"id": 7}), runner.step("upload"), runner.step("upload"))
        )
        [entry] = await backend.read(name, "c1", 10, block=0)
        doc = encode_result(
            succeeded("resize", {"id": 7}, attempts=1, enqueued_at=0, started_at=0, finished_at=1)
        )
        done = Outcome(
            entry_id=entry.id, task_id=entry.id, document=doc, keep=60, notify=60,
            workflow=wf.id, step="resize", step_state="succeeded",
        )  # fmt: skip
        before = await _calls(backend)
        assert await backend.finish(name, [entry.id], [done]) == 1
        after = await _calls(backend)
        spent = {c: n - before.get(c, 0) for c, n in after.items() if n != before.get(c, 0)}
        for command in ("hmget", "hincrby", "xadd", "hdel", "hset"):
            assert spent.get(command) == 1, (command, spent)
        assert "hget" not in spent, spent
        [queued] = await backend.read(name, "c1", 10, block=0)
        assert queued.inputs is not None
        assert queued.inputs[1] == doc
        fields = await backend._client.execute("HMGET", workflow_key(name, wf.id), "f:resize")
        assert fields == [b""], "a final step's field keeps no copy of its successor's message"


async def test_a_record_without_finish_fields_still_finishes(redis_url: str) -> None:
    """A workflow started before finish fields existed (its record has none: this one's
    are deleted before any step runs) ends as it did, a chain's steps still carrying
    their parent's result."""
    name = group_name()
    async with RedisBackend.from_url(redis_url) as backend:
        runner, runs = runner_with_tasks(backend, consumer_group=name)
        dag = (
            Workflow("old")
            .step("r", "resize", {"id": 3})
            .step("u", "upload", after=["r"])
            .step("a", "fetch", {"url": "ab"})
            .step("bad", "boom", on_failure="continue")
            .step("m", "merge", after=["u", "a", "bad"])
        )
        wf = await runner.dispatch_workflow(dag)
        key = workflow_key(name, wf.id)
        record = await backend._client.execute("HGETALL", key)
        finish_fields = [bytes(f) for f in record[::2] if bytes(f).startswith(b"f:")]
        assert len(finish_fields) == 5
        await backend._client.execute("HDEL", key, *finish_fields)
        async with serving(runner):
            result: Any = await wf.result(timeout=30)
        failed = {"step": "bad", "type": "ValueError", "message": "no luck"}
        assert result["payload"] == ["uploaded 3", 2, failed]
        assert (runs["resize"], runs["upload"], runs["fetch"], runs["merge"]) == (1, 1, 1, 1)
