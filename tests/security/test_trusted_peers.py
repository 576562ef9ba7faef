"""Whose word the api takes for a client's address, and who may use its own port.

Issue 27: compose trusted Docker's whole address pools as proxies, so the host (whose
connections come from the bridge gateway) and every container on the network could
name any address in ``X-Forwarded-For``, straight to the api's port, and pass for
loopback. A trusted proxy is now named (``proxy``): only the address that name has is
believed. And the api's own port answers the protocol only to this host and its
networks unless ``ZOSCII_DIRECT_ACCESS=public`` says it is the public endpoint.
"""

from __future__ import annotations

import ipaddress
from pathlib import Path

import pytest

from tests.support.api_app import body, make_client
from zoscii_api import endpoint
from zoscii_api.settings import ApiSettings
from zosciimq.addresses import (
    RESOLVE_SECONDS,
    ClientAddress,
    DirectPeers,
    TrustedPeers,
    attached_networks,
    parse_address,
)
from zosciimq.settings import SettingsError


class Dns:
    """A resolver the test sets: name -> addresses, counting lookups."""

    def __init__(self, **names: str) -> None:
        self.names = {
            name: {parse_address(a) for a in found.split(",")} for name, found in names.items()
        }
        self.lookups = 0

    def __call__(self, name: str) -> set:
        self.lookups += 1
        return set(self.names.get(name, set()))


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_only_the_named_proxy_is_believed_not_its_neighbours() -> None:
    dns = Dns(proxy="172.18.0.5")
    addresses = ClientAddress(("proxy",), resolver=dns)
    assert addresses.of("172.18.0.5", "198.51.100.7") == "198.51.100.7"
    # the bridge gateway (this host's own connections) and another container: not believed
    assert addresses.of("172.18.0.1", "127.0.0.1") == "172.18.0.1"
    assert addresses.of("172.18.0.9", "127.0.0.1") == "172.18.0.9"
    assert addresses.of("::ffff:172.18.0.5", "203.0.113.4") == "203.0.113.4"


def test_a_recreated_proxy_is_found_again_at_its_new_address() -> None:
    dns, clock = Dns(proxy="172.18.0.5"), Clock()
    trusted = TrustedPeers(("proxy",), resolver=dns, clock=clock)
    assert parse_address("172.18.0.5") in trusted
    dns.names["proxy"] = {parse_address("172.18.0.7")}
    assert parse_address("172.18.0.7") not in trusted  # looked up a moment ago
    lookups = dns.lookups
    assert parse_address("172.18.0.7") not in trusted
    assert dns.lookups == lookups  # not again within RESOLVE_SECONDS, whoever asks
    clock.now += RESOLVE_SECONDS
    assert parse_address("172.18.0.7") in trusted
    assert parse_address("172.18.0.5") not in trusted  # its old address is anyone's now


def test_a_name_that_does_not_resolve_trusts_nobody() -> None:
    addresses = ClientAddress(("proxy", "10.9.9.9/32"), resolver=Dns())
    assert addresses.of("172.18.0.5", "127.0.0.1") == "172.18.0.5"
    assert addresses.of("10.9.9.9", "127.0.0.1") == "127.0.0.1"  # ranges still work


def test_names_and_ranges_are_settings_and_garbage_is_not() -> None:
    read = ApiSettings.from_env
    assert read({"ZOSCII_TRUSTED_PROXIES": "proxy, statissa"}).trusted_proxies == (
        "proxy",
        "statissa",
    )
    assert read({"ZOSCII_TRUSTED_PROXIES": "10.0.0.0/8,::1"}).trusted_proxies == (
        "10.0.0.0/8",
        "::1",
    )
    for bad in ("10.0.0.0/33", "proxy;rm", "-proxy", "a..b"):
        with pytest.raises(SettingsError, match="ZOSCII_TRUSTED_PROXIES"):
            read({"ZOSCII_TRUSTED_PROXIES": bad})


def test_the_compose_file_trusts_named_services_only() -> None:
    """The shipped default: no address range at all (issue 27, item 1)."""
    from tests.e2e.compose_spec import load_services

    api = load_services(env={})["api"]
    trusted = api.environment({})["ZOSCII_TRUSTED_PROXIES"].split(",")
    assert trusted == ["proxy", "statissa"]


