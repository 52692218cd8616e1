"""The sync producer, on redis-py: for Django, Flask, scripts, notebooks, threads.

Theory of operation. A :class:`Producer` holds one ``redis.Redis`` client, whose
connection pool makes it safe to share across threads: each call borrows a
connection for its round trips and gives it back. Everything else it holds is
read-only or replaced whole (the strict catalog), so threads need no lock.

Its client, and what becomes of it after a fork or at the first call of a producer
made from a URL, is its :class:`~taskrunner.producer._sync_client.ProducerClient`'s.
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
from taskrunner.producer._handles import ProducerHandle
from taskrunner.producer._setup import producer_core, url_settings
from taskrunner.producer._steps import cancellation, result_wait
from taskrunner.producer._sync_client import Client, ProducerClient, check_client, url_client
from taskrunner.producer._workflow_handles import ProducerWorkflow
from taskrunner.producer._workflows import (
    plan_workflow,
    producer_step,
    task_names,
)

log = logging.getLogger("taskrunner.producer")


class Producer:
    """Sends tasks by name to a group's runners, from sync code (threads welcome).

    Args:
        client: A redis-py client (``redis.Redis``, ``redis.RedisCluster``,
            ``fakeredis.FakeRedis``), which
            stays yours: :meth:`close` never closes it.
        consumer_group: The runners' ``TaskRunnerConfig.consumer_group``.
        prefix: As ``RedisBackend``'s: ``None`` means the group's own stream,
            ``taskrunner:<group>:<queue>``.
        queue: As ``RedisBackend``'s.
        strict: Refuse a task that no live runner of the group serves on this
            stream (:class:`~taskrunner.errors.TaskNotFound`), and dispatch each
            task with the settings its runners publish (unique lock and its
            lifetime, reservation timeout). Without it, the producer sends what
            it is told.
        key_layout: The runners' key layout, ``"go"`` or ``"cluster"`` (see
            docs/redis-key-layout.md); ``None`` (the default) is ``"cluster"`` on a
            Redis Cluster client and ``"go"`` otherwise, as ``RedisBackend`` chooses
            (``"cluster"`` with ``shards > 1``).
        shards: The group's shard count (docs/sharding.md), checked against the
            group's record at the first call (:class:`~taskrunner.ShardCountError`
            when they differ); ``None`` (the default) takes the record's. In the
            cluster layout the first call reads the record either way; in the go
            layout a group has no shards.

    Raises:
        TypeError: ``client`` is not a sync redis-py client.
        ValueError: a name is empty, holds spaces, or collides with the key layout;
            ``shards`` is out of range, or above 1 with ``key_layout="go"`` or a prefix.

    Prefer :meth:`from_url`.
    """

    def __init__(
        self,
        client: Client,
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
        self._start(ProducerClient(client, None, core))

    def _start(self, conn: ProducerClient) -> None:
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
    ) -> Producer:
        """A producer on a client of its own, ``redis.Redis.from_url(url, **redis_options)``,
        or ``redis.RedisCluster.from_url`` on a cluster: ``cluster=None`` (the default)
        asks the server once, at the first call (``INFO cluster``), ``True`` or
        ``False`` decide without asking.

        Unless given, ``socket_connect_timeout=5`` and ``socket_timeout=30`` are
        set, so that no call waits forever on a dead server. :meth:`close`
        closes the client.

        A ``redis+sentinel://s1:26379,s2:26379/mymaster/0`` URL (the one the
        workers use) builds the client with redis-py's ``Sentinel(...).master_for``
        instead: see ``docs/redis-sentinel.md``.

        Raises:
            ValueError: the URL cannot be parsed, or a name is invalid.
            ClusterCommandError: a cluster and a URL naming a database other
                than 0 (with ``cluster=None``, raised by the first call).
        """

        def core_of(client: Client) -> ProducerCore:
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
            f"<Producer group={destination.consumer_group!r} stream={destination.stream!r}"
            f"{' strict' if self._core.strict else ''}>"
        )

    @property
    def strict(self) -> bool:
        """Whether unknown task names are refused (see the class)."""
        return self._core.strict

    @property
    def stream(self) -> str:
        """The stream this producer adds to."""
        return self._core.destination.stream

    # The client -------------------------------------------------------------
    def _redis(self) -> Client:
        return self._conn.ready(self)

    def _read_catalog(self, client: Client, name: str | None) -> None:
        if self._core.needs_catalog(name):
            with translated():
                fields = client.hgetall(self._core.destination.catalog)
            self._core.catalog_read(fields)

    def _add(self, client: Client, data: bytes, stream: str) -> str:
        with translated():
            # execute_command: XADD without xadd()'s argument checks (the hot path).
            reply = client.execute_command(  # type: ignore[no-untyped-call]
                "XADD", stream, "*", "payload", data
            )
        return text(reply)

    # Dispatching ------------------------------------------------------------
    def dispatch(
        self,
        name: str,
        payload: Any = None,
        *,
        unique_key: str | None = None,
        unique_for: float | None = None,
        queue: str | None = None,
        shard_key: object = None,
    ) -> ProducerHandle:
        """Queue one run of task ``name``: one ``XADD`` (a unique task takes its lock first).

        Args:
            name: The task, as its runners registered it.
            payload: JSON-ready data, or an attrs / dataclass instance (unstructured
                with cattrs, as a runner does for a typed payload).
            unique_key: Makes this dispatch unique on ``taskrunner:unique:<task>:<key>``,
                what the task's ``unique_key`` function would return for ``payload``.
            unique_for: The lock's lifetime in seconds; alone, the task is unique per
                name (``taskrunner:unique:<task>``). A strict producer takes both
                from the catalog when not given (but for a key its runners compute
                with a function: pass ``unique_key``).
            queue: The queue of the group to add it to (its stream by the producer's
                prefix). By default: strict, the queue a live runner serves the
                task on (the catalog's), else the producer's ``queue``.
            shard_key: In a sharded group, what the task's ``shard_key`` function
                returns for ``payload`` (the producer cannot run it): the dispatch goes
                to that key's shard, as the runner's would. ``None``: the unique key's
                shard for a unique task, else the next shard in turn.

        Returns:
            The task's handle; its id is the stream id (``<shard>.<stream id>`` in a
            sharded group).

        Raises:
            TaskNotFound: strict, and no live runner serves ``name`` (on ``queue``,
                when given).
            InvalidTaskPayload: ``payload`` cannot be encoded, or is over the size
                limit; nothing was queued.
            TaskAlreadyDispatched: the task is unique and its lock is held.
            BackendError: Redis could not be reached. A unique task's lock is given
                back only when the add certainly did not happen; otherwise it is
                kept (no duplicate gets in) and expires after ``unique_for``.
            ValueError: a bad name, ``unique_key``, ``unique_for`` or ``queue``.
            TypeError: ``shard_key`` is not a JSON value.
            ShardCountError: at the first call, ``shards=`` differs from the group's record.
        """
        client = self._redis()
        self._read_catalog(client, name)
        destination = self._core.route(name, queue)
        entry, shard, stream = self._core.one(
            name, payload, unique_key, unique_for, destination, shard_key
        )
        task_id = self._core.shards.task_id(shard, self._send(client, name, entry, stream))
        return ProducerHandle(task_id, name, self)

    def _send(self, client: Client, name: str, entry: Enqueue, stream: str) -> str:
        lock = entry.lock
        if lock is None:
            return self._add(client, entry.data, stream)
        with translated():
            taken = client.set(lock.key, lock.token, nx=True, px=lock_px(lock.ttl))
        if not taken:
            raise TaskAlreadyDispatched(name, lock.key)
        try:
            return self._add(client, entry.data, stream)
        except BackendError as exc:
            if give_back_lock(exc.maybe_applied):
                self._give_back(lock)
            else:
                log_kept_lock(name, lock, exc)
            raise

    def _give_back(self, lock: LockRequest) -> None:
        try:
            with translated():
                self._conn.release(keys=[lock.key], args=[lock.token])
        except BackendError as exc:
            log.warning(
                "could not release unique lock %s after a failed dispatch (%s); it expires in %ss",
                lock.key,
                exc,
                lock.ttl,
            )

    def dispatch_many(
        self,
        name: str,
        payloads: Iterable[Any],
        *,
        queue: str | None = None,
        shard_keys: Iterable[object] | None = None,
    ) -> list[ProducerHandle]:
        """Queue one run of task ``name`` per payload, pipelined (one round trip per
        2,000). Every payload is encoded before anything is sent, so an invalid one
        queues none.

        Args:
            shard_keys: In a sharded group, one ``shard_key`` per payload (see
                :meth:`dispatch`); ``None``: the shards in turn.

        Raises:
            TaskNotFound, InvalidTaskPayload, BackendError: as :meth:`dispatch`.
            ValueError: the task is unique per the catalog (dispatch those one by one),
                or ``shard_keys`` does not give one key per payload.
        """
        client = self._redis()
        self._read_catalog(client, name)
        destination = self._core.route(name, queue)
        data, shards, streams = self._core.many(name, payloads, destination, shard_keys)
        ids: list[str] = []
        for start in range(0, len(data), ADD_CHUNK):
            with translated():
                pipe = client.pipeline(transaction=False)
                for at in range(start, min(start + ADD_CHUNK, len(data))):
                    pipe.execute_command(  # type: ignore[no-untyped-call, unused-ignore]
                        "XADD", streams[at], "*", "payload", data[at]
                    )
                ids.extend(text(reply) for reply in pipe.execute())
        task_id = self._core.shards.task_id
        return [ProducerHandle(task_id(s, i), name, self) for s, i in zip(shards, ids, strict=True)]

    step = staticmethod(producer_step)
    """``producer.step(task, payload, *, id=, queue=, on_failure=)``: one step of a
    workflow, as ``runner.step``."""

    def dispatch_workflow(
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
        client = self._redis()
        for name in task_names(work):
            self._read_catalog(client, name)
        workflow_id, calls = plan_workflow(self._core, work, keep)
        with translated():
            for keys, args in calls:  # one call up to START_CHUNK steps, in chunks past it
                self._conn.start_workflow(keys=[str(k) for k in keys], args=args, client=client)
        return workflow_id

    def workflow(self, workflow_id: str) -> ProducerWorkflow:
        """The handle of workflow ``workflow_id`` (as :meth:`dispatch_workflow` returns, or
        any runner or producer of the group dispatched): its ``result(timeout)``,
        ``status()`` and ``cancel()``, as the runner's ``WorkflowHandle``."""
        return ProducerWorkflow(workflow_id, self)

    def dispatch_delayed(
        self,
        name: str,
        payload: Any = None,
        delay: float | timedelta = 0.0,
        *,
        queue: str | None = None,
        shard_key: object = None,
    ) -> ProducerHandle:
        """Queue one run of task ``name`` after ``delay`` (seconds, or a timedelta):
        one ``ZADD`` to the group's delayed set, which the group's leader moves to
        its stream when due (a unique task takes its lock then, with its runners'
        settings).

        Returns:
            The task's handle; its id is the delayed task's id.

        Raises:
            TaskNotFound, InvalidTaskPayload, BackendError: as :meth:`dispatch`.
            ValueError: ``delay`` is negative or not finite.
        """
        return self._add_delayed(name, payload, self._core.run_at_after(delay), queue, shard_key)

    def schedule_for(
        self,
        name: str,
        payload: Any,
        when: datetime | float,
        *,
        queue: str | None = None,
        shard_key: object = None,
    ) -> ProducerHandle:
        """Queue one run of task ``name`` at ``when`` (an aware datetime, or unix
        seconds; a time in the past runs at the leader's next pass).

        Raises:
            TaskNotFound, InvalidTaskPayload, BackendError: as :meth:`dispatch`.
            ValueError: ``when`` is a naive datetime or not finite.
        """
        return self._add_delayed(name, payload, self._core.run_at(when), queue, shard_key)

    def _add_delayed(
        self, name: str, payload: Any, run_at: float, queue: str | None, shard_key: object
    ) -> ProducerHandle:
        client = self._redis()
        self._read_catalog(client, name)
        destination = self._core.route(name, queue)
        member_id, member, shard, at = self._core.delayed(
            name, payload, run_at, destination, shard_key
        )
        keys, args = self._core.add_delayed_call(member_id, member, run_at, at)
        with translated():
            self._conn.add_delayed(keys=keys, args=args, client=client)
        return ProducerHandle(self._core.shards.task_id(shard, member_id), name, self)

    # Results and cancellation -----------------------------------------------
    def result(
        self,
        task_id: str,
        timeout: float | None = None,
        *,
        type: type[Any] | None = None,
        task_name: str = "",
    ) -> Any:
        """Wait for the outcome of task ``task_id`` and return its value.

        The task must keep results (its runners registered it with
        ``keep_result=seconds``): the runner that runs it keeps its outcome in
        Redis, where this waits for it. Waiting is one call of the runner's
        ``lua/wait.lua`` (the result, else this waiter registered for it), then a
        blocking ``BLMOVE`` of its notice (on a connection of the pool), which the
        runner pushes for a registered task only; a wait that times out leaves
        only its registration, which ends by itself.

        Args:
            task_id: The task (``handle.id``).
            timeout: Seconds to wait; ``None`` waits until the outcome comes.
            type: Structure the value into this attrs class or dataclass (cattrs);
                by default the value is its JSON form.
            task_name: For the error messages.

        Returns:
            What the action returned.

        Raises:
            TaskFailed: its last attempt failed (the error it records).
            TaskCancelled: it was cancelled.
            ResultTimeout: no outcome within ``timeout`` (also a ``TimeoutError``).
            InvalidTaskPayload: the value does not fit ``type``.
            BackendError: Redis could not be reached.
            ValueError: a bad ``timeout``.
        """
        limit = check_timeout(timeout)
        raw = self._wait_document(task_id, limit)
        if raw is None:
            raise ResultTimeout(task_id, task_name, limit)
        return self._core.outcome(task_id, raw, type)

    def _wait_document(self, task_id: str, limit: float) -> bytes | None:
        """The result document kept under ``task_id``, waited for up to ``limit``
        seconds (``None``: none came); see :meth:`result`."""
        client = self._redis()
        wait = result_wait(self._core, task_id, limit, socket_timeout_of(client))
        raw: bytes | None = self._conn.run(client, wait)
        return raw

    def cancel(self, task_id: str) -> bool:
        """Cancel task ``task_id``, wherever it is, as ``TaskRunner.cancel`` does (one
        call of the runner's ``lua/track.lua``, on the streams of the producer's own
        queue, the queues it dispatched to and those the catalog names, in that
        order, the catalog read when older than 5 s): a queued task is deleted from the
        stream before any worker reads it, a delayed one removed from the delayed
        set (each has its unique lock released and, when it keeps results, is
        recorded as cancelled); a running one is asked to stop, and the runner
        running it stops it within about a second.

        Returns:
            ``False`` when the task is finished or unknown.

        Raises:
            BackendError: Redis could not be reached.
        """
        client = self._redis()
        self._read_catalog(client, None)  # the queues its runners serve
        cancelled: bool = self._conn.run(client, cancellation(self._core, task_id))
        return cancelled

    # Closing ----------------------------------------------------------------
    def close(self) -> None:
        """Close the client if this producer made it (:meth:`from_url`). Idempotent;
        the producer refuses calls afterwards."""
        self._conn.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
