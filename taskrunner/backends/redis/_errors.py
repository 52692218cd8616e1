"""Exceptions of the Redis connection layer.

Two families, both under :class:`~taskrunner.errors.BackendError`:

* :class:`RedisConnectionError` (and its :class:`RedisTimeoutError`): the
  conversation with the server broke. The request may or may not have run on
  the server; the next call reconnects.
* :class:`ResponseError` and its subclasses: the server answered with an error
  reply. The class is picked from the reply's first word (``NOGROUP``,
  ``BUSYGROUP``, ...) by :func:`error_from_reply`, never by matching the rest of
  the message, so callers can ``except NoGroupError`` safely.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from taskrunner.errors import BackendError


class RedisError(BackendError):
    """Root of the exceptions raised by the Redis connection layer."""


class RedisConnectionError(RedisError):
    """The connection to the server failed, was lost, or could not be opened.

    Every request pending on a connection fails with this when the connection
    breaks. Whether such a request ran on the server is unknown. The next call
    opens a new connection (after a backoff delay if connecting keeps failing).
    The underlying error, when there is one, is ``__cause__``.
    """


class RedisTimeoutError(RedisConnectionError):
    """Connecting, or waiting for a reply, took longer than the configured timeout.

    A reply that does not come in time leaves the connection unusable (later
    replies could no longer be matched to their requests), so the connection is
    closed and this is raised to every request pending on it.
    """


RETRYABLE_CODES = frozenset(
    {
        "LOADING",
        "BUSY",
        "READONLY",
        "OOM",
        "MISCONF",
        "TRYAGAIN",
        "CLUSTERDOWN",
        "MOVED",
        "ASK",
        "UNBLOCKED",
        "MASTERDOWN",
        "NOREPLICAS",
        "NOAUTH",
        "WRONGPASS",
        "NOPERM",
    }
)
"""Error codes about the server's state or configuration at the moment, which can
change (a restart, a failover, an operator): the same command may succeed later.
Every other code (``ERR``, ``WRONGTYPE``, ``NOGROUP``...) refuses the request for
what it asks, and repeating it cannot help."""


class ResponseError(RedisError):
    """The server answered a command with an error reply.

    Attributes:
        code: The first word of the error reply (``"ERR"``, ``"WRONGTYPE"``...).
        message: The full error text as the server sent it, code included.
        retryable: Whether ``code`` is one of :data:`RETRYABLE_CODES`.
    """

    #: The error code this class stands for; ``None`` on the generic base.
    CODE: ClassVar[str | None] = None

    def __init__(self, message: str) -> None:
        code = message.split(" ", 1)[0] if message else ""
        # An error reply: the server refused the command, so it did not apply
        # (a script may have done part of its work before raising, though).
        super().__init__(message, maybe_applied=False, retryable=code in RETRYABLE_CODES)
        self.message = message
        self.code = code

    def __reduce__(self) -> tuple[type[ResponseError], tuple[str]]:
        return (type(self), (self.message,))


class NoGroupError(ResponseError):
    """``NOGROUP``: the consumer group (or its stream) does not exist."""

    CODE = "NOGROUP"


class BusyGroupError(ResponseError):
    """``BUSYGROUP``: ``XGROUP CREATE`` for a group that already exists."""

    CODE = "BUSYGROUP"


class NoScriptError(ResponseError):
    """``NOSCRIPT``: ``EVALSHA`` of a script the server has not cached."""

    CODE = "NOSCRIPT"


class WrongTypeError(ResponseError):
    """``WRONGTYPE``: the command does not apply to the key's type."""

    CODE = "WRONGTYPE"


class BusyScriptError(ResponseError):
    """``BUSY``: a script or function is running too long on the server."""

    CODE = "BUSY"


class LoadingError(ResponseError):
    """``LOADING``: the server is loading its dataset and not serving yet."""

    CODE = "LOADING"


class ReadOnlyError(ResponseError):
    """``READONLY``: a write was sent to a replica."""

    CODE = "READONLY"


class OutOfMemoryError(ResponseError):
    """``OOM``: the server is over ``maxmemory`` and refuses writes."""

    CODE = "OOM"


class ExecAbortError(ResponseError):
    """``EXECABORT``: a ``MULTI`` block was discarded because of earlier errors."""

    CODE = "EXECABORT"


class AuthenticationError(ResponseError):
    """``WRONGPASS``/``NOAUTH``: authentication failed or is required."""

    CODE = "WRONGPASS"


class NoPermissionError(ResponseError):
    """``NOPERM``: the ACL user may not run this command or touch this key."""

    CODE = "NOPERM"


class CrossSlotError(ResponseError):
    """``CROSSSLOT``: the keys of one command hash to different cluster slots.

    The cluster client raises it before sending anything (the message names the
    command and the slots); a server's own ``CROSSSLOT`` reply maps here too.

    Attributes:
        command: The command's name, upper-case (empty for a server reply).
        slots: The slots its keys hash to (empty for a server reply).
    """

    CODE = "CROSSSLOT"

    def __init__(self, message: str, *, command: str = "", slots: tuple[int, ...] = ()) -> None:
        super().__init__(message)
        self.command = command
        self.slots = slots

    @classmethod
    def of(cls, command: str, slots: Sequence[int]) -> CrossSlotError:
        """The refusal of ``command`` whose keys hash to ``slots``."""
        shown = ", ".join(str(slot) for slot in slots)
        return cls(
            f"CROSSSLOT {command}: keys hash to slots {shown}; the keys of one command "
            "must share a hash tag on a cluster (nothing was sent)",
            command=command,
            slots=tuple(slots),
        )


class ClusterCommandError(RedisError):
    """A command that cannot run as asked on a Redis Cluster; nothing was sent.

    ``SELECT`` or a database other than 0, a bare ``SCAN`` (a walk must visit
    every master), ``MULTI``/``EXEC`` split over nodes, or malformed key
    arguments (``EVAL`` with a wrong ``numkeys``).

    Attributes:
        command: The command's name, upper-case.
        reason: Why it is refused.
    """

    def __init__(self, command: str, reason: str) -> None:
        super().__init__(
            f"{command} is refused on a Redis Cluster: {reason}",
            maybe_applied=False,
            retryable=False,
        )
        self.command = command
        self.reason = reason


_BY_CODE: dict[str, type[ResponseError]] = {
    cls.CODE: cls
    for cls in (
        NoGroupError,
        BusyGroupError,
        NoScriptError,
        WrongTypeError,
        BusyScriptError,
        LoadingError,
        ReadOnlyError,
        OutOfMemoryError,
        ExecAbortError,
        AuthenticationError,
        NoPermissionError,
        CrossSlotError,
    )
    if cls.CODE is not None
}
_BY_CODE["NOAUTH"] = AuthenticationError


def error_from_reply(message: str) -> ResponseError:
    """Build the exception for an error reply, its class chosen by the first word.

    Args:
        message: The error text as sent by the server (without the leading ``-``).

    Returns:
        An instance of the subclass registered for the first word, or of
        :class:`ResponseError` itself for codes without one (``ERR`` included).
    """
    code = message.split(" ", 1)[0]
    return _BY_CODE.get(code, ResponseError)(message)
