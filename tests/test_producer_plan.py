"""A producer's decisions before any I/O (taskrunner.producer._plan, pure): where tasks go,
which settings a dispatch carries, when a strict producer reads the catalog again."""

from __future__ import annotations

import dataclasses
import math

import attrs
import pytest

from taskrunner import TaskNotFound
from taskrunner._wire import CatalogDocument, CatalogTask
from taskrunner.backends.memory import MemoryBackend
from taskrunner.backends.redis import RedisBackend
from taskrunner.producer._plan import (
    CATALOG_CACHE,
    MISS_RECHECK,
    CatalogView,
    Destination,
    Settings,
    check_task_name,
    task_settings,
    wire_payload,
)

LAYOUTS = [
    ("shop", None, "tasks"),
    ("shop", None, "emails"),
    ("shop", "taskrunner", "tasks"),  # shared with a Go fleet
    ("billing", "orders", "high"),
]


@pytest.mark.parametrize(("group", "prefix", "queue"), LAYOUTS)
def test_the_stream_and_keys_are_the_backends(group: str, prefix: str | None, queue: str) -> None:
    destination = Destination(consumer_group=group, prefix=prefix, queue=queue)
    backend = RedisBackend.from_url("redis://127.0.0.1:1/0", prefix=prefix, queue=queue)
    assert destination.stream == backend.stream_keys(group).stream
    assert destination.stream == MemoryBackend(prefix=prefix, queue=queue).stream_keys(group).stream
    assert destination.delayed == f"taskrunner:{group}:delayed_tasks"
    assert destination.catalog == f"taskrunner:{group}:catalog"


