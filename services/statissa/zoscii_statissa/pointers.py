"""Replicator pointers: how far behind each replikate state file's last message is."""

from __future__ import annotations

import logging

from zoscii_statissa.model import PointerStats
from zosciimq.core.layout import DataDir
from zosciimq.core.names import parse_name
from zosciimq.core.states import iter_state_files, read_pointer
from zosciimq.errors import InvalidInput

log = logging.getLogger(__name__)


def read_pointers(data_dir: DataDir, now: float) -> list[PointerStats]:
    """A handful of tiny files, read on the driver; a corrupt one is reported, not fatal."""
    result = []
    for state, path in iter_state_files(data_dir):
        try:
            pointer = read_pointer(path)
        except (InvalidInput, OSError, UnicodeDecodeError) as exc:
            log.warning("replikate state %s is unreadable: %s", path, exc)
            result.append(PointerStats(state=state, error=str(exc)))
            continue
        if not pointer:
            result.append(PointerStats(state=state))
            continue
        published = parse_name(pointer).published_timestamp
        result.append(
            PointerStats(
                state=state,
                pointer=pointer,
                pointer_timestamp=published,
                age_seconds=max(0.0, now - published),
            )
        )
    return result
