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

The limits are enforced inside the queue's publish commit, under the queue lock
(``core.limits``, which picks the oldest files to drop for ``drop_oldest``); this module
only reads the file and says which rule applies.

``dead_letter_max_deliveries`` is read by consumer groups (``ConsumerGroups``, given
``PolicySource.max_deliveries_for``) when they lease: a message delivered that many times
goes to the dead letters instead; without it, the server's ``ZOSCII_MAX_DELIVERIES``.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any

from zosciimq.core.names import MAX_TOKEN_LENGTH
from zosciimq.settings import SettingsError, setting
from zosciimq.settings_file import load_toml, read_table, table_at

log = logging.getLogger(__name__)

REFUSE = "refuse"
DROP_OLDEST = "drop_oldest"
WHEN_FULL = (REFUSE, DROP_OLDEST)
MAX_DELIVERIES = 1000  # as ZOSCII_MAX_DELIVERIES
_PATTERN_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789_-*?[]!")


@dataclass(frozen=True)
class QueueRule:
    """What applies to one queue; None: not set (no limit, the server's default). The
    settings are the keys of an entry of the file (``zosciimq.settings_file``)."""

    pattern: str = ""  # "" for [default]
    retention_days: int | None = setting(None, minimum=0, maximum=9999)
    max_messages: int | None = setting(None, minimum=1)
    max_bytes: int | None = setting(None, minimum=1)
    when_full: str = setting(REFUSE, choices=WHEN_FULL)
    dead_letter_max_deliveries: int | None = setting(None, minimum=1, maximum=MAX_DELIVERIES)

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
    document = load_toml(text, source)
    unknown = set(document) - {"default", "queues"}
    if unknown:
        raise SettingsError(
            f'{source}: unknown section(s) {sorted(unknown)}: use [default], [queues."<name>"]'
        )
    default = _rule(
        table_at(document.get("default", {}), f"{source}: [default]"),
        "",
        QueueRule(),
        f"{source}: [default]",
    )
    raw_queues = table_at(document.get("queues", {}), f'{source}: [queues."<name>"]')
    exact: dict[str, QueueRule] = {}
    patterns: list[QueueRule] = []
    for name, entry in raw_queues.items():
        where = f'{source}: [queues."{name}"]'
        pattern = name.lower()
        if not pattern or len(pattern) > MAX_TOKEN_LENGTH or not set(pattern) <= _PATTERN_CHARS:
            raise SettingsError(f"{where}: not a queue name or pattern (a-z 0-9 _ - and * ? [ ])")
        rule = _rule(table_at(entry, where), pattern, default, where)
        if any(c in pattern for c in "*?["):
            patterns.append(rule)
        elif pattern in exact:
            raise SettingsError(f"{where}: queue named twice")
        else:
            exact[pattern] = rule
    return Policy(default=default, exact=exact, patterns=tuple(patterns))


def _rule(entry: dict[str, Any], pattern: str, base: QueueRule, where: str) -> QueueRule:
    """``base`` (the ``[default]`` rule) with what ``entry`` sets."""
    return replace(base, pattern=pattern, **read_table(QueueRule, entry, where))


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
