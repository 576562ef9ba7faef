"""Client addresses: parsing, the configured networks, and who is behind a trusted proxy.

Every check of an address against a list (``ZOSCII_TRUSTED_PROXIES`` for the rate limit,
the admin check and the access log; ``ZOSCII_ADMIN_ALLOW``) goes through ``parse_address``
and ``parse_network``, so they agree on one form: a dual-stack socket reports an IPv4
peer as ``::ffff:a.b.c.d``, which must match ``a.b.c.d/32`` everywhere or nowhere, and a
link-local zone (``fe80::1%eth0``) is not part of the address.

A trusted proxy may also be given by host name (compose's ``proxy``): then only the
address that name has is trusted, never a whole address pool that other containers and
the host's own connections (the bridge gateway) come from too (issue 27). A container
that is recreated gets a new address, so a name is looked up again when a peer that is
not trusted sends the header, at most every ``RESOLVE_SECONDS``.
"""

from __future__ import annotations

import ipaddress
import logging
import re
import socket
import threading
import time
from collections.abc import Callable, Iterable, Mapping

from zosciimq.settings import SettingsError

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network

_MAPPED_PREFIX = 96  # ::ffff:0:0/96 holds the IPv4-mapped addresses
RESOLVE_SECONDS = 5.0
_LABEL = r"[A-Za-z0-9][A-Za-z0-9-]{0,62}"
_HOST_NAME = re.compile(rf"(?=.{{1,253}}$){_LABEL}(\.{_LABEL})*")

log = logging.getLogger(__name__)


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


def is_host_name(text: str) -> bool:
    """A DNS name (letters, digits, hyphens, dots) rather than an address or range."""
    return bool(_HOST_NAME.fullmatch(text.strip())) and not _is_network(text)


def network_setting(raw: str, variable: str, *, host_names: bool = False) -> tuple[str, ...]:
    """A comma-separated setting of addresses and CIDR ranges (with ``host_names``, names
    too: they stand for the addresses they resolve to), each checked, kept as given."""
    items = tuple(item.strip() for item in raw.split(",") if item.strip())
    for item in items:
        if host_names and is_host_name(item):
            continue
        try:
            parse_network(item)  # as they are used
        except ValueError:
            raise SettingsError(f"{variable}: {item!r} is not an address") from None
    return items


def trusted_proxies_setting(raw: str) -> tuple[str, ...]:
    """``ZOSCII_TRUSTED_PROXIES``, read alike by every service that believes a proxy."""
    return network_setting(raw, "ZOSCII_TRUSTED_PROXIES", host_names=True)


def _is_network(text: str) -> bool:
    try:
        parse_network(text)
    except ValueError:
        return False
    return True


Resolver = Callable[[str], set[Address]]


def resolve(name: str) -> set[Address]:
    """Every address ``name`` has now (none when it does not resolve)."""
    try:
        found = socket.getaddrinfo(name, None, proto=socket.IPPROTO_TCP)
    except (OSError, UnicodeError):
        return set()
    addresses = {parse_address(str(info[4][0])) for info in found}
    return {a for a in addresses if a is not None}


