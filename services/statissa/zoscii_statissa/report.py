"""The HTML page at ``/``: the console's front page (the original statissa report, with
the history charts of ``console.py`` above it), for people rather than scrapers.

Server-rendered with Jinja2 autoescaping (every name from disk is escaped), inline CSS
and no external assets, so it works from an isolated network and under a strict CSP.
"""

from __future__ import annotations

from datetime import UTC, datetime

from jinja2 import Environment, StrictUndefined
from markupsafe import Markup

from zoscii_statissa.model import GroupStats, Snapshot
from zoscii_statissa.scan import HOURS
from zoscii_statissa.snapshots import RunStatus

STYLE = """\
  :root { --ink:#1d2330; --muted:#667085; --line:#e4e7ec; --bar:#3b82f6; --bg:#f8fafc;
          --bad:#b42318; --badbg:#fef3f2; --ok:#027a48; }
  * { box-sizing: border-box; }
  body { margin:0; font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;
         color:var(--ink); background:var(--bg); }
  header { background:#111827; color:#fff; padding:18px 28px; }
  header h1 { margin:0; font-size:20px; font-weight:600; }
  header .meta { color:#cbd5e1; margin-top:4px; }
  main { padding:20px 28px 40px; max-width:1400px; }
  section { background:#fff; border:1px solid var(--line); border-radius:8px;
            margin:0 0 20px; overflow-x:auto; }
  section h2 { font-size:15px; margin:0; padding:12px 16px; border-bottom:1px solid var(--line); }
  table { border-collapse:collapse; width:100%; }
  th, td { padding:7px 12px; text-align:right; white-space:nowrap;
           border-bottom:1px solid var(--line); }
  th { font-weight:600; color:var(--muted); font-size:12px; text-transform:uppercase;
       letter-spacing:.03em; background:#fcfcfd; white-space:normal; }
  td.name, th.name { text-align:left; font-family:ui-monospace,Menlo,Consolas,monospace; }
  /* long names and times wrap, so that the tables fit their cards at 1280 px */
  td.name { white-space:normal; overflow-wrap:anywhere; min-width:12ch; max-width:30ch; }
  td.when { white-space:normal; min-width:10ch; }
  tr:last-child td { border-bottom:0; }
  .cards { display:flex; gap:12px; flex-wrap:wrap; margin-bottom:20px; }
  .card { background:#fff; border:1px solid var(--line); border-radius:8px; padding:12px 16px;
          min-width:150px; }
  .card .v { font-size:20px; font-weight:600; }
  .card .k { color:var(--muted); font-size:12px; }
  .share { display:flex; align-items:center; gap:8px; justify-content:flex-end; }
  .share .track { width:72px; height:10px; background:#eef2f6; border-radius:5px;
                  overflow:hidden; }
  .share .fill { height:100%; background:var(--bar); }
  .spark { display:inline-flex; align-items:flex-end; gap:1px; height:24px; vertical-align:middle; }
  .spark span { width:3px; background:var(--bar); min-height:1px; opacity:.85; }
  .spark span.zero { background:#e4e7ec; }
  .banner { border-radius:8px; padding:12px 16px; margin-bottom:20px; }
  .banner.bad { background:var(--badbg); color:var(--bad); border:1px solid #fecdca; }
  .banner.info { background:#eff8ff; color:#175cd3; border:1px solid #b2ddff; }
  .muted { color:var(--muted); }
  .warn { color:var(--bad); font-weight:600; }
  footer { color:var(--muted); font-size:12px; }
  footer a { color:inherit; }
  button { font:inherit; padding:4px 10px; border-radius:6px; border:1px solid #cbd5e1;
           background:#fff; cursor:pointer; }
  header h1 a { color:inherit; text-decoration:none; }
  header .meta, .qname { overflow-wrap:anywhere; }
  a { color:#175cd3; }
  td.name a { color:inherit; }
  .pad { padding:0 16px; }
  section h2 { display:flex; flex-wrap:wrap; gap:8px 16px; align-items:center; }
  .ranges { display:inline-flex; gap:4px; font-weight:400; font-size:13px; }
  .ranges a { padding:1px 8px; border:1px solid var(--line); border-radius:12px;
              text-decoration:none; }
  .ranges a.on { background:#111827; color:#fff; border-color:#111827; }
  .charts { display:grid; gap:12px; padding:12px 16px;
            grid-template-columns:repeat(auto-fit, minmax(min(100%, 360px), 1fr)); }
  .chart { margin:0; min-width:0; }
  .chart figcaption { font-weight:600; font-size:13px; margin-bottom:4px; }
  .chart-svg { display:block; width:100%; height:auto; }
  .chart-svg .grid { stroke:#e4e7ec; stroke-width:1; }
  .chart-svg .tick { fill:#667085; font-size:13px; }
  .chart-svg path { stroke-width:1.8; }
  .chart-svg circle { stroke:none; }
  .legend { display:flex; flex-wrap:wrap; gap:4px 14px; font-size:12px; color:var(--muted); }
  .legend span { display:inline-flex; align-items:center; gap:5px; overflow-wrap:anywhere; }
  .legend i { width:10px; height:10px; border-radius:2px; display:inline-block; }
  .legend b { color:var(--ink); font-weight:600; }
  .nodata { padding:24px 0; }
  .actions .action-bar { display:flex; flex-wrap:wrap; gap:8px; padding:12px 16px; }
  @media (max-width: 640px) {
    header { padding:14px 16px; }
    main { padding:14px 12px 32px; }
    .card { min-width:0; flex:1 1 40%; }
    .charts { padding:10px; }
  }
"""

