"""Finding the master through the sentinels, and checking that it is one.

:meth:`MasterLocator.open_master` is the Sentinel client's connection opener:
ask the sentinels in order, each within ``SentinelConfig.timeout``, ``SENTINEL
get-master-addr-by-name`` (the one that answers moves to the front, as
Sentinel's client guidelines say); connect with the master's credentials; send
``ROLE`` and keep the connection only if it says ``master``, else ask again
(a sentinel that has not caught up with a failover still names the old
master). The last ``+switch-master`` the watcher saw is tried first, for the
same reason.
"""

from __future__ import annotations

import logging
from typing import Any

import attrs
import hiredis
import trio

from ._config import ConnectionConfig
from ._connection import open_connection, pack_command, read_replies, translate_errors
from ._errors import RedisConnectionError, ResponseError
from ._sentinel_config import SentinelConfig

log = logging.getLogger("taskrunner.backends.redis._sentinel")

ROLE_ATTEMPTS = 3
"""Resolutions tried by one connect while the named server says it is not the master."""
ROLE_RETRY_DELAY = 0.1
"""Seconds between those resolutions (the sentinels are catching up)."""


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class MasterLocator:
    """Finds the master through the sentinels, and remembers the last ``+switch-master``."""

    def __init__(self, config: SentinelConfig) -> None:
        self.config = config
        self.order = list(config.sentinels)
        self.switched_to: tuple[str, int] | None = None
        """The master named by the last ``+switch-master``: tried first, since a
        sentinel that has not heard of the switch yet still names the old one."""

    async def ask(self) -> tuple[str, int]:
        """The master's address, from the first sentinel that knows it.

        Raises:
            RedisConnectionError: No sentinel answered with an address.
        """
        problems: list[str] = []
        for host, port in list(self.order):
            try:
                address = await self._ask_one(host, port)
            except (RedisConnectionError, ResponseError) as exc:
                problems.append(f"{host}:{port}: {exc}")
                continue
            if address is None:
                problems.append(f"{host}:{port}: does not know {self.config.service_name!r}")
                continue
            if self.order[0] != (host, port):  # the one that answered goes first
                self.order.remove((host, port))
                self.order.insert(0, (host, port))
            return address
        raise RedisConnectionError(
            f"no sentinel named the master {self.config.service_name!r}: " + "; ".join(problems)
        )

    async def _ask_one(self, host: str, port: int) -> tuple[str, int] | None:
        stream, reader = await open_connection(self.config.connection_to(host, port))
        try:
            with translate_errors(f"asking sentinel {host}:{port}"):
                with trio.fail_after(self.config.timeout):
                    command = ("SENTINEL", "get-master-addr-by-name", self.config.service_name)
                    await stream.send_all(pack_command(command))
                    (reply,) = await read_replies(stream, reader, 1)
        finally:
            await trio.aclose_forcefully(stream)
        if isinstance(reply, ResponseError):
            raise reply
        if not reply:
            return None
        return (_text(reply[0]), int(reply[1]))

    async def open_master(self, config: ConnectionConfig) -> tuple[trio.abc.Stream, hiredis.Reader]:
        """Resolve, connect with ``config``'s credentials, and check ``ROLE`` says master.

        Raises:
            RedisConnectionError: No sentinel answered, the master is
                unreachable, or it still said it was not the master after
                :data:`ROLE_ATTEMPTS` resolutions.
            ResponseError: The master refused a set-up command (``AUTH``...).
        """
        role = "?"
        address: tuple[str, int] = ("?", 0)
        for attempt in range(ROLE_ATTEMPTS):
            if attempt:
                await trio.sleep(ROLE_RETRY_DELAY)
            hinted = self.switched_to
            address = hinted or await self.ask()
            try:
                stream, reader = await open_connection(
                    attrs.evolve(config, host=address[0], port=address[1])
                )
            except RedisConnectionError:
                if hinted is None:
                    raise
                self.switched_to = None  # the switch's master is gone too: ask the sentinels
                continue
            try:
                with translate_errors(f"checking ROLE of {address[0]}:{address[1]}"):
                    with trio.fail_after(config.connect_timeout):
                        await stream.send_all(pack_command(("ROLE",)))
                        (reply,) = await read_replies(stream, reader, 1)
            except BaseException:
                await trio.aclose_forcefully(stream)
                raise
            if isinstance(reply, ResponseError):
                await trio.aclose_forcefully(stream)
                raise reply
            role = _text(reply[0]) if reply else "?"
            if role == "master":
                return stream, reader
            await trio.aclose_forcefully(stream)
            if hinted is not None:
                self.switched_to = None
            log.info(
                "%s:%s named as master of %s says ROLE %s; resolving again",
                address[0],
                address[1],
                self.config.service_name,
                role,
            )
        raise RedisConnectionError(
            f"the master of {self.config.service_name!r} ({address[0]}:{address[1]}) "
            f"says ROLE {role}, after {ROLE_ATTEMPTS} resolutions"
        )
