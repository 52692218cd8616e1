"""The Sentinel client (issue 26): on a real deployment, and against a scripted sentinel.

The deployment (``taskrunner.testing.SentinelDeployment``: a primary, two
replicas, three sentinels on loopback ports) is shared by the module's
read-mostly tests; the ones that fail it over start their own. The scripted
sentinel (:class:`FakeSentinel`, a few lines of trio) names whichever server a
test wants and publishes the events it wants, when it wants: that is how the
ROLE check, READONLY, the hold and its bound are tested exactly, on real
data servers.
"""

from __future__ import annotations

import asyncio
import json
import socket
import ssl
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import hiredis
import pytest
import trio
import trustme
from test_cli import APP, GROUP, app_env, cli, ok

from taskrunner import TaskRunner, TaskRunnerConfig
from taskrunner.backends.redis import RedisBackend
from taskrunner.backends.redis._config import ConnectionConfig
from taskrunner.backends.redis._errors import ReadOnlyError, RedisConnectionError
from taskrunner.backends.redis._sentinel import SentinelRedisClient
from taskrunner.backends.redis._sentinel_config import SentinelConfig
from taskrunner.errors import NotReplicated
from taskrunner.producer import AsyncProducer, Producer
from taskrunner.testing import (
    SentinelDeployment,
    ServerProcess,
    contract_parametrize,
    sync_command,
)

ServerFactory = Callable[..., ServerProcess]


