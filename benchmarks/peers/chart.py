"""Render the peers results: ``results.md`` (the facts and the table) and the chart
``docs/images/peers.svg``, both from ``results.json``.

    python benchmarks/peers/chart.py [--results results.json]

The chart puts every system on the same yardstick, the Redis ceiling that
``redis-benchmark`` measured in the same run: bulk enqueue and processing as a
fraction of pipelined XADD (-P16), per-task enqueue as a fraction of XADD from
50 clients, and Redis CPU per task as what one bare XADD costs divided by what
the system spends per task. 1 is the ceiling; the axis is logarithmic since
the systems lie decades apart.

The SVG is written here, by hand, rather than with matplotlib: that would be a
dependency for one picture, and its output embeds a date and random ids, so
every render would differ; this one changes only when the numbers do.
"""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any
from xml.sax.saxutils import escape

from _report import facts_markdown, rounds, server_name, short_label, table_markdown

HERE = Path(__file__).resolve().parent
SVG = HERE.parent.parent / "docs" / "images" / "peers.svg"
MARKDOWN = HERE / "results.md"

Ratio = Callable[[dict[str, Any], dict[str, float]], float | None]


def _bulk(median: dict[str, Any], ceiling: dict[str, float]) -> float | None:
    bulk = median["bulk"]
    return bulk["enqueue_per_s"] / ceiling["xadd_p16_per_s"] if bulk else None


def _each(median: dict[str, Any], ceiling: dict[str, float]) -> float | None:
    return float(median["each"]["enqueue_per_s"] / ceiling["xadd_c50_per_s"])


def _process(median: dict[str, Any], ceiling: dict[str, float]) -> float | None:
    return float(median["each"]["process_per_s"] / ceiling["xadd_p16_per_s"])


def _cpu(median: dict[str, Any], ceiling: dict[str, float]) -> float | None:
    return float(ceiling["xadd_p16_cpu_us"] / median["each"]["redis_cpu_us_per_task"])


PANELS: list[tuple[str, Ratio, str]] = [
    ("Bulk enqueue ÷ XADD -P16", _bulk, "no bulk call"),
    ("Per-task enqueue ÷ XADD -c 50", _each, ""),
    ("Processing ÷ XADD -P16", _process, ""),
    ("XADD's Redis CPU ÷ Redis CPU per task", _cpu, ""),
]
"""Each panel: its title, the ratio it draws, and what to say where there is none."""

WIDTH = 820
LABEL_RIGHT = 250
PLOT_LEFT, PLOT_RIGHT = 260, 760
ROW, BAR = 22, 14
OURS, PEER, INK, GRID = "#3949ab", "#9e9e9e", "#212121", "#e0e0e0"


def is_ours(name: str, system: dict[str, Any]) -> bool:
    """Whether the bar is taskrunner's (in either of its columns), drawn in its colour."""
    return bool(system.get("package", name) == "taskrunner")


def ratios(results: dict[str, Any]) -> list[tuple[str, list[tuple[str, bool, float | None]]]]:
    """Per panel: its title, and per system its label, whether it is taskrunner, and the ratio."""
    ceiling = results["ceiling"]["median"]
    if not ceiling:
        raise ValueError("results without a redis-benchmark ceiling: nothing to draw against")
    panels = []
    for title, ratio, _ in PANELS:
        bars = [
            (short_label(name, system), is_ours(name, system), ratio(system["median"], ceiling))
            for name, system in results["systems"].items()
            if system["median"] is not None
        ]
        panels.append((title, bars))
    return panels


def decades(values: list[float]) -> tuple[int, int]:
    """The log10 range of the axis: whole decades around ``values``, reaching 1 at least."""
    low = math.floor(math.log10(min(values)))
    high = max(0, math.ceil(math.log10(max(values))))
    return low, max(high, low + 1)


