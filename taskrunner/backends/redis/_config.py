"""Where and how to connect: :class:`ConnectionConfig`, URL parsing, reconnect backoff.

URLs are parsed by redis-py's own parser (:func:`redis.connection.parse_url`)
so that every URL redis-py accepts means the same thing here. The backoff rule
is a pure function of the failure count and a random number, tested with
tables.
"""

from __future__ import annotations

import ssl
from typing import Any

import attrs
from redis.connection import SSLConnection, UnixDomainSocketConnection, parse_url

# URL query options understood on top of redis-py's, mapped to config fields.
_SSL_CERT_REQS = {
    "none": ssl.CERT_NONE,
    "optional": ssl.CERT_OPTIONAL,
    "required": ssl.CERT_REQUIRED,
}


@attrs.frozen(kw_only=True)
class ConnectionConfig:
    """Everything needed to open (and reopen) one connection to the server."""

    host: str = "127.0.0.1"
    """TCP host; ignored when :attr:`path` is set."""
    port: int = attrs.field(default=6379, validator=attrs.validators.ge(0))
    """TCP port; ignored when :attr:`path` is set."""
    path: str | None = None
    """Unix socket path; when set, TCP settings are not used."""
    db: int = attrs.field(default=0, validator=attrs.validators.ge(0))
    """Database index selected with ``SELECT`` after connecting (skipped when 0)."""
    username: str | None = None
    """ACL user for ``AUTH``; ``None`` authenticates as the default user."""
    password: str | None = attrs.field(default=None, repr=False)
    """Password for ``AUTH``; no ``AUTH`` is sent when ``None``."""
    client_name: str | None = None
    """Name set with ``CLIENT SETNAME`` after connecting (shows in ``CLIENT LIST``)."""
    ssl_context: ssl.SSLContext | None = attrs.field(default=None, eq=False)
    """TLS context; when set, the connection is wrapped in :class:`trio.SSLStream`."""
    connect_timeout: float = attrs.field(default=5.0, validator=attrs.validators.gt(0))
    """Seconds allowed for TCP/TLS set-up plus AUTH/SELECT/SETNAME."""
    command_timeout: float = attrs.field(default=30.0, validator=attrs.validators.gt(0))
    """Seconds a pending request may go without any reply data arriving before
    its connection is declared dead (blocking commands pass their own timeout)."""
    backoff_base: float = attrs.field(default=0.05, validator=attrs.validators.ge(0))
    """First reconnect delay after a failed connect attempt, in seconds."""
    backoff_cap: float = attrs.field(default=2.0, validator=attrs.validators.ge(0))
    """Largest reconnect delay, in seconds."""

    @classmethod
    def from_url(cls, url: str, **overrides: Any) -> ConnectionConfig:
        """Parse ``redis://``, ``rediss://`` or ``unix://`` URLs.

        Forms: ``redis://[[user]:password@]host[:port][/db]``,
        ``rediss://...`` (TLS), ``unix:///path/to/socket?db=N``. Query options
        ``client_name``, ``ssl_ca_certs``, ``ssl_certfile``, ``ssl_keyfile``,
        ``ssl_cert_reqs`` (``none``/``optional``/``required``) and
        ``ssl_check_hostname`` are understood; keyword ``overrides`` win over
        the URL (e.g. ``ssl_ca_certs=...`` or a ready ``ssl_context=...``).

        Raises:
            ValueError: The URL has another scheme or an invalid option.
        """
        parsed: dict[str, Any] = dict(parse_url(url))  # type: ignore[no-untyped-call]
        parsed.update(overrides)
        connection_class = parsed.pop("connection_class", None)
        fields: dict[str, Any] = {}
        if connection_class is UnixDomainSocketConnection:
            fields["path"] = parsed.pop("path")
        else:
            fields["host"] = parsed.pop("host", "127.0.0.1")
            fields["port"] = int(parsed.pop("port", 6379))
        for name in ("username", "password", "client_name", "ssl_context"):
            if name in parsed:
                fields[name] = parsed.pop(name)
        for name in ("db",):
            if name in parsed:
                fields[name] = int(parsed.pop(name))
        for name in ("connect_timeout", "command_timeout", "backoff_base", "backoff_cap"):
            if name in parsed:
                fields[name] = float(parsed.pop(name))
        tls_options = {k: parsed.pop(k) for k in list(parsed) if k.startswith("ssl_")}
        if connection_class is SSLConnection and "ssl_context" not in fields:
            fields["ssl_context"] = make_ssl_context(**tls_options)
        elif tls_options:
            raise ValueError(f"ssl_* options need a rediss:// URL: {sorted(tls_options)}")
        if parsed:
            raise ValueError(f"unsupported Redis URL option(s): {sorted(parsed)}")
        return cls(**fields)


def make_ssl_context(
    *,
    ssl_ca_certs: str | None = None,
    ssl_certfile: str | None = None,
    ssl_keyfile: str | None = None,
    ssl_cert_reqs: str | int = "required",
    ssl_check_hostname: bool | str = True,
) -> ssl.SSLContext:
    """A client TLS context: default trust store or ``ssl_ca_certs``, optional client cert."""
    context = ssl.create_default_context(cafile=ssl_ca_certs)
    if isinstance(ssl_check_hostname, str):
        ssl_check_hostname = ssl_check_hostname.lower() not in ("0", "false", "no")
    context.check_hostname = ssl_check_hostname
    if isinstance(ssl_cert_reqs, str):
        ssl_cert_reqs = _SSL_CERT_REQS[ssl_cert_reqs.lower()]
    if ssl_cert_reqs == ssl.CERT_NONE:
        context.check_hostname = False
    context.verify_mode = ssl.VerifyMode(ssl_cert_reqs)
    if ssl_certfile:
        context.load_cert_chain(ssl_certfile, ssl_keyfile)
    return context


def reconnect_delay(failures: int, *, base: float, cap: float, jitter: float) -> float:
    """Seconds to wait before the next connect attempt ("equal jitter" backoff).

    Args:
        failures: Consecutive failed attempts so far; 0 means connect at once.
        base: Delay after the first failure, before jitter.
        cap: Largest delay, before jitter.
        jitter: A random number in ``[0, 1)``; the delay is scaled into
            ``[0.5, 1)`` of the exponential value so that many clients
            reconnecting at once spread out.
    """
    if failures <= 0:
        return 0.0
    exponential = min(cap, base * 2.0 ** min(failures - 1, 32))
    return exponential * (0.5 + jitter / 2.0)
