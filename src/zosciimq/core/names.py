"""Message names and the input rules around them (PROTOCOL.md sections 2 and 3).

A name is ``YYYYMMDDHHNNSSCCCC-RRRR-GUID.bin``: 64 fixed-width characters whose lexical
order is publish order, so a consumer's pointer is simply the last name it read.
Times are always UTC (an improvement over the original's local clock), so a
container's TZ setting can never reorder a queue.
"""

from __future__ import annotations

import calendar
import os
import re
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from functools import cached_property, lru_cache

from zosciimq.errors import InvalidInput

NAME_LENGTH = 64  # a queue message's name; store names may carry "-u" and ".bin" more
MAX_NAME_LENGTH = NAME_LENGTH + len(".bin-u")
MAX_COUNTER = 9999
MAX_RETENTION_DAYS = 9999
MAX_TOKEN_LENGTH = 128
RESERVED_QUEUES = frozenset({"temp"})  # queues/temp/ holds uploads in progress
# A store name a replicator wrote without a target queue, until a consumer identifies it.
UNIDENTIFIED_SUFFIX = "-u.bin"

# ASCII digits only: "\d" would also take fullwidth and other Unicode digits, which
# int() accepts and the file system, the index (ASCII) and the original do not.
_NAME_RE = re.compile(
    r"(?P<stamp>[0-9]{14})(?P<counter>[0-9]{4})-(?P<retention>[0-9]{4})-"
    r"(?P<guid>[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})"
    r"(?P<doubled>\.bin)?(?P<u>-u)?\.bin",
    re.ASCII,
)
_TOKEN_RE = re.compile(r"[A-Za-z0-9_-]+")
_BASE36 = "0123456789abcdefghijklmnopqrstuvwxyz"


@dataclass(frozen=True)
class MessageName:
    """A parsed message name; ``str()`` gives back the exact file name."""

    stamp: str  # YYYYMMDDHHNNSS, UTC
    counter: int
    retention_days: int
    guid: str
    unidentified: bool = False
    # The original's replikate.php stores without a target queue as "<name>.bin-u.bin"
    # (its identify then makes that "<name>.bin.bin"). Such files exist on shared
    # volumes; they are store names like any other, with ".bin" doubled.
    doubled: bool = False

    def __str__(self) -> str:
        suffix = (".bin" if self.doubled else "") + (
            UNIDENTIFIED_SUFFIX if self.unidentified else ".bin"
        )
        return format_name(self.stamp, self.counter, self.retention_days, self.guid, suffix)

    @property
    def published_at(self) -> datetime:
        return stamp_datetime(self.stamp)

    @property
    def expires_at(self) -> datetime:
        """Name time + RRRR days; claireup deletes when now >= this (0000: next run)."""
        return self.published_at + timedelta(days=self.retention_days)

    @cached_property
    def published_timestamp(self) -> int:
        """``published_at`` as Unix seconds, without strptime: cheap enough for bulk scans."""
        s = self.stamp
        return calendar.timegm(
            (int(s[0:4]), int(s[4:6]), int(s[6:8]), int(s[8:10]), int(s[10:12]), int(s[12:14]))
        )

    @property
    def expires_timestamp(self) -> int:
        """``expires_at`` as Unix seconds (see ``published_timestamp``)."""
        return self.published_timestamp + self.retention_days * 86_400

    def identified(self) -> MessageName:
        return replace(self, unidentified=False)

    def unidentified_variant(self) -> MessageName:
        return replace(self, unidentified=True)

    @property
    def store_dirs(self) -> tuple[str, str, str]:
        return store_dirs(str(self))


def format_name(
    stamp: str, counter: int, retention_days: int, guid: str, suffix: str = ".bin"
) -> str:
    """``YYYYMMDDHHNNSSCCCC-RRRR-GUID`` and ``suffix``: the one place a name is spelled
    (``MessageName`` for a parsed name, the group commit for every new one)."""
    return f"{stamp}{counter:04d}-{retention_days:04d}-{guid}{suffix}"


def is_unidentified(name: str) -> bool:
    return name.endswith(UNIDENTIFIED_SUFFIX)


def identified_name(name: str) -> str:
    """An unidentified store name without its ``-u`` (``is_unidentified`` must hold)."""
    return name[: -len(UNIDENTIFIED_SUFFIX)] + ".bin"


def parse_name(text: str) -> MessageName:
    """Parse a message or store name, or raise InvalidInput naming it as the original does."""
    match = _NAME_RE.fullmatch(text) if isinstance(text, str) else None
    if match is None:
        raise InvalidInput(f"Invalid name '{_shorten(text)}'.")
    stamp = match["stamp"]
    try:  # datetime() over strptime: the same check at a third of the cost (hot in rebuilds)
        stamp_datetime(stamp)
    except ValueError:
        raise InvalidInput(f"Invalid name '{_shorten(text)}'.") from None
    return MessageName(
        stamp=stamp,
        counter=int(match["counter"]),
        retention_days=int(match["retention"]),
        guid=match["guid"],
        unidentified=match["u"] is not None,
        doubled=match["doubled"] is not None,
    )


