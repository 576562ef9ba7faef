"""Where a consumer keeps its pointer (the last message name it processed).

A restarted consumer loads the pointer and carries on with the next message, so the
store decides what "exactly where it stopped" survives: ``FilePointerStore`` writes
atomically and durably (the file holds only the pointer, the same format as the
replicator's state files); ``MemoryPointerStore`` is for tests and throwaway readers.
Anything with ``load()`` and ``save()`` will do (a database row, a key-value store).
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from zosciimq.core.states import read_pointer, write_pointer


class PointerStore(Protocol):
    def load(self) -> str:
        """The saved pointer, "" when there is none."""
        ...

    def save(self, pointer: str) -> None:
        """Persist ``pointer``; when this returns, a crash must not lose it."""
        ...


class FilePointerStore:
    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)

    def load(self) -> str:
        return read_pointer(self.path)

    def save(self, pointer: str) -> None:
        write_pointer(self.path, pointer)


class MemoryPointerStore:
    def __init__(self, pointer: str = "") -> None:
        self.pointer = pointer

    def load(self) -> str:
        return self.pointer

    def save(self, pointer: str) -> None:
        self.pointer = pointer
