"""Benchmarks of ZOSCII MQ, each figure next to this machine's own ceiling.

Run from the repository root with the venv of ``make venv``:
``.venv/bin/python -m bench.run [--quick] [--containers]``; the scripts of single
scenarios the same way (``.venv/bin/python -m bench.replikate_bench``). ``zosciimq`` and
the services are imported as installed there; ``bench`` and ``tests.support`` are found
in the current directory, the repository root.
"""

from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
