"""The charts' geometry: a series of ``(unix seconds, value)`` points as an SVG polyline
over the last hour (pure). ``static/live.js`` does the same arithmetic in the browser
when a poll brings new points, so a chart looks the same before and after an update.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["HEIGHT", "SPAN", "WIDTH", "polyline", "top_of"]

WIDTH = 600
HEIGHT = 120
SPAN = 3600.0
"""Seconds a chart spans, ending at its newest point."""


def top_of(series: Sequence[Sequence[float]]) -> float:
    """The value at the top of the chart: the largest, at least 1."""
    return max([1.0, *(point[1] for point in series)])


def polyline(series: Sequence[Sequence[float]], *, span: float = SPAN) -> str:
    """The ``points`` attribute of the chart of ``series`` (oldest first): x is time
    within the ``span`` seconds up to the newest point, y the value from 0 up to
    :func:`top_of`, both scaled to :data:`WIDTH` x :data:`HEIGHT` and rounded to
    0.1, so only numbers are ever written into the SVG."""
    if not series:
        return ""
    end = series[-1][0]
    top = top_of(series)
    points = []
    for at, value in series:
        x = WIDTH * (1 - (end - at) / span)
        if x < 0:
            continue
        y = HEIGHT * (1 - max(0.0, value) / top)
        points.append(f"{x:.1f},{y:.1f}")
    return " ".join(points)
