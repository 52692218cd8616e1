"""Lua scripts run by SHA, reloaded transparently when the server forgot them.

:class:`Script` computes the SHA1 locally and runs ``EVALSHA``; on a
``NOSCRIPT`` error reply (server restarted, ``SCRIPT FLUSH``, failover) it runs
the same call as ``EVAL``, which also caches the script again. It works with
any :class:`~._protocol.RedisClient` (or dedicated connection).

In a pipeline a ``NOSCRIPT`` cannot be retried in place without reordering
commands, so :meth:`Script.eval_command` gives an ``EVAL`` command (the server
compiles it once and then finds it in its cache; only the source bytes are
resent), and :meth:`Script.evalsha_command` an ``EVALSHA`` for callers who
load the script first and handle :class:`~._errors.NoScriptError` themselves.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from importlib import resources
from typing import Protocol

import attrs

from ._connection import CommandArg, Reply
from ._errors import NoScriptError


class _Executor(Protocol):
    async def execute(self, *args: CommandArg) -> Reply: ...


@attrs.frozen(init=False)
class Script:
    """A Lua script, identified by the SHA1 of its source.

    Args:
        source: The Lua source (``str`` is encoded as UTF-8).
    """

    source: bytes
    """The Lua source as sent to the server."""
    sha: str
    """Lower-case hex SHA1 of :attr:`source`, as ``SCRIPT LOAD`` returns it."""

    def __init__(self, source: str | bytes) -> None:
        raw = source.encode() if isinstance(source, str) else source
        self.__attrs_init__(source=raw, sha=hashlib.sha1(raw).hexdigest())

    async def __call__(
        self,
        client: _Executor,
        keys: Sequence[CommandArg] = (),
        args: Sequence[CommandArg] = (),
    ) -> Reply:
        """Run the script with ``EVALSHA``, falling back to ``EVAL`` on ``NOSCRIPT``.

        Returns:
            The script's reply, raw as for any command.

        Raises:
            ResponseError: The script raised (``ERR ... user_script...``) or
                returned an error; or another error reply.
            RedisConnectionError: As for the client's ``execute``.

        Cancellation: the script may have run (once; it is never run twice,
        since ``EVAL`` is only sent after the server said it lacked the
        script, i.e. did not run it).
        """
        try:
            return await client.execute(*self.evalsha_command(keys, args))
        except NoScriptError:
            return await client.execute(*self.eval_command(keys, args))

    async def load(self, client: _Executor) -> None:
        """Cache the script on the server with ``SCRIPT LOAD`` (for pipelined ``EVALSHA``)."""
        await client.execute("SCRIPT", "LOAD", self.source)

    def evalsha_command(
        self, keys: Sequence[CommandArg] = (), args: Sequence[CommandArg] = ()
    ) -> tuple[CommandArg, ...]:
        """The ``EVALSHA`` command for these keys and arguments (for pipelines)."""
        return ("EVALSHA", self.sha, len(keys), *keys, *args)

    def eval_command(
        self, keys: Sequence[CommandArg] = (), args: Sequence[CommandArg] = ()
    ) -> tuple[CommandArg, ...]:
        """The ``EVAL`` command for these keys and arguments (always works in a pipeline)."""
        return ("EVAL", self.source, len(keys), *keys, *args)


def load_script(name: str) -> Script:
    """The script ``lua/<name>`` shipped beside this module (read once, at import)."""
    return Script((resources.files("taskrunner.backends.redis") / "lua" / name).read_bytes())
