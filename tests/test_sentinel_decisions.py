"""The Sentinel client's pure parts: URL parsing, and what failover events mean."""

from __future__ import annotations

import math
import ssl

import pytest

from taskrunner.backends.redis._failover import (
    OPEN,
    EventKind,
    FailoverEvent,
    Gate,
    event_of,
    on_deadline,
    on_event,
)
from taskrunner.backends.redis._sentinel_config import (
    is_sentinel_url,
    parse_sentinel_url,
    redis_py_sentinel_options,
)


@pytest.mark.parametrize(
    ("url", "sentinels", "service", "db", "password"),
    [
        (
            "redis+sentinel://s1:26379,s2:26380,s3/mymaster/0",
            (("s1", 26379), ("s2", 26380), ("s3", 26379)),
            "mymaster",
            0,
            None,
        ),
        ("redis+sentinel://:secret@s1/cache/3", (("s1", 26379),), "cache", 3, "secret"),
        ("redis+sentinel://[::1]:5000/m", (("::1", 5000),), "m", 0, None),
        ("REDIS+SENTINEL://h:1/m%20x/2", (("h", 1),), "m x", 2, None),
    ],
)
def test_urls(
    url: str,
    sentinels: tuple[tuple[str, int], ...],
    service: str,
    db: int,
    password: str | None,
) -> None:
    sentinel, master = parse_sentinel_url(url)
    assert sentinel.sentinels == sentinels
    assert sentinel.service_name == service
    assert (master.db, master.password) == (db, password)
    assert sentinel.password is None  # the master's password is not the sentinels'
    assert sentinel.ssl_context is None
    assert master.ssl_context is None


def test_sentinel_options_are_their_own() -> None:
    sentinel, master = parse_sentinel_url(
        "redis+sentinel://u:pw@h/m?sentinel_password=spw&sentinel_username=su"
        "&sentinel_ssl=true&sentinel_ssl_cert_reqs=none&sentinel_timeout=0.2&failover_hold=3"
        "&connect_timeout=2"
    )
    assert (sentinel.username, sentinel.password) == ("su", "spw")
    assert (master.username, master.password) == ("u", "pw")
    assert isinstance(sentinel.ssl_context, ssl.SSLContext)
    assert sentinel.ssl_context.verify_mode == ssl.CERT_NONE
    assert master.ssl_context is None
    assert (sentinel.timeout, sentinel.failover_hold, master.connect_timeout) == (0.2, 3.0, 2.0)
    tls_sentinel, tls_master = parse_sentinel_url("rediss+sentinel://h/m?ssl_cert_reqs=none")
    assert tls_sentinel.ssl_context is None
    assert isinstance(tls_master.ssl_context, ssl.SSLContext)


def test_overrides_win() -> None:
    sentinel, master = parse_sentinel_url(
        "redis+sentinel://h/m?failover_hold=3", failover_hold=0, password="x"
    )
    assert (sentinel.failover_hold, master.password) == (0.0, "x")


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("redis://h:6379/0", "not a Sentinel URL"),
        ("redis+sentinel://h1,h2", "no service name"),
        ("redis+sentinel://h1,,h2/m", "an empty entry"),
        ("redis+sentinel://h:x/m", "port='x'"),
        ("redis+sentinel://h:0/m", "out of range"),
        ("redis+sentinel://h/m/0/1", "expected /service[/db]"),
        ("redis+sentinel://h/m/zero", "db='zero'"),
        ("redis+sentinel://h/m?sentinel_ssl=maybe", "sentinel_ssl='maybe'"),
        ("redis+sentinel://h/m?failover_hold=soon", "failover_hold='soon'"),
        ("redis+sentinel://h/m?ssl_cert_reqs=none", "need a rediss+sentinel://"),
        ("redis+sentinel://h/m?colour=blue", "unsupported Sentinel URL option: colour"),
        ("redis+sentinel://:pw@h", "***@h"),
    ],
)
def test_bad_urls(url: str, message: str) -> None:
    with pytest.raises(ValueError) as info:  # noqa: PT011 - the message is checked below
        parse_sentinel_url(url)
    assert message in str(info.value)
    assert "pw" not in str(info.value)


def test_the_producers_redis_py_arguments() -> None:
    sentinels, service, sentinel_kwargs, master_kwargs = redis_py_sentinel_options(
        "rediss+sentinel://u:pw@s1,s2:5000/cache/4?sentinel_password=spw&sentinel_ssl=yes"
        "&sentinel_ssl_cert_reqs=none&ssl_check_hostname=false&sentinel_timeout=0.25"
        "&connect_timeout=2&failover_hold=1"
    )
    assert sentinels == [("s1", 26379), ("s2", 5000)]
    assert service == "cache"
    assert sentinel_kwargs == {
        "socket_timeout": 0.25,
        "socket_connect_timeout": 0.25,
        "password": "spw",
        "ssl": True,
        "ssl_cert_reqs": "none",
    }
    assert master_kwargs == {
        "db": 4,
        "username": "u",
        "password": "pw",
        "socket_connect_timeout": 2.0,
        "ssl": True,
        "ssl_check_hostname": False,
    }
    plain = redis_py_sentinel_options("redis+sentinel://h/m")
    assert plain[2] == {"socket_timeout": 0.5, "socket_connect_timeout": 0.5}
    assert plain[3] == {"db": 0}
    with pytest.raises(ValueError, match="unsupported Sentinel URL option: colour"):
        redis_py_sentinel_options("redis+sentinel://h/m?colour=blue")


