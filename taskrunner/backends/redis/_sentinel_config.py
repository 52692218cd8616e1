"""Where the sentinels are and how to talk to them: :class:`SentinelConfig`, URL parsing.

A Sentinel deployment has two kinds of server with their own credentials and
TLS: the sentinels (asked where the master is, and watched for failovers) and
the data nodes (the master we send commands to). :class:`SentinelConfig` holds
the first; the master's side stays a :class:`~._config.ConnectionConfig`
whose ``host``/``port`` are filled in by each resolution. Parsing is pure and
table-tested.

URL form::

    redis+sentinel://[[user]:password@]host[:port][,host[:port]...]/service[/db][?options]
    rediss+sentinel://...   (TLS to the master)

The userinfo and ``ssl_*`` options are the master's. The sentinels' own are
``sentinel_username``, ``sentinel_password``, ``sentinel_ssl`` (``true`` for
TLS to the sentinels) and ``sentinel_ssl_*`` (``ca_certs``, ``certfile``,
``keyfile``, ``cert_reqs``, ``check_hostname``). ``sentinel_timeout`` (s) bounds
each question to one sentinel, ``failover_hold`` (s) how long writes wait
between a failover's first event and ``+switch-master``.
"""

from __future__ import annotations

import ssl
import urllib.parse
from typing import Any

import attrs

from ._config import ConnectionConfig, make_ssl_context

SCHEMES = ("redis+sentinel", "rediss+sentinel")
"""The URL schemes that mean "find the master through these sentinels"."""

DEFAULT_SENTINEL_PORT = 26379

_TLS_OPTIONS = ("ca_certs", "certfile", "keyfile", "cert_reqs", "check_hostname")
_MASTER_FLOATS = ("connect_timeout", "command_timeout", "backoff_base", "backoff_cap")
_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")


def _address(item: tuple[str, int]) -> tuple[str, int]:
    host, port = item
    return (str(host), int(port))


def _addresses(value: Any) -> tuple[tuple[str, int], ...]:
    return tuple(_address(item) for item in value)


def _not_empty(_instance: object, attribute: attrs.Attribute[Any], value: Any) -> None:
    if not value:
        raise ValueError(f"{attribute.name} must not be empty")


@attrs.frozen(kw_only=True)
class SentinelConfig:
    """The sentinels of one monitored master, and how to ask them."""

    sentinels: tuple[tuple[str, int], ...] = attrs.field(converter=_addresses, validator=_not_empty)
    """``(host, port)`` of every sentinel, asked in this order (one that answers
    moves to the front, as Sentinel's client guidelines say)."""
    service_name: str = attrs.field(validator=_not_empty)
    """The master's name in the sentinels' configuration (``sentinel monitor <name> ...``)."""
    username: str | None = None
    """ACL user for ``AUTH`` on the sentinels (not the master's)."""
    password: str | None = attrs.field(default=None, repr=False)
    """Password for ``AUTH`` on the sentinels; ``None``: the sentinels need none."""
    ssl_context: ssl.SSLContext | None = attrs.field(default=None, eq=False)
    """TLS to the sentinels; ``None``: plain TCP (the master's TLS is separate)."""
    timeout: float = attrs.field(default=0.5, validator=attrs.validators.gt(0))
    """Seconds one sentinel may take to connect and answer before the next is asked."""
    failover_hold: float = attrs.field(default=10.0, validator=attrs.validators.ge(0))
    """Longest that commands wait, from a failover's first event on a sentinel
    (``+try-failover``...), for ``+switch-master``; 0 turns holding off."""

    def connection_to(self, host: str, port: int) -> ConnectionConfig:
        """How to open a connection to the sentinel at ``host:port``."""
        return ConnectionConfig(
            host=host,
            port=port,
            username=self.username,
            password=self.password,
            ssl_context=self.ssl_context,
            connect_timeout=self.timeout,
            command_timeout=max(self.timeout, 1.0),
        )


def is_sentinel_url(url: str) -> bool:
    """Whether ``url`` names a master through sentinels (``redis+sentinel://...``)."""
    return url.partition("://")[0].lower() in SCHEMES


