"""Benchmarks of ZOSCII MQ, each figure next to this machine's own ceiling.

Run from the repository root: ``python -m bench.run [--quick] [--containers]``.

The package is not installed into the venv (pytest finds it through ``pythonpath``), so
the benchmarks put the repository's sources on ``sys.path`` the same way, here, before
any module of theirs imports ``zosciimq``.
"""

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SOURCE_DIRS = [REPO / "src", *sorted((REPO / "services").glob("*/"))]

for _path in (str(p) for p in [REPO, *SOURCE_DIRS]):
    if _path not in sys.path:
        sys.path.insert(1, _path)
