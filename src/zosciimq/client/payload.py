"""Turning what a caller hands to publish/store into a request body.

bytes and str go as they are (str as UTF-8: a ``str`` is always the message text, never
a file name). A file or stream is sent from disk without loading it into memory; one
that cannot seek (a pipe, a generator) is first spooled to a temporary file, because a
retried request must be able to send the same bytes again from the start. A path
(``pathlib.Path`` or any ``os.PathLike``) is opened here and sent the same way.
"""

from __future__ import annotations

import io
import os
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from typing import IO, BinaryIO, Protocol, cast

from zosciimq.client.errors import ZosciiClientError


class Readable(Protocol):
    """Anything with a file's ``read``: sent from where it stands (re-read from there
    for a retry when it also has ``seekable``, ``seek`` and ``tell``, else spooled)."""

    def read(self, size: int = -1, /) -> bytes: ...


MessageSource = (
    bytes | bytearray | memoryview | str | os.PathLike[str] | BinaryIO | IO[bytes] | Readable
    | Iterable[bytes]
)
SPOOL_CHUNK = 1 << 20


class PayloadTooLarge(ZosciiClientError):
    """The message is over the client's own ``max_message_bytes``; nothing was sent."""

    reason = "too_large"


@dataclass
class Payload:
    """Either ``data`` in memory or ``file`` positioned at ``start`` with ``size`` bytes."""

    size: int
    data: bytes | None = None
    file: BinaryIO | None = None
    start: int = 0
    _owned: bool = False
    spooled: bool = False  # ``file`` is a temporary copy of a stream that cannot be re-read

    @classmethod
    def from_source(cls, message: MessageSource, max_bytes: int | None = None) -> Payload:
        if isinstance(message, str):
            message = message.encode("utf-8")
        if isinstance(message, (bytes, bytearray, memoryview)):
            data = bytes(message)
            _check_size(len(data), max_bytes)
            return cls(size=len(data), data=data)
        if isinstance(message, os.PathLike):
            return cls._open(message, max_bytes)
        if hasattr(message, "read"):
            file = cast(BinaryIO, message)
            position = _seekable_position(file)
            if position is not None:
                end = file.seek(0, io.SEEK_END)
                file.seek(position)
                _check_size(end - position, max_bytes)
                return cls(size=end - position, file=file, start=position)
            return cls._spool(iter(lambda: file.read(SPOOL_CHUNK), b""), max_bytes)
        if isinstance(message, Iterable):
            return cls._spool(message, max_bytes)
        raise TypeError(f"cannot send a {type(message).__name__} as a message")

    @classmethod
    def _open(cls, path: os.PathLike[str], max_bytes: int | None) -> Payload:
        file = open(path, "rb")  # noqa: SIM115 - closed by Payload.close
        try:
            size = os.fstat(file.fileno()).st_size
            _check_size(size, max_bytes)
        except BaseException:
            file.close()
            raise
        return cls(size=size, file=file, _owned=True)

    @classmethod
    def _spool(cls, chunks: Iterable[bytes], max_bytes: int | None) -> Payload:
        spool = tempfile.TemporaryFile()  # noqa: SIM115 - closed by Payload.close
        size = 0
        try:
            for chunk in chunks:
                size += len(chunk)
                _check_size(size, max_bytes)
                spool.write(chunk)
            spool.flush()
            spool.seek(0)
        except BaseException:
            spool.close()
            raise
        return cls(size=size, file=spool, _owned=True, spooled=True)

    def read_all(self) -> bytes:
        """The whole message in memory (the original's urlencoded form needs it)."""
        if self.data is not None:
            return self.data
        assert self.file is not None
        self.file.seek(self.start)
        return self.file.read(self.size)

    def body(self) -> bytes | BinaryIO:
        """A request body, rewound: requests takes Content-Length from the position."""
        if self.data is not None:
            return self.data
        assert self.file is not None
        self.file.seek(self.start)
        return self.file

    def rewind(self) -> None:
        """Put a caller's file back where it was found (so it can be sent again)."""
        if self.file is not None:
            self.file.seek(self.start)

    def detach(self) -> BinaryIO:
        """The spooled copy, rewound, now the caller's to close (``close()`` leaves it)."""
        assert self.spooled and self.file is not None
        self._owned = False
        self.file.seek(0)
        return self.file

    def close(self) -> None:
        if self._owned and self.file is not None:
            self.file.close()


def _seekable_position(file: object) -> int | None:
    try:
        if not file.seekable():  # type: ignore[attr-defined]
            return None
        return int(file.tell())  # type: ignore[attr-defined]
    except (AttributeError, OSError, ValueError):
        return None


def _check_size(size: int, max_bytes: int | None) -> None:
    if max_bytes is not None and size > max_bytes:
        raise PayloadTooLarge(f"message of {size} bytes is over the maximum of {max_bytes}")
