"""The fast scan against the core: the same figures as walking with ``zosciimq.core.walk``
and ``parse_name``, name by name, including every name the fast check must not vouch for."""

from __future__ import annotations

import os
import string
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from zoscii_statissa import scan
from zoscii_statissa.scan import QUEUE, STORE, Partial, scan_directory
from zosciimq.core import walk
from zosciimq.core.names import parse_name
from zosciimq.core.walk import Kind
from zosciimq.errors import InvalidInput

NOW = 1_773_144_000.0  # 2026-03-10 12:00 UTC
GUID = "0f0e0d0c-0b0a-4908-8706-050403020100"


def name(stamp: str, retention: str = "0001", tail: str = ".bin", guid: str = GUID) -> str:
    return f"{stamp}0007-{retention}-{guid}{tail}"


# Valid names at the edges of the time stamp and the suffixes, then names that only look
# like messages: each one must be judged exactly as parse_name judges it.
NAMES = [
    name("20260310115959"),
    name("20260310120000", "0000"),
    name("20260309120000", "0001"),  # expires exactly at NOW: expired
    name("20260310110000", "0001", "-u.bin"),  # unidentified
    name("20260310104500", "0030", ".bin.bin"),  # the original's doubled .bin
    name("20260310104500", "0030", ".bin-u.bin"),
    name("20260310130000"),  # an hour ahead of NOW: counts in the last hour
    name("20240229000000", "9999"),  # a leap day
    name("19691231235959"),  # Unix time -1
    name("00010101000000"),
    name("99991231235959", "9999"),
    name("20250229000000"),  # not a leap year
    name("20260310240000"),  # hour 24
    name("20260310126000"),  # minute 60
    name("20260310120060"),  # second 60 (datetime has no leap seconds)
    name("20261310120000"),  # month 13
    name("20260300120000"),  # day 0
    name("00000101000000"),  # year 0
    name("20260310120000", tail=".bin.bin.bin"),
    name("20260310120000", tail="-u"),
    name("20260310120000", guid=GUID.upper()),
    name("2026031012000\uff10"),  # a fullwidth digit zero
    name("20260310120000") + "\n",
    "x" + name("20260310120000"),
    "not-a-message-name.bin",
    "README.txt",
    ".bin",
]


def reference(kind: str, directory: str, now: float) -> Partial:
    """The scan as it was before the fast path: the core's walk and parse, per file."""
    partial = Partial()
    found = (
        walk.iter_fanout_files(directory) if kind == STORE else walk.iter_message_files(directory)
    )
    for item in found:
        if item.kind is Kind.MALFORMED:
            partial.unrecognised += 1
        elif item.message is not None:
            partial.add(item.message, item.entry.stat(follow_symlinks=False).st_size, now)
    return partial


def write(directory: Path, names: list[str]) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    for size, file_name in enumerate(names):
        (directory / file_name).write_bytes(b"m" * size)


def test_a_queue_directory_gives_the_cores_figures(tmp_path: Path) -> None:
    queue = tmp_path / "orders"
    write(queue, NAMES)
    (queue / name("20260310100000", tail=".bin.dir")).mkdir()  # not a regular file
    (queue / name("20260310100000", "0002")).mkdir()  # a directory named as a message
    os.symlink(queue / NAMES[0], queue / name("20260310090000"))  # a link: a stray
    figures = scan_directory(QUEUE, str(queue), NOW)
    assert figures == reference(QUEUE, str(queue), NOW)
    assert figures.messages == 11 and figures.unrecognised == 13
    assert figures.unidentified == 2


def test_a_store_fanout_gives_the_cores_figures(tmp_path: Path) -> None:
    root = tmp_path / "store" / "a"
    write(root / "b" / "c", NAMES[:6])
    write(root / "b" / "d", NAMES[6:12])
    write(root / "e" / "f", NAMES[12:])
    (root / "stray.bin").write_bytes(b"above the leaves")
    (root / "b" / "stray.bin").write_bytes(b"above the leaves")
    figures = scan_directory(STORE, str(root), NOW)
    assert figures == reference(STORE, str(root), NOW)
    assert figures.messages == 11


def test_missing_directories_are_empty(tmp_path: Path) -> None:
    assert scan_directory(QUEUE, str(tmp_path / "gone"), NOW) == Partial()
    assert scan_directory(STORE, str(tmp_path / "gone"), NOW) == Partial()


def test_the_stamp_cache_stays_bounded_and_right(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(scan, "_STAMP_CACHE_LIMIT", 4)
    queue = tmp_path / "q"
    write(queue, [name(f"202603101{m // 60:01d}{m % 60:02d}00", f"{m % 3:04d}") for m in range(90)])
    assert scan_directory(QUEUE, str(queue), NOW) == reference(QUEUE, str(queue), NOW)


_VALID = name("20260310115959", "0001", "-u.bin")


@given(
    st.lists(
        st.tuples(
            st.integers(0, len(_VALID) - 1),
            st.sampled_from(string.digits + "abcdefABCDEF-.u\u0663"),  # and an Arabic-Indic 3
        ),
        max_size=3,
    )
)
def test_the_fast_check_vouches_only_for_names_the_core_accepts(
    edits: list[tuple[int, str]],
) -> None:
    """Mutated valid names: whatever the fast check takes, parse_name takes, with the same
    time, retention and flag."""
    chars = list(_VALID)
    for at, char in edits:
        chars[at] = char
    text = "".join(chars)
    if scan._PLAIN_NAME.fullmatch(text) is None:
        return
    published = scan._remember({}, text[:14])
    if published == scan._INVALID:
        with pytest.raises(InvalidInput):
            parse_name(text)
        return
    message = parse_name(text)
    assert message.published_timestamp == published
    assert message.retention_days == int(text[19:23])
    assert message.unidentified == text.endswith("-u.bin")
