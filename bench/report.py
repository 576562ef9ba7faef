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


# The targets the per-target ratio columns divide by (bench.contenders names the rest).
ORIGINAL = "original"
RAW_FLOOR = "raw WSGI floor"
RATIO_COLUMNS = ((f"x {ORIGINAL}", ORIGINAL), ("x raw floor", RAW_FLOOR))


@dataclass(frozen=True)
class Goal:
    """What an issue asks of one target of a comparison, judged on the median over the
    rounds: ``rate``: msg/s >= value; ``ratio``: its rate / ``of``'s rate, taken within
    each round, >= value; ``cpu``: server CPU ms per message <= value."""

    target: str
    kind: str  # rate | ratio | cpu
    value: float
    of: str = ""  # ratio only: the other target

    @property
    def label(self) -> str:
        if self.kind == "rate":
            return f"{self.target} >= {self.value:,.0f} msg/s"
        if self.kind == "ratio":
            times = f"{self.value:.1f}" if self.value < 10 else f"{self.value:g}"
            return f"{self.target} >= {times}x {self.of}"
        return f"{self.target} CPU <= {self.value:g} ms/msg"

    def figures(self, comparison: Comparison) -> list[float]:
        """The per-round figures the goal is judged on (CPU in ms)."""
        if self.kind == "rate":
            return comparison.rates(self.target)
        if self.kind == "ratio":
            return comparison.ratios(self.target, self.of)
        return [value * 1000 for value in comparison.cpu(self.target)]

    def met(self, comparison: Comparison) -> bool | None:
        """None when not measured (e.g. no original)."""
        figures = self.figures(comparison)
        if not figures:
            return None
        median = statistics.median(figures)
        return median <= self.value if self.kind == "cpu" else median >= self.value

    def verdict(self, comparison: Comparison) -> str:
        """``<label>: met at <median (range)>``, or MISSED at, or not measured."""
        met = self.met(comparison)
        if met is None:
            return f"{self.label}: not measured"
        text = {"rate": _rate, "ratio": _times, "cpu": _ms_plain}[self.kind]
        figures = _range(self.figures(comparison), text)
        return f"{self.label}: {'met' if met else 'MISSED'} at {figures}"

    def to_json(self, comparison: Comparison) -> dict[str, Any]:
        figures = self.figures(comparison)
        return {
            "goal": self.label,
            **asdict(self),
            "figures": spread(figures) if figures else None,
            "met": self.met(comparison),
        }


@dataclass
class Comparison:
    """One scenario's targets (ours, the floors, the disk ceilings, the original), round
    by round.

    Ratios are taken within a round (the targets ran back to back), then summarised
    over the rounds like the rates: median and range.
    """

    scenario: str
    rounds: list[dict[str, Sample]] = field(default_factory=list)
    missing: dict[str, str] = field(default_factory=dict)  # target -> why not measured
    goals: list[Goal] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    targets: list[str] = field(default_factory=list)  # in the order to show them

    def shown(self) -> list[str]:
        """Every target measured or missing: ``targets`` first, then any other."""
        seen = dict.fromkeys(self.targets)
        for figures in self.rounds:
            seen.update(dict.fromkeys(figures))
        seen.update(dict.fromkeys(self.missing))
        return list(seen)

    def rates(self, target: str) -> list[float]:
        return [r[target].rate for r in self.rounds if target in r]

    def cpu(self, target: str) -> list[float]:
        return [
            r[target].cpu_per_message
            for r in self.rounds
            if target in r and r[target].cpu_per_message is not None
        ]

    def ratios(self, target: str, other: str) -> list[float]:
        """target / other, per round where both ran."""
        return [
            r[target].rate / r[other].rate
            for r in self.rounds
            if target in r and other in r and r[other].rate > 0
        ]

    def to_json(self) -> dict[str, Any]:
        summary: dict[str, Any] = {}
        targets = self.shown()
        for target in targets:
            if not self.rates(target):
                continue
            ratios = {
                other: spread(self.ratios(target, other))
                for other in targets
                if other != target and self.ratios(target, other)
            }
            summary[target] = {
                "rate": spread(self.rates(target)),
                "cpu_per_message": spread(self.cpu(target)) if self.cpu(target) else None,
                "ratio_to": ratios,
            }
        return {
            "scenario": self.scenario,
            "unit": "msg/s",
            "targets": targets,
            "rounds": [{t: asdict(s) for t, s in r.items()} for r in self.rounds],
            "summary": summary,
            "missing": self.missing,
            "goals": [goal.to_json(self) for goal in self.goals],
            "notes": self.notes,
        }


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
    "target",
    "msg/s",
    *(heading for heading, _ in RATIO_COLUMNS),
    "CPU ms/msg",
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
    """Seconds as milliseconds."""
    return _ms_plain(value * 1000)


