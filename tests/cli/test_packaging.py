"""`pip install .` into a fresh venv gives the library and a working `zoscii` command."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.api_server import REPO
from tests.support.queues import queue_name


@pytest.mark.slow
def test_pip_install_gives_the_library_and_the_command(url: str, tmp_path: Path) -> None:
    # a copy of what the package is built from: building in the work tree would leave
    # build/ and *.egg-info behind there
    project = tmp_path / "project"
    project.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, project / name)
    shutil.copytree(
        REPO / "src", project / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info")
    )
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pip = subprocess.run(
        [str(venv / "bin" / "pip"), "install", "--quiet", str(project)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert pip.returncode == 0, pip.stdout + pip.stderr

    zoscii = venv / "bin" / "zoscii"
    help_text = subprocess.run([zoscii, "--help"], capture_output=True, text=True, cwd="/")
    assert help_text.returncode == 0 and "usage: zoscii" in help_text.stdout
    library = subprocess.run(
        [venv / "bin" / "python", "-c", "import zosciimq.client as c; print(c.__file__)"],
        capture_output=True,
        text=True,
        cwd="/",
    )
    assert library.returncode == 0
    assert library.stdout.startswith(str(venv))  # the installed copy, not the work tree

    queue = queue_name()
    env = {"PATH": "/usr/bin:/bin", "ZOSCII_URL": url}
    published = subprocess.run(
        [zoscii, "publish", queue, "-"], input=b"\x00installed\xff", env=env, cwd="/"
    )
    assert published.returncode == 0
    fetched = subprocess.run([zoscii, "fetch", queue], capture_output=True, env=env, cwd="/")
    assert (fetched.returncode, fetched.stdout) == (0, b"\x00installed\xff")
    after = subprocess.run(
        [zoscii, "fetch", queue, "--after", fetched.stderr.decode().strip()], env=env, cwd="/"
    )
    assert after.returncode == 4  # the console script exits with main()'s code