def _flag(name: str, value: str) -> bool:
    lowered = value.lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise ValueError(f"Sentinel URL option {name}={value!r}: expected true or false")


def _number(name: str, value: str, *, integer: bool = False) -> float:
    try:
        return int(value) if integer else float(value)
    except ValueError:
        kind = "an integer" if integer else "a number"
        raise ValueError(f"Sentinel URL option {name}={value!r}: expected {kind}") from None


def _parse_hosts(netloc: str) -> tuple[tuple[str, int], ...]:
    hosts: list[tuple[str, int]] = []
    for part in netloc.split(","):
        if not part:
            raise ValueError(f"Sentinel URL host list {netloc!r}: an empty entry")
        if part.startswith("["):  # [ipv6]:port
            host, _, rest = part[1:].partition("]")
            port_text = rest.removeprefix(":")
        else:
            host, _, port_text = part.rpartition(":") if ":" in part else (part, "", "")
        if not host:
            raise ValueError(f"Sentinel URL host {part!r}: no host name")
        port = int(_number("port", port_text, integer=True)) if port_text else DEFAULT_SENTINEL_PORT
        if not 0 < port < 65536:
            raise ValueError(f"Sentinel URL host {part!r}: port {port} out of range")
        hosts.append((host, port))
    return tuple(hosts)


def parse_sentinel_url(url: str, **overrides: Any) -> tuple[SentinelConfig, ConnectionConfig]:
    """Split a ``redis+sentinel://`` URL into the sentinels' and the master's settings.

    Args:
        url: See the module docstring for the form and the options.
        overrides: Keyword options that win over the URL: the master's
            :class:`~._config.ConnectionConfig` fields (``password``,
            ``ssl_context``, ``connect_timeout``...) and the sentinels' as
            ``sentinel_password``, ``sentinel_ssl_context``, ``sentinel_timeout``...

    Returns:
        The sentinels' configuration, and the master's connection settings
        (``host``/``port`` are placeholders, replaced at each resolution).

    Raises:
        ValueError: Another scheme, no service name, a bad host, db or option.
    """
    split = urllib.parse.urlsplit(url)
    scheme = split.scheme.lower()
    if scheme not in SCHEMES:
        raise ValueError(f"not a Sentinel URL (expected redis+sentinel://...): scheme {scheme!r}")
    userinfo, at, hostlist = split.netloc.rpartition("@")
    if not at:
        userinfo, hostlist = "", split.netloc
    segments = [urllib.parse.unquote(s) for s in split.path.split("/") if s]
    if not segments:
        raise ValueError(f"Sentinel URL {_redacted(url)!r}: no service name (…/mymaster/0)")
    if len(segments) > 2:
        raise ValueError(f"Sentinel URL path {split.path!r}: expected /service[/db]")
    options: dict[str, Any] = {k: v for k, v in urllib.parse.parse_qsl(split.query)}
    options.update(overrides)
    master: dict[str, Any] = {}
    if userinfo:
        user, colon, password = userinfo.partition(":")
        if colon:
            master["password"] = urllib.parse.unquote(password)
        if user:
            master["username"] = urllib.parse.unquote(user)
    if len(segments) == 2:
        master["db"] = int(_number("db", segments[1], integer=True))
    sentinel: dict[str, Any] = {
        "sentinels": _parse_hosts(hostlist),
        "service_name": segments[0],
    }
    sentinel_tls: dict[str, Any] = {}
    master_tls: dict[str, Any] = {}
    sentinel_ssl: bool | None = None
    for name, value in options.items():
        if name in ("sentinel_username", "sentinel_password", "sentinel_ssl_context"):
            sentinel[name.removeprefix("sentinel_")] = value
        elif name in ("sentinel_timeout", "failover_hold"):
            key = "timeout" if name == "sentinel_timeout" else name
            sentinel[key] = _number(name, value) if isinstance(value, str) else float(value)
        elif name == "sentinel_ssl":
            sentinel_ssl = _flag(name, value) if isinstance(value, str) else bool(value)
        elif name.startswith("sentinel_ssl_") and name[13:] in _TLS_OPTIONS:
            sentinel_tls["ssl_" + name[13:]] = value
        elif name.startswith("ssl_") and name[4:] in _TLS_OPTIONS:
            master_tls[name] = value
        elif name in _MASTER_FLOATS:
            master[name] = _number(name, value) if isinstance(value, str) else float(value)
        elif name in ("username", "password", "client_name", "ssl_context"):
            master[name] = value
        elif name == "db":
            number = _number(name, value, integer=True) if isinstance(value, str) else value
            master["db"] = int(number)
        else:
            raise ValueError(f"unsupported Sentinel URL option: {name}")
    if sentinel_tls and sentinel_ssl is False:
        raise ValueError(f"sentinel_ssl_* options with sentinel_ssl=false: {sorted(sentinel_tls)}")
    if (sentinel_ssl or sentinel_tls) and "ssl_context" not in sentinel:
        sentinel["ssl_context"] = make_ssl_context(**sentinel_tls)
    if scheme == "rediss+sentinel":
        if "ssl_context" not in master:
            master["ssl_context"] = make_ssl_context(**master_tls)
    elif master_tls:
        raise ValueError(f"ssl_* options need a rediss+sentinel:// URL: {sorted(master_tls)}")
    return SentinelConfig(**sentinel), ConnectionConfig(**master)


