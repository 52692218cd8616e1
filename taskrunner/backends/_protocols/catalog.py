"""The task catalog protocol: serving runners say which tasks they serve.

Theory of operation. Each serving instance publishes one
:class:`~taskrunner._wire.CatalogDocument` under its ``host`` in its group's
catalog (``taskrunner:<group>:catalog``, a hash of host -> document on Redis)
when it starts, and again every :data:`~taskrunner._serve.catalog.PUBLISH_INTERVAL`
seconds, each time valid for :data:`~taskrunner._serve.catalog.CATALOG_TTL`;
it removes it when it stops. A document counts until its ``expires`` (the
backend's clock): a crashed instance's document stops counting by itself, and
the next publish by any instance deletes it. A producer created with
``strict=True`` reads the live documents to refuse names no runner serves and to
learn a task's settings (``taskrunner.producer``). Go runners publish nothing:
a strict producer sees Python runners only.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from taskrunner._wire import CatalogDocument


@runtime_checkable
class TaskCatalog(Protocol):
    """Where serving instances publish the tasks they serve (one document per host)."""

    async def publish_catalog(self, group: str, document: CatalogDocument, ttl: float) -> None:
        """Store ``document`` as its host's entry in the group's catalog, replacing the
        host's previous one, and delete every other host's entry whose ``expires``
        has passed (the backend's clock). The catalog itself is kept for at least
        ``ttl`` seconds from now (``ttl`` should reach past ``document.expires``).

        Cancellation: the document may have been stored; a repeat is harmless.
        """
        ...

    async def remove_catalog(self, group: str, host: str) -> None:
        """Delete the host's entry (nothing happens if there is none).

        Cancellation: the entry may have been deleted; a repeat is harmless.
        """
        ...

    async def read_catalog(self, group: str) -> list[CatalogDocument]:
        """The group's entries that still count (``expires`` after the backend's
        ``now()``), sorted by host. An entry that cannot be decoded (written by
        hand) is left out."""
        ...
