"""The write-ahead log: why a durable publish costs one device flush and no journal commit.

Making a new file durable the POSIX way (flush it, rename it, flush its directory, flush
the index) costs the file system three journal commits. A commit writes its records
into a log file that was allocated and zero-filled once and never changes size, and
flushes only that: ``fdatasync`` of blocks that already exist writes the data and one
cache flush, no metadata. Only then are the ``.bin`` files, nonce markers and index
records written, none of them flushed; a checkpoint makes them durable later, in bulk
(``core.checkpoint``), and recovery redoes from the log whatever a power loss took
(``core.recovery``). PostgreSQL's WAL, SQLite's WAL mode and Kafka's log work this way.

One log per queue (``.zoscii/wal/<queue>.wal``), and one for the store, written under
the same lock as the commit it records: so a queue's records are in the order of its
names, across every process and container on the volume, and losing the unflushed end
of a log (``interval`` durability, a power loss) loses the newest messages, never a
message before a kept one.

The file is a ring. Two 512-byte header slots (written alternately, each with a CRC,
so a torn one leaves the other) hold the checkpoint (where recovery starts: offset and
sequence number), a tail and the boot id of the last writer; records follow from
``DATA_START``. An append does not write the header: that would put a second block, far
from the record, into every flush (measured on a loop device: 0.21 against 0.145 ms an
``fdatasync``, docs/benchmarks.md). So the
header's tail is where the log stood when the header was last written (a checkpoint, a
take-back, the first ``interval`` append after a checkpoint), and the real tail is the
end of the chain of whole records from there, which ``header`` follows, as recovery
does. A record is a 24-byte head (magic, sequence
number, length, flags, CRC-32 of all of it) and a body; recovery follows the chain from
the checkpoint while each record is whole and numbered one past the last, so a torn
record, zeros or an older lap's record all end it. A record that does not fit before
the end is preceded by a ``WRAP`` record (or by too little room for one) and written at
``DATA_START``. The writer never overwrites the records after the checkpoint: when the
ring is full the caller checkpoints at once or grows the log (``LogFull``).

Everything here runs with the owner's lock held; nothing is shared between threads.
"""

from __future__ import annotations

import os
import struct
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import cache
from typing import Any, NamedTuple

DATA_START = 4096
SLOT_SIZE = 512
MAGIC = b"ZOSCII-WAL-1 "
RECORD_MAGIC = b"ZWR1"
_HEAD = struct.Struct("<4sQIII")  # magic, lsn, body length, flags, crc32
HEAD_SIZE = _HEAD.size
WRAP = 1  # the record is a marker: the chain goes on at DATA_START
INITIAL_SIZE = 1 << 20
MAX_SIZE = 256 << 20
_ZEROS = bytes(1 << 16)


class LogFull(Exception):
    """The record does not fit in the free part of the ring: checkpoint (or grow), retry."""


class LogCorrupt(Exception):
    """Neither header slot is whole: the file was never finished (a crash while it was
    being created), or it is not ours."""


@cache
def boot_id() -> str:
    """This boot of the machine's kernel (shared by its containers): a log written under
    another one may have lost what it had not flushed, as after a power loss."""
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as file:
            return file.read().strip()[:36]
    except OSError:
        return "unknown"


class LogHeader(NamedTuple):
    """What the header slots say (immutable: a commit reads it, a new one is written)."""

    generation: int = 0
    size: int = INITIAL_SIZE
    ckpt_off: int = DATA_START
    ckpt_lsn: int = 1
    tail_off: int = DATA_START
    tail_lsn: int = 1
    boot: str = ""
    # Written in ``interval`` durability since the checkpoint: after a power loss, files
    # newer than the log's last whole record may be torn (core.recovery moves them aside).
    relaxed: bool = False
    # The highest name the checkpoint covers (a queue's; "" for the store): names above
    # it are only as durable as the log records after the checkpoint.
    ckpt_last: str = ""

    @property
    def empty(self) -> bool:
        """No record after the checkpoint."""
        return self.tail_lsn == self.ckpt_lsn

    def but(self, **changes: Any) -> LogHeader:
        """A copy with ``changes``."""
        return self._replace(**changes)

    def encode(self) -> bytes:
        line = MAGIC + (
            f"{self.generation:012d} {self.size:012d} {self.ckpt_off:012d} "
            f"{self.ckpt_lsn:016d} {self.tail_off:012d} {self.tail_lsn:016d} "
            f"{self.boot or '-':<36} {int(self.relaxed)} {self.ckpt_last or '-':<72}"
        ).encode("ascii")
        line += b" %08x" % zlib.crc32(line)
        return line.ljust(SLOT_SIZE - 1) + b"\n"

    @classmethod
    def decode(cls, raw: bytes) -> LogHeader | None:
        if not raw.startswith(MAGIC):
            return None
        body = raw.partition(b"\n")[0]
        line, _, crc = body.rstrip(b" ").rpartition(b" ")
        try:
            if int(crc, 16) != zlib.crc32(line):
                return None
            fields = line[len(MAGIC) :].decode("ascii").split()
            gen, size, ckpt_off, ckpt_lsn, tail_off, tail_lsn, boot, relaxed, last = fields
            return cls(
                generation=int(gen),
                size=int(size),
                ckpt_off=int(ckpt_off),
                ckpt_lsn=int(ckpt_lsn),
                tail_off=int(tail_off),
                tail_lsn=int(tail_lsn),
                boot="" if boot == "-" else boot,
                relaxed=relaxed == "1",
                ckpt_last="" if last == "-" else last,
            )
        except ValueError:
            return None


