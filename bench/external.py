"""Scenarios measured by the services' own bench scripts, run as subprocesses.

Each ``bench/<x>_bench.py`` takes a size flag and prints one JSON object as its last
stdout line (progress goes to stderr, passed through). The flag's name is read from the
script's ``--help`` (``--count`` first, then the names the scripts actually use), so a
script can rename it without breaking the driver. A script that does not exist yet is
reported as "not available", not as a failure.
"""

from __future__ import annotations

import json
import logging
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench import REPO
from bench.ceilings import dirty_expire_seconds, unlink_seconds_per_file
from bench.context import Context
from bench.report import Row

log = logging.getLogger(__name__)

SIZE_FLAGS = ("--count", "--files", "--messages")


class NotAvailable(Exception):
    """The scenario's script is not there (yet)."""


@dataclass(frozen=True)
class Script:
    name: str
    file: str
    quick_count: int
    full_count: int
    quick_timeout: float
    full_timeout: float

    @property
    def path(self) -> Path:
        return REPO / "bench" / self.file

    def count(self, quick: bool) -> int:
        return self.quick_count if quick else self.full_count

    def timeout(self, quick: bool) -> float:
        return self.quick_timeout if quick else self.full_timeout


REPLIKATE = Script("replication", "replikate_bench.py", 1_000, 10_000, 240, 1_200)
CLAIREUP = Script("claireup", "claireup_bench.py", 20_000, 1_000_000, 300, 3_600)
STATISSA = Script("statissa", "statissa_bench.py", 20_000, 1_000_000, 300, 3_600)


def run_script(ctx: Context, script: Script) -> dict[str, Any]:
    """Run one bench script (our run's root as TMPDIR); its last stdout line, parsed."""
    if not script.path.exists():
        raise NotAvailable(f"{script.path.relative_to(REPO)} does not exist")
    workdir = ctx.fresh_dir(f"external-{script.name}")
    env = {**os.environ, "TMPDIR": str(workdir)}
    base = [sys.executable, "-m", f"bench.{script.path.stem}"]  # from REPO, as bench.run
    command = [*base, _size_flag(base, env), str(script.count(ctx.quick))]
    log.info("running %s", " ".join(command[1:]))
    try:
        result = subprocess.run(
            command,
            cwd=REPO,
            env=env,
            stdout=subprocess.PIPE,
            text=True,
            timeout=script.timeout(ctx.quick),
        )
    finally:
        ctx.remove(workdir)
    lines = [line for line in result.stdout.splitlines() if line.strip()]
    if result.returncode != 0:
        tail = lines[-1][:300] if lines else "no output"
        raise RuntimeError(f"{script.file} exited with {result.returncode}: {tail}")
    if not lines:
        raise RuntimeError(f"{script.file} printed nothing on stdout")
    try:
        parsed = json.loads(lines[-1])
    except ValueError as exc:
        raise RuntimeError(f"{script.file}: last line is not JSON: {lines[-1][:200]}") from exc
    if not isinstance(parsed, dict):
        raise RuntimeError(f"{script.file}: last line is not a JSON object")
    return parsed


def _size_flag(base: list[str], env: dict[str, str]) -> str:
    """The first of SIZE_FLAGS the script's --help mentions (default: --count, as agreed)."""
    try:
        text = subprocess.run(
            [*base, "--help"], cwd=REPO, env=env, capture_output=True, text=True, timeout=60
        ).stdout
    except (OSError, subprocess.TimeoutExpired):
        return SIZE_FLAGS[0]
    for flag in SIZE_FLAGS:
        if re.search(rf"(?<![\w-]){re.escape(flag)}(?![\w-])", text):
            return flag
    return SIZE_FLAGS[0]


def number(data: dict[str, Any], *keys: str) -> float | None:
    """The first of ``keys`` holding a number; ``a.b`` looks inside a nested object."""
    for key in keys:
        value: Any = data
        for part in key.split("."):
            value = value.get(part) if isinstance(value, dict) else None
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
    return None


