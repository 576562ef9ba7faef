"""Which queues changed: the kernel's word (inotify) on the directory of queue indexes.

A publish becomes visible by a write to its queue's index (``core.index``: the header's
``committed``), a rebuild by a rename over it, a delete by its removal: all of them are
events on ``.zoscii/index/`` under the name ``<queue>.idx``. One inotify watch on that
directory tells a process that follows many queues (the live service) which ones to look
at again, without a stat per queue per interval, for every writer on this kernel: other
processes and other containers sharing the volume.

It tells nothing about writers on another host of a network file system (NFS, EFS):
no notification crosses hosts. ``local_notifications`` says whether the data directory
is on a file system whose changes all happen here; where it is not, or inotify is
missing (not Linux, no more watches), the caller polls ``QueueStore.change_token``
instead. Either way an event only says "look": what is visible is still read from the
index, so a spurious or coalesced event costs a look and nothing else.

Standard library only (ctypes), like the rest of the core.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import logging
import os
import struct
from pathlib import Path

from zosciimq.core.layout import INDEX_SUFFIX, DataDir

log = logging.getLogger(__name__)

# <sys/inotify.h>
IN_MODIFY = 0x00000002
IN_MOVED_FROM = 0x00000040
IN_MOVED_TO = 0x00000080
IN_CREATE = 0x00000100
IN_DELETE = 0x00000200
IN_DELETE_SELF = 0x00000400
IN_MOVE_SELF = 0x00000800
IN_Q_OVERFLOW = 0x00004000
IN_IGNORED = 0x00008000
IN_NONBLOCK = os.O_NONBLOCK
IN_CLOEXEC = os.O_CLOEXEC
WATCHED = IN_MODIFY | IN_MOVED_FROM | IN_MOVED_TO | IN_CREATE | IN_DELETE
GONE = IN_DELETE_SELF | IN_MOVE_SELF | IN_IGNORED
_EVENT = struct.Struct("iIII")  # wd, mask, cookie, len; then len bytes of name
_READ_SIZE = 64 * 1024

# File systems whose changes may come from another host: inotify would miss those.
REMOTE_FILE_SYSTEMS = frozenset(
    {"nfs", "nfs4", "cifs", "smb3", "smbfs", "ceph", "glusterfs", "lustre", "gpfs", "9p",
     "afs", "ncpfs", "fuse.sshfs", "fuse.s3fs", "fuse.gcsfuse", "fuse.glusterfs",
     "fuse.ceph", "fuse.juicefs", "virtiofs", "efs"}
)  # fmt: skip


class Unavailable(OSError):
    """No inotify here (or no watch could be added): poll instead."""


class Changes:
    """Which queues' indexes changed: one inotify watch on ``.zoscii/index/``.

    ``fileno()`` becomes readable when there are events (for an event loop's
    ``add_reader``); ``read()`` drains them. The result is the set of queue names, or
    None when the kernel's queue overflowed or the directory went away (then every
    followed queue must be looked at, and ``read`` tries to watch the directory again).
    """

    def __init__(self, data_dir: DataDir) -> None:
        self.directory = data_dir.indexes
        libc = _libc()
        self._libc = libc
        fd = libc.inotify_init1(IN_NONBLOCK | IN_CLOEXEC)
        if fd < 0:
            raise Unavailable(ctypes.get_errno(), "inotify_init1 failed")
        self._fd: int = fd
        self._wd = -1
        try:
            self._add_watch()
        except OSError:
            os.close(fd)
            raise

    def _add_watch(self) -> None:
        path = os.fsencode(self.directory)
        wd = self._libc.inotify_add_watch(self._fd, path, WATCHED | IN_DELETE_SELF | IN_MOVE_SELF)
        if wd < 0:
            number = ctypes.get_errno()
            raise Unavailable(number, f"cannot watch {self.directory}: {os.strerror(number)}")
        self._wd = wd

    def fileno(self) -> int:
        return self._fd

    def read(self) -> set[str] | None:
        everything = False
        changed: set[str] = set()
        while True:
            try:
                raw = os.read(self._fd, _READ_SIZE)
            except BlockingIOError:
                break
            except OSError as exc:
                if exc.errno == errno.EINTR:
                    continue
                raise
            if not raw:
                break
            offset = 0
            while offset + _EVENT.size <= len(raw):
                _wd, mask, _cookie, length = _EVENT.unpack_from(raw, offset)
                name = raw[offset + _EVENT.size : offset + _EVENT.size + length].rstrip(b"\0")
                offset += _EVENT.size + length
                if mask & (IN_Q_OVERFLOW | GONE):
                    everything = True
                    continue
                text = os.fsdecode(name)
                if text.endswith(INDEX_SUFFIX) and not text.startswith("."):
                    changed.add(text[: -len(INDEX_SUFFIX)])
        if everything:
            self._rewatch()
            return None
        return changed

    def _rewatch(self) -> None:
        """The directory was removed or replaced (``.zoscii`` deleted: it is a cache)."""
        try:
            self._add_watch()
        except OSError as exc:
            log.warning("%s: events lost until it exists again", exc)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


def _libc() -> ctypes.CDLL:
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name, use_errno=True)
        libc.inotify_init1.argtypes = [ctypes.c_int]
        libc.inotify_add_watch.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]
    except (OSError, AttributeError, TypeError) as exc:
        raise Unavailable(errno.ENOSYS, f"no inotify in this C library: {exc}") from None
    return libc


def file_system_type(path: Path) -> str | None:
    """The type of the file system ``path`` is on (Linux's mountinfo), None if unknown."""
    try:
        target = os.path.realpath(path)
        with open("/proc/self/mountinfo", encoding="utf-8", errors="replace") as mounts:
            best, kind = "", None
            for line in mounts:
                fields = line.split()
                if "-" not in fields:
                    continue
                mount_point = _unescape(fields[4])
                fs_type = fields[fields.index("-") + 1]
                inside = target == mount_point or target.startswith(mount_point.rstrip("/") + "/")
                if inside and len(mount_point) >= len(best):
                    best, kind = mount_point, fs_type
            return kind
    except OSError:
        return None


def local_notifications(path: Path) -> bool:
    """Whether every change to ``path``'s file system is made by this kernel (so inotify
    sees it): not a network or cluster file system."""
    kind = file_system_type(path)
    return kind is not None and kind not in REMOTE_FILE_SYSTEMS


def _unescape(field: str) -> str:
    """mountinfo writes space, tab, newline and backslash as octal escapes."""
    return (
        field.replace("\\040", " ").replace("\\011", "\t").replace("\\012", "\n")
        .replace("\\134", "\\")
    )  # fmt: skip
