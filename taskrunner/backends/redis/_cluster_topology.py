"""What the cluster looks like and what a redirect means: pure functions, no I/O.

Theory of operation: the client keeps one :class:`ClusterMap`, the owner
(master address) of each of the 16384 slots, parsed from ``CLUSTER SHARDS``
(Redis 7+, Valkey) by :func:`parse_shards` or from ``CLUSTER SLOTS`` (older
servers) by :func:`parse_slots`. A node that announces no address (``""`` or
``"?"``, as a node that never met another one does) is the node that was
asked. :meth:`ClusterMap.missing_slots` is the full-coverage check: a map with
unowned slots is not adopted (the cluster is still forming or lost a shard).

Error replies that are not the command's own answer are redirects,
:func:`parse_redirect` tells them apart: ``MOVED <slot> <host:port>`` (the slot
lives elsewhere for good: update the map, resend there), ``ASK <slot>
<host:port>`` (the slot is migrating and this key already left: send
``ASKING`` then the command to the target, once, map unchanged), ``TRYAGAIN``
(a multi-key command during a migration: wait and resend) and ``CLUSTERDOWN``
(the cluster cannot serve the slot right now: wait, refresh, resend), and
``UNBLOCKED ... instance state changed`` (Redis ending a blocking read on a
master that became a replica, in a failover: refresh, resend). All five mean
the command did not run, which is why resending them is safe. (An
``UNBLOCKED`` an operator caused with ``CLIENT UNBLOCK ... ERROR`` is the
command's own error: the operator meant it to end.)
:func:`redirect_delay` is the wait before each resend.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from typing import Any

import attrs

from ._cluster_slots import HASH_SLOTS
from ._errors import ResponseError

Address = tuple[str, int]
"""A node's ``(host, port)``."""


class RedirectKind(enum.Enum):
    """What a redirecting error reply asks for (see the module docstring)."""

    MOVED = "MOVED"
    ASK = "ASK"
    TRYAGAIN = "TRYAGAIN"
    CLUSTERDOWN = "CLUSTERDOWN"
    UNBLOCKED = "UNBLOCKED"


@attrs.frozen(kw_only=True)
class Redirect:
    """A parsed redirect: ``slot`` and ``address`` are set for ``MOVED`` and ``ASK``."""

    kind: RedirectKind
    """What to do."""
    slot: int | None = None
    """The slot the server names."""
    address: Address | None = None
    """Where to resend."""


@attrs.frozen(kw_only=True)
class Shard:
    """One master, its replicas, and the slot ranges it serves."""

    master: Address
    """Where the shard's commands go."""
    replicas: tuple[Address, ...] = ()
    """Its replicas (not read from; known so a failover can be followed)."""
    ranges: tuple[tuple[int, int], ...] = ()
    """Inclusive ``(first, last)`` slot ranges."""


@attrs.frozen(kw_only=True)
class ClusterMap:
    """The owner of every slot, as the cluster last told us."""

    shards: tuple[Shard, ...]
    """Every shard with a master, in the order the server listed them."""
    owners: tuple[Address | None, ...] = attrs.field(repr=False)
    """``owners[slot]``: the master serving ``slot``, ``None`` if nobody does."""

    @classmethod
    def of(cls, shards: Sequence[Shard]) -> ClusterMap:
        """The map of ``shards`` (a slot listed twice goes to the last one)."""
        owners: list[Address | None] = [None] * HASH_SLOTS
        for shard in shards:
            for first, last in shard.ranges:
                owners[first : last + 1] = [shard.master] * (last - first + 1)
        return cls(shards=tuple(shards), owners=tuple(owners))

    @property
    def masters(self) -> tuple[Address, ...]:
        """Every master that serves at least one slot, in listing order."""
        serving = {owner for owner in self.owners if owner is not None}
        return tuple(shard.master for shard in self.shards if shard.master in serving)

    def missing_slots(self) -> list[tuple[int, int]]:
        """Inclusive ranges of the slots nobody serves (empty: full coverage)."""
        missing: list[tuple[int, int]] = []
        start: int | None = None
        for slot, owner in enumerate(self.owners):
            if owner is None and start is None:
                start = slot
            elif owner is not None and start is not None:
                missing.append((start, slot - 1))
                start = None
        if start is not None:
            missing.append((start, HASH_SLOTS - 1))
        return missing

    def over(self, old: ClusterMap) -> ClusterMap:
        """This map, with the slots it leaves unserved still served as in ``old``
        (a shard whose master failed, before its replica is promoted)."""
        owners = tuple(
            new if new is not None else was
            for new, was in zip(self.owners, old.owners, strict=True)
        )
        listed = {shard.master for shard in self.shards}
        kept = tuple(s for s in old.shards if s.master not in listed and s.master in owners)
        return ClusterMap(shards=(*self.shards, *kept), owners=owners)

    def moved(self, slot: int, address: Address) -> ClusterMap:
        """This map with ``slot`` served by ``address`` (what a ``MOVED`` says)."""
        owners = list(self.owners)
        owners[slot] = address
        shards = self.shards
        if all(shard.master != address for shard in shards):
            shards = (*shards, Shard(master=address))
        return ClusterMap(shards=shards, owners=tuple(owners))