def replication(ctx: Context) -> dict[str, Any]:
    data = run_script(ctx, REPLIKATE)
    count = int(number(data, "messages", "count") or REPLIKATE.count(ctx.quick))
    rate = number(data, "messages_per_s", "messages_per_second", "rate")
    seconds = number(data, "seconds", "elapsed_seconds")
    if rate is None and seconds:
        rate = count / seconds
    parts = data.get("ms_per_message")
    note = ""
    if isinstance(parts, dict):
        note = ", ".join(f"{key} {value} ms" for key, value in parts.items())
    ctx.results.add(
        Row(
            f"replicate {count:,} x 1 KB",
            "messages/s",
            rate,
            "msg/s",
            True,
            ctx.shared.get("durable_write_rate_1"),
            "durable 1 KB write, 1 thread (the target's part)",
            note=note,
        )
    )
    return data


def claireup(ctx: Context) -> dict[str, Any]:
    """Rated against listing every file plus deleting the expired ones, at this disk's rates."""
    data = run_script(ctx, CLAIREUP)
    count = int(number(data, "files", "count") or CLAIREUP.count(ctx.quick))
    expired = int(number(data, "expired") or 0)
    seconds = number(data, "run_seconds", "seconds", "elapsed_seconds")
    scenario = f"claireup over {count:,} files"
    ceiling, label = None, ""
    per_listed = ctx.shared.get("list_seconds_per_file")
    if per_listed is not None:
        # Files written longer ago than the writeback delay are on disk when claireup
        # deletes them; a quick fill is deleted from the page cache. Match that.
        fill_seconds = number(data, "fill_seconds") or 0.0
        on_disk = fill_seconds > dirty_expire_seconds()
        sample = 5_000 if ctx.quick else 20_000
        per_unlink = unlink_seconds_per_file(
            ctx.fresh_dir("unlink-sample"), sample, 32, written_back=on_disk
        )
        ctx.remove(ctx.root / "unlink-sample")
        ceiling = count * per_listed + expired * per_unlink
        state = "written-back" if on_disk else "cached (not yet written back)"
        label = f"list {count:,} + unlink {expired:,} {state} files, Python"
        data["ceiling_unlink_ms_per_file"] = per_unlink * 1000
    ctx.results.add(Row(scenario, "seconds", seconds, "s", False, ceiling, label))
    _memory_row(
        ctx, scenario, number(data, "peak_rss_mib", "peak_rss_mb"), number(data, "baseline_rss_mib")
    )
    return data


def statissa(ctx: Context) -> dict[str, Any]:
    """Spark (what the service runs) and the plain-Python scan, against scandir + stat."""
    data = run_script(ctx, STATISSA)
    count = int(number(data, "files", "count") or STATISSA.count(ctx.quick))
    per_file = ctx.shared.get("scan_stat_seconds_per_file")
    ceiling = count * per_file if per_file is not None else None
    label = f"scandir + stat of {count:,} files, Python" if ceiling else ""
    for mode, title in (("spark", "Spark"), ("python", "plain Python scan")):
        if not isinstance(data.get(mode), dict):
            continue
        scenario = f"statissa over {count:,} files ({title})"
        startup = number(data, f"{mode}.startup_seconds")
        note = f"+ {startup:.0f} s Spark start" if startup else ""
        ctx.results.add(
            Row(
                scenario,
                "seconds, first run",
                number(data, f"{mode}.first_run_seconds"),
                "s",
                False,
                ceiling,
                label,
                note=note,
            )
        )
        ctx.results.add(
            Row(
                scenario,
                "seconds, second run",
                number(data, f"{mode}.second_run_seconds"),
                "s",
                False,
                ceiling,
                label,
            )
        )
        _memory_row(ctx, scenario, number(data, f"{mode}.peak_tree_rss_mib"), None)
    if not any(isinstance(data.get(mode), dict) for mode in ("spark", "python")):
        seconds = number(data, "seconds", "run_seconds", "elapsed_seconds")
        ctx.results.add(
            Row(f"statissa over {count:,} files", "seconds", seconds, "s", False, ceiling, label)
        )
    return data


def _memory_row(
    ctx: Context, scenario: str, peak_mib: float | None, idle_mib: float | None
) -> None:
    """Peak memory, rated against the same program over nothing when the script measured it."""
    if peak_mib is None:
        return
    idle = idle_mib * 2**20 / 1e6 if idle_mib is not None else None
    label = "the same run over an empty data dir" if idle is not None else ""
    ctx.results.add(Row(scenario, "peak memory", peak_mib * 2**20 / 1e6, "MB", False, idle, label))
