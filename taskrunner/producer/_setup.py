"""What both producers make of their arguments: the core of a producer on a client, and
the client settings of a URL (:meth:`~taskrunner.producer.Producer.from_url`).

The producers differ only in the client classes they make from these (redis-py's or
redis.asyncio's), so the rules live here once: the key layout chosen for the client, the
timeouts set unless given, a Sentinel URL never a cluster, a cluster URL checked.
"""

from __future__ import annotations

from typing import Any

import attrs

from taskrunner._keys import KeyLayout
from taskrunner.backends.redis._sentinel_config import is_sentinel_url
from taskrunner.producer._core import (
    CONNECT_TIMEOUT,
    SOCKET_TIMEOUT,
    ProducerCore,
    check_cluster_url,
    is_cluster_client,
)
from taskrunner.producer._sharding import producer_layout


def producer_core(
    client: object,
    *,
    consumer_group: str,
    prefix: str | None,
    queue: str,
    strict: bool,
    key_layout: KeyLayout | None,
    shards: int | None,
) -> ProducerCore:
    """The core of a producer on ``client``, in the key layout its arguments and the
    client's kind choose (see :func:`~taskrunner.producer._sharding.producer_layout`).

    Raises:
        ValueError: a name is invalid, or ``shards`` is out of range or does not fit the
            layout.
    """
    return ProducerCore(
        consumer_group=consumer_group,
        prefix=prefix,
        queue=queue,
        strict=bool(strict),
        key_layout=producer_layout(key_layout, shards, prefix, cluster=is_cluster_client(client)),
        shards=shards,
    )


@attrs.frozen(kw_only=True)
class UrlSettings:
    """How ``from_url`` makes a producer's clients."""

    cluster: bool | None
    """A cluster client (``True``), a standalone or Sentinel one (``False``), or asked
    at the first call (``None``)."""
    options: dict[str, Any]
    """The client's options: those given, with the timeouts set unless given."""
    defaults: dict[str, Any]
    """The timeouts set unless given."""
    given: dict[str, Any]
    """The options as given (a Sentinel client tells them from the defaults)."""


def url_settings(url: str, cluster: bool | None, options: dict[str, Any]) -> UrlSettings:
    """The settings of the clients ``from_url(url, cluster=cluster, **options)`` makes.

    Raises:
        ValueError: ``cluster=True`` with a Sentinel URL.
        ClusterCommandError: ``cluster=True`` and a URL naming a database other than 0.
    """
    given = dict(options)
    options = {**options}
    options.setdefault("socket_connect_timeout", CONNECT_TIMEOUT)
    options.setdefault("socket_timeout", SOCKET_TIMEOUT)
    defaults = {"socket_connect_timeout": CONNECT_TIMEOUT, "socket_timeout": SOCKET_TIMEOUT}
    if is_sentinel_url(url):
        if cluster:
            raise ValueError("cluster=True with a Sentinel URL: Sentinel serves no cluster")
        cluster = False
    if cluster:
        check_cluster_url(url)
    return UrlSettings(cluster=cluster, options=options, defaults=defaults, given=given)
