"""Prometheus export of one runner: a collector and a small trio-native ``/metrics`` server.

Theory of operation. Prometheus calls :meth:`RunnerCollector.collect`
synchronously (from the scrape handler, or from a thread when a user serves
their registry with ``prometheus_client``'s own server), but most of what is
worth exporting lives in the backend and needs ``await``. So the collector
keeps an immutable :class:`Snapshot` of the backend-side numbers
(:class:`~taskrunner.Stats`, :class:`~taskrunner.backends.QueueMetrics`, the
replication count, the published ``desired_instances``) that
:meth:`RunnerCollector.run_updater` refreshes every ``refresh_interval``
seconds; ``collect`` only reads it, plus the runner's local state
(:meth:`~taskrunner.TaskRunner.statistics`, ``is_leader``), which is
synchronous and always current. A failed refresh is logged and the last
good snapshot stays; ``taskrunner_snapshot_age_seconds`` tells how old it is,
so a dashboard can tell stale numbers from live ones. The per-task duration
histogram is fed on the hot path by :meth:`~taskrunner.TaskRunner.add_observer`
(a bucket increment under a lock, nothing else).

:func:`serve_metrics` is the I/O shell the CLI uses (``taskrunner worker
--metrics-port``): the updater plus a minimal HTTP/1.x server on
``trio.serve_tcp`` answering ``GET /metrics`` (and ``HEAD``), 404 elsewhere.
Requests are bounded in size and time, and every connection is closed after
one response, so a stuck or hostile client costs one task for a few seconds.
"""

# Where things live: the collector and its updater in _collector, the families read from
# a snapshot in _families, the HTTP shell in _http (docs/reference/prometheus.md lists
# what the API reference shows, in this order).

from __future__ import annotations

from taskrunner.prometheus._collector import DURATION_BUCKETS, RunnerCollector
from taskrunner.prometheus._collector import REFRESH_TIMEOUT as REFRESH_TIMEOUT
from taskrunner.prometheus._families import Snapshot
from taskrunner.prometheus._http import MAX_REQUEST_BYTES as MAX_REQUEST_BYTES
from taskrunner.prometheus._http import REQUEST_TIMEOUT as REQUEST_TIMEOUT
from taskrunner.prometheus._http import answer as answer
from taskrunner.prometheus._http import serve_metrics

__all__ = [
    "DURATION_BUCKETS",
    "RunnerCollector",
    "Snapshot",
    "serve_metrics",
]
