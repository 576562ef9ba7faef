"""Figures, their ceilings, the printed table and the JSON result.

Every figure is printed twice: absolute, and as a share of its ceiling, oriented so that
100% means "as fast as the raw file system allows" whatever the unit (for a rate that is
figure / ceiling, for a latency or a duration ceiling / figure). The lowest share is the
slowest part of the system relative to what the machine can do.
"""

from __future__ import annotations

import json
import math
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
class Results:
    header: dict[str, Any]
    rows: list[Row] = field(default_factory=list)
    outcomes: list[ScenarioOutcome] = field(default_factory=list)

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
