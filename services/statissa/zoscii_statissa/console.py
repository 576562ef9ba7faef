"""The console's parts: charts drawn on the server as inline SVG, the time ranges, and
the queue page (``/queues/<name>``).

Charts are plain SVG built from numbers (names are escaped): no script, no external
asset, so the page keeps working from an isolated network and under a strict CSP. Each
series is a ``<g class="series" data-queue=... data-points=N>`` holding one ``<path>``
and, up to ``MAX_MARKERS`` points, one ``<circle>`` per point (with a ``<title>``
tooltip), so tests and people can count what was drawn.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from jinja2 import Environment
from markupsafe import Markup, escape

from zoscii_statissa.history import (
    History,
    HistoryPoint,
    Series,
    fetch_rates,
    group_series,
    publish_rates,
    queue_series,
)
from zoscii_statissa.model import ConsumerGroupStats, GroupStats, Snapshot
from zoscii_statissa.report import environment, human_age, when
from zoscii_statissa.snapshots import RunStatus
from zosciimq.core import browse
from zosciimq.core.layout import DataDir

RANGES: dict[str, float] = {"1h": 3600.0, "6h": 6 * 3600.0, "24h": 86_400.0, "7d": 7 * 86_400.0}
DEFAULT_RANGE = "24h"
MAX_SERIES = 8  # queues drawn on one overview chart (the deepest ones)
MAX_POINTS = 400  # points per series drawn (evenly thinned beyond)
MAX_MARKERS = 200  # series with more points get a line only
LATEST_NAMES = 20
PALETTE = (
    "#2563eb", "#dc2626", "#059669", "#d97706", "#7c3aed", "#0891b2", "#db2777", "#4b5563",
)  # fmt: skip

NO_HISTORY = "No history yet: a point is added at each computation."
FETCH_NODATA = (
    "No fetch counts in this range: statissa reads them from the api's /metrics at each "
    "computation (ZOSCII_STATISSA_API_URL, ZOSCII_STATISSA_API_METRICS_URLS)."
)

# The viewBox is about the width a chart is drawn at (three to a row at 1280 px: ~385 px),
# so its 13-unit labels show at 11-12 px rather than shrink with a wider box.
_W, _H = 420.0, 160.0
_LEFT, _RIGHT, _TOP, _BOTTOM = 76.0, 12.0, 12.0, 28.0


def pick_range(raw: str | None) -> str:
    return raw if raw in RANGES else DEFAULT_RANGE


def fmt_count(value: float) -> str:
    if value >= 10_000:
        return f"{value / 1000:,.0f}k"
    return f"{value:,.0f}" if value >= 10 or value == int(value) else f"{value:.2f}"


def fmt_rate(value: float) -> str:
    return f"{value:.1f}/min" if value < 100 else f"{value:,.0f}/min"


@dataclass(frozen=True)
class Chart:
    """One chart: a title, its series (name, points) and how values read."""

    key: str  # depth, rate, fetch, age, lag: the svg's data-metric
    title: str
    series: tuple[tuple[str, Series], ...]
    fmt: Callable[[float], str]
    nodata: str = NO_HISTORY
    # the time axis (first, last): the same for every chart of a page, up to its figures'
    # time; None: the series' own first and last times
    span: tuple[float, float] | None = None

    @property
    def empty(self) -> bool:
        return not any(points for _, points in self.series)


def thin(points: Series, limit: int = MAX_POINTS) -> Series:
    """At most ``limit`` points, evenly spread, the first and the last always kept."""
    if len(points) <= limit:
        return points
    step = (len(points) - 1) / (limit - 1)
    return [points[round(i * step)] for i in range(limit)]


def render_chart(chart: Chart, *, link: Callable[[str], str] | None = None) -> Markup:
    """The chart as an inline ``<svg>`` plus its legend (HTML)."""
    series = [(name, thin(points)) for name, points in chart.series if points]
    label = escape(chart.title)
    if not series:
        return Markup(
            f'<figure class="chart"><figcaption>{label}</figcaption>'
            f'<p class="muted nodata">{escape(chart.nodata)}</p></figure>'
        )
    times = [t for _, points in series for t, _ in points]
    values = [v for _, points in series for _, v in points]
    start, end = chart.span or (min(times), max(times))
    start, end = min(start, *times), max(end, *times)
    if end - start < 1:  # one moment: the minute before it, never a time after it
        start = end - 60
    top = _nice_ceiling(max(values))
    plot_w, plot_h = _W - _LEFT - _RIGHT, _H - _TOP - _BOTTOM

    def x(t: float) -> float:
        return _LEFT + (t - start) / (end - start) * plot_w

    def y(v: float) -> float:
        return _TOP + plot_h - (v / top) * plot_h

    parts = [
        f'<svg class="chart-svg" viewBox="0 0 {_W:.0f} {_H:.0f}" role="img" '
        f'aria-label="{label}" data-metric="{escape(chart.key)}" '
        f'preserveAspectRatio="xMidYMid meet">'
    ]
    for fraction in (0.0, 0.5, 1.0):
        gy = y(top * fraction)
        parts.append(
            f'<line class="grid" x1="{_LEFT:.0f}" x2="{_W - _RIGHT:.0f}" '
            f'y1="{gy:.1f}" y2="{gy:.1f}"/>'
            f'<text class="tick" x="{_LEFT - 6:.0f}" y="{gy + 4:.1f}" text-anchor="end">'
            f"{escape(chart.fmt(top * fraction))}</text>"
        )
    span = end - start
    for fraction, anchor in ((0.0, "start"), (0.5, "middle"), (1.0, "end")):
        t = start + span * fraction
        parts.append(
            f'<text class="tick" x="{x(t):.1f}" y="{_H - 6:.0f}" text-anchor="{anchor}">'
            f"{_time_label(t, span)}</text>"
        )
    for index, (name, points) in enumerate(series):
        color = PALETTE[index % len(PALETTE)]
        coords = [(x(t), y(v)) for t, v in points]
        path = "M" + " L".join(f"{cx:.1f} {cy:.1f}" for cx, cy in coords)
        parts.append(
            f'<g class="series" data-queue="{escape(name)}" data-points="{len(points)}" '
            f'stroke="{color}" fill="{color}"><path d="{path}" fill="none"/>'
        )
        if len(points) <= MAX_MARKERS:
            for (cx, cy), (t, v) in zip(coords, points, strict=True):
                parts.append(
                    f'<circle cx="{cx:.1f}" cy="{cy:.1f}" r="2.5"><title>{escape(name)} '
                    f"{when(t)}: {escape(chart.fmt(v))}</title></circle>"
                )
        parts.append("</g>")
    parts.append("</svg>")
    legend = []
    for index, (name, points) in enumerate(series):
        color = PALETTE[index % len(PALETTE)]
        text = escape(name)
        if link is not None:
            text = Markup(f'<a href="{escape(link(name))}">{text}</a>')
        latest = escape(chart.fmt(points[-1][1]))
        legend.append(f'<span><i style="background:{color}"></i>{text} <b>{latest}</b></span>')
    return Markup(
        f'<figure class="chart"><figcaption>{label}</figcaption>{"".join(parts)}'
        f'<div class="legend">{"".join(legend)}</div></figure>'
    )


def _nice_ceiling(value: float) -> float:
    """A round top for the y axis (1, 2, 2.5, 5 x 10^n), at least 1."""
    if value <= 1:
        return 1.0
    magnitude = 10.0 ** math.floor(math.log10(value))
    for step in (1, 2, 2.5, 5, 10):
        if value <= step * magnitude:
            return step * magnitude
    return 10 * magnitude


def _time_label(t: float, span: float) -> str:
    moment = datetime.fromtimestamp(t, UTC)
    if span <= 36 * 3600:
        return moment.strftime("%H:%M:%S" if span < 600 else "%H:%M")
    return moment.strftime("%m-%d %H:%M")


# --- what the pages chart -------------------------------------------------------------
def window(history: History, snapshot: Snapshot | None, range_key: str) -> list[HistoryPoint]:
    """The points of the chosen range, up to the served snapshot (or now)."""
    end = snapshot.generated_at if snapshot is not None else datetime.now(UTC).timestamp()
    return history.points(since=end - RANGES[range_key], until=end)


def overview_charts(points: Sequence[HistoryPoint], snapshot: Snapshot) -> list[Chart]:
    """Depth, publish and fetch rates and oldest age of the deepest queues."""
    chosen = [q.name for q in sorted(snapshot.queues, key=lambda q: (-q.messages, q.name))]
    chosen = chosen[:MAX_SERIES]
    return _queue_charts(points, chosen)


def _queue_charts(points: Sequence[HistoryPoint], queues: Sequence[str]) -> list[Chart]:
    span = _span(points)
    return [
        Chart(
            "depth",
            "Depth (messages)",
            tuple((q, queue_series(points, q, "messages")) for q in queues),
            fmt_count,
            span=span,
        ),
        Chart(
            "rate",
            "Publish rate (messages per minute)",
            tuple((q, publish_rates(points, q)) for q in queues),
            fmt_rate,
            span=span,
        ),
        Chart(
            "fetch",
            "Fetch rate (messages per minute)",
            tuple((q, fetch_rates(points, q)) for q in queues),
            fmt_rate,
            nodata=NO_HISTORY if any(p.fetch_counts_known for p in points) else FETCH_NODATA,
            span=span,
        ),
        Chart(
            "age",
            "Oldest message age",
            tuple((q, queue_series(points, q, "oldest_age_seconds")) for q in queues),
            human_age,
            span=span,
        ),
    ]


def _span(points: Sequence[HistoryPoint]) -> tuple[float, float] | None:
    """One time axis for a page's charts: its first point to its last (a rate starts at the
    second point; without this, that chart's axis would not line up with the others)."""
    return (points[0].at, points[-1].at) if points else None