@pytest.fixture(scope="module")
def deployment(
    redis_server: ServerProcess, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[SentinelDeployment]:
    """A primary, two replicas and three sentinels (of the configured server kind),
    for tests that do not fail it over."""
    started = SentinelDeployment(redis_server.binary, tmp_path_factory.mktemp("sentinel"))
    try:
        started.start()
        yield started
    finally:
        started.stop()


@contract_parametrize()
async def test_contract_through_sentinel(check: Any, deployment: SentinelDeployment) -> None:
    backend = RedisBackend.from_url(deployment.url(), queue=f"contract-{uuid.uuid4().hex[:8]}")
    try:
        await check(backend)
    finally:
        await backend.aclose()


async def test_from_sentinel_reaches_the_master(deployment: SentinelDeployment) -> None:
    backend = RedisBackend.from_sentinel(deployment.addresses, deployment.service_name, db=2)
    async with backend:
        await backend.client.execute("SET", "from-sentinel", "yes")
        role = await backend.client.execute("ROLE")
    assert role[0] == b"master"
    assert _in_db(deployment.master().port, 2, "GET", "from-sentinel") == b"yes"


# A scripted sentinel ---------------------------------------------------------
class FakeSentinel:
    """Answers ``SENTINEL get-master-addr-by-name`` from :attr:`answers` (the last
    one repeats) and publishes what :meth:`publish` is given to its subscribers."""

    def __init__(
        self,
        answers: list[tuple[str, int]],
        password: str | None = None,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        self.answers = answers
        self.password = password
        self.tls = tls
        self.auths: list[bytes] = []
        self.asked = 0
        self.port = 0
        self.subscribers: list[Any] = []
        self.subscribed = trio.Event()

    async def serve(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        tcp = await trio.open_tcp_listeners(0, host="127.0.0.1")
        self.port = tcp[0].socket.getsockname()[1]
        listeners: list[Any] = tcp
        if self.tls is not None:
            listeners = [trio.SSLListener(listener, self.tls) for listener in tcp]
        task_status.started()
        await trio.serve_listeners(self._handle, listeners)

    async def _handle(self, stream: Any) -> None:
        reader = hiredis.Reader()
        authenticated = self.password is None
        while True:
            try:
                data = await stream.receive_some(65536)
            except trio.BrokenResourceError:  # a TLS handshake refused, or a reset
                return
            if not data:
                return
            reader.feed(data)
            while (command := reader.gets()) is not False:
                name = command[0].upper()
                if name == b"AUTH":
                    self.auths.append(command[-1])
                    authenticated = command[-1].decode() == self.password
                    await stream.send_all(b"+OK\r\n" if authenticated else b"-WRONGPASS no\r\n")
                elif not authenticated:
                    await stream.send_all(b"-NOAUTH Authentication required.\r\n")
                elif name == b"SENTINEL":
                    host, port = self.answers[min(self.asked, len(self.answers) - 1)]
                    self.asked += 1
                    await stream.send_all(hiredis.pack_command((host, str(port))))
                elif name == b"SUBSCRIBE":
                    self.subscribers.append(stream)
                    self.subscribed.set()
                else:
                    await stream.send_all(b"-ERR unknown command\r\n")

    async def publish(self, channel: str, data: str) -> None:
        for stream in self.subscribers:
            await stream.send_all(hiredis.pack_command(("message", channel, data)))


@pytest.fixture
async def fake_sentinel() -> AsyncIterator[Callable[..., Any]]:
    async with trio.open_nursery() as nursery:

        async def start(
            *answers: tuple[str, int],
            password: str | None = None,
            tls: ssl.SSLContext | None = None,
        ) -> FakeSentinel:
            fake = FakeSentinel(list(answers), password, tls)
            await nursery.start(fake.serve)
            return fake

        yield start
        nursery.cancel_scope.cancel()


def client_of(fake: FakeSentinel, **options: Any) -> SentinelRedisClient:
    config = SentinelConfig(sentinels=[("127.0.0.1", fake.port)], service_name="m", **options)
    return SentinelRedisClient(config, ConnectionConfig())


def address(server: ServerProcess) -> tuple[str, int]:
    return ("127.0.0.1", server.port)


async def test_the_sentinels_password_is_their_own(
    redis_server_factory: ServerFactory, fake_sentinel: Callable[..., Any]
) -> None:
    master = redis_server_factory("--requirepass", "master-pw", password="master-pw")
    fake = await fake_sentinel(address(master), password="sentinel-pw")
    url = f"redis+sentinel://:master-pw@127.0.0.1:{fake.port}/m/0?sentinel_password=sentinel-pw"
    async with RedisBackend.from_url(url) as backend:
        assert await backend.client.execute("SET", "k", "v") == b"OK"
    assert set(fake.auths) == {b"sentinel-pw"}  # the master's password never went there
    backend = RedisBackend.from_sentinel(
        [("127.0.0.1", fake.port)], "m", password="master-pw", sentinel_password="sentinel-pw"
    )
    async with backend:
        assert await backend.client.execute("GET", "k") == b"v"
    wrong = RedisBackend.from_url(f"redis+sentinel://:master-pw@127.0.0.1:{fake.port}/m/0")
    async with wrong:
        with pytest.raises(RedisConnectionError, match="NOAUTH"):
            await wrong.client.execute("GET", "k")


async def test_the_sentinels_tls_is_their_own(
    redis_server_factory: ServerFactory, fake_sentinel: Callable[..., Any], tmp_path: Path
) -> None:
    ca = trustme.CA()
    server_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(server_context)
    ca.cert_pem.write_to_path(str(tmp_path / "ca.pem"))
    master = redis_server_factory()  # plain TCP: the master's TLS is another setting
    fake = await fake_sentinel(address(master), tls=server_context)
    url = (
        f"redis+sentinel://127.0.0.1:{fake.port}/m/0?sentinel_ssl=true"
        f"&sentinel_ssl_ca_certs={tmp_path / 'ca.pem'}"
    )
    async with RedisBackend.from_url(url) as backend:
        assert await backend.client.execute("SET", "k", "over TLS") == b"OK"
    assert fake.asked >= 1
    plain = RedisBackend.from_url(f"redis+sentinel://127.0.0.1:{fake.port}/m/0")
    async with plain:  # without sentinel_ssl the sentinel is unreachable
        with pytest.raises(RedisConnectionError, match="no sentinel named the master"):
            await plain.client.execute("GET", "k")
    assert sync_command(master.port, "GET", "k") == b"over TLS"


async def test_role_check_asks_again(
    redis_server_factory: ServerFactory, fake_sentinel: Callable[..., Any]
) -> None:
    master = redis_server_factory()
    replica = redis_server_factory("--replicaof", "127.0.0.1", str(master.port))
    fake = await fake_sentinel(address(replica), address(master))  # first the replica
    async with client_of(fake) as client:
        assert await client.execute("SET", "k", "on the master") == b"OK"
        assert fake.asked == 2  # the replica said ROLE slave: asked again
    assert sync_command(master.port, "GET", "k") == b"on the master"


async def test_role_never_master_fails_clearly(
    redis_server_factory: ServerFactory, fake_sentinel: Callable[..., Any]
) -> None:
    master = redis_server_factory()
    replica = redis_server_factory("--replicaof", "127.0.0.1", str(master.port))
    fake = await fake_sentinel(address(replica))
    async with client_of(fake) as client:
        with pytest.raises(RedisConnectionError, match=r"says ROLE slave, after 3 resolutions"):
            await client.execute("PING")


async def test_readonly_means_the_master_moved(
    redis_server_factory: ServerFactory, fake_sentinel: Callable[..., Any]
) -> None:
    first, second = redis_server_factory(), redis_server_factory()
    fake = await fake_sentinel(address(first))
    async with client_of(fake) as client:
        assert await client.execute("SET", "k", "1") == b"OK"
        # ``REPLICAOF`` does not disconnect idle clients: the client's connection
        # now talks to a replica, which answers writes with READONLY.
        fake.answers = [address(second)]
        sync_command(first.port, "REPLICAOF", "127.0.0.1", second.port)
        assert await client.execute("SET", "k", "2") == b"OK"
        assert client.moves == 1
        reader = client.dedicated()
        assert await reader.execute("INCR", "n") == 1  # dedicated connections follow too
    assert sync_command(second.port, "GET", "k") == b"2"


async def test_a_pipeline_is_resent_only_when_none_of_it_ran(
    redis_server_factory: ServerFactory, fake_sentinel: Callable[..., Any]
) -> None:
    first, second = redis_server_factory(), redis_server_factory()
    fake = await fake_sentinel(address(first))
    async with client_of(fake) as client:
        await client.execute("SET", "k", "1")
        fake.answers = [address(second)]
        sync_command(first.port, "REPLICAOF", "127.0.0.1", second.port)
        # Every reply an error, one READONLY: nothing ran, so all of it goes to the new
        # master (a replica answers WAIT with ERR: min_replicas' XADD + WAIT).
        replies = await client.pipeline([("SET", "k", "2"), ("INCR", "n"), ("WAIT", 0, 10)])
        assert replies == [b"OK", 1, 0]
        assert client.moves == 1
        # Back again, but now the pipeline reads before it writes: the read ran on the
        # replica, so the pipeline is returned as it is (and the client still moves).
        fake.answers = [address(first)]
        sync_command(first.port, "REPLICAOF", "NO", "ONE")
        sync_command(second.port, "REPLICAOF", "127.0.0.1", first.port)
        replies = await client.pipeline([("GET", "k"), ("SET", "k", "3")], raise_on_error=False)
        assert replies[0] == b"2"
        assert isinstance(replies[1], ReadOnlyError)
        assert client.moves == 2
        assert await client.execute("SET", "k", "5") == b"OK"
    assert sync_command(first.port, "GET", "k") == b"5"


async def test_commands_wait_from_the_first_event_to_switch_master(
    redis_server_factory: ServerFactory, fake_sentinel: Callable[..., Any]
) -> None:
    old, new = redis_server_factory(), redis_server_factory()
    fake = await fake_sentinel(address(old))
    async with client_of(fake) as client:
        assert await client.execute("SET", "k", "old") == b"OK"
        with trio.fail_after(5):
            await fake.subscribed.wait()
        await fake.publish("+try-failover", "master m 127.0.0.1 1")
        await fake.publish("+try-failover", "master other 127.0.0.1 1")  # another master
        await trio.sleep(0.1)
        done = trio.Event()
        reader = client.dedicated()

        async def write() -> None:
            assert await client.execute("SET", "k", "new") == b"OK"
            assert await reader.execute("INCR", "n") == 1
            done.set()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(write)
            await trio.sleep(0.5)
            assert not done.is_set(), "a write went out during the failover"
            assert sync_command(old.port, "GET", "k") == b"old"
            fake.answers = [address(new)]  # as the sentinels would, after the switch
            await fake.publish("+switch-master", f"m 127.0.0.1 {old.port} 127.0.0.1 {new.port}")
            with trio.fail_after(2):
                await done.wait()
        assert client.moves == 1
        # The other sentinels announce the same switch: no second move.
        await fake.publish("+switch-master", f"m 127.0.0.1 {old.port} 127.0.0.1 {new.port}")
        await trio.sleep(0.1)
        assert client.moves == 1
    assert sync_command(new.port, "GET", "k") == b"new"
    assert sync_command(old.port, "GET", "k") == b"old"


async def test_the_hold_is_bounded_and_an_abort_releases_it(
    redis_server_factory: ServerFactory, fake_sentinel: Callable[..., Any]
) -> None:
    server = redis_server_factory()
    fake = await fake_sentinel(address(server))
    async with client_of(fake, failover_hold=0.5) as client:
        await client.execute("PING")
        with trio.fail_after(5):
            await fake.subscribed.wait()
        await fake.publish("+try-failover", "master m 127.0.0.1 1")
        await trio.sleep(0.1)
        start = trio.current_time()
        await client.execute("SET", "k", "1")
        waited = trio.current_time() - start
        assert 0.3 <= waited < 1.5, waited  # no +switch-master: released at the bound
        assert client.moves == 1  # and resolved afresh
        await fake.publish("+selected-slave", "slave a:1 a 1 @ m 127.0.0.1 1")
        await trio.sleep(0.1)
        await fake.publish("-failover-abort-no-good-slave", "master m 127.0.0.1 1")
        await trio.sleep(0.1)
        start = trio.current_time()
        await client.execute("SET", "k", "2")
        assert trio.current_time() - start < 0.3  # the abort released it at once


async def test_sentinel_failover_loses_no_acknowledged_write(
    redis_server: ServerProcess, tmp_path: Path
) -> None:
    """``SENTINEL FAILOVER`` under a steady stream of writes (both server kinds run
    this test through ``.ci/run``): every acknowledged INCR is on the new master."""
    deployment = SentinelDeployment(redis_server.binary, tmp_path)
    deployment.start()
    try:
        old = deployment.master_port()
        async with SentinelRedisClient.from_url(deployment.url()) as client:
            acknowledged = 0
            gaps: list[float] = []
            last = trio.current_time()
            # The loop ends at a deadline, never by cancelling an INCR in flight:
            # a cancelled INCR may have run with its reply unread, and would then
            # count as a write nobody acknowledged (seen once in CI: 1894 == 1893).
            deadline = last + 6
            async with trio.open_nursery() as nursery:
                nursery.start_soon(trio.to_thread.run_sync, deployment.failover)
                while trio.current_time() < deadline:
                    await client.execute("INCR", "n")
                    acknowledged += 1
                    now = trio.current_time()
                    gaps.append(now - last)
                    last = now
                    await trio.sleep(0.002)
            new = await trio.to_thread.run_sync(deployment.wait_master_change, old)
            assert int(await client.execute("GET", "n")) == acknowledged
            assert (await client.execute("ROLE"))[0] == b"master"
        assert int(sync_command(new, "GET", "n")) == acknowledged
        print(f"\nSENTINEL FAILOVER: {acknowledged} writes, longest pause {max(gaps):.3f}s")
        assert max(gaps) < 5.0
    finally:
        deployment.stop()


# The producers: redis-py's Sentinel underneath -----------------------------------
def test_producers_take_the_same_url(deployment: SentinelDeployment) -> None:
    url = deployment.url(3)
    with Producer.from_url(url, consumer_group="sentinel-producers") as producer:
        sync_id = producer.dispatch("resize", {"w": 1}).id

    async def produce() -> str:
        async with AsyncProducer.from_url(url, consumer_group="sentinel-producers") as producer:
            return (await producer.dispatch("resize", {"w": 2})).id

    async_id = asyncio.run(produce())
    master = deployment.master().port
    stream = "taskrunner:sentinel-producers:tasks"
    ids = [entry[0].decode() for entry in _in_db(master, 3, "XRANGE", stream, "-", "+")]
    assert sync_id in ids
    assert async_id in ids


def _in_db(port: int, db: int, *command: Any) -> Any:
    """One command in database ``db``."""
    reader = hiredis.Reader()
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(hiredis.pack_command(("SELECT", db)) + hiredis.pack_command(command))
        replies: list[Any] = []
        while len(replies) < 2:
            reply = reader.gets()
            if reply is False:
                reader.feed(sock.recv(65536))
            else:
                replies.append(reply)
    return replies[1]


def test_cli_commands_take_the_sentinel_url(deployment: SentinelDeployment) -> None:
    url = deployment.url()
    queue = f"q{uuid.uuid4().hex[:8]}"
    env = app_env(url, queue)  # cli_app builds RedisBackend.from_url(url)
    task_id = ok(cli(env, "dispatch", APP, "record", "--payload", '{"n": 1}')).strip()
    where = ["--url", url, "--group", GROUP, "--queue", queue]
    shown = json.loads(ok(cli(env, "inspect", *where, "--json", task_id)))
    assert shown["state"] == "queued", shown
    stats = json.loads(ok(cli(env, "stats", *where, "--json")))
    assert stats


# min_replicas ----------------------------------------------------------------------
def _replicated_runner(backend: RedisBackend, **config: Any) -> TaskRunner:
    runner = TaskRunner(TaskRunnerConfig(consumer_group="replicated", **config), backend)

    @runner.task(name="record")
    async def record(payload: object) -> None:
        raise AssertionError("never served here")

    @runner.task(name="once", unique=True, unique_for=60.0)
    async def once(payload: object) -> None:
        raise AssertionError("never served here")

    return runner


async def test_min_replicas_waits_for_a_replica(deployment: SentinelDeployment) -> None:
    async with RedisBackend.from_url(deployment.url(), queue="replicated") as backend:
        runner = _replicated_runner(backend, min_replicas=2)
        handle = await runner.dispatch("record", 1)
        handles = await runner.dispatch_many("record", [2, 3])
        unique = await runner.dispatch("once", 4)
    for replica in deployment.servers:
        if replica.port == deployment.master_port():
            continue  # WAIT 2 returned: both replicas already hold every entry
        stream = "taskrunner:replicated:replicated"
        ids = {e[0].decode() for e in sync_command(replica.port, "XRANGE", stream, "-", "+")}
        assert {handle.id, unique.id, *(h.id for h in handles)} <= ids


async def test_min_replicas_fails_loudly_without_replicas(redis_url: str) -> None:
    async with RedisBackend.from_url(redis_url, queue="alone") as backend:
        runner = _replicated_runner(backend, min_replicas=1, replica_timeout=0.05)
        with pytest.raises(NotReplicated, match=r"min_replicas=1, but WAIT counted 0 replica"):
            await runner.dispatch("record", 1)
        with pytest.raises(NotReplicated) as info:
            await runner.dispatch_many("record", [1, 2])
        assert (info.value.wanted, info.value.confirmed, info.value.maybe_applied) == (1, 0, True)
        with pytest.raises(NotReplicated):
            await runner.dispatch("once", 1)
        # Not acknowledged, maybe applied: the unique lock is kept (as for a lost reply).
        assert await backend.client.execute("EXISTS", "taskrunner:unique:once") == 1


async def test_min_replicas_covers_delayed_dispatches(
    deployment: SentinelDeployment, redis_url: str
) -> None:
    async with RedisBackend.from_url(deployment.url(), queue="replicated") as backend:
        runner = _replicated_runner(backend, min_replicas=2)
        later = await runner.dispatch_delayed("record", 1, 60)
        at = await runner.schedule_for("record", 2, time.time() + 60)
    for replica in deployment.servers:
        members = sync_command(replica.port, "HKEYS", "taskrunner:replicated:delayed_ids")
        assert {later.id.encode(), at.id.encode()} <= set(members)
    async with RedisBackend.from_url(redis_url, queue="alone") as alone:
        runner = _replicated_runner(alone, min_replicas=1, replica_timeout=0.05)
        with pytest.raises(NotReplicated):
            await runner.dispatch_delayed("record", 1, 60)