_UNITS = ("B", "KiB", "MiB", "GiB", "TiB", "PiB")

TEMPLATE = """\
<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>ZOSCII MQ statistics &middot; console</title>
<style>
{{ style }}</style>
</head>
<body>
<header>
  <h1>ZOSCII MQ console</h1>
  <div class="meta">
  {% if snapshot %}Generated at {{ when(snapshot.generated_at) }} (UTC) in
  {{ "%.2f"|format(snapshot.duration_seconds) }} s &middot; data directory
  {{ snapshot.data_dir }}{% else %}No statistics computed yet{% endif %}
  </div>
</header>
<main>
{% if status.last_run_success == false %}
  <div class="banner bad" role="alert"><strong>The last computation failed</strong>
  at {{ when(status.last_run_finished_at) }}: {{ status.last_error }}.
  {% if snapshot %}The figures below are the last good ones, from
  {{ when(snapshot.generated_at) }}.{% endif %}</div>
{% endif %}
{% if not snapshot %}
  <div class="banner info">The first computation is {{ "running" if status.running
  else "scheduled" }}; this page shows figures once it has finished.</div>
{% else %}
<div class="cards">
  <div class="card"><div class="v">{{ snapshot.queues|length }}</div>
    <div class="k">queues</div></div>
  <div class="card"><div class="v">{{ num(snapshot.total_messages) }}</div>
    <div class="k">messages (queues + store)</div></div>
  <div class="card"><div class="v">{{ size(snapshot.total_bytes) }}</div>
    <div class="k">stored</div></div>
  <div class="card"><div class="v">{{ num(snapshot.store.unidentified) }}</div>
    <div class="k">unidentified in store</div></div>
</div>

{{ trends }}

<section>
<h2>Queues</h2>
{% if snapshot.queues %}
<table>
<thead><tr>
  <th class="name">Queue</th><th>Messages</th><th>Size</th><th>Share of storage</th>
  <th>Oldest</th><th>Newest</th><th>Oldest age</th><th>Expiring &le; 24&nbsp;h</th>
  <th>Published, last 24&nbsp;h</th>
</tr></thead>
<tbody>
{% for q in snapshot.queues %}{{ group_row(q, true) }}{% endfor %}
</tbody>
</table>
{% else %}<p class="muted" style="padding:0 16px">No queues yet.</p>{% endif %}
</section>

<section>
<h2>Consumer groups</h2>
{% if snapshot.groups %}
<table>
<thead><tr>
  <th class="name">Queue</th><th class="name">Group</th><th>Waiting</th><th>Leased</th>
  <th>Acked</th><th>Redelivered</th><th>Dead-lettered</th><th>Oldest unacked age</th>
</tr></thead>
<tbody>
{% for g in snapshot.groups %}
<tr>
  <td class="name"><a href="queues/{{ g.queue|urlencode }}">{{ g.queue }}</a></td>
  <td class="name">{{ g.group }}</td>
  {% if g.error %}<td class="name warn" colspan="6">unreadable: {{ g.error }}</td>
  {% else %}<td>{{ num(g.waiting) }}</td><td>{{ num(g.leased) }}</td>
  <td>{{ num(g.acked) }}</td><td>{{ num(g.redelivered) }}</td>
  <td{% if g.dead_lettered %} class="warn" title="in {{ g.dead_letter_queue }}"{% endif %}>
    {{ num(g.dead_lettered) }}</td>
  <td{% if g.oldest_unacked %} title="{{ g.oldest_unacked }}"{% endif %}>
    {{ age(g.oldest_unacked_age_seconds) }}</td>{% endif %}
</tr>
{% endfor %}
</tbody>
</table>
{% else %}<p class="muted" style="padding:0 16px">No consumer groups.</p>{% endif %}
</section>

<section>
<h2>Data store</h2>
<table>
<thead><tr>
  <th class="name"></th><th>Messages</th><th>Size</th><th>Share of storage</th>
  <th>Oldest</th><th>Newest</th><th>Oldest age</th><th>Expiring &le; 24&nbsp;h</th>
  <th>Unidentified (-u)</th>
</tr></thead>
<tbody>{{ group_row(snapshot.store, false) }}</tbody>
</table>
</section>

<section>
<h2>Replicator pointers</h2>
{% if snapshot.states %}
<table>
<thead><tr><th class="name">State</th><th class="name">Pointer</th>
  <th>Message time</th><th>Age</th></tr></thead>
<tbody>
{% for s in snapshot.states %}
<tr>
  <td class="name">{{ s.state }}</td>
  {% if s.error %}<td class="name warn" colspan="3">unreadable: {{ s.error }}</td>
  {% elif not s.pointer %}<td class="name muted" colspan="3">nothing replicated yet</td>
  {% else %}<td class="name">{{ s.pointer }}</td><td>{{ when(s.pointer_timestamp) }}</td>
  <td>{{ age(s.age_seconds) }}</td>{% endif %}
</tr>
{% endfor %}
</tbody>
</table>
{% else %}<p class="muted" style="padding:0 16px">No replikate state files.</p>{% endif %}
</section>
{% endif %}

<footer>
  <form method="post" action="refresh?redirect=1" style="display:inline">
    <button type="submit">Recompute now</button></form>
  &middot; machine-readable: <a href="stats.json">stats.json</a> &middot;
  <a href="history.json">history.json</a> &middot;
  <a href="metrics">metrics</a> &middot; runs {{ status.runs_total }}, failed
  {{ status.runs_failed_total }} &middot; times are UTC
</footer>
</main>
</body>
</html>
"""

