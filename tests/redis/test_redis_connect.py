"""Connecting: URLs, AUTH (password and ACL user), SELECT, unix sockets, TLS, backoff."""

from __future__ import annotations

import os
import socket
import ssl
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
import redis.exceptions
import trio
import trustme

from taskrunner.backends.redis._client import NativeRedisClient
from taskrunner.backends.redis._config import ConnectionConfig, reconnect_delay
from taskrunner.backends.redis._errors import (
    AuthenticationError,
    BusyGroupError,
    NoGroupError,
    NoPermissionError,
    NoScriptError,
    RedisConnectionError,
    RedisTimeoutError,
    ResponseError,
    WrongTypeError,
    error_from_reply,
)
from taskrunner.backends.redis._protocol import RedisClient
from taskrunner.backends.redis._pyredis import PyRedisClient, translate_error

if TYPE_CHECKING:
    from conftest import ServerProcess  # tests/conftest.py

ServerFactory = Callable[..., "ServerProcess"]


def open_client(transport: str, url: str) -> RedisClient:
    if transport == "native":
        return NativeRedisClient.from_url(url)
    return PyRedisClient.from_url(url)


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("redis://localhost", ConnectionConfig(host="localhost")),
        (
            "redis://user:p%40ss@10.0.0.1:7000/3",
            ConnectionConfig(host="10.0.0.1", port=7000, db=3, username="user", password="p@ss"),
        ),
        ("redis://:pw@h:1/0", ConnectionConfig(host="h", port=1, password="pw")),
        ("unix:///run/redis.sock?db=2", ConnectionConfig(path="/run/redis.sock", db=2)),
        ("redis://h?client_name=worker-1", ConnectionConfig(host="h", client_name="worker-1")),
    ],
)
def test_url_parsing(url: str, expected: ConnectionConfig) -> None:
    assert ConnectionConfig.from_url(url) == expected


def test_url_parsing_tls_and_overrides() -> None:
    config = ConnectionConfig.from_url("rediss://h:6380?ssl_cert_reqs=none", connect_timeout=1.5)
    assert config.ssl_context is not None
    assert config.ssl_context.verify_mode == ssl.CERT_NONE
    assert config.connect_timeout == 1.5
    with pytest.raises(ValueError, match="rediss"):
        ConnectionConfig.from_url("redis://h?ssl_ca_certs=/x")
    with pytest.raises(ValueError, match="bogus"):
        ConnectionConfig.from_url("redis://h?bogus=1")
    with pytest.raises(ValueError, match="scheme"):
        ConnectionConfig.from_url("http://h")


@pytest.mark.parametrize(
    ("failures", "jitter", "expected"),
    [(0, 0.9, 0.0), (1, 0.0, 0.05), (1, 1.0, 0.1), (2, 0.0, 0.1), (4, 0.0, 0.4), (40, 0.0, 1.0)],
)
def test_reconnect_delay(failures: int, jitter: float, expected: float) -> None:
    assert reconnect_delay(failures, base=0.1, cap=2.0, jitter=jitter) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("message", "cls", "code"),
    [
        ("NOGROUP No such key", NoGroupError, "NOGROUP"),
        ("BUSYGROUP Consumer Group name already exists", BusyGroupError, "BUSYGROUP"),
        ("NOSCRIPT No matching script", NoScriptError, "NOSCRIPT"),
        ("WRONGTYPE Operation against a key", WrongTypeError, "WRONGTYPE"),
        ("NOAUTH Authentication required.", AuthenticationError, "NOAUTH"),
        ("ERR NOGROUP mentioned later does not count", ResponseError, "ERR"),
        ("SOMETHINGNEW happened", ResponseError, "SOMETHINGNEW"),
    ],
)
def test_error_class_by_first_word(message: str, cls: type[ResponseError], code: str) -> None:
    error = error_from_reply(message)
    assert type(error) is cls
    assert error.code == code
    assert error.message == message


def test_redis_py_errors_are_translated() -> None:
    noscript = redis.exceptions.NoScriptError("No matching script", status_code="NOSCRIPT")
    assert isinstance(translate_error(noscript), NoScriptError)
    generic = translate_error(redis.exceptions.ResponseError("bad", status_code="ERR"))
    assert (type(generic), generic.message) == (ResponseError, "ERR bad")  # type: ignore[attr-defined]
    assert isinstance(translate_error(redis.exceptions.ResponseError("NOGROUP x")), NoGroupError)
    assert type(translate_error(redis.exceptions.TimeoutError())) is RedisTimeoutError
    assert type(translate_error(redis.exceptions.ConnectionError())) is RedisConnectionError


@pytest.mark.parametrize("transport", ["native", "redis-py"])
async def test_acl_user(redis_server: ServerProcess, redis_url: str, transport: str) -> None:
    admin = NativeRedisClient.from_url(redis_url)
    async with admin:
        await admin.execute("ACL", "SETUSER", "alice", "reset", "on", ">s3cret", "~app:*", "+@all")
        try:
            url = f"redis://alice:s3cret@127.0.0.1:{redis_server.port}/0"
            async with open_client(transport, url) as alice:
                assert await alice.execute("ACL", "WHOAMI") == b"alice"
                assert await alice.execute("SET", "app:x", 1) == b"OK"
                with pytest.raises(NoPermissionError):
                    await alice.execute("SET", "other", 1)
            wrong = f"redis://alice:nope@127.0.0.1:{redis_server.port}/0"
            async with open_client(transport, wrong) as intruder:
                with pytest.raises(AuthenticationError):
                    await intruder.execute("PING")
        finally:
            await admin.execute("ACL", "DELUSER", "alice")


