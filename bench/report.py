"""Figures, their ceilings, the printed table and the JSON result.

Every figure is printed twice: absolute, and as a share of its ceiling, oriented so that
100% means "as fast as the raw file system allows" whatever the unit (for a rate that is
figure / ceiling, for a latency or a duration ceiling / figure). The lowest share is the
slowest part of the system relative to what the machine can do.
"""

from __future__ import annotations

import json
import math
import statistics
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class Row:
    scenario: str
    metric: str
    value: float | None
    unit: str
    higher_is_better: bool = True
    ceiling: float | None = None
    ceiling_label: str = ""
    note: str = ""

    @property
    def share(self) -> float | None:
        """The figure as a share of its ceiling (1.0 = at the ceiling)."""
        if self.value is None or self.ceiling is None or self.value <= 0 or self.ceiling <= 0:
            return None
        return self.value / self.ceiling if self.higher_is_better else self.ceiling / self.value

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "share_of_ceiling": self.share}


@dataclass
class ScenarioOutcome:
    name: str
    status: str = "ok"  # ok | skipped | not available | failed
    seconds: float = 0.0
    reason: str = ""
    details: dict[str, Any] = field(default_factory=dict)


@dataclass
class Sample:
    """One target in one round."""

    rate: float  # messages per second (the floor: what its requests would carry)
    cpu_per_message: float | None  # server CPU seconds per message, None if not measured
    refused: int = 0  # requests answered 503 (back-pressure), not counted as messages


@dataclass
class Comparison:
    """One scenario against the floor, the disk ceiling and the original, round by round.

    Ratios are taken within a round (the targets ran back to back), then summarised
    over the rounds like the rates: median and range.
    """

    scenario: str
    rounds: list[dict[str, Sample]] = field(default_factory=list)
    missing: dict[str, str] = field(default_factory=dict)  # target -> why not measured
    goal: tuple[str, float] | None = None  # ("floor", 0.8): ours >= 0.8 x floor; ("", n): >= n
    notes: list[str] = field(default_factory=list)

    def rates(self, target: str) -> list[float]:
        return [r[target].rate for r in self.rounds if target in r]

    def cpu(self, target: str) -> list[float]:
        return [
            r[target].cpu_per_message
            for r in self.rounds
            if target in r and r[target].cpu_per_message is not None
        ]

    def ratios(self, other: str) -> list[float]:
        """ours / other, per round where both ran."""
        return [
            r["ours"].rate / r[other].rate
            for r in self.rounds
            if "ours" in r and other in r and r[other].rate > 0
        ]

    @property
    def goal_label(self) -> str:
        if self.goal is None:
            return ""
        other, value = self.goal
        if not other:
            return f"ours >= {value:,.0f} msg/s"
        return f"ours >= {value:.0%} of {other}" if value < 1 else f"ours >= {value:g}x {other}"

    @property
    def goal_met(self) -> bool | None:
        if self.goal is None:
            return None
        other, value = self.goal
        values = self.ratios(other) if other else self.rates("ours")
        return statistics.median(values) >= value if values else None

    def to_json(self) -> dict[str, Any]:
        summary: dict[str, Any] = {}
        for target in COMPARED:
            if self.rates(target):
                summary[target] = {
                    "rate": spread(self.rates(target)),
                    "cpu_per_message": spread(self.cpu(target)) if self.cpu(target) else None,
                }
        for other in ("floor", "ceiling", "original"):
            if self.ratios(other):
                summary[f"ours/{other}"] = spread(self.ratios(other))
        return {
            "scenario": self.scenario,
            "unit": "msg/s",
            "rounds": [{t: asdict(s) for t, s in r.items()} for r in self.rounds],
            "summary": summary,
            "missing": self.missing,
            "goal": self.goal_label,
            "goal_met": self.goal_met,
            "notes": self.notes,
        }


COMPARED = ("ours", "floor", "ceiling", "original")