def queue_charts(
    points: Sequence[HistoryPoint], queue: str, groups: Sequence[ConsumerGroupStats]
) -> list[Chart]:
    charts = _queue_charts(points, [queue])
    if groups:
        charts.append(
            Chart(
                "lag",
                "Consumer group lag (messages waiting)",
                tuple((g.group, group_series(points, queue, g.group)) for g in groups),
                fmt_count,
                span=_span(points),
            )
        )
    return charts


@dataclass(frozen=True)
class LatestName:
    name: str
    published: str
    retention_days: int
    size: int | None


def latest_names(
    data_dir: DataDir, queue: str, limit: int = LATEST_NAMES
) -> tuple[list[LatestName], str]:
    """The newest message names of ``queue``, newest first, and a note when they are not
    from the index (``zosciimq.core.browse.latest``: the index's tail when it agrees with
    the directory, else a bounded listing; nothing written, no lock taken)."""
    found = browse.latest(data_dir, queue, limit)
    names = [
        LatestName(m.name, when(m.message.published_timestamp), m.retention_days, m.size)
        for m in found.messages
    ]
    note = ""
    if found.source == "listing":
        note = "Listed from the directory (its index is being updated or was changed)"
        if not found.complete:
            note += (
                f": the newest among the first {browse.DEFAULT_SCAN_LIMIT:,} entries listed, "
                "not necessarily the newest of the queue"
            )
        note += "."
    return names, note


