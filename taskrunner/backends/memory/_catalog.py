"""The task catalog in process memory, on trio's clock.

Modelled on the Redis hash ``taskrunner:<group>:catalog``: one encoded
document per host, and the key's own expiry, which each publish pushes out to
at least ``ttl`` from now. Documents count until their ``expires``; a publish
deletes the other hosts' documents that no longer count, as the Lua script
does on Redis, so inspection sees the same number of fields on both backends.
"""

from __future__ import annotations

import attrs
import trio

from taskrunner import _wire
from taskrunner._wire import CatalogDocument
from taskrunner.backends.memory._state import check_text
from taskrunner.errors import InvalidTaskPayload


@attrs.define
class _Catalog:
    documents: dict[str, bytes]
    """host -> the document as published."""
    until: float
    """When the whole key expires (trio's clock)."""


def _counts(raw: bytes, now: float) -> bool:
    try:
        return _wire.decode_catalog(raw).expires > now
    except InvalidTaskPayload:
        return False


class MemoryCatalog:
    """A :class:`~taskrunner.backends.TaskCatalog` held in process memory."""

    def __init__(self) -> None:
        self._catalogs: dict[str, _Catalog] = {}

    def _catalog(self, group: str) -> _Catalog | None:
        """The group's catalog while its key lives (expired ones vanish when looked at)."""
        catalog = self._catalogs.get(group)
        if catalog is not None and (catalog.until <= trio.current_time() or not catalog.documents):
            del self._catalogs[group]
            return None
        return catalog

    async def publish_catalog(self, group: str, document: CatalogDocument, ttl: float) -> None:
        await trio.lowlevel.checkpoint()
        check_text("publish_catalog", "host", document.host)
        raw = _wire.encode_catalog(document)
        now = trio.current_time()
        catalog = self._catalog(group) or self._catalogs.setdefault(group, _Catalog({}, now))
        catalog.documents[document.host] = raw
        for host, stored in list(catalog.documents.items()):
            if host != document.host and not _counts(stored, now):
                del catalog.documents[host]
        catalog.until = max(catalog.until, now + ttl)

    async def remove_catalog(self, group: str, host: str) -> None:
        await trio.lowlevel.checkpoint()
        check_text("remove_catalog", "host", host)
        catalog = self._catalog(group)
        if catalog is not None:
            catalog.documents.pop(host, None)
            self._catalog(group)  # an empty hash is no key, as on Redis

    async def read_catalog(self, group: str) -> list[CatalogDocument]:
        await trio.lowlevel.checkpoint()
        catalog = self._catalog(group)
        if catalog is None:
            return []
        now = trio.current_time()
        found = []
        for host in sorted(catalog.documents):
            try:
                document = _wire.decode_catalog(catalog.documents[host])
            except InvalidTaskPayload:
                continue
            if document.expires > now:
                found.append(document)
        return found

    def catalog_keep_result(self, group: str, name: str) -> float | None:
        """The ``keep_result`` the group's live catalog gives task ``name``
        (:func:`~taskrunner._wire.served_keep_result`), ``None`` if none."""
        catalog = self._catalog(group)
        if catalog is None:
            return None
        documents = []
        for raw in catalog.documents.values():
            try:
                documents.append(_wire.decode_catalog(raw))
            except InvalidTaskPayload:
                continue
        return _wire.served_keep_result(documents, name, trio.current_time())

    def catalog_size(self, group: str) -> tuple[int, float] | None:
        """``(fields, seconds left)`` of the group's catalog key, if it exists (for inspection)."""
        catalog = self._catalog(group)
        if catalog is None:
            return None
        return len(catalog.documents), catalog.until - trio.current_time()
