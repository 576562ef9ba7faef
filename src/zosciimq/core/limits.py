"""The queue policy's limits, enforced inside a publish commit under the queue lock.

``core.commit`` asks ``make_room`` before it allocates names: the counts it checks are
the queue's message files as of that lock, kept in a small cache file
``.zoscii/index/<queue>.usage`` that is trusted only while it names the index header it
was written with (committed count, last name, directory mtime and inode). Anything else
that changed the directory (claireup deleting, a purge, a rebuild, another writer)
changes the header, and the next limited publish recounts by a stat of every indexed
file, once. So a limited publish costs O(1) plus the messages it drops; the counts are
exact for what went through the core. A publish whose nonce turns out to be used counts
toward the check although nothing is written. Which limits apply to a queue is the
policy file's to say (``core.policy``).
"""

from __future__ import annotations

import builtins
import logging
import os
import zlib
from collections.abc import Sequence
from dataclasses import dataclass

from zosciimq.core import index as idx
from zosciimq.core.durable import unlink_quietly
from zosciimq.core.layout import leftover_path
from zosciimq.core.policy import DROP_OLDEST, QueueRule
from zosciimq.errors import QueueFull

log = logging.getLogger(__name__)

REBUILD_AFTER = 1024  # dropped records the index keeps before it is rebuilt


@dataclass
class Usage:
    """A queue's message files as of an index header: ``head`` is the index position of
    the oldest record that may still have its file (the ones before were dropped)."""

    key: str
    head: int = 0
    count: int = 0
    bytes: int = 0

    def encode(self) -> builtins.bytes:  # ``bytes`` is the field here
        line = f"{self.key} {self.head} {self.count} {self.bytes}"
        return f"{line} {zlib.crc32(line.encode('ascii')):08x}\n".encode("ascii")


def header_key(header: idx.IndexHeader) -> str:
    return f"{header.committed}:{header.last or '-'}:{header.dir_mtime_ns}:{header.dir_ino}"


def read_usage(path: str, header: idx.IndexHeader) -> Usage | None:
    """The cached usage when it was written for this very header, else None."""
    try:
        with open(path, "rb") as file:
            raw = file.read(512)
        text = raw.decode("ascii")
        line, _, crc = text.rstrip("\n").rpartition(" ")
        if int(crc, 16) != zlib.crc32(line.encode("ascii")):
            return None
        key, head, count, size = line.split(" ")
        if key != header_key(header):
            return None
        return Usage(key, int(head), int(count), int(size))
    except (OSError, ValueError):
        return None


def write_usage(path: str, usage: Usage) -> None:
    """Not flushed: a lost or torn write only costs a recount."""
    tmp = leftover_path(path)
    try:
        with open(tmp, "wb") as file:
            file.write(usage.encode())
        os.replace(tmp, path)
    except OSError as exc:
        log.warning("cannot keep %s (%s): the next limited publish recounts", path, exc)
        unlink_quietly(tmp)
        unlink_quietly(path)


def scan_usage(queue_dir: str, index: idx.IndexFile, header: idx.IndexHeader) -> Usage:
    """Count the indexed files that exist (O(messages), once per outside change)."""
    usage = Usage(header_key(header), head=header.committed)
    for position, name in enumerate(index.iter_from(0, header.committed)):
        try:
            size = os.lstat(os.path.join(queue_dir, name)).st_size
        except (FileNotFoundError, ValueError):
            continue
        usage.head = min(usage.head, position)
        usage.count += 1
        usage.bytes += size
    return usage


def make_room(
    queue: str,
    rule: QueueRule,
    usage: Usage,
    queue_dir: str,
    index: idx.IndexFile,
    header: idx.IndexHeader,
    incoming: Sequence[tuple[int, int]],
) -> tuple[list[QueueFull | None], list[str]]:
    """For each submission (messages, bytes) in commit order: None when it fits (after
    dropping the oldest files with ``drop_oldest``), else the error it is refused with;
    and the names to drop.

    The caller drops them once its group is logged (a group that fails drops nothing);
    ``usage`` already counts them out, and the accepted submissions are the caller's to
    add once they are written. Only indexed (older) messages are ever dropped.
    """
    count, size = usage.count, usage.bytes
    verdicts: list[QueueFull | None] = []
    drops: list[str] = []
    for messages, nbytes in incoming:
        if _over(rule, messages, nbytes):
            verdicts.append(QueueFull(f"Queue '{queue}' cannot take this: {_limits(rule)}."))
            continue

        if rule.when_full == DROP_OLDEST:
            while _over(rule, count + messages, size + nbytes) and usage.head < header.committed:
                name = index.record(usage.head)
                usage.head += 1
                try:
                    dropped = os.lstat(os.path.join(queue_dir, name)).st_size
                except (FileNotFoundError, ValueError):
                    continue
                drops.append(name)
                count -= 1
                size -= dropped
                usage.count -= 1
                usage.bytes -= dropped
        if _over(rule, count + messages, size + nbytes):
            verdicts.append(
                QueueFull(f"Queue '{queue}' is full ({_limits(rule)}); nothing was kept.")
            )
            continue
        count += messages
        size += nbytes
        verdicts.append(None)
    return verdicts, drops


def _over(rule: QueueRule, messages: int, nbytes: int) -> bool:
    return (rule.max_messages is not None and messages > rule.max_messages) or (
        rule.max_bytes is not None and nbytes > rule.max_bytes
    )


def _limits(rule: QueueRule) -> str:
    parts = []
    if rule.max_messages is not None:
        parts.append(f"max_messages {rule.max_messages}")
    if rule.max_bytes is not None:
        parts.append(f"max_bytes {rule.max_bytes}")
    return ", ".join(parts)