_ROW = """\
{% macro group_row(g, is_queue) %}
<tr>
  <td class="name">{% if is_queue %}<a href="queues/{{ g.name|urlencode }}">{{ g.name }}</a>{%
    else %}{{ g.name }}{% endif %}</td>
  <td>{{ num(g.messages) }}</td>
  <td title="{{ num(g.bytes) }} bytes">{{ size(g.bytes) }}</td>
  <td><div class="share"><span>{{ "%.1f"|format(g.storage_share * 100) }}&nbsp;%</span>
    <div class="track"><div class="fill" style="width:{{ "%.1f"|format(g.storage_share * 100) }}%">
    </div></div></div></td>
  <td class="when">{{ when(g.oldest_timestamp) or "\u2013" }}</td>
  <td class="when">{{ when(g.newest_timestamp) or "\u2013" }}</td>
  <td>{{ age(g.oldest_age_seconds) }}</td>
  <td{% if g.expired %} title="{{ num(g.expired) }} already past retention"{% endif %}>
    {{ num(g.expiring_24h) }}</td>
  {% if is_queue %}<td title="{{ num(g.published_last_24h) }} in the last 24 h, oldest hour left">
    {{ spark(g) }} {{ num(g.published_last_24h) }}</td>
  {% else %}<td>{{ num(g.unidentified) }}</td>{% endif %}
</tr>
{% endmacro %}
"""


def environment(**extra: object) -> Environment:
    """The Jinja environment of the console's pages (autoescaping: every name is escaped)
    with the helpers every page uses, and ``extra`` ones."""
    env = Environment(autoescape=True, undefined=StrictUndefined, trim_blocks=True)
    env.globals.update(
        when=when, num=_num, size=human_bytes, age=human_age, style=Markup(STYLE), **extra
    )
    return env


class ReportPage:
    """Renders the page; build one per app (the template compiles once)."""

    def __init__(self) -> None:
        env = environment(spark=_spark)
        macros = env.from_string(_ROW).module
        env.globals["group_row"] = macros.group_row  # type: ignore[attr-defined]
        self._template = env.from_string(TEMPLATE)

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
