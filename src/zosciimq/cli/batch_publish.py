"""publish --batch: many messages, few requests (the client's ``publish_iter``).

Each FILE is one message, streamed from disk by the client. ``-`` is stdin, one message
per line without its newline (``--lines``, the default for ``-``), or one per
NUL-terminated record with ``-z``; ``--lines``/``-z`` split FILEs the same way. Records
are read as they are sent, one request's worth at a time, so an endless pipe works and
memory stays flat.

One result per message, in input order, printed as soon as its request is acknowledged:
its name (``-`` when there is none: a repeat of a nonce, or a server that does not say),
or with ``--json`` one object per message.
"""

from __future__ import annotations

import os
import stat
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from zosciimq.cli import exit_codes
from zosciimq.cli.console import is_terminal
from zosciimq.cli.context import CliError, Context
from zosciimq.client import BatchItem, Published, ZosciiClientError
from zosciimq.client.payload import MessageSource
from zosciimq.client.publish_batch import DEFAULT_PUBLISH_BATCH_BYTES, DEFAULT_PUBLISH_BATCH_SIZE

READ_BLOCK = 1 << 16
NO_NAME = "-"
DEFAULT_BATCH_SIZE = DEFAULT_PUBLISH_BATCH_SIZE
DEFAULT_BATCH_BYTES = DEFAULT_PUBLISH_BATCH_BYTES


@dataclass(frozen=True)
class Origin:
    """Where a message came from: a file (or ``-``), and its record number when split."""

    source: str
    record: int | None
    size: int


def publish_batch(ctx: Context) -> int:
    args, console = ctx.args, ctx.console
    separator = _separator(ctx)
    total_messages, total_bytes = _check_inputs(ctx, separator)
    origins: deque[Origin] = deque()

    def items() -> Iterator[BatchItem]:
        for number, (origin, data) in enumerate(_messages(ctx, separator), 1):
            origins.append(origin)
            nonce = f"{args.nonce}-{number}" if args.nonce else None
            yield BatchItem(data, nonce=nonce)

    published = duplicates = unnamed = 0
    bar = ctx.batch_progress(
        f"publish {args.queue}", total_messages=total_messages, total_bytes=total_bytes
    )
    stdout_tty = is_terminal(console.stdout)
    try:
        for result in ctx.client.publish_iter(
            args.queue,
            items(),
            retention_days=args.retention,
            batch_size=args.batch_size,
            batch_bytes=args.batch_bytes,
            on_progress=bar.update,
        ):
            origin = origins.popleft()
            if stdout_tty:
                bar.clear()
            _print(ctx, origin, result)
            published += 1
            duplicates += result.duplicate is True
            unnamed += result.name is None and result.duplicate is not True
    except (ZosciiClientError, OSError, KeyboardInterrupt):
        bar.close()
        again = (
            "the same command with the same -n stores nothing twice, so it can be run again"
            if args.nonce
            else "the failed request stored nothing, unless only its reply was lost"
        )
        console.notice(f"{args.queue}: {published} message(s) published before the error; {again}")
        raise
    bar.close()
    _summary(ctx, published, duplicates, unnamed)
    return exit_codes.OK


def _print(ctx: Context, origin: Origin, result: Published) -> None:
    console = ctx.console
    if console.json:
        fields: dict[str, object] = {
            "action": "publish",
            "queue": ctx.args.queue,
            "source": origin.source,
        }
        if origin.record is not None:
            fields["record"] = origin.record
        fields.update(
            size=origin.size,
            name=result.name,
            nonce=result.nonce,
            duplicate=result.duplicate,
        )
        console.result(**fields)
    else:
        console.line(result.name or NO_NAME)


def _summary(ctx: Context, published: int, duplicates: int, unnamed: int) -> None:
    queue = ctx.args.queue
    if not published:
        ctx.console.notice(f"{queue}: no message to publish")
        return
    text = f"{queue}: {published} message(s) published"
    if duplicates:
        text += f"; {duplicates} were there already (nonce used), nothing stored for them"
    if unnamed:
        text += f"; {unnamed} without a name (the server does not say: printed as {NO_NAME})"
    ctx.console.notice(text)


# --- the input ------------------------------------------------------------------------
def _separator(ctx: Context) -> bytes | None:
    """b"\\n" (--lines), b"\\0" (-z), or None: each FILE whole (``-`` is split by lines)."""
    args = ctx.args
    if args.null:
        return b"\0"
    if args.lines:
        return b"\n"
    return None


def _check_inputs(ctx: Context, separator: bytes | None) -> tuple[int | None, int | None]:
    """Every FILE readable before anything is sent; the totals for the progress bar
    (known when every input is a whole file)."""
    files = ctx.args.batch
    if files.count("-") > 1:
        raise CliError("- (stdin) can be given only once", exit_codes.USAGE)
    total = 0
    for path in files:
        if path == "-":
            continue
        try:
            with open(path, "rb") as file:
                info = os.fstat(file.fileno())
        except OSError as exc:
            raise CliError(
                f"cannot read {path}: {exc.strerror}", exit_codes.INVALID, "input"
            ) from None
        if stat.S_ISDIR(info.st_mode):
            raise CliError(f"{path} is a directory", exit_codes.INVALID, "input")
        total += info.st_size
    if separator is None and "-" not in files:
        return len(files), total
    return None, None


def _messages(ctx: Context, separator: bytes | None) -> Iterator[tuple[Origin, MessageSource]]:
    for path in ctx.args.batch:
        if path == "-":
            for number, record in enumerate(records(ctx.stdin, separator or b"\n"), 1):
                yield Origin("-", number, len(record)), record
        elif separator is not None:
            with open(path, "rb") as file:
                for number, record in enumerate(records(file, separator), 1):
                    yield Origin(path, number, len(record)), record
        else:
            yield Origin(path, None, os.stat(path).st_size), Path(path)


def records(file: BinaryIO, separator: bytes) -> Iterator[bytes]:
    """The records of ``file``, each without its separator, read as they are needed.

    A last record without a separator counts; an empty one between two separators is
    an empty message; nothing after the last separator is no message.
    """
    pending = b""
    while block := _read(file):
        pending += block
        *complete, pending = pending.split(separator)
        yield from complete
    if pending:
        yield pending


def _read(file: BinaryIO) -> bytes:
    read1 = getattr(file, "read1", None)  # what a pipe has now, not a whole block
    return read1(READ_BLOCK) if read1 is not None else file.read(READ_BLOCK)
