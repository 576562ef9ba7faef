"""Per-queue policy: default retention, size limits and dead-letter threshold, from one
operator file.

The file is TOML (``ZOSCII_POLICY_FILE``; documented in README.md, "Queue policy", and
PROTOCOL.md)::

    [default]                      # every queue no entry matches (all keys optional)
    retention_days = 30

    [queues."orders"]              # an exact name...
    retention_days = 90
    max_messages = 100000
    when_full = "refuse"           # 507 queue_full (the default)

    [queues."telemetry_*"]         # ...or an fnmatch pattern (* ? [seq])
    max_bytes = 1_073_741_824
    when_full = "drop_oldest"      # delete the oldest messages to make room
    dead_letter_max_deliveries = 2 # consumer groups: dead letters after 2 deliveries

Matching: an entry whose name is the queue's exact name wins; otherwise the first
pattern entry that matches, in file order; otherwise ``[default]``. Only one entry
applies, and a key it does not set is taken from ``[default]``.

Enforcement (``make_room``) runs inside the queue's publish commit, under the queue
lock (``core.commit``), before names are allocated: the counts it checks are the
queue's message files as of that lock, kept in a small cache file
``.zoscii/index/<queue>.usage`` that is trusted only while it names the index header it
was written with (committed count, last name, directory mtime and inode). Anything else
that changed the directory (claireup deleting, a purge, a rebuild, another writer)
changes the header, and the next limited publish recounts by a stat of every indexed
file, once. So a limited publish costs O(1) plus the messages it drops; the counts are
exact for what went through the core. A publish whose nonce turns out to be used counts
toward the check although nothing is written.

``dead_letter_max_deliveries`` is read by consumer groups (``ConsumerGroups``, given
``PolicySource.max_deliveries_for``) when they lease: a message delivered that many times
goes to the dead letters instead; without it, the server's ``ZOSCII_MAX_DELIVERIES``.
"""

from __future__ import annotations

import logging
import os
import threading
import time
import tomllib
import zlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any

from zosciimq.core import index as idx
from zosciimq.core.durable import unlink_quietly
from zosciimq.core.layout import leftover_path
from zosciimq.core.names import MAX_TOKEN_LENGTH
from zosciimq.errors import QueueFull
from zosciimq.settings import SettingsError

log = logging.getLogger(__name__)

REFUSE = "refuse"
DROP_OLDEST = "drop_oldest"
WHEN_FULL = (REFUSE, DROP_OLDEST)
REBUILD_AFTER = 1024  # dropped records the index keeps before it is rebuilt
_KEYS = ("retention_days", "max_messages", "max_bytes", "when_full", "dead_letter_max_deliveries")
MAX_DELIVERIES = 1000  # as ZOSCII_MAX_DELIVERIES
_PATTERN_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789_-*?[]!")


@dataclass(frozen=True)
class QueueRule:
    """What applies to one queue; None: not set (no limit, the server's default)."""

    pattern: str = ""  # "" for [default]
    retention_days: int | None = None
    max_messages: int | None = None
    max_bytes: int | None = None
    when_full: str = REFUSE
    dead_letter_max_deliveries: int | None = None

    @property
    def limited(self) -> bool:
        return self.max_messages is not None or self.max_bytes is not None


@dataclass(frozen=True)
class Policy:
    default: QueueRule = QueueRule()
    exact: Mapping[str, QueueRule] | None = None
    patterns: tuple[QueueRule, ...] = ()

    def rule_for(self, queue: str) -> QueueRule:
        """The entry for ``queue`` (exact name, else first pattern, else the default)."""
        if self.exact and queue in self.exact:
            return self.exact[queue]
        for rule in self.patterns:
            if fnmatchcase(queue, rule.pattern):
                return rule
        return self.default


EMPTY = Policy()


def parse_policy(text: str, source: str = "policy file") -> Policy:
    """The policy in ``text``; SettingsError naming ``source``, the entry and the key."""
    try:
        document = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise SettingsError(f"{source}: {exc}") from None
    unknown = set(document) - {"default", "queues"}
    if unknown:
        raise SettingsError(
            f'{source}: unknown section(s) {sorted(unknown)}: use [default], [queues."<name>"]'
        )
    raw_default = document.get("default", {})
    if not isinstance(raw_default, dict):
        raise SettingsError(f"{source}: [default] must be a table")
    default = _rule(raw_default, "", QueueRule(), f"{source}: [default]")
    raw_queues = document.get("queues", {})
    if not isinstance(raw_queues, dict):
        raise SettingsError(f'{source}: queues must be tables: [queues."<name>"]')
    exact: dict[str, QueueRule] = {}
    patterns: list[QueueRule] = []
    for name, entry in raw_queues.items():
        where = f'{source}: [queues."{name}"]'
        pattern = name.lower()
        if not pattern or len(pattern) > MAX_TOKEN_LENGTH or not set(pattern) <= _PATTERN_CHARS:
            raise SettingsError(f"{where}: not a queue name or pattern (a-z 0-9 _ - and * ? [ ])")
        if not isinstance(entry, dict):
            raise SettingsError(f"{where}: must be a table")
        rule = _rule(entry, pattern, default, where)
        if any(c in pattern for c in "*?["):
            patterns.append(rule)
        elif pattern in exact:
            raise SettingsError(f"{where}: queue named twice")
        else:
            exact[pattern] = rule
    return Policy(default=default, exact=exact, patterns=tuple(patterns))


