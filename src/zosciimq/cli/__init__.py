"""The ``zoscii`` command line (``zoscii --help``; ``python -m zosciimq.cli`` works too)."""

from zosciimq.cli.main import main

__all__ = ["main"]
