"""Calling user hooks: plain or async, never fatal to the runner."""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable
from typing import Any

Hook = Callable[..., Any]
"""A user callback; it may return an awaitable, which is awaited."""

log = logging.getLogger(__name__)


async def call_hook(hook: Hook, *args: Any) -> Any:
    """Call ``hook(*args)`` and await its result if it is awaitable.

    Exceptions propagate; see :func:`call_hook_safely` for the never-fatal variant.
    """
    result = hook(*args)
    if inspect.isawaitable(result):
        result = await result
    return result


async def call_hook_safely(name: str, hook: Hook | None, *args: Any) -> None:
    """Call a reporting hook; log (never raise) what it raises.

    Cancellation passes through untouched: it is not the hook's error.
    """
    if hook is None:
        return
    try:
        await call_hook(hook, *args)
    except Exception:
        log.exception("%s hook %r raised; ignoring it", name, hook)
