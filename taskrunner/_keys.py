"""Every key name, built in one place (see docs/redis-key-layout.md).

Pure functions, no I/O. The in-memory backend uses the same names for its
shared state, so both backends can be inspected the same way. Unique-lock keys
(``taskrunner:unique:`` + the message's ``unique_key``) and the metrics fields
follow the Go library's documents, so they are built in :mod:`taskrunner._wire`.
"""

from __future__ import annotations

import base64
import hashlib

PREFIX = "taskrunner"


def stream(prefix: str, queue: str) -> str:
    """The main message stream: ``<prefix>:<queue>``."""
    return f"{prefix}:{queue}"


def dead_letter(prefix: str, queue: str) -> str:
    """The dead-letter stream: ``<prefix>:<queue>:dead``."""
    return f"{prefix}:{queue}:dead"


def claim_delay_ring(prefix: str, queue: str) -> str:
    """The claim-delay ring: ``ring:<prefix>:metrics:<queue>``."""
    return f"ring:{prefix}:metrics:{queue}"


def delayed_tasks(group: str) -> str:
    """The delayed-task ZSET: ``taskrunner:<group>:delayed_tasks``."""
    return f"{PREFIX}:{group}:delayed_tasks"


def metrics(group: str) -> str:
    """The timing-metrics hash: ``taskrunner:<group>:metrics``."""
    return f"{PREFIX}:{group}:metrics"


def worker_tuning_capacity(group: str) -> str:
    """The published pool capacity: ``taskrunner:<group>:worker_tuning_capacity``."""
    return f"{PREFIX}:{group}:worker_tuning_capacity"


def leader(group: str) -> str:
    """The leader lease: ``taskrunner:leader:<base32(sha1(group))>``.

    Standard base32 alphabet with ``=`` padding, as Go's ``base32.StdEncoding``.
    """
    digest = hashlib.sha1(group.encode()).digest()
    return f"{PREFIX}:leader:{base64.b32encode(digest).decode()}"


def replication(host: str) -> str:
    """An instance heartbeat: ``taskrunner:replication:<host>``."""
    return f"{PREFIX}:replication:{host}"


REPLICATION_PATTERN = f"{PREFIX}:replication:*"
"""``SCAN MATCH`` pattern for every heartbeat key."""