@dataclass
class Entry:
    """One message a commit makes: where it goes and how to make it again.

    ``path`` is relative to the data directory (``queues/<q>/<name>`` or a store path).
    Its bytes are in the record (``data``), or, for a large message, in the upload file
    ``temp`` (relative too), whose content was flushed before the record was written.
    """

    path: str
    size: int
    data: bytes | None = None
    temp: str = ""
    nonce: str = ""
    expires_ms: int | None = None  # a queue message's TTL (the queue's .ttl file)


@dataclass
class Record:
    """What recovery needs to redo one commit (a group of publishes, a store, a batch)."""

    queue: str  # "" for the store
    entries: list[Entry] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)  # names the queue policy removed
    lsn: int = 0
    offset: int = 0
    end: int = 0  # where the next record starts
    prior: tuple[int, int] = (0, 0)  # the log's tail before it was appended (take_back)
    _encoded: bytes | None = field(default=None, repr=False, compare=False)

    def size(self) -> int:
        """Bytes the record takes in a log."""
        return _align(HEAD_SIZE + len(self.encode()))

    def encode(self) -> bytes:
        """Text lines, then the inline bytes: ``<queue>``, one line per entry (path,
        size, 1 when its bytes follow, temp, nonce, expiry; tab-separated, "-" for none),
        the dropped names on one line. Names, paths and nonces hold no tab or newline."""
        if self._encoded is not None:
            return self._encoded
        lines = [self.queue or "-", str(len(self.entries))]
        lines += [
            f"{e.path}\t{e.size}\t{int(e.data is not None)}\t{e.temp or '-'}\t"
            f"{e.nonce or '-'}\t{'-' if e.expires_ms is None else e.expires_ms}"
            for e in self.entries
        ]
        lines.append("\t".join(self.dropped) or "-")
        head = "\n".join(lines).encode("utf-8")
        parts = [struct.pack("<I", len(head)), head]
        parts.extend(e.data for e in self.entries if e.data is not None)
        self._encoded = b"".join(parts)
        return self._encoded

    @classmethod
    def decode(cls, body: bytes, lsn: int, offset: int) -> Record:
        (length,) = struct.unpack_from("<I", body)
        lines = body[4 : 4 + length].decode("utf-8").split("\n")
        count = int(lines[1])
        position = 4 + length
        entries = []
        for line in lines[2 : 2 + count]:
            path, size, inline, temp, nonce, expires = line.split("\t")
            data = None
            if inline == "1":
                data = body[position : position + int(size)]
                position += int(size)
            entries.append(
                Entry(
                    path,
                    int(size),
                    data,
                    "" if temp == "-" else temp,
                    "" if nonce == "-" else nonce,
                    None if expires == "-" else int(expires),
                )
            )
        dropped = lines[2 + count]
        queue = lines[0]
        return cls(
            "" if queue == "-" else queue,
            entries,
            [] if dropped == "-" else dropped.split("\t"),
            lsn,
            offset,
        )


def read_header(raw: bytes) -> LogHeader | None:
    """The newer whole one of the two header slots at the start of ``raw``."""
    slots = (LogHeader.decode(raw[:SLOT_SIZE]), LogHeader.decode(raw[SLOT_SIZE : 2 * SLOT_SIZE]))
    whole = [slot for slot in slots if slot is not None]
    return max(whole, key=lambda h: h.generation) if whole else None


def _align(offset: int) -> int:
    return (offset + 7) & ~7


