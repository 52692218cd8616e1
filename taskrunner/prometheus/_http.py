"""The HTTP shell of :func:`serve_metrics`: a minimal HTTP/1.x server on
``trio.serve_tcp`` answering ``GET /metrics`` (and ``HEAD``), 404 elsewhere.

The answer to a request head is sans-io (:func:`answer`); the connection handling
around it bounds a request in size and time and closes every connection after one
response, so a stuck or hostile client costs one task for a few seconds.
"""

from __future__ import annotations

import logging
from functools import partial

import prometheus_client
import trio
from prometheus_client.registry import CollectorRegistry

from taskrunner._runner import TaskRunner
from taskrunner.prometheus._collector import RunnerCollector

log = logging.getLogger("taskrunner.prometheus")

MAX_REQUEST_BYTES = 8192
"""Longest request head (request line and headers) the server reads."""
REQUEST_TIMEOUT = 5.0
"""Seconds a client has to send its request head and read the answer."""


def _response(status: str, body: bytes, content_type: str, *, head: bool = False) -> bytes:
    headers = (
        f"HTTP/1.1 {status}\r\n"
        f"Content-Type: {content_type}\r\n"
        f"Content-Length: {len(body)}\r\n"
        "Connection: close\r\n\r\n"
    )
    return headers.encode("latin-1") + (b"" if head else body)


def answer(request_head: bytes, registry: CollectorRegistry) -> bytes:
    """The whole HTTP response to one request head (sans-io: no sockets here).

    ``GET``/``HEAD /metrics`` (any query string) -> 200 with the exposition;
    another path -> 404; another method -> 405; an unparsable head -> 400.
    """
    text_plain = "text/plain; charset=utf-8"
    line = request_head.split(b"\r\n", 1)[0]
    parts = line.split(b" ")
    if len(parts) != 3 or not parts[2].startswith(b"HTTP/"):
        return _response("400 Bad Request", b"bad request\n", text_plain)
    method, target = parts[0], parts[1]
    if method not in (b"GET", b"HEAD"):
        return _response("405 Method Not Allowed", b"method not allowed\n", text_plain)
    head = method == b"HEAD"
    if target.split(b"?", 1)[0] != b"/metrics":
        return _response("404 Not Found", b"not found; try /metrics\n", text_plain, head=head)
    body = prometheus_client.generate_latest(registry)
    return _response("200 OK", body, prometheus_client.CONTENT_TYPE_LATEST, head=head)


async def _read_head(stream: trio.abc.Stream) -> bytes | None:
    """The request head, or ``None`` if the client closed or sent too much."""
    data = b""
    while b"\r\n\r\n" not in data and b"\n\n" not in data:
        if len(data) > MAX_REQUEST_BYTES:
            return None
        chunk = await stream.receive_some(4096)
        if not chunk:
            return data or None
        data += chunk
    return data


async def _handle(stream: trio.SocketStream, registry: CollectorRegistry) -> None:
    try:
        with trio.move_on_after(REQUEST_TIMEOUT):
            head = await _read_head(stream)
            if head is None:
                response = _response(
                    "431 Request Header Fields Too Large", b"", "text/plain; charset=utf-8"
                )
            else:
                response = answer(head, registry)
            await stream.send_all(response)
    except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
        log.debug("metrics client went away: %r", exc)
    finally:
        with trio.move_on_after(1) as cleanup:
            cleanup.shield = True
            await stream.aclose()


async def serve_metrics(
    runner: TaskRunner,
    port: int,
    *,
    host: str = "127.0.0.1",
    registry: CollectorRegistry | None = None,
    refresh_interval: float = 5.0,
    task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve ``runner``'s metrics on ``http://host:port/metrics`` until cancelled.

    Creates a :class:`RunnerCollector` for ``runner``, registers it in
    ``registry`` (default: a fresh :class:`~prometheus_client.CollectorRegistry`;
    pass ``prometheus_client.REGISTRY`` to export the process metrics too),
    runs its updater and answers scrapes.

    Args:
        runner: The runner to export.
        port: TCP port; 0 picks a free one (reported through ``task_status``).
        host: Address to listen on; the default only accepts local scrapes.
        registry: Registry to serve, with the collector added to it.
        refresh_interval: Seconds between two refreshes of the backend snapshot.

    Returns:
        Never; it runs until cancelled.

    Raises:
        OSError: the port cannot be bound (before ``task_status.started``).

    Cancellation: stops listening, drops open scrape connections, removes
    the collector from a registry that was passed in and its observer from
    ``runner``.
    """
    # Bound here, before any task starts: a busy port is a plain OSError.
    listeners = await trio.open_tcp_listeners(port, host=host)
    try:
        collector = RunnerCollector(runner, refresh_interval=refresh_interval)
        served = CollectorRegistry() if registry is None else registry
        served.register(collector)
        try:
            async with trio.open_nursery() as nursery:
                await nursery.start(collector.run_updater)

                async def handler(stream: trio.SocketStream) -> None:
                    await _handle(stream, served)

                await nursery.start(partial(trio.serve_listeners, handler, listeners))
                real_port = listeners[0].socket.getsockname()[1]
                log.info("serving metrics on http://%s:%d/metrics", host, real_port)
                task_status.started(real_port)
        finally:
            served.unregister(collector)
            collector.close()
    finally:
        # serve_listeners closes them too; this covers a start cut short before it.
        for listener in listeners:
            await trio.aclose_forcefully(listener)
