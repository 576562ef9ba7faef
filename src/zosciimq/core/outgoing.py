"""What a publisher hands the core, and what it gets back."""

from __future__ import annotations

from dataclasses import dataclass

from zosciimq.core.upload import Upload


@dataclass(frozen=True)
class Outgoing:
    """One message to publish: its upload and its clean retention and nonce, and when
    it expires for consumer groups (Unix seconds; None: never, see ``groups``).

    ``retention_days`` None: the queue policy's retention for the queue, else the
    store's default, decided in the commit that names the message (one policy lookup
    per commit, for the limits and the retention together)."""

    upload: Upload
    retention_days: int | None
    nonce: str | None = None
    expires_at: float | None = None


@dataclass(frozen=True)
class PublishResult:
    name: str | None  # None when the nonce had been used: nothing was written
    duplicate: bool = False