class WriteAheadLog:
    """One open log file. The caller holds the lock of what it records (queue, store)."""

    def __init__(self, fd: int, path: str) -> None:
        self.fd = fd
        self.path = path
        self.ino = os.fstat(fd).st_ino
        # The header slots as last read or written, and what they say: a commit reads
        # the header and decodes it only when another process wrote it since.
        self._raw = b""
        self._header: LogHeader | None = None

    @classmethod
    def open(cls, path: str, *, create: bool) -> WriteAheadLog | None:
        """The log at ``path``; made (zero-filled, flushed) when missing and ``create``."""
        flags = os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC
        try:
            fd = os.open(path, flags)
        except FileNotFoundError:
            if not create:
                return None
            return cls._create(path)
        log = cls(fd, path)
        try:
            log.header()
        except LogCorrupt:
            if not create:
                log.close()
                return None
            log._format(INITIAL_SIZE)  # never finished: nothing in it was ever flushed
        return log

    @classmethod
    def _create(cls, path: str) -> WriteAheadLog:
        directory = os.path.dirname(path)
        os.makedirs(directory, exist_ok=True)
        try:
            fd = os.open(
                path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644
            )
        except FileExistsError:  # made meanwhile by a process not holding our lock: ours now
            fd = os.open(path, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC)
        log = cls(fd, path)
        log._format(INITIAL_SIZE)
        dir_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
        return log

    def _format(self, size: int) -> None:
        """Zero-fill ``size`` bytes and write a fresh header, flushed: from here on a
        flush of the log writes no metadata (its blocks exist and its size is fixed)."""
        self._zero_fill(0, size)
        header = LogHeader(size=size, boot=boot_id())
        self._write_slots(header)
        os.fsync(self.fd)

    def _zero_fill(self, start: int, end: int) -> None:
        position = start
        while position < end:
            position += os.pwrite(self.fd, _ZEROS[: min(len(_ZEROS), end - position)], position)

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    # --- the header ---------------------------------------------------------------------
    def header(self) -> LogHeader:
        """The header, its tail moved to the end of the records appended after it."""
        raw = os.pread(self.fd, 2 * SLOT_SIZE, 0)
        if raw == self._raw and self._header is not None:
            header = self._header  # its tail: where this process last saw the end
        else:
            found = read_header(raw)
            if found is None:
                raise LogCorrupt(f"{self.path}: no whole header")
            self._raw, header = raw, found
        end = None
        for record in self.records(header, start=(header.tail_off, header.tail_lsn)):
            end = record
        if end is not None:  # appended since, by another process or before a crash
            header = header.but(tail_off=end.end, tail_lsn=end.lsn + 1)
        self._header = header
        return header

    def write_header(self, header: LogHeader, **changes: Any) -> LogHeader:
        """Write the next generation of ``header`` (with ``changes``) into the slot not
        holding the current one (not flushed: the caller's flush of the log carries it)."""
        header = header.but(generation=header.generation + 1, boot=boot_id(), **changes)
        slot = (header.generation % 2) * SLOT_SIZE
        encoded = header.encode()
        os.pwrite(self.fd, encoded, slot)
        raw = self._raw if len(self._raw) == 2 * SLOT_SIZE else bytes(2 * SLOT_SIZE)
        self._raw, self._header = raw[:slot] + encoded + raw[slot + SLOT_SIZE :], header
        return header

    def _write_slots(self, header: LogHeader) -> None:
        os.pwrite(self.fd, header.encode() * 2, 0)
        self._raw, self._header = b"", None

    def sync(self) -> None:
        os.fdatasync(self.fd)

    # --- appending -------------------------------------------------------------------------
    def append(self, header: LogHeader, record: Record, *, relaxed: bool = False) -> LogHeader:
        """Write ``record`` at the tail (unflushed); the header is written only when
        ``relaxed`` must be set in it, once after each checkpoint.

        Raises LogFull, writing nothing, when the free part of the ring is too small
        (``make_room`` after a checkpoint). ``relaxed``: the writer answers before the
        log is flushed (``interval`` durability; see LogHeader.relaxed). Returns the new
        header; ``record.lsn``, ``record.offset`` and ``record.end`` are set.
        """
        body = record.encode()
        need = record.size()
        place = _place(header, need)
        if place is None:
            raise LogFull(f"{self.path}: {need} bytes do not fit")
        wrap_at, offset = place
        lsn = header.tail_lsn
        record.prior = (header.tail_off, header.tail_lsn)
        if wrap_at is not None and wrap_at + HEAD_SIZE <= header.size:
            os.pwrite(self.fd, _head(lsn, b"", WRAP), wrap_at)
            lsn += 1  # (with less room than a head left, recovery goes round by itself)
        os.pwrite(self.fd, _head(lsn, body, 0) + body, offset)
        record.lsn, record.offset, record.end = lsn, offset, offset + need
        header = header.but(tail_off=offset + need, tail_lsn=lsn + 1)
        if relaxed and not header.relaxed:
            return self.write_header(header, relaxed=True)
        self._header = header  # the slots on disk are unchanged: ``header`` goes on from here
        return header

    @staticmethod
    def fits(header: LogHeader, record: Record) -> bool:
        """Whether ``append`` would find room for ``record`` now."""
        return _place(header, record.size()) is not None

    def room_for(self, header: LogHeader, record: Record) -> LogHeader | None:
        """A header under which ``record`` fits: ``header`` itself, or, for an empty ring
        whose end is too near, the ring started again at its beginning (not grown:
        nothing waited for a checkpoint). None when the ring is full: the caller
        checkpoints at once, then ``make_room(grow=True)``."""
        if self.fits(header, record):
            return header
        if header.empty:
            return self.make_room(header, record, grow=False)
        return None

    def make_room(self, header: LogHeader, record: Record, *, grow: bool) -> LogHeader:
        """An empty log (just checkpointed) made ready for ``record``: started again at
        ``DATA_START`` and, when ``grow`` or when the record needs it, made larger. Both
        are flushed before the space is used: recovery starts and wraps where the
        header it reads says."""
        assert header.empty
        need = record.size()
        old = size = header.size
        while size < MAX_SIZE and ((grow and size == old) or size - DATA_START < need):
            size *= 2
        if size - DATA_START < need:
            raise LogFull(f"{self.path}: a record of {need} bytes is larger than a log may be")
        if size > old:
            self._zero_fill(old, size)
        header = self.write_header(header, size=size, ckpt_off=DATA_START, tail_off=DATA_START)
        if size > old:
            os.fsync(self.fd)  # the size changed: a full fsync, once
        else:
            os.fdatasync(self.fd)
        return header

    def take_back(self, header: LogHeader, record: Record) -> LogHeader:
        """Remove ``record``, the last one appended (``header`` counts it), flushed: a
        group that failed after it was logged must not be redone by a recovery."""
        prior_off, prior_lsn = record.prior
        blank = bytes(HEAD_SIZE)
        os.pwrite(self.fd, blank, record.offset)
        if prior_off != record.offset and prior_off + HEAD_SIZE <= header.size:
            os.pwrite(self.fd, blank, prior_off)  # the WRAP that went round before it
        header = self.write_header(header, tail_off=prior_off, tail_lsn=prior_lsn)
        os.fdatasync(self.fd)
        return header

    def checkpointed(self, header: LogHeader, offset: int, lsn: int, last: str) -> LogHeader:
        """Move the checkpoint to (offset, lsn), flushed: the records before it will not
        be redone, and their space can be written again."""
        relaxed = header.relaxed and lsn != header.tail_lsn
        header = self.write_header(
            header, ckpt_off=offset, ckpt_lsn=lsn, ckpt_last=last, relaxed=relaxed
        )
        os.fdatasync(self.fd)
        return header

    # --- reading -------------------------------------------------------------------------
    def records(
        self, header: LogHeader, *, start: tuple[int, int] | None = None
    ) -> Iterator[Record]:
        """The whole records after the checkpoint (or from ``start``), in order: the chain
        ends at the first torn, missing or out-of-sequence record."""
        offset, lsn = start or (header.ckpt_off, header.ckpt_lsn)
        size = header.size
        for _ in range(size // HEAD_SIZE + 1):  # a bound: a chain cannot be longer
            if offset + HEAD_SIZE > size:
                offset = DATA_START
            raw = os.pread(self.fd, HEAD_SIZE, offset)
            if len(raw) < HEAD_SIZE:
                return
            magic, got_lsn, length, flags, crc = _HEAD.unpack(raw)
            if magic != RECORD_MAGIC or got_lsn != lsn or offset + HEAD_SIZE + length > size:
                return
            body = os.pread(self.fd, length, offset + HEAD_SIZE) if length else b""
            if zlib.crc32(body, zlib.crc32(raw[4:20])) != crc:
                return
            if flags & WRAP:
                offset, lsn = DATA_START, lsn + 1
                continue
            try:
                record = Record.decode(body, lsn, offset)
            except (ValueError, IndexError, struct.error, UnicodeDecodeError):
                return  # whole by its CRC but not ours to read: the end of what we know
            record.end = _align(offset + HEAD_SIZE + length)
            yield record
            offset, lsn = record.end, lsn + 1


def _place(header: LogHeader, need: int) -> tuple[int | None, int] | None:
    """(where a WRAP goes or None, where the record goes) for a record of ``need`` bytes,
    or None when it would overwrite a record after the checkpoint."""
    tail, ckpt, size = header.tail_off, header.ckpt_off, header.size
    if header.empty:  # going round an empty ring: make_room starts it again instead
        return (None, tail) if tail + need <= size else None
    if tail >= ckpt:  # the live records are [ckpt, tail)
        if tail + need <= size:
            return None, tail
        return (tail, DATA_START) if DATA_START + need <= ckpt else None
    return (None, tail) if tail + need <= ckpt else None  # gone round: [ckpt, end) + [start, tail)


def _head(lsn: int, body: bytes, flags: int) -> bytes:
    partial = struct.pack("<QII", lsn, len(body), flags)
    crc = zlib.crc32(body, zlib.crc32(partial))
    return RECORD_MAGIC + partial + struct.pack("<I", crc)