@pytest.mark.parametrize("transport", ["native", "redis-py"])
async def test_password_select_and_client_name(
    redis_server_factory: ServerFactory, transport: str
) -> None:
    server = redis_server_factory("--requirepass", "pw", password="pw")
    url = f"redis://:pw@127.0.0.1:{server.port}/3?client_name=taskrunner-test"
    async with open_client(transport, url) as client:
        info = await client.execute("CLIENT", "INFO")
        assert b" db=3 " in info
        assert b" name=taskrunner-test " in info
    async with open_client(transport, f"redis://127.0.0.1:{server.port}/0") as anonymous:
        with pytest.raises(AuthenticationError):
            await anonymous.execute("PING")


@pytest.mark.parametrize("transport", ["native", "redis-py"])
async def test_unix_socket(
    redis_server_factory: ServerFactory, tmp_path: Path, transport: str
) -> None:
    path = tmp_path / "r.sock"
    redis_server_factory("--unixsocket", str(path), "--unixsocketperm", "700")
    async with open_client(transport, f"unix://{path}?db=2") as client:
        assert await client.execute("SET", "k", "v") == b"OK"
        assert b" db=2 " in await client.execute("CLIENT", "INFO")
        async with client.dedicated() as dedicated:
            assert await dedicated.execute("GET", "k") == b"v"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


async def test_refused_connection_backs_off() -> None:
    url = f"redis://127.0.0.1:{free_port()}/0"
    async with NativeRedisClient.from_url(url, backoff_base=0.2, backoff_cap=0.2) as client:
        errors: list[BaseException] = []

        async def call() -> None:
            with pytest.raises(RedisConnectionError) as info:
                await client.execute("PING")
            errors.append(info.value)

        with trio.fail_after(5):
            async with trio.open_nursery() as nursery:
                for _ in range(10):
                    nursery.start_soon(call)
            assert len(errors) == 10  # all failed with the one attempt's error
            started = trio.current_time()
            with pytest.raises(RedisConnectionError):
                await client.execute("PING")
            assert trio.current_time() - started >= 0.1  # waited out the jittered backoff


@pytest.fixture(scope="module")
def certificates(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """A CA, a server certificate for 127.0.0.1 and a client certificate, as PEM files."""
    ca = trustme.CA()
    directory = tmp_path_factory.mktemp("tls")
    paths = {name: str(directory / f"{name}.pem") for name in ("ca", "server", "client")}
    ca.cert_pem.write_to_path(paths["ca"])
    ca.issue_cert("127.0.0.1").private_key_and_cert_chain_pem.write_to_path(paths["server"])
    ca.issue_cert("client@example.org").private_key_and_cert_chain_pem.write_to_path(
        paths["client"]
    )
    return paths


@pytest.fixture
def tls_port(
    redis_server_factory: ServerFactory,
    redis_server_binaries: list[str],
    certificates: dict[str, str],
) -> int:
    """The TLS port of a server started on the first binary built with TLS support."""
    factory = redis_server_factory
    tried: list[str] = []
    for binary in redis_server_binaries:
        tls_port = free_port()
        try:
            factory(
                "--tls-port", str(tls_port),
                "--tls-cert-file", certificates["server"],
                "--tls-key-file", certificates["server"],
                "--tls-ca-cert-file", certificates["ca"],
                "--tls-auth-clients", "yes",
                binary=binary,
            )  # fmt: skip
        except RuntimeError:
            tried.append(binary)
            continue
        return tls_port
    reason = (
        f"no server binary with TLS support (tried {tried}); Debian's redis-server "
        "package has it: apt-get install -y redis-server"
    )
    if os.environ.get("CI"):
        pytest.fail(f"{reason} (.ci/run installs it)")
    pytest.skip(reason)


@pytest.mark.parametrize("transport", ["native", "redis-py"])
async def test_tls_with_client_certificate(
    tls_port: int, certificates: dict[str, str], transport: str
) -> None:
    url = (
        f"rediss://127.0.0.1:{tls_port}/1?ssl_ca_certs={certificates['ca']}"
        f"&ssl_certfile={certificates['client']}"
    )
    async with open_client(transport, url) as client:
        assert await client.execute("SET", "secure", "yes") == b"OK"
        replies = await client.pipeline([("GET", "secure"), ("ECHO", "x" * 100_000)])
        assert replies == [b"yes", b"x" * 100_000]
        async with client.dedicated() as dedicated:
            assert await dedicated.execute("BLPOP", "nothing", 0.05, reply_timeout=5) is None
    # no client certificate: the server refuses the handshake
    bare = f"rediss://127.0.0.1:{tls_port}/1?ssl_ca_certs={certificates['ca']}"
    async with open_client(transport, bare) as refused:
        with trio.fail_after(5), pytest.raises(RedisConnectionError):
            await refused.execute("PING")
