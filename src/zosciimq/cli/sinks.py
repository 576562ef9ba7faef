"""Receiving a message: straight to stdout as it arrives, with a progress bar if big."""

from __future__ import annotations

from collections.abc import Callable
from typing import BinaryIO

from zosciimq.cli.context import Context
from zosciimq.client import ReplyInfo
from zosciimq.client.replies import Sink


class ProgressSink:
    def __init__(self, out: BinaryIO, update: Callable[[int, int | None], None], info: ReplyInfo):
        self.out = out
        self.update = update
        self.done = info.offset
        self.total = info.total_length or info.content_length

    def write(self, data: bytes) -> None:
        self.out.write(data)
        self.done += len(data)
        self.update(self.done, self.total)


def stdout_sink(ctx: Context, update: Callable[[int, int | None], None]) -> Callable[..., Sink]:
    """A sink factory for ``fetch_into``/``retrieve_into``; the name goes to stderr first."""

    def open_sink(info: ReplyInfo) -> Sink:
        ctx.console.notice(info.name)
        return ProgressSink(ctx.console.stdout, update, info)

    return open_sink
