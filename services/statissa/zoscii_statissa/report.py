"""The HTML page at ``/``: the console's front page (the original statissa report, with
the history charts of ``console.py`` above it), for people rather than scrapers.

Server-rendered with Jinja2 autoescaping (every name from disk is escaped) from
``templates/report.html``, with inline CSS (``templates/console.css``) and no external
assets, so it works from an isolated network and under a strict CSP.
"""

from __future__ import annotations

from datetime import UTC, datetime

from jinja2 import Environment, PackageLoader, StrictUndefined
from markupsafe import Markup

from zoscii_statissa.model import GroupStats, Snapshot
from zoscii_statissa.scan import HOURS
from zoscii_statissa.snapshots import RunStatus

_UNITS = ("B", "KiB", "MiB", "GiB", "TiB", "PiB")

def environment(**extra: object) -> Environment:
    """The Jinja environment of the console's pages, their templates in ``templates/``
    (``base.html`` and one per page; autoescaping: every name is escaped) with the
    helpers every page uses, and ``extra`` ones."""
    env = Environment(
        loader=PackageLoader("zoscii_statissa"),
        autoescape=True,
        undefined=StrictUndefined,
        trim_blocks=True,
    )
    env.globals.update(when=when, num=_num, size=human_bytes, age=human_age, **extra)
    return env


class ReportPage:
    """Renders the page; build one per app (the template compiles once)."""

    def __init__(self) -> None:
        self._template = environment(spark=_spark).get_template("report.html")

    def render(
        self, snapshot: Snapshot | None, status: RunStatus, *, trends: Markup | None = None
    ) -> str:
        """``trends``: the console's charts section (``console.TrendsSection``)."""
        return self._template.render(snapshot=snapshot, status=status, trends=trends or "")


def human_bytes(count: int) -> str:
    value = float(count)
    for unit in _UNITS:
        if value < 1024 or unit == _UNITS[-1]:
            return f"{int(value)} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def human_age(seconds: float | None) -> str:
    if seconds is None:
        return "\u2013"
    seconds = int(seconds)
    days, rest = divmod(seconds, 86_400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}d {hours}h"
    if hours:
        return f"{hours}h {minutes}m"
    if minutes:
        return f"{minutes}m {secs}s"
    return f"{secs}s"


def _num(value: int) -> str:
    return f"{value:,}"


def _spark(group: GroupStats) -> Markup:
    """24 tiny bars, oldest hour first; built from numbers only, so Markup is safe."""
    counts = list(reversed(group.published_hourly))
    peak = max(counts) or 1
    bars = []
    for hours_ago, count in zip(range(HOURS - 1, -1, -1), counts, strict=True):
        height = max(4, round(100 * count / peak)) if count else 4
        css = "" if count else ' class="zero"'
        bars.append(
            f'<span{css} style="height:{height}%" title="{count} published '
            f'{hours_ago}-{hours_ago + 1} h ago"></span>'
        )
    return Markup(f'<span class="spark">{"".join(bars)}</span>')


def when(timestamp: float | None) -> str:
    """A UTC time for people (the page says once that times are UTC)."""
    if timestamp is None:
        return ""
    return datetime.fromtimestamp(timestamp, UTC).strftime("%Y-%m-%d %H:%M:%S")
