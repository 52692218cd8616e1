"""The client a :class:`~taskrunner.producer.Producer` works on, its scripts, and the
steps of a plan (``_steps``) run on it.

Theory of operation. A :class:`ProducerClient` is given (``Producer(client)``: it stays
the caller's) or made from a URL (:func:`url_client`: the producer's own, closed with
it). Forks (gunicorn ``--preload`` imports the app, and so creates the producer,
before it forks its workers): every call first compares ``os.getpid()`` with the pid
the client was made in. In a child, a client the producer made itself is replaced by
a new one from the same URL, and the parent's is dropped without being closed
(closing would shut the sockets the parent still uses). A client that was given keeps
working too: redis-py's pool itself starts afresh in a child. A URL client with
``cluster=None`` asks the server at the first call whether it is a cluster, and then
replaces its standalone client with a cluster one.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import redis

from taskrunner._keys import KeyLayout
from taskrunner.backends.redis._sentinel_config import is_sentinel_url
from taskrunner.producer._core import (
    ADD_DELAYED_SOURCE,
    RELEASE_SOURCE,
    TRACK_SOURCE,
    WAIT_SOURCE,
    ProducerCore,
    ask_is_cluster,
    check_cluster_url,
    translated,
)
from taskrunner.producer._plan import CatalogView
from taskrunner.producer._sentinel import sync_master
from taskrunner.producer._setup import UrlSettings
from taskrunner.producer._sharding import wanted_layout
from taskrunner.producer._steps import Plan
from taskrunner.producer._workflows import FINISH_SOURCE, START_WORKFLOW_SOURCE

Client = redis.Redis | redis.RedisCluster
"""The redis-py clients a producer works on."""


def check_client(client: object) -> None:
    """Refuse what is not a sync redis-py client.

    Raises:
        TypeError: ``client`` is not a ``redis.Redis`` or ``redis.RedisCluster``.
    """
    if not isinstance(client, redis.Redis | redis.RedisCluster):
        raise TypeError(
            f"Producer needs a sync redis-py client (redis.Redis or redis.RedisCluster), "
            f"got {client!r}: "
            "from asyncio code use taskrunner.producer.AsyncProducer"
        )


class ProducerClient:
    """The client of one producer (``client``; ``connect`` makes another when it is the
    producer's own), with the producer's scripts registered on it."""

    def __init__(
        self, client: Client, connect: Callable[[], Client] | None, core: ProducerCore
    ) -> None:
        self.client = client
        self.connect = connect  # set when the client is ours
        self.core = core
        self.choose: Callable[[], None] | None = None  # set while cluster=None is undecided
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

    def ready(self, owner: object) -> Client:
        """The client for a call of ``owner``: a new one in a forked child (when it is
        ours), the cluster question answered at the first call, and the group's shard
        count read at the first call.

        Raises:
            RuntimeError: ``owner`` is closed.
            BackendError: Redis could not be reached.
            ShardCountError: the group's record differs from ``shards=``.
        """
        if self.closed:
            raise RuntimeError(f"{owner!r} is closed")
        if os.getpid() != self.pid:
            self._after_fork()
        if self.choose is not None:
            self.choose()
        record = self.core.shard_count_key
        if record is not None:  # the first call: the group's shard count
            with translated():
                reply = self.client.get(record)
            self.core.take_shard_count(reply)
        return self.client

    def _after_fork(self) -> None:
        # The parent's sockets are the parent's: never closed here (see the module).
        self.pid = os.getpid()
        if self.connect is not None:
            self.client = self.connect()
            self.register()
        self.core.catalog = CatalogView()

    def run(self, client: Client, plan: Plan) -> Any:
        """Run ``plan``'s steps on ``client`` (see ``_steps``), redis-py's errors raised as
        ``BackendError``: its outcome."""
        reply = None
        with translated():
            try:
                while True:
                    step = plan.send(reply)
                    if step.kind == "command":
                        reply = client.execute_command(*step.args)  # type: ignore[no-untyped-call]
                    elif step.kind == "get":
                        reply = client.get(step.args[0])
                    else:
                        script = {
                            "wait": self.wait,
                            "track": self.track,
                            "finish": self.finish,
                        }[step.kind]
                        reply = script(keys=step.keys, args=step.args, client=client)
            except StopIteration as done:
                return done.value

    def close(self) -> None:
        """Close the client if it is ours (and this is the process that made it).
        Idempotent; :meth:`ready` refuses afterwards."""
        if self.closed:
            return
        self.closed = True
        if self.connect is not None and os.getpid() == self.pid:
            self.client.close()


def url_client(
    url: str,
    settings: UrlSettings,
    core_of: Callable[[Client], ProducerCore],
    *,
    shards: int | None,
    key_layout: KeyLayout | None,
) -> ProducerClient:
    """A client of its own on ``url`` (see ``Producer.from_url``), its core made by
    ``core_of`` from its first client."""
    cluster, options = settings.cluster, settings.options

    def connect() -> Client:
        if cluster:
            return redis.RedisCluster.from_url(url, **options)
        if is_sentinel_url(url):
            return sync_master(url, settings.defaults, settings.given)
        return redis.Redis.from_url(url, **options)

    first = connect()
    check_client(first)
    made = ProducerClient(first, connect, core_of(first))
    if cluster is None:

        def choose() -> None:
            nonlocal cluster
            # Asked once, at the first call: from_url opens no connection.
            with translated():
                on_cluster = ask_is_cluster(url, options)
            made.choose = None
            if on_cluster:
                check_cluster_url(url)
                made.client.close()
                cluster = True  # connect() now makes cluster clients (after a fork too)
                made.client = connect()
                made.register()
                # Its keys in the cluster layout (and its shard count read again).
                made.core.on_cluster(wanted_layout(shards, key_layout))

        made.choose = choose
    return made
