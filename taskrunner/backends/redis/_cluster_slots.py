"""Which hash slot a command goes to on a Redis Cluster: pure functions, no I/O.

Theory of operation: a cluster splits the key space into :data:`HASH_SLOTS`
slots; a key's slot is the CRC16 (XMODEM, which is ``binascii.crc_hqx(key, 0)``)
of its hash tag, or of the whole key when it has none, modulo 16384. The hash
tag is what lies between the first ``{`` and the first ``}`` after it, when that
is not empty (so ``{}x``, ``{x`` and ``x}`` have none, and ``foo{}{bar}`` hashes
whole). Every key a command names must be in one slot (else the server answers
``CROSSSLOT``): :func:`command_slot` finds the keys of the commands our backend
and its operators send (:func:`command_keys`) and refuses a command whose keys
span slots before anything is sent, naming the command and the slots.

A command this table does not know is taken to name its key first, as most
Redis commands do: were that wrong, the server's ``MOVED`` reply corrects the
routing (a key-less command runs on any node, wherever it is sent). Commands
that cannot mean one node on a cluster (``SELECT``, a bare ``SCAN``,
transactions split over pipelines) are refused with
:class:`~._errors.ClusterCommandError`.
"""

from __future__ import annotations

import binascii
from collections.abc import Sequence

from ._connection import CommandArg
from ._errors import ClusterCommandError, CrossSlotError

HASH_SLOTS = 16384
"""Slots of a Redis Cluster; a key's slot is CRC16 of its hash tag modulo this."""


def _as_bytes(value: CommandArg) -> bytes:
    if isinstance(value, bytes):
        return value
    if isinstance(value, str):
        # A key with no UTF-8 form fails later at encoding, with its own error:
        # any slot will do until then.
        return value.encode(errors="surrogatepass")
    return repr(value).encode() if isinstance(value, float) else str(value).encode()


def hash_tag(key: bytes) -> bytes:
    """The part of ``key`` that is hashed: its hash tag if it has a non-empty one, else all."""
    start = key.find(b"{")
    if start == -1:
        return key
    end = key.find(b"}", start + 1)
    if end == -1 or end == start + 1:
        return key
    return key[start + 1 : end]


_SLOT_CACHE: dict[CommandArg, int] = {}
_SLOT_CACHE_SIZE = 8192


def key_slot(key: CommandArg) -> int:
    """The hash slot of ``key`` (``str`` keys as UTF-8, numbers as their decimal text)."""
    # Every command pays for this, and a fleet names the same few keys over and
    # over: a small cache (emptied when full) saves the encode, search and CRC.
    slot = _SLOT_CACHE.get(key)
    if slot is None:
        slot = binascii.crc_hqx(hash_tag(_as_bytes(key)), 0) % HASH_SLOTS
        if len(_SLOT_CACHE) >= _SLOT_CACHE_SIZE:
            _SLOT_CACHE.clear()
        _SLOT_CACHE[key] = slot
    return slot


def _name(arg: CommandArg) -> str:
    return (arg.decode(errors="replace") if isinstance(arg, bytes) else str(arg)).upper()


KEYLESS = frozenset(
    {
        "PING", "ECHO", "INFO", "TIME", "CLUSTER", "CLIENT", "COMMAND", "CONFIG",
        "SCRIPT", "FUNCTION", "DBSIZE", "LASTSAVE", "ROLE", "ASKING", "READONLY",
        "READWRITE", "HELLO", "AUTH", "QUIT", "MEMORY", "SLOWLOG", "LATENCY",
        "WAIT", "FLUSHDB", "FLUSHALL", "RANDOMKEY", "DEBUG", "ACL",
    }
)  # fmt: skip
"""Commands that name no key: they run on whichever master they are sent to."""

ALL_KEYS = frozenset({"DEL", "UNLINK", "EXISTS", "TOUCH", "MGET", "WATCH", "SINTER", "SUNION"})
"""Commands whose every argument is a key."""

KEY_AFTER_SUBCOMMAND = frozenset({"XINFO", "XGROUP", "OBJECT"})
"""Commands whose key follows a subcommand (``XINFO GROUPS <key>``)."""

NUMKEYS_AT_2 = frozenset({"EVAL", "EVALSHA", "EVAL_RO", "EVALSHA_RO", "FCALL", "FCALL_RO"})
"""Commands with ``numkeys`` at position 2 and that many keys after it."""

REFUSED = {
    "SELECT": "a cluster has only database 0",
    "SWAPDB": "a cluster has only database 0",
    "MOVE": "a cluster has only database 0",
    "SCAN": "a key-space walk must run on every master (use the client's masters())",
    "KEYS": "a key-space walk must run on every master (use the client's masters())",
    "MULTI": "a transaction cannot be split over nodes (use one Lua script)",
    "EXEC": "a transaction cannot be split over nodes (use one Lua script)",
    "DISCARD": "a transaction cannot be split over nodes (use one Lua script)",
    "SUBSCRIBE": "pub/sub is not routed by this client",
    "PSUBSCRIBE": "pub/sub is not routed by this client",
}
"""Commands refused on a cluster, with the reason given in the error."""


