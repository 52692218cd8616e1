"""The asyncio producer, on redis.asyncio: for FastAPI, Starlette, aiohttp.

Theory of operation. An :class:`AsyncProducer` holds one ``redis.asyncio.Redis``
client, whose connection pool lets any number of asyncio tasks dispatch at
once: each call borrows a connection for its round trips. Nothing else it holds
changes but by whole replacement (the strict catalog), so tasks need no lock;
two tasks that both find the catalog stale both read it, which is harmless. It
is not tied to the event loop it was made in until its first call.

A client the producer made is closed by :meth:`AsyncProducer.aclose` (or
``async with``); one it was given stays open. What becomes of the client after a
fork or at the first call of a producer made from a URL is its
:class:`~taskrunner.producer._async_client.AsyncProducerClient`'s.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from datetime import datetime, timedelta
from types import TracebackType
from typing import Any, Self

from taskrunner._dispatch.enqueue import Enqueue, LockRequest, give_back_lock
from taskrunner._dispatch.workflows import DEFAULT_KEEP
from taskrunner._keys import KeyLayout
from taskrunner._workflows import StepSpec, Workflow
from taskrunner._workflows.graph import Canvas
from taskrunner.errors import BackendError, ResultTimeout, TaskAlreadyDispatched
from taskrunner.producer._async_client import (
    AsyncClient,
    AsyncProducerClient,
    check_client,
    url_client,
)
from taskrunner.producer._core import (
    ADD_CHUNK,
    ProducerCore,
    check_timeout,
    lock_px,
    log_kept_lock,
    socket_timeout_of,
    text,
    translated,
)
from taskrunner.producer._handles import AsyncProducerHandle
from taskrunner.producer._setup import producer_core, url_settings
from taskrunner.producer._steps import cancellation, result_wait
from taskrunner.producer._workflow_handles import AsyncProducerWorkflow
from taskrunner.producer._workflows import (
    plan_workflow,
    producer_step,
    task_names,
)

log = logging.getLogger("taskrunner.producer")


class AsyncProducer:
    """Sends tasks by name to a group's runners, from asyncio code.

    The same as :class:`~taskrunner.producer.Producer` (its docstrings are the
    contract), with ``await``; it shares one client across asyncio tasks.

    Args:
        client: A ``redis.asyncio.Redis`` (``fakeredis.FakeAsyncRedis``), which
            stays yours: :meth:`aclose` never closes it.
        consumer_group: As for ``Producer``.
        prefix: As for ``Producer``.
        queue: As for ``Producer``.
        strict: As for ``Producer``.

    Raises:
        TypeError: ``client`` is not a redis.asyncio client.
        ValueError: a name is empty, holds spaces, or collides with the key layout;
            a bad ``shards`` (see ``Producer``).

    Cancellation: a cancelled call may or may not have queued its task; a unique
    task's lock is then kept until it expires (or the worker releases it).
    """

    def __init__(
        self,
        client: AsyncClient,
        *,
        consumer_group: str,
        prefix: str | None = None,
        queue: str = "tasks",
        strict: bool = False,
        key_layout: KeyLayout | None = None,
        shards: int | None = None,
    ) -> None:
        check_client(client)
        core = producer_core(
            client,
            consumer_group=consumer_group,
            prefix=prefix,
            queue=queue,
            strict=strict,
            key_layout=key_layout,
            shards=shards,
        )
        self._start(AsyncProducerClient(client, None, core))

    def _start(self, conn: AsyncProducerClient) -> None:
        self._conn = conn
        self._core = conn.core

    @classmethod
    def from_url(
        cls,
        url: str,
        *,
        consumer_group: str,
        prefix: str | None = None,
        queue: str = "tasks",
        strict: bool = False,
        key_layout: KeyLayout | None = None,
        cluster: bool | None = None,
        shards: int | None = None,
        **redis_options: Any,
    ) -> AsyncProducer:
        """A producer on a client of its own,
        ``redis.asyncio.Redis.from_url(url, **redis_options)`` (``socket_connect_timeout=5``
        and ``socket_timeout=30`` unless given), or ``redis.asyncio.RedisCluster.from_url``
        on a cluster: ``cluster=None`` (the default) asks the server once, at the
        first call (``INFO cluster``), ``True`` or ``False`` decide without asking.
        No connection is opened until the first call, so it can be made at import
        time. :meth:`aclose` closes the client.

        A ``redis+sentinel://s1:26379,s2:26379/mymaster/0`` URL (the one the
        workers use) builds the client with redis-py's ``Sentinel(...).master_for``
        instead: see ``docs/redis-sentinel.md``.

        Raises:
            ValueError: the URL cannot be parsed, or a name is invalid.
            ClusterCommandError: a cluster and a URL naming a database other
                than 0 (with ``cluster=None``, raised by the first call).
        """

        def core_of(client: AsyncClient) -> ProducerCore:
            return producer_core(
                client,
                consumer_group=consumer_group,
                prefix=prefix,
                queue=queue,
                strict=strict,
                key_layout=key_layout,
                shards=shards,
            )

        settings = url_settings(url, cluster, redis_options)
        producer = cls.__new__(cls)
        producer._start(url_client(url, settings, core_of, shards=shards, key_layout=key_layout))
        return producer

    def __repr__(self) -> str:
        destination = self._core.destination
        return (
            f"<AsyncProducer group={destination.consumer_group!r} "
            f"stream={destination.stream!r}{' strict' if self._core.strict else ''}>"
        )

    @property
    def strict(self) -> bool:
        """Whether unknown task names are refused (see ``Producer``)."""
        return self._core.strict

    @property
    def stream(self) -> str:
        """The stream this producer adds to."""
        return self._core.destination.stream

    # The client -------------------------------------------------------------
    async def _redis(self) -> AsyncClient:
        return await self._conn.ready(self)

    async def _read_catalog(self, client: AsyncClient, name: str | None) -> None:
        if self._core.needs_catalog(name):
            with translated():
                fields = await client.hgetall(self._core.destination.catalog)
            self._core.catalog_read(fields)

    async def _add(self, client: AsyncClient, data: bytes, stream: str) -> str:
        with translated():
            # execute_command: XADD without xadd()'s argument checks (the hot path).
            reply = await client.execute_command(  # type: ignore[no-untyped-call, unused-ignore]
                "XADD", stream, "*", "payload", data
            )
        return text(reply)

    # Dispatching ------------------------------------------------------------
    async def dispatch(
        self,
        name: str,
        payload: Any = None,
        *,
        unique_key: str | None = None,
        unique_for: float | None = None,
        queue: str | None = None,
        shard_key: object = None,
    ) -> AsyncProducerHandle:
        """Queue one run of task ``name`` (see ``Producer.dispatch``)."""
        client = await self._redis()
        await self._read_catalog(client, name)
        destination = self._core.route(name, queue)
        entry, shard, stream = self._core.one(
            name, payload, unique_key, unique_for, destination, shard_key
        )
        inner = await self._send(client, name, entry, stream)
        return AsyncProducerHandle(self._core.shards.task_id(shard, inner), name, self)

    async def _send(self, client: AsyncClient, name: str, entry: Enqueue, stream: str) -> str:
        lock = entry.lock
        if lock is None:
            return await self._add(client, entry.data, stream)
        with translated():
            taken = await client.set(lock.key, lock.token, nx=True, px=lock_px(lock.ttl))
        if not taken:
            raise TaskAlreadyDispatched(name, lock.key)
        try:
            return await self._add(client, entry.data, stream)
        except BackendError as exc:
            if give_back_lock(exc.maybe_applied):
                await self._give_back(lock)
            else:
                log_kept_lock(name, lock, exc)
            raise

    async def _give_back(self, lock: LockRequest) -> None:
        try:
            with translated():
                await self._conn.release(keys=[lock.key], args=[lock.token])
        except BackendError as exc:
            log.warning(
                "could not release unique lock %s after a failed dispatch (%s); it expires in %ss",
                lock.key,
                exc,
                lock.ttl,
            )

    async def dispatch_many(
        self,
        name: str,
        payloads: Iterable[Any],
        *,
        queue: str | None = None,
        shard_keys: Iterable[object] | None = None,
    ) -> list[AsyncProducerHandle]:
        """Queue one run of task ``name`` per payload, pipelined (see
        ``Producer.dispatch_many``)."""
        client = await self._redis()
        await self._read_catalog(client, name)
        destination = self._core.route(name, queue)
        data, shards, streams = self._core.many(name, payloads, destination, shard_keys)
        ids: list[str] = []
        for start in range(0, len(data), ADD_CHUNK):
            with translated():
                pipe = client.pipeline(transaction=False)
                for at in range(start, min(start + ADD_CHUNK, len(data))):
                    pipe.execute_command("XADD", streams[at], "*", "payload", data[at])
                ids.extend(text(reply) for reply in await pipe.execute())
        task_id = self._core.shards.task_id
        return [
            AsyncProducerHandle(task_id(s, i), name, self) for s, i in zip(shards, ids, strict=True)
        ]

    step = staticmethod(producer_step)
    """``producer.step(task, payload, *, id=, queue=, on_failure=)``: one step of a
    workflow, as ``runner.step``."""

    async def dispatch_workflow(
        self, work: Workflow | Canvas | StepSpec, *, keep: float = DEFAULT_KEEP
    ) -> str:
        """Dispatch a workflow, chain, group or chord built of :meth:`step` specs: its record
        is written and its first steps queued in one call of the runner's
        ``lua/start_workflow.lua``, as ``runner.dispatch_workflow`` does.

        Args:
            keep: Seconds its record and its steps' results live once it is over.

        Returns:
            The workflow's id: :meth:`workflow` of it (its ``result``, ``status``,
            ``cancel``), ``runner.get_workflow(id)`` or ``taskrunner.admin.get_workflow``
            follow it. (:meth:`result` of it waits for its end but gives no value.)

        Raises:
            InvalidWorkflow: a cycle, an unknown parent, a duplicate step id.
            TaskNotFound: strict, and a step's task is served by no live runner.
            InvalidTaskPayload: a step's payload cannot be encoded.
            ValueError: a step's task is unique, or ``keep`` is not seconds > 0.
            BackendError: Redis could not be reached (the workflow may have started).
        """
        client = await self._redis()
        for name in task_names(work):
            await self._read_catalog(client, name)
        workflow_id, calls = plan_workflow(self._core, work, keep)
        with translated():
            for keys, args in calls:  # one call up to START_CHUNK steps, in chunks past it
                await self._conn.start_workflow(
                    keys=[str(k) for k in keys], args=args, client=client
                )
        return workflow_id

    def workflow(self, workflow_id: str) -> AsyncProducerWorkflow:
        """The handle of workflow ``workflow_id`` (as :meth:`dispatch_workflow` returns, or
        any runner or producer of the group dispatched): its ``result(timeout)``,
        ``status()`` and ``cancel()``, as the runner's ``WorkflowHandle``."""
        return AsyncProducerWorkflow(workflow_id, self)

    async def dispatch_delayed(
        self,
        name: str,
        payload: Any = None,
        delay: float | timedelta = 0.0,
        *,
        queue: str | None = None,
        shard_key: object = None,
    ) -> AsyncProducerHandle:
        """Queue one run of task ``name`` after ``delay`` (see ``Producer.dispatch_delayed``)."""
        run_at = self._core.run_at_after(delay)
        return await self._add_delayed(name, payload, run_at, queue, shard_key)

    async def schedule_for(
        self,
        name: str,
        payload: Any,
        when: datetime | float,
        *,
        queue: str | None = None,
        shard_key: object = None,
    ) -> AsyncProducerHandle:
        """Queue one run of task ``name`` at ``when`` (see ``Producer.schedule_for``)."""
        return await self._add_delayed(name, payload, self._core.run_at(when), queue, shard_key)

    async def _add_delayed(
        self, name: str, payload: Any, run_at: float, queue: str | None, shard_key: object
    ) -> AsyncProducerHandle:
        client = await self._redis()
        await self._read_catalog(client, name)
        destination = self._core.route(name, queue)
        member_id, member, shard, at = self._core.delayed(
            name, payload, run_at, destination, shard_key
        )
        keys, args = self._core.add_delayed_call(member_id, member, run_at, at)
        with translated():
            await self._conn.add_delayed(keys=keys, args=args, client=client)
        return AsyncProducerHandle(self._core.shards.task_id(shard, member_id), name, self)

    # Results and cancellation -----------------------------------------------
    async def result(
        self,
        task_id: str,
        timeout: float | None = None,  # noqa: ASYNC109 (the redis wait is told it)
        *,
        type: type[Any] | None = None,
        task_name: str = "",
    ) -> Any:
        """Wait for the outcome of task ``task_id`` and return its value, as
        ``Producer.result`` does: ``lua/wait.lua``, then ``BLMOVE`` of its notice, which
        the runner pushes for a registered task only (a wait that times out or is
        cancelled leaves only its registration, which ends by itself).

        Raises:
            TaskFailed: its last attempt failed (the error it records).
            TaskCancelled: it was cancelled.
            ResultTimeout: no outcome within ``timeout`` (also a ``TimeoutError``).
            InvalidTaskPayload: the value does not fit ``type``.
            BackendError: Redis could not be reached.
            ValueError: a bad ``timeout``.
        """
        limit = check_timeout(timeout)
        raw = await self._wait_document(task_id, limit)
        if raw is None:
            raise ResultTimeout(task_id, task_name, limit)
        return self._core.outcome(task_id, raw, type)

    async def _wait_document(self, task_id: str, limit: float) -> bytes | None:
        """The result document kept under ``task_id``, waited for up to ``limit``
        seconds (``None``: none came); see :meth:`result`."""
        client = await self._redis()
        wait = result_wait(self._core, task_id, limit, socket_timeout_of(client))
        raw: bytes | None = await self._conn.run(client, wait)
        return raw

    async def cancel(self, task_id: str) -> bool:
        """Cancel task ``task_id`` wherever it is (see ``Producer.cancel``).

        Returns:
            ``False`` when the task is finished or unknown.

        Raises:
            BackendError: Redis could not be reached.
        """
        client = await self._redis()
        await self._read_catalog(client, None)  # the queues its runners serve
        cancelled: bool = await self._conn.run(client, cancellation(self._core, task_id))
        return cancelled

    # Closing ----------------------------------------------------------------
    async def aclose(self) -> None:
        """Close the client if this producer made it (:meth:`from_url`). Idempotent;
        the producer refuses calls afterwards."""
        await self._conn.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()
