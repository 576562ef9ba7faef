"""The rate limit moved to ``zosciimq.ratelimit`` (shared with the live service)."""

from zosciimq.ratelimit import *  # noqa: F403
from zosciimq.ratelimit import Admission, ClientAddress, RateLimited, TokenBuckets  # noqa: F401