def _ms_plain(value: float) -> str:
    return f"{value:.3g}"


def target_cells(comparison: Comparison, target: str) -> list[str]:
    """One target's line: msg/s, its ratios to the reference targets, CPU per message."""
    if target in comparison.missing and not comparison.rates(target):
        return [target, "not available: " + comparison.missing[target]]
    ratios = [
        _range(comparison.ratios(target, other), _times) if other != target else ""
        for _, other in RATIO_COLUMNS
    ]
    return [
        target,
        _range(comparison.rates(target), _rate),
        *ratios,
        _range(comparison.cpu(target), _ms),
    ]


def comparison_notes(comparison: Comparison) -> list[str]:
    """What goes under a scenario's lines: a target that stopped after some rounds, the
    notes, requests refused."""
    stopped = [
        f"{target} not available after {len(comparison.rates(target))} rounds: {why}"
        for target, why in comparison.missing.items()
        if comparison.rates(target)
    ]
    refused = [
        f"{target} refused {count:,} requests with 503 (back-pressure)"
        for target in comparison.shown()
        if (count := sum(r[target].refused for r in comparison.rounds if target in r))
    ]
    return stopped + comparison.notes + refused


def render_comparisons(comparisons: list[Comparison]) -> str:
    """Per scenario: one line per target (msg/s, ratios within rounds, CPU per message,
    each the median (min-max) over the rounds), its goals, its notes; then the goals'
    tally."""
    sections = [(c, [target_cells(c, target) for target in c.shown()]) for c in comparisons]
    # A target not available is one line with its reason: it sets no column's width.
    table = [list(COMPARISON_HEADINGS)]
    table += [cells for _, lines in sections for cells in lines if len(cells) > 2]
    widths = [max(len(cells[i]) for cells in table) for i in range(len(COMPARISON_HEADINGS))]

    def row(cells: list[str]) -> str:
        return "  " + "  ".join(cell.ljust(widths[i]) for i, cell in enumerate(cells)).rstrip()

    out = []
    for comparison, lines in sections:
        out += ["", comparison.scenario, row(list(COMPARISON_HEADINGS))]
        out += [row(cells) for cells in lines]
        out += [f"  goal: {goal.verdict(comparison)}" for goal in comparison.goals]
        out += [f"  - {note}" for note in comparison_notes(comparison)]
    tally = goal_tally(comparisons)
    return "\n".join(out[1:] + (["", *tally] if tally else []))


def goal_tally(comparisons: list[Comparison]) -> list[str]:
    """``goals: n met, m MISSED, k not measured``, then each one missed."""
    verdicts = [(c, goal, goal.met(c)) for c in comparisons for goal in c.goals]
    if not verdicts:
        return []
    met = sum(1 for _, _, ok in verdicts if ok)
    missed = [(c, goal) for c, goal, ok in verdicts if ok is False]
    unmeasured = sum(1 for _, _, ok in verdicts if ok is None)
    out = [f"goals: {met} met, {len(missed)} MISSED, {unmeasured} not measured"]
    out += [f"  {c.scenario}: {goal.verdict(c)}" for c, goal in missed]
    return out


def render_comparisons_markdown(comparisons: list[Comparison]) -> str:
    """The same for docs/benchmarks.md: a table per scenario, its goals and notes."""
    out = []
    for comparison in comparisons:
        out += [
            f"**{comparison.scenario}**",
            "",
            "| " + " | ".join(COMPARISON_HEADINGS) + " |",
            "|---|" + "---:|" * (len(COMPARISON_HEADINGS) - 1),
        ]
        for target in comparison.shown():
            cells = target_cells(comparison, target)
            cells += [""] * (len(COMPARISON_HEADINGS) - len(cells))
            out.append("| " + " | ".join(cells) + " |")
        extra = [f"goal: {goal.verdict(comparison)}" for goal in comparison.goals]
        extra += comparison_notes(comparison)
        out += ([""] + [f"- {line}" for line in extra] if extra else []) + [""]
    tally = goal_tally(comparisons)
    if tally:
        missed = [f"- {line.strip()}" for line in tally[1:]]
        out += [tally[0], *([""] if missed else []), *missed]
    return "\n".join(out).rstrip()
