"""Access control moved to ``zosciimq.access`` (shared with the PHPMQ gateway)."""

from zosciimq.access import *  # noqa: F403
from zosciimq.access import __all__  # noqa: F401
