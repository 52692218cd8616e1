"""What a failover's events on the sentinels mean for our commands (pure, table-tested).

Theory of operation. Sentinel's failover is not coordinated with clients: the
old master keeps accepting writes until a sentinel reconfigures it, and every
write it takes after the replica's promotion vanishes when it resyncs as a
replica. Moving at the first ``+switch-master`` is too late (the promotion came
before it), and ``WAIT 1`` does not help when the other replica is promoted.
What loses nothing is to hold commands from the failover's first event on any
sentinel (``+try-failover``, ``+selected-slave``...) until ``+switch-master``
names the new master, and then send them there. The hold is bounded: a
failover that aborts (``-failover-abort-*``) or never finishes within
``failover_hold`` seconds releases the commands to whatever the sentinels then
say is the master.

Several sentinels may try a failover of the same master at once (after an
``+odown`` every sentinel that sees it may start one; only the elected leader
goes on, the others later publish ``-failover-abort-not-elected``), so a hold is
kept per sentinel, and the gate is closed while any sentinel holds it.

:func:`event_of` reads one pub/sub message, :func:`on_event` and
:meth:`Gate.holding` decide; the I/O is in :mod:`._sentinel`.
"""

from __future__ import annotations

import enum
import math

import attrs

START_CHANNELS = (
    "+try-failover",
    "+elected-leader",
    "+failover-state-select-slave",
    "+selected-slave",
    "+failover-state-send-slaveof-noone",
    "+failover-state-wait-promotion",
    "+promoted-slave",
    "+failover-state-reconf-slaves",
)
"""A failover of the master is under way on the sentinel that publishes these."""

ABORT_CHANNELS = (
    "-failover-abort-not-elected",
    "-failover-abort-no-good-slave",
    "-failover-abort-slave-timeout",
    "+failover-end-for-timeout",
)
"""That sentinel's failover ended without (or before) a switch it will announce."""

SWITCH_CHANNEL = "+switch-master"
"""``<name> <old-ip> <old-port> <new-ip> <new-port>``: the master moved."""

CHANNELS = (*START_CHANNELS, *ABORT_CHANNELS, SWITCH_CHANNEL)
"""Every channel the watcher subscribes to on each sentinel."""


class EventKind(enum.Enum):
    START = "start"
    ABORT = "abort"
    SWITCH = "switch"


@attrs.frozen
class FailoverEvent:
    """One event about our master, read from a sentinel's pub/sub."""

    kind: EventKind
    channel: str
    address: tuple[str, int] | None = None
    """The new master, for :attr:`EventKind.SWITCH`."""


def _service_of(words: list[str]) -> str | None:
    """The master name in Sentinel's instance format: ``master <name> <ip> <port>``, or
    ``<type> <name> <ip> <port> @ <master-name> <master-ip> <master-port>``."""
    if len(words) >= 2 and words[0] == "master":
        return words[1]
    if "@" in words:
        at = words.index("@")
        if at + 1 < len(words):
            return words[at + 1]
    return None


def event_of(channel: bytes | str, data: bytes | str, service: str) -> FailoverEvent | None:
    """The event a pub/sub message carries for master ``service``, or ``None``.

    Messages about other masters, on other channels, or malformed, give ``None``.
    """
    name = channel.decode(errors="replace") if isinstance(channel, bytes) else channel
    text = data.decode(errors="replace") if isinstance(data, bytes) else data
    words = text.split()
    if name == SWITCH_CHANNEL:
        if len(words) != 5 or words[0] != service:
            return None
        try:
            port = int(words[4])
        except ValueError:
            return None
        return FailoverEvent(EventKind.SWITCH, name, (words[3], port))
    if _service_of(words) != service:
        return None
    if name in START_CHANNELS:
        return FailoverEvent(EventKind.START, name)
    if name in ABORT_CHANNELS:
        return FailoverEvent(EventKind.ABORT, name)
    return None


@attrs.frozen
class Gate:
    """Which sentinels are failing our master over, and until when commands wait."""

    holders: frozenset[int] = frozenset()
    """Indexes of the sentinels whose failover started and has not ended."""
    deadline: float = math.inf
    """When the hold ends even without ``+switch-master`` (``inf`` when open)."""

    def holding(self, now: float) -> bool:
        """Whether commands must wait at ``now``."""
        return bool(self.holders) and now < self.deadline


OPEN = Gate()


@attrs.frozen
class Decision:
    """What to do after an event."""

    gate: Gate
    move_to: tuple[str, int] | None = None
    """Drop every connection and connect to this master (after ``+switch-master``)."""
    expired: bool = False
    """A hold ran out without a switch: drop the connections and resolve afresh."""


def on_event(gate: Gate, sentinel: int, event: FailoverEvent, now: float, hold: float) -> Decision:
    """The gate after ``event`` from sentinel number ``sentinel`` at ``now``.

    Args:
        gate: The gate before the event.
        sentinel: Which sentinel published it (its index).
        event: The event.
        now: The current time (``trio.current_time()``).
        hold: The longest hold in seconds; 0 never closes the gate.
    """
    if event.kind is EventKind.SWITCH:
        return Decision(OPEN, move_to=event.address)
    if event.kind is EventKind.ABORT:
        holders = gate.holders - {sentinel}
        return Decision(Gate(holders, gate.deadline) if holders else OPEN)
    if hold <= 0:
        return Decision(gate)
    if gate.holders and now >= gate.deadline:  # an expired hold restarts, not extends
        return Decision(Gate(frozenset({sentinel}), now + hold), expired=True)
    deadline = gate.deadline if gate.holders else now + hold
    return Decision(Gate(gate.holders | {sentinel}, deadline))


def on_deadline(gate: Gate, now: float) -> Decision:
    """The gate when its deadline may have passed: open, and resolve afresh, if so."""
    if gate.holders and now >= gate.deadline:
        return Decision(OPEN, expired=True)
    return Decision(gate)
