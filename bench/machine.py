"""What the figures depend on: cores, versions, kernel and the data directory's file system."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

import psutil


def describe(data_dir: Path, *, mode: str, server: str) -> dict[str, Any]:
    fs_type, device, mount_point = file_system(data_dir)
    return {
        "mode": mode,
        "server": server,
        "cores": os.cpu_count(),
        "memory": f"{psutil.virtual_memory().total / 2**30:.1f} GiB",
        "python": platform.python_version(),
        "gunicorn": _version("gunicorn"),
        "flask": _version("flask"),
        "werkzeug": _version("werkzeug"),
        "requests": _version("requests"),
        "kernel": f"{platform.system()} {platform.release()}",
        "data dir": str(data_dir),
        "file system": f"{fs_type} on {device} (mounted at {mount_point})",
        "cpu": _cpu_model(),
        "load average at start": " ".join(f"{load:.2f}" for load in os.getloadavg()),
        "executable": sys.executable,
    }


def file_system(path: Path) -> tuple[str, str, str]:
    """(type, device, mount point) of the mount holding ``path``, from /proc/mounts.

    ``stat -f`` is the fallback; it cannot tell ext4 from ext2/ext3 (same magic number).
    """
    path = Path(path).resolve()
    best: tuple[str, str, str] = ("", "", "")
    try:
        lines = Path("/proc/mounts").read_text().splitlines()
    except OSError:
        lines = []
    for line in lines:
        fields = line.split()
        if len(fields) < 3:
            continue
        device, mount_point, fs_type = fields[0], _unescape(fields[1]), fields[2]
        inside = path == Path(mount_point) or Path(mount_point) in path.parents
        if inside and len(mount_point) >= len(best[2]):
            best = (fs_type, device, mount_point)
    if best[0]:
        return best
    try:
        fs_type = subprocess.run(
            ["stat", "-f", "-c", "%T", str(path)], capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        fs_type = "unknown"
    return fs_type, "?", "?"


def _unescape(field: str) -> str:
    """/proc/mounts writes spaces and tabs in paths as octal escapes."""
    return field.replace("\\040", " ").replace("\\011", "\t").replace("\\134", "\\")


def _version(package: str) -> str:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "not installed"


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"
