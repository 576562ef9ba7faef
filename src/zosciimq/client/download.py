"""Resumable downloads of large messages into a file.

The bytes go to ``<dest>.part`` as they arrive, beside a small ``<dest>.part.json``
that says which message they belong to. A download that is interrupted (the
connection drops, the process dies, the caller gives up) is resumed by calling it
again: it asks only for the missing bytes (``offset`` for fetch, HTTP ``Range`` for
retrieve in the default mode) and checks that the server answers for the same message
at the same offset. When the message is complete the part file is fsynced and renamed
to ``dest``, so ``dest`` only ever holds a whole message.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

from zosciimq.client.errors import NotZosciiReply, RangeNotSatisfiable, TruncatedReply
from zosciimq.client.replies import Received, ReplyInfo
from zosciimq.core.durable import atomic_write, fsync_dir, unlink_quietly

if TYPE_CHECKING:
    from zosciimq.client.client import ZosciiClient

Progress = Callable[[int, int | None], None]  # (bytes on disk, total or None)


@dataclass(frozen=True)
class DownloadResult:
    name: str
    path: Path
    size: int
    resumed_from: int  # bytes that were already on disk when this call started


class _Restart(Exception):
    """The server answered for another message or from the start: begin again."""


class Download:
    def __init__(
        self,
        client: ZosciiClient,
        dest: Path,
        *,
        queue: str | None = None,
        after: str = "",
        name: str | None = None,
        on_progress: Progress | None = None,
    ) -> None:
        self.source: dict[str, str]
        if queue is not None and name is None:
            self.source = {"queue": queue, "after": after}
        elif name is not None and queue is None:
            self.source = {"name": name}
        else:
            raise ValueError("give either a queue (fetch) or a store name (retrieve)")
        self.client = client
        self.dest = dest
        self.part = dest.with_name(dest.name + ".part")
        self.meta = dest.with_name(dest.name + ".part.json")
        self.on_progress = on_progress

    def run(self) -> DownloadResult | None:
        """The finished download, or None when the queue has nothing after ``after``."""
        state = self._load_state()
        resumed_from = self._part_size() if state else 0
        if state and state.get("total") is not None and resumed_from == state["total"]:
            return self._finish(state["name"], resumed_from, resumed_from)
        try:
            try:
                received = self._transfer(state, resumed_from)
            except RangeNotSatisfiable:
                if not resumed_from:
                    raise
                raise _Restart from None  # a shorter message answers now: ours is gone
        except _Restart:
            self._discard()
            state, resumed_from = None, 0
            received = self._transfer(None, 0)
        if received is None:
            return None
        size = self._part_size()
        expected = received.total_length
        if expected is not None and size != expected:
            raise TruncatedReply(f"{received.name}: {size} of {expected} bytes after the transfer")
        return self._finish(received.name, size, resumed_from)

    def _transfer(self, state: dict[str, Any] | None, have: int) -> Received | None:
        expected_name = state["name"] if state else None
        out: list[BinaryIO] = []

        def open_sink(info: ReplyInfo) -> _PartWriter:
            if expected_name is not None and info.name != expected_name:
                raise _Restart  # that message is gone; the next one is answered instead
            if info.offset != have:
                if info.offset == 0:
                    raise _Restart  # the server ignored the offset: take it from the start
                raise NotZosciiReply(f"asked for offset {have}, got {info.offset}")
            if state is None:
                self._save_state({**self.source, "name": info.name, "total": info.total_length})
            file = open(self.part, "ab", buffering=0)  # noqa: SIM115 - closed below
            out.append(file)
            return _PartWriter(file, have, info.total_length, self.on_progress)

        try:
            if "queue" in self.source:
                return self.client.fetch_into(
                    self.source["queue"], self.source["after"], open_sink, offset=have
                )
            name = self.source["name"]
            if have and not self.client.original:
                return self.client.retrieve_into(
                    name, open_sink, headers={"Range": f"bytes={have}-"}
                )
            return self.client.retrieve_into(name, open_sink, offset=have)
        finally:
            for file in out:
                file.close()

    def _finish(self, name: str, size: int, resumed_from: int) -> DownloadResult:
        with open(self.part, "rb") as file:
            os.fsync(file.fileno())
        os.replace(self.part, self.dest)
        fsync_dir(self.dest.parent)
        unlink_quietly(self.meta)
        return DownloadResult(name=name, path=self.dest, size=size, resumed_from=resumed_from)

    def _load_state(self) -> dict[str, Any] | None:
        """The saved state if it is for this same request and its part file exists."""
        try:
            state = json.loads(self.meta.read_text())
        except (FileNotFoundError, ValueError):
            state = None
        if (
            isinstance(state, dict)
            and all(state.get(k) == v for k, v in self.source.items())
            and isinstance(state.get("name"), str)
            and self.part.exists()
        ):
            return state
        self._discard()
        return None

    def _save_state(self, state: dict[str, Any]) -> None:
        self.dest.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(self.meta, json.dumps(state).encode())

    def _part_size(self) -> int:
        try:
            return self.part.stat().st_size
        except FileNotFoundError:
            return 0

    def _discard(self) -> None:
        unlink_quietly(self.part)
        unlink_quietly(self.meta)


class _PartWriter:
    def __init__(
        self, file: BinaryIO, done: int, total: int | None, on_progress: Progress | None
    ) -> None:
        self.file, self.done, self.total, self.on_progress = file, done, total, on_progress

    def write(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            view = view[self.file.write(view) :]
        self.done += len(data)
        if self.on_progress is not None:
            self.on_progress(self.done, self.total)