def _streams_keys(args: Sequence[CommandArg], name: str) -> Sequence[CommandArg]:
    """``XREAD``/``XREADGROUP``: the first half of the arguments after ``STREAMS``."""
    for at in range(1, len(args)):
        if isinstance(args[at], bytes | str) and _name(args[at]) == "STREAMS":
            rest = args[at + 1 :]
            if len(rest) % 2:
                raise ClusterCommandError(name, "STREAMS needs as many ids as keys")
            return rest[: len(rest) // 2]
    raise ClusterCommandError(name, "no STREAMS argument")


_KEYLESS, _REFUSED, _NUMKEYS, _STREAMS, _ALL, _PAIRS, _BLOCKING, _SUBCOMMAND, _FIRST = range(9)

FIRST_KEY = frozenset(
    {
        "GET", "SET", "INCR", "INCRBY", "DECR", "EXPIRE", "PEXPIRE", "PTTL", "TTL", "TYPE",
        "STRLEN", "HSET", "HGET", "HGETALL", "HDEL", "HLEN", "HINCRBY", "HMGET", "SADD", "SREM",
        "SMEMBERS", "SCARD", "ZADD", "ZREM", "ZCARD", "ZRANGE", "ZRANGEBYSCORE", "ZMSCORE",
        "ZSCORE", "LPUSH", "RPUSH", "LRANGE", "LTRIM", "LLEN", "XADD", "XACK", "XDEL", "XLEN",
        "XRANGE", "XREVRANGE", "XPENDING", "XCLAIM", "XAUTOCLAIM", "XTRIM", "BLMOVE",
    }
)  # fmt: skip
"""Common commands whose one key comes first (what an unknown command is taken to do)."""


def _rules() -> dict[CommandArg, int]:
    rules: dict[str, int] = {}
    for names, rule in (
        (KEYLESS, _KEYLESS), (REFUSED, _REFUSED), (NUMKEYS_AT_2, _NUMKEYS),
        (("XREADGROUP", "XREAD"), _STREAMS), (ALL_KEYS, _ALL), (("MSET", "MSETNX"), _PAIRS),
        (("BLPOP", "BRPOP", "BZPOPMIN", "BZPOPMAX"), _BLOCKING),
        (KEY_AFTER_SUBCOMMAND, _SUBCOMMAND), (FIRST_KEY, _FIRST),
    ):  # fmt: skip
        rules.update(dict.fromkeys(names, rule))
    # The first argument as sent, in either case and type, finds its rule in
    # one lookup (the hot path); any other spelling is upper-cased first.
    spelled: dict[CommandArg, int] = {}
    for name, rule in rules.items():
        for form in (name, name.lower()):
            spelled[form] = spelled[form.encode()] = rule
    return spelled


_RULES = _rules()


def command_keys(args: Sequence[CommandArg]) -> Sequence[CommandArg]:
    """The keys ``args`` (a command and its arguments) names, in order.

    Raises:
        ClusterCommandError: The command is refused on a cluster (see
            :data:`REFUSED`), or its arguments are malformed where the keys are.
    """
    if not args:
        raise ClusterCommandError("?", "an empty command")
    rule = _RULES.get(args[0])
    if rule is None:
        rule = _RULES.get(_name(args[0]), _FIRST)
    if rule == _FIRST:
        return args[1:2]
    if rule == _KEYLESS:
        return ()
    name = _name(args[0])
    if rule == _REFUSED:
        raise ClusterCommandError(name, REFUSED[name])
    if rule == _NUMKEYS:
        try:
            count = int(args[2])
        except (IndexError, ValueError):
            raise ClusterCommandError(name, "numkeys is missing or not a number") from None
        if count < 0 or len(args) < 3 + count:
            raise ClusterCommandError(name, f"numkeys {count} does not match the arguments")
        return args[3 : 3 + count]
    if rule == _STREAMS:
        return _streams_keys(args, name)
    if rule == _ALL:
        return args[1:]
    if rule == _PAIRS:
        return args[1::2]
    if rule == _BLOCKING:
        return args[1:-1]
    return args[2:3]  # _SUBCOMMAND


def command_slot(args: Sequence[CommandArg]) -> int | None:
    """The slot ``args`` must run on, or ``None`` for a command that names no key.

    Raises:
        CrossSlotError: Its keys hash to more than one slot; nothing may be sent.
        ClusterCommandError: As :func:`command_keys`.
    """
    keys = command_keys(args)
    if not keys:
        return None
    slot = key_slot(keys[0])
    if len(keys) > 1:
        for key in keys[1:]:
            if key_slot(key) != slot:
                slots = sorted({key_slot(k) for k in keys})
                raise CrossSlotError.of(_name(args[0]), slots)
    return slot