def stamp_datetime(stamp: str) -> datetime:
    """The UTC time of a name's ``YYYYMMDDHHNNSS``; ValueError when there is none."""
    return datetime(
        int(stamp[0:4]),
        int(stamp[4:6]),
        int(stamp[6:8]),
        int(stamp[8:10]),
        int(stamp[10:12]),
        int(stamp[12:14]),
        tzinfo=UTC,
    )


def is_message_name(text: str) -> bool:
    try:
        parse_name(text)
    except InvalidInput:
        return False
    return True


def new_name(
    now: datetime, retention_days: int, *, counter: int = 0, unidentified: bool = False
) -> MessageName:
    return MessageName(
        stamp=format_stamp(now),
        counter=counter,
        retention_days=retention_days,
        guid=new_guid(),
        unidentified=unidentified,
    )


def format_stamp(now: datetime) -> str:
    if now.tzinfo is None:
        raise ValueError("naive datetime: the core works in UTC only")
    if now.utcoffset():
        now = now.astimezone(UTC)
    return (
        f"{now.year:04d}{now.month:02d}{now.day:02d}{now.hour:02d}{now.minute:02d}{now.second:02d}"
    )


def new_guid() -> str:
    """A random (version 4) UUID as text: what ``str(uuid.uuid4())`` gives, at a third
    of its cost (every publish makes one)."""
    raw = bytearray(os.urandom(16))
    raw[6] = (raw[6] & 0x0F) | 0x40  # version 4
    raw[8] = (raw[8] & 0x3F) | 0x80  # RFC 4122 variant
    h = raw.hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def store_dirs(name: str) -> tuple[str, str, str]:
    """The three fan-out directories of a store name (PROTOCOL.md, "The store fan-out").

    ``YYYYMMDDHHNNSSCCCC`` is reordered to ``SS NN HH DD MM YYYY CCCC``, read as a decimal
    and written in base 36; the seconds lead, so consecutive stores spread over directories.
    """
    t = name[:18]
    reordered = t[12:14] + t[10:12] + t[8:10] + t[6:8] + t[4:6] + t[0:4] + t[14:18]
    text = to_base36(int(reordered))
    return text[0], text[1], text[2]


def to_base36(number: int) -> str:
    if number == 0:
        return "0"
    digits = []
    while number:
        number, rest = divmod(number, 36)
        digits.append(_BASE36[rest])
    return "".join(reversed(digits))


# --- input rules ---------------------------------------------------------------------
# The original silently strips characters; here an input that cleaning would change is
# an error, never a guess. The one exception is case in queue names: the original
# lowercases them, and lowercasing loses no information a client relied on.


def clean_queue(raw: str) -> str:
    if not raw:
        raise InvalidInput("Missing queue name (q).")
    if len(raw) > MAX_TOKEN_LENGTH or not _TOKEN_RE.fullmatch(raw):
        raise InvalidInput(
            f"Invalid queue name '{_shorten(raw)}': use 1 to {MAX_TOKEN_LENGTH} of a-z 0-9 _ -."
        )
    queue = raw.lower()
    if queue in RESERVED_QUEUES:
        raise InvalidInput(f"Queue name '{queue}' is reserved.")
    return queue


def clean_nonce(raw: str | None) -> str | None:
    if raw is None or raw == "":
        return None
    if len(raw) > MAX_TOKEN_LENGTH or not _TOKEN_RE.fullmatch(raw):
        raise InvalidInput(
            f"Invalid nonce '{_shorten(raw)}': use 1 to {MAX_TOKEN_LENGTH} of a-z A-Z 0-9 _ -."
        )
    return raw


def is_queue_name(name: str) -> bool:
    """A name a queue directory may have (exactly: not after lowercasing)."""
    try:
        return clean_queue(name) == name
    except InvalidInput:
        return False


def is_nonce_name(name: str) -> bool:
    """A name a nonce marker may have."""
    try:
        return clean_nonce(name) == name
    except InvalidInput:
        return False


def clean_retention(raw: str | None, default: int) -> int:
    if raw is None or raw == "":
        return default
    if not raw.isascii() or not raw.isdigit() or len(raw) > 4:
        raise InvalidInput(
            f"Invalid retention '{_shorten(raw)}': a whole number of days, 0 to 9999."
        )
    return int(raw)


def clean_pointer(raw: str | None) -> str:
    """An ``after`` pointer: empty, or a well-formed name (never a path)."""
    if raw is None or raw == "":
        return ""
    try:
        return _clean_name(raw)
    except InvalidInput:
        raise InvalidInput(f"Invalid pointer '{_shorten(raw)}': expected a message name.") from None


@lru_cache(maxsize=1024)
def _clean_name(raw: str) -> str:
    """Remembered: a queue's readers ask after the same few names (10,000 long-polls
    that were all answered the same message ask again after it), and parsing one
    costs more than the rest of a parked request's dispatch (a date is built)."""
    return str(parse_name(raw))


def _shorten(value: object, limit: int = 100) -> str:
    text = value if isinstance(value, str) else repr(value)
    return text if len(text) <= limit else text[:limit] + "..."
