"""When a file is due: messages by their own name, markers and leftovers by their age.

A message expires at ``MessageName.expires_at`` (name time + RRRR days, UTC) and is
deleted when ``now >= expires_at`` (PROTOCOL.md 5). Computing that per file costs a
second ``strptime`` (about 25 us, i.e. most of a million-file run), so ``ExpiryRule``
turns it around once per retention value: ``published + R days <= now`` holds exactly
when ``published <= now - R days``, and because names carry whole seconds and the
fixed-width stamp sorts like the time it spells, when ``stamp <= stamp(now - R days)``.
A property test holds this equal to ``expires_at`` for any name and any ``now``.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from zosciimq.core.names import MessageName, format_stamp


def expired_by_definition(name: MessageName, now: datetime) -> bool:
    """The contract, literally (a name whose expiry lies past year 9999 never expires)."""
    try:
        return now >= name.expires_at
    except OverflowError:
        return False


class ExpiryRule:
    """``expired(name)`` for one fixed ``now``: a dict lookup and a string compare."""

    def __init__(self, now: datetime) -> None:
        if now.tzinfo is None:
            raise ValueError("naive datetime: retention is decided in UTC only")
        self._cutoffs: dict[int, str] = {}
        self._nothing_expires = False
        try:
            self.now = now.astimezone(UTC)
        except OverflowError:  # within hours of year 1 or past year 9999 in UTC
            # Before 0001-01-01 UTC no name has expired; after 9999-12-31 every name whose
            # expiry is a date has, as at the last instant a datetime holds.
            offset = now.utcoffset()
            self._nothing_expires = offset is not None and offset > timedelta(0)
            self.now = datetime.max.replace(tzinfo=UTC)

    def cutoff(self, retention_days: int) -> str:
        """The highest stamp that is expired for this retention ("" when none can be)."""
        if self._nothing_expires:
            return ""
        cutoff = self._cutoffs.get(retention_days)
        if cutoff is None:
            try:
                cutoff = format_stamp(self.now - timedelta(days=retention_days))
            except OverflowError:  # now - R days before year 1: nothing is old enough
                cutoff = ""
            self._cutoffs[retention_days] = cutoff
        return cutoff

    def expired(self, name: MessageName) -> bool:
        return name.stamp <= self.cutoff(name.retention_days)


def older_than(mtime: float, now: datetime, max_age_seconds: float) -> bool:
    """True when a file last modified at ``mtime`` (epoch seconds) is past ``max_age``."""
    return now.timestamp() - mtime > max_age_seconds
