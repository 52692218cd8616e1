"""An in-memory Redis Cluster for the cluster client's unit tests.

Each :class:`FakeNode` serves connections made of ``trio.testing`` memory
streams, speaking real RESP (requests parsed with ``hiredis``), so the client
under test runs its real connection code. The fake routes like a cluster
node: a key of a slot it does not serve is answered ``MOVED``; a key missing
from a slot it is migrating is answered ``ASK``; an ``ASKING`` command lets the
next command into a slot it is importing. Tests steer it: ``errors`` (replies
to give the next keyed commands instead of running them), ``hold`` (commands
that wait for an event before answering), ``drop`` (commands after which the
connection is cut without an answer) and ``down`` (refuse connections).
Every command a node receives is appended to its ``log``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

import attrs
import hiredis
import trio
import trio.testing

from taskrunner.backends.redis._cluster_slots import HASH_SLOTS, command_keys, key_slot
from taskrunner.backends.redis._config import ConnectionConfig
from taskrunner.backends.redis._connection import make_reader
from taskrunner.backends.redis._errors import RedisConnectionError

Address = tuple[str, int]


class Status(bytes):
    """A status reply (``+OK``)."""


class Error(str):
    """An error reply."""


def encode(reply: Any) -> bytes:
    if isinstance(reply, Status):
        return b"+" + bytes(reply) + b"\r\n"
    if isinstance(reply, Error):
        return b"-" + reply.encode() + b"\r\n"
    if reply is None:
        return b"$-1\r\n"
    if isinstance(reply, int):
        return b":%d\r\n" % reply
    if isinstance(reply, bytes):
        return b"$%d\r\n%s\r\n" % (len(reply), reply)
    if isinstance(reply, list):
        return b"*%d\r\n" % len(reply) + b"".join(encode(item) for item in reply)
    raise TypeError(reply)


OK = Status(b"OK")


@attrs.define(eq=False)
class FakeNode:
    cluster: FakeCluster
    address: Address
    data: dict[bytes, Any] = attrs.Factory(dict)
    scripts: dict[str, bytes] = attrs.Factory(dict)
    log: list[tuple[bytes, ...]] = attrs.Factory(list)
    errors: list[str] = attrs.Factory(list)
    hold: dict[bytes, trio.Event] = attrs.Factory(dict)
    drop: set[bytes] = attrs.Factory(set)
    down: bool = False
    migrating: dict[int, Address] = attrs.Factory(dict)
    importing: set[int] = attrs.Factory(set)
    connections: int = 0

    def names(self) -> list[bytes]:
        """The command names received, in order."""
        return [command[0].upper() for command in self.log]

    async def serve(self, stream: trio.abc.Stream) -> None:
        reader = hiredis.Reader()
        asking = False
        try:
            while True:
                data = await stream.receive_some(65536)
                if not data:
                    return
                reader.feed(data)
                while (request := reader.gets()) is not False:
                    command = tuple(request)
                    self.log.append(command)
                    name = command[0].upper()
                    if name in self.drop:
                        self.drop.discard(name)
                        return  # the connection is cut: no reply
                    if name in self.hold:
                        await self.hold[name].wait()
                    if name == b"ASKING":
                        asking = True
                        await stream.send_all(encode(OK))
                        continue
                    reply = self.reply(command, asking=asking)
                    asking = False
                    await stream.send_all(encode(reply))
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            return
        finally:
            await trio.aclose_forcefully(stream)

    def reply(self, command: tuple[bytes, ...], *, asking: bool) -> Any:
        name = command[0].upper()
        if name == b"PING":
            return Status(b"PONG")
        if name == b"CLUSTER":
            return self.cluster.shards_reply()
        if name == b"SCRIPT":
            sha = hashlib.sha1(command[2]).hexdigest()
            self.scripts[sha] = command[2]
            return sha.encode()
        if name == b"SCAN":
            return [b"0", sorted(self.data)]
        keys = [bytes(k) for k in command_keys(command)]
        if keys:
            slot = key_slot(keys[0])
            owner = self.cluster.owner[slot]
            if owner != self.address and not (asking and slot in self.importing):
                return Error(f"MOVED {slot} {owner[0]}:{owner[1]}")
            target = self.migrating.get(slot)
            if target is not None and any(k not in self.data for k in keys):
                return Error(f"ASK {slot} {target[0]}:{target[1]}")
            if self.errors:
                return Error(self.errors.pop(0))
        return self.run(name, command, keys)

    def run(self, name: bytes, command: tuple[bytes, ...], keys: list[bytes]) -> Any:
        data = self.data
        if name == b"GET":
            return data.get(keys[0])
        if name == b"SET":
            data[keys[0]] = command[2]
            return OK
        if name == b"INCR":
            data[keys[0]] = b"%d" % (int(data.get(keys[0], b"0")) + 1)
            return int(data[keys[0]])
        if name == b"RPUSH":
            data.setdefault(keys[0], []).extend(command[2:])
            return len(data[keys[0]])
        if name == b"DEL":
            return sum(data.pop(key, None) is not None for key in keys)
        if name in (b"EVALSHA", b"EVAL"):
            if name == b"EVALSHA" and command[1].decode() not in self.scripts:
                return Error("NOSCRIPT No matching script. Please use EVAL.")
            if name == b"EVAL":
                self.scripts[hashlib.sha1(command[1]).hexdigest()] = command[1]
            # every fake script increments each of its keys
            for key in keys:
                data[key] = b"%d" % (int(data.get(key, b"0")) + 1)
            return [int(data[key]) for key in keys]
        if name == b"WAIT":
            return 1  # one replica acknowledged
        if name == b"XREADGROUP":
            return None  # nothing to read (the BLOCK time is not waited)
        return Error(f"ERR unknown command '{name.decode()}'")


@attrs.define(eq=False)
class FakeCluster:
    """Nodes on ``fake-host`` ports, and who serves each slot."""

    nursery: trio.Nursery
    nodes: dict[Address, FakeNode] = attrs.Factory(dict)
    owner: list[Address] = attrs.Factory(list)
    hidden: set[Address] = attrs.Factory(set)  # left out of CLUSTER SHARDS (failed masters)
    shards_asked: int = 0

    @classmethod
    def start(cls, nursery: trio.Nursery, masters: int = 3) -> FakeCluster:
        cluster = cls(nursery)
        addresses = [("fake-host", 7001 + n) for n in range(masters)]
        for address in addresses:
            cluster.nodes[address] = FakeNode(cluster, address)
        share = HASH_SLOTS // masters
        cluster.owner = [addresses[min(slot // share, masters - 1)] for slot in range(HASH_SLOTS)]
        return cluster

    def node_of(self, key: str) -> FakeNode:
        return self.nodes[self.owner[key_slot(key)]]

    def add_node(self, port: int) -> FakeNode:
        node = self.nodes[("fake-host", port)] = FakeNode(self, ("fake-host", port))
        return node

    def move_slot(self, slot: int, to: Address) -> None:
        self.owner[slot] = to

    def shards_reply(self) -> list[Any]:
        self.shards_asked += 1
        ranges: dict[Address, list[int]] = {}
        start = 0
        for slot in range(1, HASH_SLOTS + 1):
            if slot == HASH_SLOTS or self.owner[slot] != self.owner[start]:
                ranges.setdefault(self.owner[start], []).extend([start, slot - 1])
                start = slot
        return [
            [b"slots", flat, b"nodes", [[
                b"id", b"0" * 40, b"port", address[1], b"ip", address[0].encode(),
                b"endpoint", address[0].encode(), b"role", b"master",
                b"replication-offset", 0, b"health", b"online",
            ]]]
            for address, flat in ranges.items()
            if address not in self.hidden
        ]  # fmt: skip

    async def open(self, config: ConnectionConfig) -> tuple[trio.abc.Stream, Any]:
        """The opener the client under test uses."""
        await trio.lowlevel.checkpoint()
        node = self.nodes.get((config.host, config.port))
        if node is None or node.down:
            raise RedisConnectionError(f"connecting to {config.host}:{config.port}: refused")
        node.connections += 1
        client_side, server_side = trio.testing.memory_stream_pair()
        self.nursery.start_soon(node.serve, server_side)
        return client_side, make_reader()


def logged(node: FakeNode, *names: bytes) -> list[tuple[bytes, ...]]:
    """The commands of ``node``'s log named ``names`` (all but PING/CLUSTER by default)."""
    wanted: Sequence[bytes] = names
    return [
        command
        for command in node.log
        if (command[0].upper() in wanted if wanted else command[0].upper() not in _NOISE)
    ]


_NOISE = {b"PING", b"CLUSTER"}