def svg(results: dict[str, Any]) -> str:
    panels = ratios(results)
    values = [v for _, bars in panels for _, _, v in bars if v]
    low, high = decades(values)

    def x(value: float) -> float:
        share = (math.log10(value) - low) / (high - low)
        return PLOT_LEFT + (PLOT_RIGHT - PLOT_LEFT) * min(1.0, max(0.0, share))

    params, redis = results["params"], results["redis"]
    subtitle = (
        f"{server_name(redis)}, {results['machine']['cores']} cores, "
        f"{params['tasks']:,} no-op tasks, concurrency {params['concurrency']}, "
        f"median of {rounds(params['repeat'])}, {results['date'][:10]}"
    )
    out: list[str] = []
    y = 58
    for (title, bars), (_, _, missing) in zip(panels, PANELS, strict=True):
        out.append(_text(PLOT_LEFT, y, title, weight="bold"))
        y += 8
        top = y
        for label, ours, value in bars:
            middle = y + ROW / 2
            out.append(_text(LABEL_RIGHT, middle + 4, label, anchor="end"))
            if value is None:
                out.append(_text(PLOT_LEFT + 4, middle + 4, missing, fill=PEER))
            else:
                right = x(value)
                out.append(
                    f'<rect x="{PLOT_LEFT}" y="{middle - BAR / 2:.1f}" '
                    f'width="{max(1.0, right - PLOT_LEFT):.1f}" height="{BAR}" '
                    f'fill="{OURS if ours else PEER}"/>'
                )
                out.append(_text(right + 4, middle + 4, _figure(value)))
            y += ROW
        for decade in range(low, high + 1):
            gx = x(10.0**decade)
            out.insert(0, _line(gx, top, gx, y, GRID if decade else INK))
            out.append(_text(gx, y + 13, _figure(10.0**decade), anchor="middle", size=10))
        y += 40
    head = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{y}" '
        f'viewBox="0 0 {WIDTH} {y}" font-family="sans-serif" font-size="12">',
        f'<rect width="{WIDTH}" height="{y}" fill="#ffffff"/>',
        _text(
            20, 22, "Each system as a fraction of the Redis ceiling (1 = redis-benchmark)",
            weight="bold", size=14,
        ),
        _text(20, 40, f"{subtitle}; logarithmic axis, longer is better", fill="#616161"),
    ]  # fmt: skip
    return "\n".join([*head, *out, "</svg>"]) + "\n"


def _figure(value: float) -> str:
    return f"{value:.2g}" if value < 1 else f"{value:.3g}"


def _text(
    x: float,
    y: float,
    text: str,
    *,
    anchor: str = "start",
    weight: str = "normal",
    size: int = 12,
    fill: str = INK,
) -> str:
    return (
        f'<text x="{x:.1f}" y="{y:.1f}" text-anchor="{anchor}" font-weight="{weight}" '
        f'font-size="{size}" fill="{fill}">{escape(text)}</text>'
    )


def _line(x1: float, y1: float, x2: float, y2: float, stroke: str) -> str:
    return f'<line x1="{x1:.1f}" y1="{y1}" x2="{x2:.1f}" y2="{y2}" stroke="{stroke}"/>'


def render(results: dict[str, Any], *, chart: Path = SVG, markdown: Path = MARKDOWN) -> None:
    """Write the table (``markdown``) and the chart (``chart``) for ``results``."""
    markdown.write_text(facts_markdown(results) + "\n" + table_markdown(results))
    chart.parent.mkdir(parents=True, exist_ok=True)
    chart.write_text(svg(results))
    print(f"wrote {markdown} and {chart}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", type=Path, default=HERE / "results.json")
    parser.add_argument("--chart", type=Path, default=SVG)
    parser.add_argument("--markdown", type=Path, default=MARKDOWN)
    args = parser.parse_args()
    render(json.loads(args.results.read_text()), chart=args.chart, markdown=args.markdown)


if __name__ == "__main__":
    main()
