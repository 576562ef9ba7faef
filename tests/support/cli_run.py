"""Running the CLI in a child process, and what a run gave."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass


@dataclass(frozen=True)
class Run:
    code: int
    out: bytes
    err: str


def cli_env(**extra: str) -> dict[str, str]:
    """The environment of a ``python -m zosciimq.cli`` child: no ZOSCII_ settings."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ZOSCII_")}
    env.update(extra)
    return env


def run_process(
    *argv: str | bytes, stdin: bytes = b"", env: dict[str, str] | None = None, timeout: float = 60
) -> Run:
    done = subprocess.run(
        [sys.executable, "-m", "zosciimq.cli", *argv],
        input=stdin,
        capture_output=True,
        env=env or cli_env(),
        timeout=timeout,
        cwd="/",
    )
    return Run(done.returncode, done.stdout, done.stderr.decode(errors="replace"))