def _rule(entry: dict[str, Any], pattern: str, base: QueueRule, where: str) -> QueueRule:
    unknown = set(entry) - set(_KEYS)
    if unknown:
        raise SettingsError(f"{where}: unknown key(s) {sorted(unknown)}; known: {', '.join(_KEYS)}")
    values: dict[str, Any] = {"pattern": pattern}
    for key, low, high in (
        ("retention_days", 0, 9999),
        ("max_messages", 1, None),
        ("max_bytes", 1, None),
        ("dead_letter_max_deliveries", 1, MAX_DELIVERIES),
    ):
        if key in entry:
            value = entry[key]
            if isinstance(value, bool) or not isinstance(value, int):
                raise SettingsError(f"{where}: {key} must be a whole number")
            if value < low or (high is not None and value > high):
                bounds = f"between {low} and {high}" if high is not None else f"at least {low}"
                raise SettingsError(f"{where}: {key} = {value}: must be {bounds}")
            values[key] = value
    if "when_full" in entry:
        if entry["when_full"] not in WHEN_FULL:
            raise SettingsError(f'{where}: when_full must be "refuse" or "drop_oldest"')
        values["when_full"] = entry["when_full"]
    return replace(base, **values)


class PolicySource:
    """The policy file, read again when it changes (checked at most every
    ``check_every`` seconds); a bad edit is logged and the last good policy kept.

    Without a path: the empty policy (server defaults, no limits). A path that cannot
    be read or parsed at start raises SettingsError (the service exits 2).
    """

    def __init__(
        self,
        path: str | os.PathLike[str] | None = None,
        *,
        check_every: float = 1.0,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.path = Path(path) if path else None
        self.check_every = check_every
        self._monotonic = monotonic
        self._mutex = threading.Lock()
        self._policy = EMPTY
        self._signature: tuple[int, int, int] | None = None
        self._checked = 0.0
        if self.path is not None:
            signature = self._stat(strict=True)
            self._policy = self._load()
            self._signature = signature
            self._checked = monotonic()

    @property
    def current(self) -> Policy:
        if self.path is None:
            return self._policy
        now = self._monotonic()
        if now - self._checked < self.check_every:
            return self._policy
        with self._mutex:
            if now - self._checked >= self.check_every:
                self._checked = now
                self._reload()
        return self._policy

    def rule_for(self, queue: str) -> QueueRule:
        return self.current.rule_for(queue)

    def retention_for(self, queue: str, fallback: int) -> int:
        """Retention of a publish to ``queue`` without ``r``."""
        days = self.rule_for(queue).retention_days
        return fallback if days is None else days

    def max_deliveries_for(self, queue: str, fallback: int) -> int:
        """Deliveries of a message in a consumer group of ``queue`` before it goes to the
        dead letters (``fallback``: the server's ZOSCII_MAX_DELIVERIES)."""
        deliveries = self.rule_for(queue).dead_letter_max_deliveries
        return fallback if deliveries is None else deliveries

    def limits_for(self, queue: str) -> QueueRule | None:
        """The rule of ``queue`` when it limits the queue (QueueStore's ``limits``)."""
        rule = self.rule_for(queue)
        return rule if rule.limited else None

    def _reload(self) -> None:
        try:
            signature = self._stat(strict=False)
        except SettingsError as exc:
            if self._signature is not None:
                log.error("%s; keeping the last good policy", exc)
            self._signature = None
            return
        if signature == self._signature:
            return
        self._signature = signature  # a bad edit is logged once, not every second
        try:
            self._policy = self._load()
        except SettingsError as exc:
            log.error("%s; keeping the last good policy", exc)
            return
        log.info("queue policy reloaded from %s", self.path)

    def _stat(self, *, strict: bool) -> tuple[int, int, int]:
        assert self.path is not None
        try:
            stat = os.stat(self.path)
        except OSError as exc:
            raise SettingsError(f"ZOSCII_POLICY_FILE={self.path}: {exc.strerror}") from None
        return stat.st_mtime_ns, stat.st_size, stat.st_ino

    def _load(self) -> Policy:
        assert self.path is not None
        try:
            text = self.path.read_text("utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            why = exc.strerror if isinstance(exc, OSError) else "not UTF-8"
            raise SettingsError(f"ZOSCII_POLICY_FILE={self.path}: {why}") from None
        return parse_policy(text, f"ZOSCII_POLICY_FILE={self.path}")


# --- enforcement (under the queue lock) ---------------------------------------------------
@dataclass
class Usage:
    """A queue's message files as of an index header: ``head`` is the index position of
    the oldest record that may still have its file (the ones before were dropped)."""

    key: str
    head: int = 0
    count: int = 0
    bytes: int = 0

    def encode(self) -> bytes:
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
