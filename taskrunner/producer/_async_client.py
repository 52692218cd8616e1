"""The client an :class:`~taskrunner.producer.AsyncProducer` works on, its scripts, and
the steps of a plan (``_steps``) run on it.

Theory of operation. An :class:`AsyncProducerClient` is given (``AsyncProducer(client)``: it
stays the caller's) or made from a URL (:func:`url_client`: the producer's own,
closed with it). It is not tied to the event loop it was made in until its first
call. After a fork (gunicorn ``--preload``), a client the producer made is replaced
by a new one from the same URL; a given asyncio client cannot be (its pool keeps the
parent's sockets), so the producer refuses calls in the child, saying so. A URL
client with ``cluster=None`` asks the server at the first call whether it is a
cluster, and then replaces its standalone client with a cluster one; first calls
made at once wait for that one answer.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable
from typing import Any

import redis.asyncio

from taskrunner._keys import KeyLayout
from taskrunner.backends.redis._errors import ClusterCommandError
from taskrunner.backends.redis._sentinel_config import is_sentinel_url
from taskrunner.producer._core import (
    ADD_DELAYED_SOURCE,
    RELEASE_SOURCE,
    TRACK_SOURCE,
    WAIT_SOURCE,
    ProducerCore,
    ask_is_cluster_async,
    check_cluster_url,
    translated,
)
from taskrunner.producer._plan import CatalogView
from taskrunner.producer._sentinel import async_master
from taskrunner.producer._setup import UrlSettings
from taskrunner.producer._sharding import wanted_layout
from taskrunner.producer._steps import Plan
from taskrunner.producer._workflows import FINISH_SOURCE, START_WORKFLOW_SOURCE

AsyncClient = redis.asyncio.Redis | redis.asyncio.RedisCluster
"""The redis.asyncio clients an async producer works on."""


def check_client(client: object) -> None:
    """Refuse what is not a redis.asyncio client.

    Raises:
        TypeError: ``client`` is not a ``redis.asyncio.Redis`` or ``RedisCluster``.
    """
    if not isinstance(client, redis.asyncio.Redis | redis.asyncio.RedisCluster):
        raise TypeError(
            f"AsyncProducer needs a redis.asyncio client (redis.asyncio.Redis or "
            f"redis.asyncio.RedisCluster), got "
            f"{client!r}: from sync code use taskrunner.producer.Producer"
        )


class AsyncProducerClient:
    """The client of one asyncio producer (``client``; ``connect`` makes another when it
    is the producer's own), with the producer's scripts registered on it."""

    def __init__(
        self, client: AsyncClient, connect: Callable[[], AsyncClient] | None, core: ProducerCore
    ) -> None:
        self.client = client
        self.connect = connect
        self.core = core
        self.choose: Callable[[], Awaitable[None]] | None = None  # while cluster=None is undecided
        self.pid = os.getpid()
        self.register()
        self.closed = False

    def register(self) -> None:
        """Register the producer's scripts on the client (again when it is replaced)."""
        client = self.client
        self.release = client.register_script(RELEASE_SOURCE)
        self.track = client.register_script(TRACK_SOURCE)
        self.add_delayed = client.register_script(ADD_DELAYED_SOURCE)
        self.wait = client.register_script(WAIT_SOURCE)
        self.start_workflow = client.register_script(START_WORKFLOW_SOURCE)
        self.finish = client.register_script(FINISH_SOURCE)

    async def ready(self, owner: object) -> AsyncClient:
        """The client for a call of ``owner``: a new one in a forked child (when it is
        ours), the cluster question answered at the first call, and the group's shard
        count read at the first call.

        Raises:
            RuntimeError: ``owner`` is closed, or this is a forked child and the
                client was given.
            BackendError: Redis could not be reached.
            ShardCountError: the group's record differs from ``shards=``.
        """
        if self.closed:
            raise RuntimeError(f"{owner!r} is closed")
        if os.getpid() != self.pid:
            if self.connect is None:
                raise RuntimeError(
                    f"{owner!r} was given a redis.asyncio client in process {self.pid}, "
                    f"which process {os.getpid()} cannot share after a fork: create the client "
                    "(or the producer, with AsyncProducer.from_url) in each process"
                )
            # The parent's sockets are the parent's: dropped, never closed here.
            self.pid = os.getpid()
            self.client = self.connect()
            self.register()
            self.core.catalog = CatalogView()
        while self.choose is not None:  # again if the call that was asking failed
            await self.choose()
        record = self.core.shard_count_key
        if record is not None:  # the first call: the group's shard count
            with translated():
                reply = await self.client.get(record)
            self.core.take_shard_count(reply)
        return self.client

    async def run(self, client: AsyncClient, plan: Plan) -> Any:
        """Run ``plan``'s steps on ``client`` (see ``_steps``), redis-py's errors raised as
        ``BackendError``: its outcome."""
        reply = None
        with translated():
            try:
                while True:
                    step = plan.send(reply)
                    if step.kind == "command":
                        reply = await client.execute_command(*step.args)  # type: ignore[no-untyped-call, unused-ignore]
                    elif step.kind == "get":
                        reply = await client.get(step.args[0])
                    else:
                        script = {
                            "wait": self.wait,
                            "track": self.track,
                            "finish": self.finish,
                        }[step.kind]
                        reply = await script(keys=step.keys, args=step.args, client=client)
            except StopIteration as done:
                return done.value

    async def aclose(self) -> None:
        """Close the client if it is ours (and this is the process that made it).
        Idempotent; :meth:`ready` refuses afterwards."""
        if self.closed:
            return
        self.closed = True
        if self.connect is not None and os.getpid() == self.pid:
            await self.client.aclose()


def url_client(
    url: str,
    settings: UrlSettings,
    core_of: Callable[[AsyncClient], ProducerCore],
    *,
    shards: int | None,
    key_layout: KeyLayout | None,
) -> AsyncProducerClient:
    """A client of its own on ``url`` (see ``AsyncProducer.from_url``), its core made by
    ``core_of`` from its first client. No connection is opened until the first call."""
    cluster, options = settings.cluster, settings.options

    def connect() -> AsyncClient:
        if cluster:
            return redis.asyncio.RedisCluster.from_url(url, **options)
        if is_sentinel_url(url):
            return async_master(url, settings.defaults, settings.given)
        return redis.asyncio.Redis.from_url(url, **options)

    first = connect()
    check_client(first)
    made = AsyncProducerClient(first, connect, core_of(first))
    if cluster is None:
        deciding: asyncio.Future[None] | None = None

        async def choose() -> None:
            nonlocal cluster, deciding
            # Asked once, at the first call: from_url opens no connection. First
            # calls made at once (an app's first requests) wait for that answer:
            # each asking and replacing the client leaked the cluster clients the
            # others had just made, and closed the ones they were using.
            loop = asyncio.get_running_loop()
            if deciding is not None and deciding.get_loop() is loop:
                await asyncio.shield(deciding)
                return  # decided, or failed: ready() asks again if it must
            deciding = loop.create_future()
            try:
                await decide()
            finally:
                deciding.set_result(None)
                deciding = None

        async def decide() -> None:
            nonlocal cluster
            with translated():
                on_cluster = await ask_is_cluster_async(url, options)
            if not on_cluster:
                made.choose = None
                return
            try:
                check_cluster_url(url)
            except ClusterCommandError:
                made.choose = None  # refused once, at this call
                raise
            standalone = made.client
            cluster = True  # connect() now makes cluster clients (after a fork too)
            client = connect()
            try:
                # Before any call uses it: redis-py's asyncio RedisCluster fails
                # commands sent at once to a client that has not initialized yet.
                with translated():
                    await client.initialize()
            except BaseException:
                await client.aclose()
                raise
            made.client = client
            made.register()
            # Its keys in the cluster layout (and its shard count read again).
            made.core.on_cluster(wanted_layout(shards, key_layout))
            made.choose = None
            await standalone.aclose()

        made.choose = choose
    return made
