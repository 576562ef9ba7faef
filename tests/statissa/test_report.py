"""The HTML page's rendering on its own: escaping and human-friendly numbers.

Queue names on disk are limited to [a-z0-9_-], so hostile text cannot come from a real
data directory; the renderer is fed it directly to prove it escapes every name.
"""

from __future__ import annotations

import fnmatch
import tomllib
from pathlib import Path

import zoscii_statissa
from zoscii_statissa.model import GroupStats, PointerStats, Snapshot
from zoscii_statissa.report import ReportPage, human_age, human_bytes
from zoscii_statissa.snapshots import RunStatus

HOSTILE = '<script>alert("x")</script>&<b>'


def _snapshot() -> Snapshot:
    hourly = (3,) + (0,) * 22 + (9,)
    return Snapshot(
        generated_at=1_773_144_000.0,
        duration_seconds=1.25,
        data_dir="/data/<img src=x onerror=alert(1)>",
        queues=(
            GroupStats(
                name=HOSTILE,
                messages=1234567,
                bytes=5 * 1024**3,
                storage_share=0.75,
                oldest_timestamp=1_773_100_000,
                oldest_age_seconds=44_000.0,
                published_hourly=hourly,
            ),
        ),
        store=GroupStats(name="store", messages=2, bytes=10, storage_share=0.25),
        states=(
            PointerStats(state="a<b>_store", error="Invalid pointer '<x>'"),
            PointerStats(
                state="ok_q",
                pointer="202603101100000000-0001-x.bin",
                pointer_timestamp=1_773_140_400,
                age_seconds=3600.0,
            ),
        ),
    )


def test_every_name_is_escaped() -> None:
    status = RunStatus(
        runs_total=3,
        runs_failed_total=1,
        last_run_success=False,
        last_run_finished_at=1_773_144_100.0,
        last_error="<oops>",
    )
    page = ReportPage().render(_snapshot(), status)
    assert "<script" not in page and "<img" not in page and "<b>" not in page and "<x>" not in page
    assert "&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt;&amp;&lt;b&gt;" in page
    assert "a&lt;b&gt;_store" in page
    assert "&lt;oops&gt;" in page  # the failure banner's error text too


def test_figures_are_made_readable() -> None:
    page = ReportPage().render(_snapshot(), RunStatus(runs_total=1, last_run_success=True))
    assert "1,234,567" in page  # messages
    assert "5.0 GiB" in page
    assert "75.0&nbsp;%" in page and "width:75.0%" in page  # share bar
    assert "12h 13m" in page  # oldest age
    assert "2026-03-10 12:00:00" in page  # generated at
    assert 'title="9 published 23-24 h ago"' in page and 'title="3 published 0-1 h ago"' in page
    assert "The last computation failed" not in page


def test_human_units() -> None:
    assert human_bytes(0) == "0 B"
    assert human_bytes(1023) == "1023 B"
    assert human_bytes(1536) == "1.5 KiB"
    assert human_age(None) == "\u2013"
    assert human_age(59) == "59s"
    assert human_age(3 * 86_400 + 7200) == "3d 2h"


def test_every_template_ships_in_the_package() -> None:
    """The pages are read from zoscii_statissa/templates at run time: a file there that
    package-data does not name would be missing from the image's wheel."""
    package = Path(zoscii_statissa.__file__).parent
    project = tomllib.loads((package.parent / "pyproject.toml").read_text())
    patterns = project["tool"]["setuptools"]["package-data"]["zoscii_statissa"]
    files = [str(f.relative_to(package)) for f in (package / "templates").iterdir()]
    assert {"base.html", "report.html", "queue.html"} <= {Path(f).name for f in files}
    for name in files:
        assert any(fnmatch.fnmatch(name, pattern) for pattern in patterns), name