def _text(value: Any) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def _host(announced: Any, asked: Address) -> str:
    host = _text(announced) if announced is not None else ""
    return asked[0] if host in ("", "?") else host


def parse_shards(reply: Any, asked: Address, *, tls: bool = False) -> ClusterMap:
    """The map in a ``CLUSTER SHARDS`` reply (RESP2: flat ``[name, value, ...]`` arrays).

    Args:
        reply: The raw reply.
        asked: The node that answered (stands in for nodes announcing no address).
        tls: Use each node's ``tls-port`` instead of ``port``.

    Raises:
        ValueError: The reply is not shaped like ``CLUSTER SHARDS``.
    """
    shards: list[Shard] = []
    try:
        for raw_shard in reply:
            shard = dict(zip(map(_text, raw_shard[::2]), raw_shard[1::2], strict=True))
            flat = [int(n) for n in shard["slots"]]
            ranges = tuple(zip(flat[::2], flat[1::2], strict=True))
            master: Address | None = None
            replicas: list[Address] = []
            for raw_node in shard["nodes"]:
                node = dict(zip(map(_text, raw_node[::2]), raw_node[1::2], strict=True))
                if _text(node.get("health", b"online")) != "online":
                    continue  # failed or still loading: not a place to send to
                port = int(node.get("tls-port", 0) if tls else node.get("port", 0))
                announced = node.get("endpoint") or node.get("ip")
                address = (_host(announced, asked), port)
                if _text(node["role"]) == "master":
                    master = address
                else:
                    replicas.append(address)
            if master is not None:
                shards.append(Shard(master=master, replicas=tuple(replicas), ranges=ranges))
    except (KeyError, TypeError, ValueError, IndexError) as exc:
        raise ValueError(f"not a CLUSTER SHARDS reply: {reply!r:.200}") from exc
    return ClusterMap.of(shards)


def parse_slots(reply: Any, asked: Address) -> ClusterMap:
    """The map in a ``CLUSTER SLOTS`` reply (``[first, last, master, *replicas]`` rows).

    Raises:
        ValueError: The reply is not shaped like ``CLUSTER SLOTS``.
    """
    by_master: dict[Address, Shard] = {}
    try:
        for row in reply:
            first, last = int(row[0]), int(row[1])
            master = (_host(row[2][0], asked), int(row[2][1]))
            replicas = tuple((_host(node[0], asked), int(node[1])) for node in row[3:])
            known = by_master.get(master)
            ranges = ((first, last),) if known is None else (*known.ranges, (first, last))
            by_master[master] = Shard(master=master, replicas=replicas, ranges=ranges)
    except (TypeError, ValueError, IndexError) as exc:
        raise ValueError(f"not a CLUSTER SLOTS reply: {reply!r:.200}") from exc
    return ClusterMap.of(list(by_master.values()))


def _address(text: str, replier: Address) -> Address:
    host, _, port = text.rpartition(":")
    # An empty or "?" host means the replying node's own host (Redis 7's
    # "unknown-endpoint" preference).
    return (replier[0] if host in ("", "?") else host, int(port))


def parse_redirect(error: ResponseError, replier: Address) -> Redirect | None:
    """The redirect ``error`` stands for, or ``None`` if it is the command's own error.

    Args:
        error: An error reply.
        replier: The node that sent it (for addresses without a host).
    """
    code = error.code
    if code == "TRYAGAIN":
        return Redirect(kind=RedirectKind.TRYAGAIN)
    if code == "CLUSTERDOWN":
        return Redirect(kind=RedirectKind.CLUSTERDOWN)
    if code == "UNBLOCKED":
        changed = "instance state changed" in error.message
        return Redirect(kind=RedirectKind.UNBLOCKED) if changed else None
    if code not in ("MOVED", "ASK"):
        return None
    parts = error.message.split()
    if len(parts) != 3:
        return None
    try:
        slot, address = int(parts[1]), _address(parts[2], replier)
    except ValueError:
        return None
    return Redirect(kind=RedirectKind(code), slot=slot, address=address)


MAX_REDIRECTS = 8
"""Redirects one command may follow before its last error is raised."""

TRYAGAIN_DELAY = 0.05
"""First wait before resending after ``TRYAGAIN`` (a migration moves keys fast)."""
CLUSTERDOWN_DELAY = 0.25
"""First wait before resending after ``CLUSTERDOWN`` (a failover takes longer)."""
MAX_DELAY = 1.0
"""Longest wait between two resends."""


def redirect_delay(kind: RedirectKind, attempt: int) -> float:
    """Seconds to wait before resending after the ``attempt``-th (1-based) redirect of ``kind``.

    ``MOVED`` and ``ASK`` name where to go now: no wait. ``TRYAGAIN``,
    ``CLUSTERDOWN`` and ``UNBLOCKED`` wait, doubling each time, up to :data:`MAX_DELAY`.
    """
    if kind is RedirectKind.TRYAGAIN:
        return min(MAX_DELAY, TRYAGAIN_DELAY * 2.0 ** (attempt - 1))
    if kind is RedirectKind.CLUSTERDOWN:
        return min(MAX_DELAY, CLUSTERDOWN_DELAY * 2.0 ** (attempt - 1))
    if kind is RedirectKind.UNBLOCKED:
        return min(MAX_DELAY, TRYAGAIN_DELAY * 2.0 ** (attempt - 1))
    return 0.0