# --- ZOSCII_DIRECT_ACCESS ----------------------------------------------------------------
ROUTES = """\
Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT
eth0\t00000000\t010012AC\t0003\t0\t0\t0\t00000000\t0\t0\t0
eth0\t000012AC\t00000000\t0001\t0\t0\t0\t0000FFFF\t0\t0\t0
eth1\t0000A8C0\t0101A8C0\t0003\t0\t0\t0\t00FFFFFF\t0\t0\t0
"""
ROUTES6 = (
    "fd000000000000000000000000000000 40 00000000000000000000000000000000 00 "
    "00000000000000000000000000000000 00000100 00000001 00000000 00000001     eth0\n"
    "00000000000000000000000000000000 00 00000000000000000000000000000000 00 "
    "fd000000000000000000000000000001 00000400 00000002 00000000 00000003     eth0\n"
    "ff000000000000000000000000000000 08 00000000000000000000000000000000 00 "
    "00000000000000000000000000000000 00000100 00000001 00000000 00000001     eth0\n"
)


def test_attached_networks_are_the_directly_connected_routes(tmp_path: Path) -> None:
    (tmp_path / "route").write_text(ROUTES)
    (tmp_path / "route6").write_text(ROUTES6)
    found = attached_networks(str(tmp_path / "route"), str(tmp_path / "route6"))
    assert found == (
        ipaddress.ip_network("127.0.0.0/8"),
        ipaddress.ip_network("::1/128"),
        ipaddress.ip_network("172.18.0.0/16"),  # the compose network, its gateway included
        ipaddress.ip_network("fd00::/64"),
    )  # not the default routes, not 192.168.0.0/24 (via a gateway), not multicast
    assert attached_networks(str(tmp_path / "none"), str(tmp_path / "none")) == found[:2]


@pytest.fixture
def compose_network(monkeypatch: pytest.MonkeyPatch) -> None:
    """The api as in a container on 172.18.0.0/16 (whatever this machine's networks are)."""
    attached = (ipaddress.ip_network("127.0.0.0/8"), ipaddress.ip_network("172.18.0.0/16"))
    monkeypatch.setattr(endpoint, "attached_networks", lambda: attached)


@pytest.mark.usefixtures("compose_network")
def test_the_api_port_answers_this_host_and_its_network_only(tmp_path: Path) -> None:
    client = make_client(tmp_path / "data")
    publish = {"action": "publish", "q": "orders", "msg": "x"}
    for peer in ("127.0.0.1", "::1", "172.18.0.1", "172.18.0.23", "::ffff:172.18.0.1"):
        reply = client.post("/", data=publish, environ_base={"REMOTE_ADDR": peer})
        assert reply.status_code == 200, (peer, reply.get_json())
    for peer in ("203.0.113.5", "10.1.2.3", "192.168.1.20", "2001:db8::5"):
        reply = client.post("/", data=publish, environ_base={"REMOTE_ADDR": peer})
        assert reply.status_code == 403, peer
        assert "ZOSCII_DIRECT_ACCESS=public" in body(reply)["error"]
    # what is not the protocol stays as it was: the health check and the metrics
    far = {"REMOTE_ADDR": "203.0.113.5"}
    assert client.get("/healthz", environ_base=far).status_code == 200
    assert client.get("/metrics", environ_base=far).status_code == 200


@pytest.mark.usefixtures("compose_network")
def test_a_trusted_proxy_outside_the_network_and_the_public_setting(tmp_path: Path) -> None:
    queues = {"action": "fetch", "q": "orders"}
    far = {"REMOTE_ADDR": "10.9.9.9"}  # a load balancer in front, listed as trusted
    trusting = make_client(tmp_path / "data", trusted_proxies=("10.9.9.9/32",))
    assert trusting.get("/", query_string=queues, environ_base=far).status_code == 404
    public = make_client(tmp_path / "data", direct_access="public")
    reply = public.get("/", query_string=queues, environ_base={"REMOTE_ADDR": "203.0.113.5"})
    assert reply.status_code == 404  # no such queue: answered
    assert ApiSettings.from_env({}).direct_access == "local"
    assert ApiSettings.from_env({"ZOSCII_DIRECT_ACCESS": "PUBLIC"}).direct_access == "public"
    with pytest.raises(SettingsError, match="ZOSCII_DIRECT_ACCESS"):
        ApiSettings.from_env({"ZOSCII_DIRECT_ACCESS": "yes"})


def test_direct_peers_remember_only_bounded_good_answers() -> None:
    peers = DirectPeers((ipaddress.ip_network("10.0.0.0/8"),), TrustedPeers(()))
    for n in range(DirectPeers._CACHE + 10):
        assert peers.allows(f"10.0.{n // 256}.{n % 256}")
    assert len(peers._allowed) <= DirectPeers._CACHE
    assert not peers.allows("11.0.0.1") and "11.0.0.1" not in peers._allowed
    assert not peers.allows(None) and not peers.allows("garbage")
