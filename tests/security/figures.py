"""The figures the issue asks for, added up over a test session and printed at its end:
requests tried, faults injected, messages verified, messages lost."""

from __future__ import annotations

from collections import Counter

TALLY: Counter[str] = Counter()
