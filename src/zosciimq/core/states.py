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
    """The pointer file of replicating ``source_queue`` into ``target_queue`` (None: the
    store), named as the original names it (unsafe characters become ``_``).

    The original keeps the letter case of the queue names it was given, so when this
    file does not exist but one differing only in case does, that one is it: a
    replicator taking over from the original carries on where it stopped.
    """
    sq = _UNSAFE.sub("_", source_queue)
    tq = _UNSAFE.sub("_", target_queue) if target_queue else STORE_TARGET
    ours = data_dir.state_path(f"replikate_state_{sq}_{tq}.txt")
    if ours.exists():
        return ours
    try:
        wanted = ours.name.lower()
        others = [p for p in data_dir.states.iterdir() if p.name.lower() == wanted]
    except FileNotFoundError:
        return ours
    return others[0] if len(others) == 1 else ours


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
