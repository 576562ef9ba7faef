"""The message to publish or store: an argument, a file, or stdin (``-``), byte-exact.

Files and stdin are never read into memory: the client streams them from disk. Stdin
from a pipe is first copied to a temporary file, so its size is known (the server wants
it up front, and the progress bar too) and a retried request can send it again.
"""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from typing import BinaryIO, TypeAlias

from zosciimq.cli import exit_codes
from zosciimq.cli.context import CliError, Context
from zosciimq.cli.progress import NoProgress, ProgressBar

Source: TypeAlias = "bytes | BinaryIO | ProgressReader"


@contextmanager
def open_message(ctx: Context, label: str) -> Iterator[tuple[Source, int]]:
    """(what to hand to the client, its size in bytes), from MESSAGE, --file or -."""
    message, path = ctx.args.message, ctx.args.file
    if message is not None and path is not None:
        raise CliError("give the message as an argument or --file, not both", exit_codes.USAGE)
    if message is None and path is None:
        raise CliError(
            "no message: give it as an argument, with --file PATH, or - to read stdin",
            exit_codes.USAGE,
        )
    if message is not None and message != "-":
        data = os.fsencode(message)  # the argument's bytes as the shell passed them
        yield data, len(data)
        return
    with ExitStack() as stack:
        if message == "-" or path == "-":
            file = _stdin_file(ctx.stdin, stack)
        else:
            try:
                file = stack.enter_context(open(path, "rb"))
            except OSError as exc:
                raise CliError(
                    f"cannot read {path}: {exc.strerror}", exit_codes.INVALID, "input"
                ) from None
        start = file.tell()
        size = os.fstat(file.fileno()).st_size - start
        bar = stack.enter_context(_closing(ctx.progress(label)))
        yield ProgressReader(file, start, bar, size), size


def _stdin_file(stdin: BinaryIO, stack: ExitStack) -> BinaryIO:
    if _is_regular_file(stdin):
        return stdin  # `< file`: stream it from where it stands
    spool = stack.enter_context(tempfile.TemporaryFile(prefix="zoscii-stdin-"))  # noqa: SIM115
    shutil.copyfileobj(stdin, spool, 1 << 20)
    spool.seek(0)
    return spool


def _is_regular_file(file: BinaryIO) -> bool:
    try:
        return file.seekable() and stat.S_ISREG(os.fstat(file.fileno()).st_mode)
    except (OSError, ValueError, AttributeError):
        return False


@contextmanager
def _closing(bar: ProgressBar | NoProgress) -> Iterator[ProgressBar | NoProgress]:
    try:
        yield bar
    finally:
        bar.close()


class ProgressReader:
    """A seekable file that reports how far the upload has read it.

    The client rewinds it for a retry; the position, not a running count, is what
    is reported, so the bar goes back too.
    """

    def __init__(
        self, file: BinaryIO, start: int, bar: ProgressBar | NoProgress, size: int
    ) -> None:
        self.file, self.start, self.bar, self.size = file, start, bar, size

    def read(self, count: int = -1) -> bytes:
        data = self.file.read(count)
        self.bar.update(self.file.tell() - self.start, self.size)
        return data

    def seekable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = os.SEEK_SET) -> int:
        return self.file.seek(offset, whence)

    def tell(self) -> int:
        return self.file.tell()
