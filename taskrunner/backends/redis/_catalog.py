"""The :class:`~taskrunner.backends.TaskCatalog` on Redis: one hash per group.

Theory of operation. ``taskrunner:<group>:catalog`` maps each serving host to
its JSON document (:func:`taskrunner._wire.encode_catalog`), which carries its
own ``expires`` (unix seconds): a hash field has no expiry of its own before
Redis 7.4. A publish is one script call (``lua/publish_catalog.lua``) that sets
the host's field, deletes the fields that no longer count and pushes the hash's
expiry out, so the hash disappears once no instance publishes any more. A read
is one ``HGETALL``, filtered by this machine's clock: the fleet keeps its clocks
in step (NTP) for the delayed set already, and a document lives about three
publish intervals, so a clock a few seconds off changes nothing.
"""

from __future__ import annotations

import logging
import time

from taskrunner import _keys, _wire
from taskrunner._wire import CatalogDocument
from taskrunner.backends._key_layout import KeyLayoutHolder
from taskrunner.backends.redis._protocol import RedisClient
from taskrunner.backends.redis._scripts import load_script
from taskrunner.backends.redis._state import _float_arg, _ms
from taskrunner.errors import InvalidTaskPayload

__all__ = ["PUBLISH_CATALOG", "RedisCatalog", "live_documents"]

log = logging.getLogger(__name__)

PUBLISH_CATALOG = load_script("publish_catalog.lua")
"""Set a host's catalog document, drop those that no longer count, keep the hash alive."""


def live_documents(fields: dict[bytes, bytes], now: float) -> list[CatalogDocument]:
    """The documents of a catalog hash as read that count at ``now``, by host (pure).

    Fields that do not decode (set by hand) are skipped, and logged at debug level.
    """
    found = []
    for host in sorted(fields):
        try:
            document = _wire.decode_catalog(fields[host])
        except InvalidTaskPayload as exc:
            log.debug("skipping catalog entry %r: %s", host, exc)
            continue
        if document.expires > now:
            found.append(document)
    return found


class RedisCatalog(KeyLayoutHolder):
    """The task catalog half of the Redis backend (see the module docstring)."""

    _client: RedisClient

    async def publish_catalog(self, group: str, document: CatalogDocument, ttl: float) -> None:
        """Set the host's document and drop the others that no longer count: one script call.

        Cancellation: the document may have been stored; a repeat is harmless.
        """
        await PUBLISH_CATALOG(
            self._client,
            [_keys.catalog(group, self.key_layout)],
            [document.host, _wire.encode_catalog(document), _float_arg(time.time()), _ms(ttl)],
        )

    async def remove_catalog(self, group: str, host: str) -> None:
        """``HDEL`` the host's document (Redis deletes the hash with its last field)."""
        await self._client.execute("HDEL", _keys.catalog(group, self.key_layout), host)

    async def read_catalog(self, group: str) -> list[CatalogDocument]:
        """The documents that count now (this machine's clock), by host: one ``HGETALL``."""
        reply = await self._client.execute("HGETALL", _keys.catalog(group, self.key_layout))
        fields = {bytes(k): bytes(v) for k, v in zip(reply[::2], reply[1::2], strict=True)}
        return live_documents(fields, time.time())  # RedisState.now's clock