def test_is_sentinel_url() -> None:
    assert is_sentinel_url("redis+sentinel://h/m")
    assert is_sentinel_url("rediss+sentinel://h/m")
    assert not is_sentinel_url("redis://h")
    assert not is_sentinel_url("unix:///tmp/s")


@pytest.mark.parametrize(
    ("channel", "data", "expected"),
    [
        (b"+try-failover", b"master mymaster 127.0.0.1 6379", EventKind.START),
        (
            b"+selected-slave",
            b"slave 1.2.3.4:6380 1.2.3.4 6380 @ mymaster 1.2.3.4 6379",
            EventKind.START,
        ),
        (b"+promoted-slave", b"slave h:1 h 1 @ mymaster h 2", EventKind.START),
        (b"-failover-abort-not-elected", b"master mymaster 127.0.0.1 6379", EventKind.ABORT),
        (b"+failover-end-for-timeout", b"master mymaster h 1", EventKind.ABORT),
        (b"+switch-master", b"mymaster 127.0.0.1 6379 127.0.0.1 6380", EventKind.SWITCH),
        (b"+try-failover", b"master other 127.0.0.1 6379", None),  # another master
        (b"+selected-slave", b"slave h:1 h 1 @ other h 2", None),
        (b"+switch-master", b"other 127.0.0.1 6379 127.0.0.1 6380", None),
        (b"+switch-master", b"mymaster 127.0.0.1 6379 127.0.0.1", None),  # malformed
        (b"+switch-master", b"mymaster a 1 b port", None),
        (b"+sdown", b"master mymaster 127.0.0.1 6379", None),  # not a failover step
        (b"+try-failover", b"", None),
    ],
)
def test_events(channel: bytes, data: bytes, expected: EventKind | None) -> None:
    event = event_of(channel, data, "mymaster")
    assert (event.kind if event else None) == expected
    if expected is EventKind.SWITCH:
        assert event is not None
        assert event.address == ("127.0.0.1", 6380)


START = FailoverEvent(EventKind.START, "+try-failover")
ABORT = FailoverEvent(EventKind.ABORT, "-failover-abort-not-elected")
SWITCH = FailoverEvent(EventKind.SWITCH, "+switch-master", ("h", 2))


def test_a_failover_holds_until_the_switch() -> None:
    first = on_event(OPEN, 0, START, now=100.0, hold=10.0)
    assert first.gate == Gate(frozenset({0}), 110.0)
    assert first.gate.holding(100.5)
    later = on_event(first.gate, 0, FailoverEvent(EventKind.START, "+selected-slave"), 101.0, 10.0)
    assert later.gate.deadline == 110.0  # later steps do not extend the hold
    switched = on_event(later.gate, 1, SWITCH, 101.5, 10.0)  # any sentinel's switch
    assert switched.gate == OPEN
    assert switched.move_to == ("h", 2)
    assert not switched.gate.holding(101.5)


def test_a_losing_candidate_does_not_release_the_winner() -> None:
    gate = on_event(OPEN, 0, START, 100.0, 10.0).gate
    gate = on_event(gate, 1, START, 100.1, 10.0).gate
    assert gate.holders == {0, 1}
    lost = on_event(gate, 1, ABORT, 100.5, 10.0)
    assert lost.gate.holders == {0}
    assert lost.gate.holding(100.6)
    assert lost.move_to is None
    assert on_event(lost.gate, 0, ABORT, 101.0, 10.0).gate == OPEN


def test_the_hold_is_bounded() -> None:
    gate = on_event(OPEN, 0, START, 100.0, 10.0).gate
    assert on_deadline(gate, 109.9).gate == gate
    assert not on_deadline(gate, 109.9).expired
    expired = on_deadline(gate, 110.0)
    assert expired.gate == OPEN
    assert expired.expired  # resolve afresh
    assert not gate.holding(110.0)
    again = on_event(gate, 1, START, 111.0, 10.0)  # an event after the deadline: a new hold
    assert again.expired
    assert again.gate == Gate(frozenset({1}), 121.0)


def test_hold_zero_never_holds() -> None:
    assert on_event(OPEN, 0, START, 100.0, 0.0).gate == OPEN
    assert on_event(OPEN, 0, SWITCH, 100.0, 0.0).move_to == ("h", 2)
    assert OPEN.deadline == math.inf
    assert not OPEN.holding(1e12)
