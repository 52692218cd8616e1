"""Workflows from producers on a real server: ``Producer.dispatch_workflow`` and
``AsyncProducer.dispatch_workflow`` send the runner's ``lua/start_workflow.lua`` with
the record and roots ``runner.dispatch_workflow`` writes, and trio runners run them."""

from __future__ import annotations

import asyncio
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
import redis
import trio
from _fleet import serving

from taskrunner import InvalidWorkflow, Workflow, chain, chord, group
from taskrunner.backends.redis import RedisBackend
from taskrunner.backends.redis._workflows import START_CHUNK
from taskrunner.errors import TaskNotFound
from taskrunner.producer import AsyncProducer, Producer

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from test_workflows import report, runner_with_tasks


def group_name() -> str:
    return f"wf-{uuid.uuid4().hex[:8]}"


def produce_sync(url: str, name: str) -> tuple[str, str]:
    with Producer.from_url(url, consumer_group=name) as producer:
        one = producer.dispatch_workflow(
            chain(producer.step("resize", {"id": 7}), producer.step("upload"))
        )
        dag = report()  # the DAG built with Workflow(...).step(...) works alike
        return one, producer.dispatch_workflow(dag)


async def produce_async(url: str, name: str) -> str:
    async with AsyncProducer.from_url(url, consumer_group=name) as producer:
        return await producer.dispatch_workflow(
            chord(group(producer.step("fetch", {"url": u}) for u in ["a", "bbb"]),
                  producer.step("merge"))
        )  # fmt: skip


async def test_workflows_from_both_producers_run_on_trio_runners(redis_url: str) -> None:
    name = group_name()
    async with RedisBackend.from_url(redis_url) as backend:
        runner, runs = runner_with_tasks(backend, consumer_group=name)
        # Sent before any runner is up: the record and roots wait in Redis.
        chained, dag = await trio.to_thread.run_sync(produce_sync, redis_url, name)
        chorded = await trio.to_thread.run_sync(asyncio.run, produce_async(redis_url, name))
        # The record is the runner's own: its status reads it before anything ran.
        before = await runner.get_workflow(dag).status()
        assert before is not None
        assert before.name == "report"
        assert before.counts == {"queued": 1, "pending": 4}
        async with serving(runner):
            assert await runner.get_workflow(chained).result(timeout=30) == "uploaded 7"
            merged = await runner.get_workflow(chorded).result(timeout=30)
            mail = await runner.get_workflow(dag).result(timeout=30)
    assert merged["payload"] == [1, 3]
    assert mail["parents"] == {"stats": 2, "chart": 3}
    assert runs["merge"] == 1
    assert runs["upload"] == 1


def test_a_producer_refuses_a_bad_workflow_before_sending_anything(redis_url: str) -> None:
    name = group_name()
    with Producer.from_url(redis_url, consumer_group=name, strict=True) as producer:
        with pytest.raises(InvalidWorkflow, match="which is no step of it"):
            producer.dispatch_workflow(Workflow("bad").step("a", "echo", after=["zz"]))
        with pytest.raises(TaskNotFound):  # strict: no live runner serves it
            producer.dispatch_workflow(chain(producer.step("echo", 1), producer.step("echo")))
        with pytest.raises(ValueError, match="on_failure"):
            producer.step("echo", on_failure="retry")
        with pytest.raises(ValueError, match="keep"):
            producer.dispatch_workflow(producer.step("echo", 1), keep=0)
    with redis.Redis.from_url(redis_url) as client:
        assert client.keys(f"taskrunner:{name}:*") == []


def test_a_producer_starts_a_wide_workflow_in_chunks(redis_url: str) -> None:
    """Past START_CHUNK steps a producer sends the backend's chunked calls ('part',
    then 'go'): the workflow runs, indexed for the leader's check, every root queued."""
    name = group_name()
    width = START_CHUNK + 1
    modes: list[str] = []
    with Producer.from_url(redis_url, consumer_group=name) as producer:
        script = producer._conn.start_workflow

        def counted(*, keys: Any, args: Any, client: Any) -> Any:
            modes.append(args[7])
            return script(keys=keys, args=args, client=client)

        producer._conn.start_workflow = counted  # type: ignore[assignment]
        workflow_id = producer.dispatch_workflow(
            chord(group(producer.step("echo", i) for i in range(width)), producer.step("merge"))
        )
    assert modes == ["part", "part", "go", "go"]  # 2002 steps, 2001 roots, by 2000
    record = f"taskrunner:{name}:workflow:{workflow_id}"
    with redis.Redis.from_url(redis_url) as client:
        assert client.hget(record, "state") == b"running"
        assert client.ttl(record) == -1  # the 'go' call ended the 'part' calls' expiry
        assert client.zscore(f"taskrunner:{name}:workflows", record) is not None
        assert client.xlen(f"taskrunner:{name}:tasks") == width
        fields = client.hgetall(record)
    states = [value for field, value in fields.items() if field.startswith(b"s:")]
    assert (states.count(b"queued"), states.count(b"pending")) == (width, 1)
