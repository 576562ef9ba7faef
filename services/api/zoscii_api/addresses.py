"""Client addresses moved to ``zosciimq.addresses`` (shared with the live service)."""

from zosciimq.addresses import *  # noqa: F403
from zosciimq.addresses import (  # noqa: F401
    Address,
    ClientAddress,
    Network,
    is_in,
    networks,
    parse_address,
    parse_network,
)