@pytest.mark.parametrize(
    ("fields", "error", "match"),
    [
        ({"consumer_group": ""}, ValueError, "consumer_group must be a non-empty string"),
        ({"consumer_group": "my shop"}, ValueError, "without spaces"),
        ({"consumer_group": 7}, TypeError, "consumer_group must be a string"),
        ({"consumer_group": "leader"}, ValueError, "would put its stream among"),
        ({"consumer_group": "shop", "queue": "metrics"}, ValueError, "would collide"),
        ({"consumer_group": "shop", "queue": "catalog"}, ValueError, "would collide"),
        ({"consumer_group": "shop", "prefix": ""}, ValueError, "prefix must be a non-empty"),
    ],
)
def test_bad_names_are_refused(fields: dict[str, object], error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        Destination(**fields)  # type: ignore[arg-type]


@pytest.mark.parametrize("name", ["", "two words", "tab\there", 7, None, "\udc80"])
def test_bad_task_names_are_refused(name: object) -> None:
    with pytest.raises(ValueError, match="task name must be"):
        check_task_name(name)


@attrs.define
class Item:
    sku: str
    quantity: int


@dataclasses.dataclass
class Order:
    id: int
    items: list[Item]


@pytest.mark.parametrize(
    ("payload", "wire"),
    [
        (Item("a", 2), {"sku": "a", "quantity": 2}),
        (Order(1, [Item("a", 2)]), {"id": 1, "items": [{"sku": "a", "quantity": 2}]}),
        ({"w": 100}, {"w": 100}),
        ([1, 2], [1, 2]),
        (None, None),
        (Item, Item),  # a class is not an instance: sent as it is (and refused by JSON)
    ],
)
def test_typed_payloads_are_unstructured(payload: object, wire: object) -> None:
    assert wire_payload(payload) == wire


SHOP = Destination(consumer_group="shop")
OTHER_STREAM = "taskrunner:shop:emails"


def entry(name: str, **fields: object) -> CatalogTask:
    fields.setdefault("stream", SHOP.stream)
    fields.setdefault("reservation_timeout", 100.0)
    return CatalogTask(name=name, **fields)  # type: ignore[arg-type]


SETTINGS = [
    # (served, unique_key, unique_for) -> (unique, unique_for, message unique_key, reservation)
    (None, None, None, (False, 0.0, "", 0.0)),
    (None, "acct-1", 60, (True, 60.0, "sync:acct-1", 0.0)),
    (None, "", 60, (True, 60.0, "sync:sync", 0.0)),  # "" falls back to the name, as in Go
    (None, None, 30, (True, 30.0, "sync", 0.0)),  # unique per name
    ([entry("sync")], None, None, (False, 0.0, "", 100.0)),
    ([entry("sync", unique=True, unique_for=45.0)], None, None, (True, 45.0, "sync", 100.0)),
    (
        [entry("sync", unique=True, unique_for=45.0, keyed=True)],
        "acct-1",
        None,
        (True, 45.0, "sync:acct-1", 100.0),
    ),
    (
        [entry("sync", unique=True, unique_for=45.0, keyed=True)],
        "acct-1",
        5,
        (True, 5.0, "sync:acct-1", 100.0),
    ),
    ([entry("sync")], "acct-1", 5, (True, 5.0, "sync:acct-1", 100.0)),  # the call decides
    (
        [entry("sync", stream=OTHER_STREAM, reservation_timeout=1.0), entry("sync")],
        None,
        None,
        (False, 0.0, "", 100.0),
    ),
]


@pytest.mark.parametrize(("served", "unique_key", "unique_for", "expected"), SETTINGS)
def test_the_settings_a_dispatch_carries(
    served: list[CatalogTask] | None,
    unique_key: str | None,
    unique_for: float | None,
    expected: tuple[bool, float, str, float],
) -> None:
    settings = task_settings("sync", SHOP, served, unique_key=unique_key, unique_for=unique_for)
    assert isinstance(settings, Settings)
    got = (
        settings.task.unique,
        settings.task.unique_for,
        settings.unique_key,
        settings.task.reservation,
    )
    assert got == expected


@pytest.mark.parametrize(
    ("served", "unique_key", "unique_for", "error", "match"),
    [
        ([], None, None, TaskNotFound, "no live runner of group 'shop' serves task 'sync' on"),
        (
            [entry("sync", stream=OTHER_STREAM)],
            None,
            None,
            TaskNotFound,
            r"\(served on taskrunner:shop:emails\)",
        ),
        (None, "acct-1", None, ValueError, "unique_for is required with unique_key"),
        (None, None, 0, ValueError, "unique_for must be a finite number of seconds > 0, got 0"),
        (None, None, -1, ValueError, "unique_for must be"),
        (None, None, math.inf, ValueError, "unique_for must be"),
        (None, None, True, ValueError, "unique_for must be"),
        (None, 7, 60, ValueError, "unique_key must be a string"),
        (None, "\udc80", 60, ValueError, "unique_key must be a string of valid UTF-8 text"),
        (
            [entry("sync", unique=True, unique_for=45.0, keyed=True)],
            None,
            None,
            ValueError,
            "takes its unique key from a unique_key function of the payload",
        ),
        (
            [entry("sync", unique=True, unique_for=45.0, keyed=True)],
            None,
            10,
            ValueError,
            "pass unique_key=",
        ),
    ],
)
def test_what_a_dispatch_refuses(
    served: list[CatalogTask] | None,
    unique_key: object,
    unique_for: object,
    error: type[Exception],
    match: str,
) -> None:
    with pytest.raises(error, match=match):
        task_settings("sync", SHOP, served, unique_key=unique_key, unique_for=unique_for)  # type: ignore[arg-type]


def test_not_found_names_the_task() -> None:
    with pytest.raises(TaskNotFound) as info:
        task_settings("resize", SHOP, [])
    assert info.value.task_name == "resize"


def document(host: str, expires: float, *names: str) -> CatalogDocument:
    return CatalogDocument(
        host=host, instance=host, expires=expires, tasks=tuple(entry(n) for n in names)
    )


@pytest.mark.parametrize(
    ("age", "name", "expires", "read"),
    [
        (0.0, "resize", 1000.0, False),
        (CATALOG_CACHE - 0.1, "resize", 1000.0, False),
        (CATALOG_CACHE, "resize", 1000.0, True),  # too old
        (0.5, "missing", 1000.0, False),  # just read: refuse without reading again
        (MISS_RECHECK, "missing", 1000.0, True),  # a runner may have started since
        (MISS_RECHECK, "resize", 99.0, True),  # the only document expired: missing now
        (MISS_RECHECK, "resize", 1000.0, False),
    ],
)
def test_when_a_strict_producer_reads_the_catalog(
    age: float, name: str, expires: float, read: bool
) -> None:
    view = CatalogView((document("a", expires, "resize"),), read_at=50.0)
    assert view.needs_read(name, now=50.0 + age, wall=100.0) is read


def test_a_catalog_never_read_is_read() -> None:
    assert CatalogView().needs_read("resize", now=0.0, wall=0.0) is True


def test_served_entries_are_the_live_ones_by_host() -> None:
    view = CatalogView(
        (
            document("b", 200.0, "resize"),
            document("a", 200.0, "resize"),
            document("c", 50.0, "resize"),
        ),
        read_at=0.0,
    )
    assert view.served("resize", wall=100.0) == [entry("resize"), entry("resize")]
    assert view.served("email", wall=100.0) == []
