"""Contract checks of the TaskCatalog protocol: publish, read back, expiry, removal."""

from __future__ import annotations

import trio

from taskrunner import _keys
from taskrunner._dispatch.guards import implements_inspection
from taskrunner._wire import CatalogDocument, CatalogTask
from taskrunner.backends._protocols import Backend
from taskrunner.testing._harness import _contract_check, _name, _within


def _document(
    backend: Backend, host: str, group: str, *names: str, lasts: float
) -> CatalogDocument:
    stream = backend.stream_keys(group).stream
    return CatalogDocument(
        host=host,
        instance=f"instance-of-{host}",
        expires=backend.now() + lasts,
        tasks=tuple(
            CatalogTask(
                name=name,
                stream=stream,
                reservation_timeout=10.0,
                unique=name.startswith("u"),
                unique_for=60.0 if name.startswith("u") else 0.0,
                keyed=name.startswith("uk"),
                keep_result=3600.0 if name.startswith("r") else None,
            )
            for name in names
        ),
    )


@_contract_check
async def check_catalog(backend: Backend) -> None:
    """Each host's document is read back as published, replaced by its next publish,
    sorted by host, per group, until removed."""
    group, other = _name("group"), _name("group")
    a, b = _name("a"), _name("b")
    a, b = sorted([a, b])
    assert await backend.read_catalog(group) == [], "a new group's catalog is empty"
    first = _document(backend, a, group, "resize", "ukey", "unamed", "report", lasts=30.0)
    await backend.publish_catalog(group, first, 30.0)
    found = await backend.read_catalog(group)
    assert found == [first], f"read_catalog must give the published document, got {found!r}"
    second = _document(backend, b, group, "resize", lasts=30.0)
    await backend.publish_catalog(group, second, 30.0)
    found = await backend.read_catalog(group)
    assert found == [first, second], f"one document per host, by host: got {found!r}"
    again = _document(backend, a, group, "email", lasts=30.0)
    await backend.publish_catalog(group, again, 30.0)
    found = await backend.read_catalog(group)
    assert found == [again, second], f"a host's publish replaces its document: got {found!r}"
    assert await backend.read_catalog(other) == [], "the catalog is per group"
    await backend.remove_catalog(group, a)
    assert await backend.read_catalog(group) == [second], "remove deletes that host's only"
    await backend.remove_catalog(group, a)  # harmless when gone
    await backend.remove_catalog(other, b)  # and in another group
    assert await backend.read_catalog(group) == [second], "removal is per group and host"
    await backend.remove_catalog(group, b)
    assert await backend.read_catalog(group) == [], "every document removed"


@_contract_check
async def check_catalog_expiry(backend: Backend) -> None:
    """A document stops counting at its ``expires``; the next publish deletes it, and a
    short ``ttl`` never cuts another host's document short."""
    group = _name("group")
    lasting, brief = sorted([_name("lasting"), _name("brief")])
    start = trio.current_time()
    long_lived = _document(backend, lasting, group, "resize", lasts=5.0)
    await backend.publish_catalog(group, long_lived, 5.0)
    short_lived = _document(backend, brief, group, "resize", lasts=0.3)
    await backend.publish_catalog(group, short_lived, 0.3)
    await trio.sleep(0.1)
    found = await backend.read_catalog(group)
    _within(start, 0.3)
    assert found == [long_lived, short_lived], f"both count before 0.3 s: got {found!r}"
    await trio.sleep(0.4)
    found = await backend.read_catalog(group)
    assert found == [long_lived], (
        f"after 0.5 s only the 5 s document counts (the 0.3 s ttl must not cut it): got {found!r}"
    )
    await backend.publish_catalog(group, long_lived, 5.0)
    if implements_inspection(backend):
        keys = {key.name: key for key in await backend.list_keys(group)}
        catalog = keys.get(_keys.catalog(group))
        assert catalog is not None, "a catalog with a document is a key"
        assert catalog.size == 1, (
            f"a publish deletes the documents that no longer count: {catalog.size} left"
        )
    await backend.remove_catalog(group, lasting)
    if implements_inspection(backend):
        names = [key.name for key in await backend.list_keys(group)]
        assert _keys.catalog(group) not in names, "a catalog with no document is no key"
