"""Replicator pointer files: ``states/replikate_state_<sq>_<tq or "store">.txt``.

The file holds only the pointer (the last source name replicated), as the original's
does, so either implementation's replicator can carry on from the other's state.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

from zosciimq.core.durable import atomic_write, ensure_dir
from zosciimq.core.layout import DataDir
from zosciimq.core.names import clean_pointer

_UNSAFE = re.compile(r"[^a-zA-Z0-9_-]")
STORE_TARGET = "store"


def state_path(data_dir: DataDir, source_queue: str, target_queue: str | None) -> Path:
    sq = _UNSAFE.sub("", source_queue)
    tq = _UNSAFE.sub("", target_queue) if target_queue else STORE_TARGET
    return data_dir.states / f"replikate_state_{sq}_{tq}.txt"


def iter_state_files(data_dir: DataDir) -> Iterator[tuple[str, Path]]:
    """``(key, path)`` of every pointer file, key = ``<sq>_<tq>``, sorted by key.

    ``sq`` and ``tq`` may themselves hold underscores, so the key is not split further.
    """
    prefix, suffix = "replikate_state_", ".txt"
    try:
        paths = sorted(data_dir.states.glob(f"{prefix}*{suffix}"))
    except FileNotFoundError:
        return
    for path in paths:
        if path.is_file():
            yield path.name[len(prefix) : -len(suffix)], path


def read_pointer(path: Path) -> str:
    """The saved pointer, "" when there is none yet; a corrupt file is an error, not a reset."""
    try:
        text = path.read_text(encoding="ascii").strip()
    except FileNotFoundError:
        return ""
    return clean_pointer(text)


def write_pointer(path: Path, pointer: str) -> None:
    ensure_dir(path.parent)
    atomic_write(path, pointer.encode("ascii"))
