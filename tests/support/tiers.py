"""The fast tier's share of the property tests (hypothesis).

``make test-unit`` runs with ``--hypothesis-profile=fast``: every property runs a
twentieth of its examples there (at least ten), and the tests that leave the count to
hypothesis run ten instead of a hundred. ``make test`` (no profile) runs every count in full.
A test with its own count writes ``settings(max_examples=examples(300))``.
"""

from __future__ import annotations

from hypothesis import settings

FAST = "fast"
FAST_SHARE = 20

settings.register_profile(FAST, max_examples=10)


def examples(full: int) -> int:
    """``full`` examples; a twentieth of them (at least ten) under the fast profile."""
    if settings.get_current_profile_name() == FAST:
        return min(full, max(10, full // FAST_SHARE))
    return full
