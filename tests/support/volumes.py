"""Real mounts for the volume tests (root needed), and snapshots of a tree to compare."""

from __future__ import annotations

import gc
import subprocess
import time
from pathlib import Path


def run(*command: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, capture_output=True, text=True, check=False)


class Mount:
    """A file system mounted for one test, unmounted (lazily if still busy) afterwards."""

    def __init__(self, point: Path) -> None:
        self.point = point

    def remount(self, options: str, *, busy_for: float = 0.0) -> None:
        """Remount; with ``busy_for``, keep trying that long while files are open for
        writing (a running api closes a queue's files once it is idle)."""
        deadline = time.monotonic() + busy_for
        while True:
            done = run("mount", "-o", f"remount,{options}", str(self.point))
            if done.returncode == 0 or "busy" not in done.stderr:
                break
            if time.monotonic() > deadline:
                break
            time.sleep(0.1)
        assert done.returncode == 0, done.stderr

    def unmount(self) -> None:
        gc.collect()  # files an app under test may have left open
        if run("umount", str(self.point)).returncode != 0:
            run("umount", "--lazy", str(self.point))


def tree(root: Path) -> dict[str, int]:
    """Every path under ``root`` with its size (directories -1): a snapshot to compare."""
    found = {}
    for path in sorted(root.rglob("*")):
        relative = str(path.relative_to(root))
        found[relative] = -1 if path.is_dir() else path.stat().st_size
    return found
