"""The results as a markdown table and a sentence of facts: printed by ``run.py``,
and written by ``chart.py`` into ``results.md``, which docs/performance.md includes.

Every figure is a median over the rounds. A system without a bulk-enqueue call
shows a dash there; a latency measured below the requested rate (half the
system's processing rate, see ``run.py``) says the rate it was measured at.
What a system keeps in Redis by default is said from its documentation and
source (``run.py``'s ``SYSTEMS``), beside the keys per task measured after the run.
"""

from __future__ import annotations

import shlex
from typing import Any

ALSO_NAMED = {"taskiq": ("taskiq-redis", "stream broker")}
"""For a system used through a plug-in: that package, and what of it is used."""


def rate(value: float) -> str:
    return f"{value:,.0f}"


def short_label(name: str, system: dict[str, Any]) -> str:
    """The system, its version and its variant (``prefork pool``), as the chart names it."""
    package = system.get("package", name)
    label = f"{package} {system.get('versions', {}).get(package, '')}".strip()
    if system.get("variant"):
        label += f", {system['variant']}"
    return label


def system_label(name: str, system: dict[str, Any]) -> str:
    versions = system.get("versions", {})
    label = short_label(name, system)
    if name in ALSO_NAMED:
        package, part = ALSO_NAMED[name]
        label += f" ({package} {versions.get(package, '')} {part})"
    return label


def keys_cell(each: dict[str, Any]) -> str:
    """The keys per task left on the server after the run (once the worker lingered)."""
    return f"{each['redis_keys_per_task']:.1f}"


def latency_cell(latency: dict[str, float], wanted: float) -> str:
    cell = f"{latency['p50_ms']:.2f} / {latency['p99_ms']:.2f}"
    if latency["rate_per_s"] < 0.95 * wanted:
        cell += f" (at {rate(latency['rate_per_s'])}/s)"
    if latency["started"] < latency["sent"]:
        cell += f", {latency['sent'] - latency['started']} never started"
    return cell


def rounds(count: int) -> str:
    return f"{count} round" if count == 1 else f"{count} rounds"


def server_name(redis: dict[str, Any]) -> str:
    """``Redis 7.0.15`` (or ``Valkey ...``)."""
    return f"{redis['kind'].capitalize()} {redis['version']}"


def table_rows(results: dict[str, Any]) -> list[list[str]]:
    """The table's rows, the header first."""
    wanted = results["params"]["latency_rate"]
    rows = [
        [
            "system",
            "bulk enqueue/s",
            "per-task enqueue/s",
            "process/s",
            "Redis CPU per task",
            "Redis commands per task",
            "kept in Redis by default",
            "keys left per task",
            f"start latency p50 / p99, ms (at {rate(wanted)}/s)",
        ]
    ]
    ceiling = results["ceiling"]["median"]
    if ceiling:
        rows.append(
            [
                "`redis-benchmark` XADD -P16 / -c 50",
                f"{rate(ceiling['xadd_p16_per_s'])} (-P16)",
                f"{rate(ceiling['xadd_c50_per_s'])} (-c 50)",
                "",
                f"{ceiling['xadd_p16_cpu_us']:.1f} µs (XADD alone)",
                "1",
                "",
                "",
                "",
            ]
        )
    for name, system in results["systems"].items():
        label = system_label(name, system)
        median = system["median"]
        if median is None:
            rows.append([label, "failed", *[""] * (len(rows[0]) - 2)])
            continue
        each, bulk, latency = median["each"], median["bulk"], median["latency"]
        rows.append(
            [
                label,
                rate(bulk["enqueue_per_s"]) if bulk else "—",
                rate(each["enqueue_per_s"]),
                rate(each["process_per_s"]),
                f"{each['redis_cpu_us_per_task']:.1f} µs",
                f"{each['redis_calls_per_task']:.1f}",
                system.get("stores", ""),
                keys_cell(each),
                latency_cell(latency, wanted),
            ]
        )
    return rows


TEXT_COLUMNS = ("system", "kept in Redis by default")
"""The columns of words, aligned left; the figures are aligned right."""


def table_markdown(results: dict[str, Any]) -> str:
    rows = table_rows(results)
    rule = "".join("---|" if head in TEXT_COLUMNS else "---:|" for head in rows[0])
    lines = ["| " + " | ".join(rows[0]) + " |", "|" + rule]
    lines += ["| " + " | ".join(row) + " |" for row in rows[1:]]
    return "\n".join(lines) + "\n"


def rerun_command(command: str) -> str:
    """The recorded command without its ``--note`` (the note is quoted on its own)."""
    words = shlex.split(command)
    kept = []
    skip = False
    for word in words:
        if skip:
            skip = False
        elif word == "--note":
            skip = True
        elif not word.startswith("--note="):
            kept.append(word)
    return shlex.join(kept)


def facts_markdown(results: dict[str, Any]) -> str:
    """Where and how the numbers were taken, as one paragraph."""
    machine, redis, params = results["machine"], results["redis"], results["params"]
    checkout = results["checkout"]
    dirty = " with uncommitted changes" if checkout["dirty"] else ""
    text = (
        f"Measured {results['date'][:10]} on {machine['cores']} cores ({machine['cpu']}), "
        f"{machine['os']}, Python {machine['python']}, {server_name(redis)}; "
        f"taskrunner at commit `{checkout['commit']}`{dirty}. "
        f"{params['tasks']:,} no-op tasks, one worker process with concurrency "
        f"{params['concurrency']}, median of {rounds(params['repeat'])}; start latency at "
        f"{rate(params['latency_rate'])} tasks/s for {params['latency_seconds']:g} s. "
        f"Command: `{rerun_command(results['command'])}`."
    )
    if results.get("complete") is False:
        text += (
            f" The run was stopped after {rounds(params['repeat'])} of the rounds it was"
            " asked for, so the table is the median of those."
        )
    if "wall_seconds" in results:
        text += f" The run took {results['wall_seconds'] / 60:.0f} min"
        load = machine.get("load_average", {}).get("median")
        if load is not None:
            text += f", at a load average of {load:.1f} (the median as each system began)"
        text += "."
    if results.get("note"):
        text += f" Note: {results['note']}"
    return text + "\n"


def table_text(results: dict[str, Any]) -> str:
    """What ``run.py`` prints: the facts, then the table."""
    return facts_markdown(results) + "\n" + table_markdown(results)