# --- the queue page ---------------------------------------------------------------------
def _environment() -> Environment:
    """The pages' environment (``report.environment``) with the chart ranges."""
    return environment(range_keys=tuple(RANGES))


class QueuePage:
    def __init__(self) -> None:
        self._template = _environment().get_template("queue.html")

    def render(
        self,
        queue: str,
        snapshot: Snapshot | None,
        status: RunStatus,
        *,
        charts: Sequence[Chart],
        names: Sequence[LatestName],
        names_error: str = "",
        names_note: str = "",
        range_key: str = DEFAULT_RANGE,
        history_error: str = "",
        actions: Sequence[Markup] = (),
        actions_note: str = "",
        live_url: str = "",
    ) -> str:
        """``live_url``: the stream's endpoint as browsers reach it (the live view is
        shown when set); it starts after the newest name listed."""
        stats: GroupStats | None = None
        groups: list[ConsumerGroupStats] = []
        if snapshot is not None:
            try:
                stats = snapshot.queue(queue)
            except KeyError:
                stats = None
            groups = [g for g in snapshot.groups if g.queue == queue]
        return self._template.render(
            queue=queue,
            snapshot=snapshot,
            status=status,
            stats=stats,
            groups=groups,
            dead_lettered=sum(g.dead_lettered for g in groups if not g.error),
            charts=charts,
            chart=render_chart,
            names=names,
            names_error=names_error,
            names_note=names_note,
            range_key=range_key,
            history_error=history_error,
            actions=actions,
            actions_note=actions_note,
            live_url=live_url,
            live_after=names[0].name if names else "",
        )


class TrendsSection:
    """The charts section of the front page (rendered into ``ReportPage``)."""

    def __init__(self) -> None:
        self._template = _environment().get_template("trends.html")

    def render(
        self,
        snapshot: Snapshot,
        charts: Sequence[Chart],
        *,
        range_key: str = DEFAULT_RANGE,
        history_error: str = "",
    ) -> Markup:
        total = len(snapshot.queues)
        shown = min(total, MAX_SERIES)
        return Markup(
            self._template.render(
                charts=charts,
                chart=render_chart,
                link=lambda name: f"queues/{name}",
                range_key=range_key,
                history_error=history_error,
                hidden=total > shown,
                shown=shown,
                total=total,
            )
        )