def _redacted(url: str) -> str:
    split = urllib.parse.urlsplit(url)
    _, at, hosts = split.netloc.rpartition("@")
    return split._replace(netloc=f"***@{hosts}" if at else split.netloc).geturl()


def redis_py_sentinel_options(
    url: str,
) -> tuple[list[tuple[str, int]], str, dict[str, Any], dict[str, Any]]:
    """The same ``redis+sentinel://`` URL as arguments of redis-py's ``Sentinel``.

    For the producers, which run on redis-py: ``Sentinel(sentinels,
    sentinel_kwargs=sentinel_kwargs, **master_kwargs).master_for(service_name)``.
    Every option is checked as :func:`parse_sentinel_url` checks it; TLS options
    are passed on as redis-py's ``ssl_*`` keywords (``sentinel_ssl_*`` to the
    sentinels' ``sentinel_kwargs``). ``failover_hold`` has no redis-py
    counterpart and is not passed on.

    Returns:
        ``(sentinels, service_name, sentinel_kwargs, master_kwargs)``.

    Raises:
        ValueError: As :func:`parse_sentinel_url`.
    """
    sentinel, master = parse_sentinel_url(url)
    split = urllib.parse.urlsplit(url)
    query = dict(urllib.parse.parse_qsl(split.query))
    master_kwargs: dict[str, Any] = {"db": master.db}
    for name in ("username", "password", "client_name"):
        if getattr(master, name) is not None:
            master_kwargs[name] = getattr(master, name)
    if "connect_timeout" in query:
        master_kwargs["socket_connect_timeout"] = master.connect_timeout
    if "command_timeout" in query:
        master_kwargs["socket_timeout"] = master.command_timeout
    sentinel_kwargs: dict[str, Any] = {
        "socket_timeout": sentinel.timeout,
        "socket_connect_timeout": sentinel.timeout,
    }
    if sentinel.username is not None:
        sentinel_kwargs["username"] = sentinel.username
    if sentinel.password is not None:
        sentinel_kwargs["password"] = sentinel.password
    for prefix, kwargs, tls in (
        ("ssl_", master_kwargs, master.ssl_context is not None),
        ("sentinel_ssl_", sentinel_kwargs, sentinel.ssl_context is not None),
    ):
        if not tls:
            continue
        kwargs["ssl"] = True
        for option in _TLS_OPTIONS:
            value = query.get(prefix + option)
            if value is not None:
                kwargs["ssl_" + option] = (
                    _flag(prefix + option, value) if option == "check_hostname" else value
                )
    return list(sentinel.sentinels), sentinel.service_name, sentinel_kwargs, master_kwargs