def spread(values: list[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


@dataclass
class Results:
    header: dict[str, Any]
    rows: list[Row] = field(default_factory=list)
    outcomes: list[ScenarioOutcome] = field(default_factory=list)
    comparisons: list[Comparison] = field(default_factory=list)

    def add(self, row: Row) -> Row:
        self.rows.append(row)
        return row

    def slowest(self) -> Row | None:
        rated = [row for row in self.rows if row.share is not None]
        return min(rated, key=lambda row: row.share or math.inf) if rated else None

    def to_json(self) -> dict[str, Any]:
        slowest = self.slowest()
        return {
            "header": self.header,
            "rows": [row.to_json() for row in self.rows],
            "scenarios": [asdict(outcome) for outcome in self.outcomes],
            "comparisons": [comparison.to_json() for comparison in self.comparisons],
            "slowest": slowest.to_json() if slowest else None,
        }

    def write_json(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.to_json(), indent=2) + "\n")


def fmt(value: float | None, unit: str = "") -> str:
    """A figure with three significant digits, large counts grouped."""
    if value is None:
        return "-"
    if unit in ("MB", "MB/s") or abs(value) < 100:
        text = f"{value:.3g}" if abs(value) < 1000 else f"{value:,.0f}"
    else:
        text = f"{value:,.0f}"
    return f"{text} {unit}".strip()


def render_header(header: dict[str, Any]) -> str:
    lines = ["ZOSCII MQ benchmarks"]
    width = max(len(key) for key in header)
    lines += [f"  {key.ljust(width)}  {value}" for key, value in header.items()]
    return "\n".join(lines)


def render_table(rows: list[Row]) -> str:
    table = [("scenario", "metric", "figure", "ceiling", "share", "ceiling is")]
    for row in rows:
        share = row.share
        table.append(
            (
                row.scenario,
                row.metric,
                fmt(row.value, row.unit) + (f"  ({row.note})" if row.note else ""),
                fmt(row.ceiling, row.unit) if row.ceiling is not None else "",
                f"{share:.0%}" if share is not None else "",
                row.ceiling_label,
            )
        )
    widths = [max(len(line[i]) for line in table) for i in range(len(table[0]))]
    out = []
    for number, line in enumerate(table):
        out.append("  ".join(cell.ljust(widths[i]) for i, cell in enumerate(line)).rstrip())
        if number == 0:
            out.append("  ".join("-" * w for w in widths))
    return "\n".join(out)


def render_markdown(rows: list[Row]) -> str:
    """The same table for docs/benchmarks.md."""
    out = [
        "| scenario | metric | figure | ceiling | share | ceiling is |",
        "|---|---|---:|---:|---:|---|",
    ]
    for row in rows:
        share = row.share
        figure = fmt(row.value, row.unit) + (f" ({row.note})" if row.note else "")
        ceiling = fmt(row.ceiling, row.unit) if row.ceiling is not None else ""
        share_text = f"{share:.0%}" if share is not None else ""
        out.append(
            f"| {row.scenario} | {row.metric} | {figure} | {ceiling} | {share_text} "
            f"| {row.ceiling_label} |"
        )
    return "\n".join(out)


COMPARISON_HEADINGS = (
    "scenario",
    "ours",
    "floor",
    "disk ceiling",
    "original",
    "ours/original",
    "ours/floor",
    "goal",
    "CPU ms/msg: ours",
    "floor",
    "original",
)


def _range(values: list[float], text: Any) -> str:
    """median (min-max), each through ``text``."""
    if not values:
        return ""
    median = statistics.median(values)
    if len(values) == 1:
        return text(median)
    return f"{text(median)} ({text(min(values))}-{text(max(values))})"


def _rate(value: float) -> str:
    return f"{value:,.0f}" if value >= 100 else f"{value:.3g}"


def _times(value: float) -> str:
    if value < 0.1:
        return f"{value:.2g}x"
    return f"{value:.2f}x" if value < 10 else f"{value:.1f}x"


def _ms(value: float) -> str:
    return f"{value * 1000:.3g}"


def comparison_cells(comparison: Comparison) -> list[str]:
    def rate(target: str) -> str:
        if target in comparison.missing:
            why = comparison.missing[target]
            return "not available: " + (why if len(why) <= 48 else why[:45] + "...")
        return _range(comparison.rates(target), _rate)

    met = comparison.goal_met
    goal = comparison.goal_label
    if goal and met is not None:
        goal += ": met" if met else ": MISSED"
    return [
        comparison.scenario,
        rate("ours"),
        rate("floor"),
        rate("ceiling"),
        rate("original"),
        _range(comparison.ratios("original"), _times),
        _range(comparison.ratios("floor"), _times),
        goal,
        _range(comparison.cpu("ours"), _ms),
        _range(comparison.cpu("floor"), _ms),
        _range(comparison.cpu("original"), _ms),
    ]


def render_comparisons(comparisons: list[Comparison]) -> str:
    """The comparison table (msg/s, median (min-max) over rounds), then its notes."""
    table = [COMPARISON_HEADINGS, *(comparison_cells(c) for c in comparisons)]
    widths = [max(len(line[i]) for line in table) for i in range(len(COMPARISON_HEADINGS))]
    out = []
    for number, line in enumerate(table):
        out.append("  ".join(cell.ljust(widths[i]) for i, cell in enumerate(line)).rstrip())
        if number == 0:
            out.append("  ".join("-" * w for w in widths))
    notes = [
        f"{c.scenario}: {target} not available: {why}"
        for c in comparisons
        for target, why in c.missing.items()
        if len(why) > 48
    ]
    notes += [f"{c.scenario}: {note}" for c in comparisons for note in c.notes]
    notes += [
        f"{c.scenario}: {target} refused {refused:,} requests with 503 (back-pressure)"
        for c in comparisons
        for target in COMPARED
        if (refused := sum(r[target].refused for r in c.rounds if target in r))
    ]
    return "\n".join(out + (["", *notes] if notes else []))


def render_comparisons_markdown(comparisons: list[Comparison]) -> str:
    out = [
        "| " + " | ".join(COMPARISON_HEADINGS) + " |",
        "|---|" + "---:|" * 6 + "---|" + "---:|" * 3,
    ]
    out += ["| " + " | ".join(comparison_cells(c)) + " |" for c in comparisons]
    return "\n".join(out)
