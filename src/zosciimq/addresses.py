"""Client addresses: parsing, the configured networks, and who is behind a trusted proxy.

Every check of an address against a list (``ZOSCII_TRUSTED_PROXIES`` for the rate limit,
the admin check and the access log; ``ZOSCII_ADMIN_ALLOW``) goes through ``parse_address``
and ``parse_network``, so they agree on one form: a dual-stack socket reports an IPv4
peer as ``::ffff:a.b.c.d``, which must match ``a.b.c.d/32`` everywhere or nowhere, and a
link-local zone (``fe80::1%eth0``) is not part of the address.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network

_MAPPED_PREFIX = 96  # ::ffff:0:0/96 holds the IPv4-mapped addresses


def parse_address(text: str | None) -> Address | None:
    """The address in ``text`` (IPv4-mapped IPv6 as IPv4, no zone), None if it is none."""
    try:
        address = ipaddress.ip_address((text or "").strip().split("%", 1)[0])
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


def parse_network(text: str) -> Network:
    """A CIDR range (or one address); ``::ffff:a.b.c.d/n`` as the IPv4 range it maps.
    Raises ValueError for anything else (the settings check every item at start)."""
    network = ipaddress.ip_network(text.strip(), strict=False)
    if isinstance(network, ipaddress.IPv6Network) and network.prefixlen >= _MAPPED_PREFIX:
        mapped = network.network_address.ipv4_mapped
        if mapped is not None:
            return ipaddress.IPv4Network((mapped, network.prefixlen - _MAPPED_PREFIX))
    return network


def networks(items: Iterable[str]) -> tuple[Network, ...]:
    return tuple(parse_network(item) for item in items)


def is_in(address: Address | None, ranges: Iterable[Network]) -> bool:
    return address is not None and any(address in network for network in ranges)


class ClientAddress:
    """The address a request comes from, through trusted proxies only."""

    def __init__(self, trusted_proxies: Iterable[str] = ()) -> None:
        self.trusted = networks(trusted_proxies)

    def of(self, remote_addr: str | None, forwarded_for: str | None) -> str:
        """The peer, or when the peer is a trusted proxy the first untrusted hop of
        ``X-Forwarded-For`` read from the right (the left part is the client's to forge).

        Without a header to believe, the peer as the server reported it (no parsing: this
        runs for every request's log line); a forwarded hop in its normal form."""
        peer = remote_addr or ""
        if not forwarded_for or not self.trusted:
            return peer
        proxy = parse_address(peer)
        if not is_in(proxy, self.trusted):
            return peer
        for hop in reversed(forwarded_for.split(",")):
            if not hop.strip():
                continue
            address = parse_address(hop)
            if address is None:
                break  # a forged or garbled hop: nothing left of it is believed
            if not is_in(address, self.trusted):
                return str(address)
            proxy = address
        return str(proxy)

    def of_environ(self, environ: Mapping[str, object]) -> str:
        """``of`` for a WSGI request."""
        remote = environ.get("REMOTE_ADDR")
        forwarded = environ.get("HTTP_X_FORWARDED_FOR")
        return self.of(
            remote if isinstance(remote, str) else None,
            forwarded if isinstance(forwarded, str) else None,
        )