class TrustedPeers:
    """The peers of ``ZOSCII_TRUSTED_PROXIES``: ranges as given, and host names by the
    addresses they resolve to, looked up again (at most every ``RESOLVE_SECONDS``) when
    asked about a peer that is not among them."""

    def __init__(
        self,
        items: Iterable[str] = (),
        *,
        resolver: Resolver = resolve,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        items = tuple(items)
        self.names = tuple(i.strip() for i in items if is_host_name(i))
        self.ranges = networks(i for i in items if not is_host_name(i))
        self._resolver = resolver
        self._clock = clock
        self._resolved: frozenset[Address] = frozenset()
        self._resolved_at: float | None = None
        self._unresolved: set[str] = set()  # warned about once
        self._lock = threading.Lock()

    def __bool__(self) -> bool:
        return bool(self.names or self.ranges)

    def __contains__(self, address: Address | None) -> bool:
        if address is None:
            return False
        if is_in(address, self.ranges):
            return True
        if not self.names:
            return False
        if address in self._resolved:
            return True
        return address in self._resolve_again()

    def _resolve_again(self) -> frozenset[Address]:
        with self._lock:
            now = self._clock()
            if self._resolved_at is not None and now - self._resolved_at < RESOLVE_SECONDS:
                return self._resolved
            self._resolved_at = now
            found: set[Address] = set()
            for name in self.names:
                addresses = self._resolver(name)
                if not addresses and name not in self._unresolved:
                    self._unresolved.add(name)
                    log.warning("trusted proxy %r does not resolve (yet)", name)
                found |= addresses
            self._resolved = frozenset(found)
            return self._resolved


class ClientAddress:
    """The address a request comes from, through trusted proxies only."""

    def __init__(
        self, trusted_proxies: Iterable[str] = (), *, resolver: Resolver = resolve
    ) -> None:
        self.trusted = TrustedPeers(trusted_proxies, resolver=resolver)

    def of(self, remote_addr: str | None, forwarded_for: str | None) -> str:
        """The peer, or when the peer is a trusted proxy the first untrusted hop of
        ``X-Forwarded-For`` read from the right (the left part is the client's to forge).

        Without a header to believe, the peer as the server reported it (no parsing: this
        runs for every request's log line); a forwarded hop in its normal form."""
        peer = remote_addr or ""
        if not forwarded_for or not self.trusted:
            return peer
        proxy = parse_address(peer)
        if proxy not in self.trusted:
            return peer
        for hop in reversed(forwarded_for.split(",")):
            if not hop.strip():
                continue
            address = parse_address(hop)
            if address is None:
                break  # a forged or garbled hop: nothing left of it is believed
            if address not in self.trusted:
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


def attached_networks(
    route_file: str = "/proc/net/route", route6_file: str = "/proc/net/ipv6_route"
) -> tuple[Network, ...]:
    """The networks this machine (or container) is attached to: loopback, and every
    directly connected route of the kernel's tables (Linux; elsewhere loopback only).

    In a container these are its compose network(s), whose gateway is where this
    host's own connections to a published port come from."""
    found: list[Network] = [
        ipaddress.IPv4Network("127.0.0.0/8"),
        ipaddress.IPv6Network("::1/128"),
    ]
    try:
        with open(route_file, encoding="ascii") as table:
            next(table, None)  # the header
            for line in table:
                fields = line.split()
                # Iface Destination Gateway Flags RefCnt Use Metric Mask ...: hex, little-endian
                if len(fields) < 8 or int(fields[2], 16) != 0 or int(fields[7], 16) == 0:
                    continue  # via a gateway, or the default route
                destination = ipaddress.IPv4Address(int(fields[1], 16).to_bytes(4, "little"))
                mask = ipaddress.IPv4Address(int(fields[7], 16).to_bytes(4, "little"))
                found.append(ipaddress.IPv4Network(f"{destination}/{mask}", strict=False))
    except (OSError, ValueError):
        pass
    try:
        with open(route6_file, encoding="ascii") as table:
            for line in table:
                fields = line.split()
                # destination prefix-length source source-length next-hop metric ... iface
                if len(fields) < 10 or fields[9] == "lo" or int(fields[4], 16) != 0:
                    continue
                length = int(fields[1], 16)
                network = ipaddress.IPv6Network(
                    (ipaddress.IPv6Address(bytes.fromhex(fields[0])), length), strict=False
                )
                if length and not network.is_multicast:
                    found.append(network)
    except (OSError, ValueError):
        pass
    return tuple(dict.fromkeys(found))


class DirectPeers:
    """``ZOSCII_DIRECT_ACCESS=local``: the peers that may use the protocol without the
    proxy: loopback, the networks the api is attached to (``attached_networks``) and the
    trusted proxies. A port mapping that publishes the api's port beyond this host
    then does not make it the public endpoint; remote clients go through the proxy."""

    _CACHE = 4096

    def __init__(self, attached: Iterable[Network], trusted: TrustedPeers) -> None:
        self.attached = tuple(attached)
        self.trusted = trusted
        self._allowed: set[str] = set()  # peers seen and allowed (a bounded set)

    def allows(self, remote_addr: str | None) -> bool:
        peer = remote_addr or ""
        if peer in self._allowed:
            return True
        address = parse_address(peer)
        if address is None:
            return False
        if not (address.is_loopback or is_in(address, self.attached) or address in self.trusted):
            return False
        if len(self._allowed) >= self._CACHE:
            self._allowed.clear()
        self._allowed.add(peer)
        return True
