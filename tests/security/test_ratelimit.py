"""Per-client rate limit: token buckets, client keys, 429 before the body, under gunicorn."""

from __future__ import annotations

import hashlib
import time
from pathlib import Path

import pytest
import requests
from zoscii_live.settings import LiveSettings

from tests.security.figures import TALLY
from tests.support.api_app import make_client
from zoscii_api.settings import ApiSettings
from zosciimq.access import AccessControl, parse_clients
from zosciimq.ratelimit import Admission, ClientAddress, RateLimited, TokenBuckets
from zosciimq.settings import SettingsError


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_bucket_allows_the_burst_then_the_rate() -> None:
    clock = Clock()
    buckets = TokenBuckets(rate=2, burst=3, clock=clock)
    assert [buckets.take("a") for _ in range(3)] == [0, 0, 0]
    assert buckets.take("a") == pytest.approx(0.5)
    assert buckets.take("b") == 0  # another client has its own bucket
    clock.now += 0.5
    assert buckets.take("a") == 0
    assert buckets.take("a") == pytest.approx(0.5)
    clock.now += 10  # refills up to the burst, no further
    assert [buckets.take("a") for _ in range(4)][-1] > 0


def test_refused_requests_do_not_use_up_tokens() -> None:
    clock = Clock()
    buckets = TokenBuckets(rate=1, burst=1, clock=clock)
    assert buckets.take("a") == 0
    for _ in range(50):  # hammering while limited
        assert buckets.take("a") > 0
    clock.now += 1.0
    assert buckets.take("a") == 0


def test_memory_stays_bounded() -> None:
    clock = Clock()
    buckets = TokenBuckets(rate=10, burst=10, clock=clock, max_keys=1000)
    for number in range(50_000):  # a client per request, as a botnet would look
        buckets.take(f"client-{number}")
        clock.now += 0.01  # a bucket refills in 1 s: about 100 keys are ever alive
    assert len(buckets) <= 101
    for number in range(50_000):  # no time passing at all: the cap holds
        buckets.take(f"burst-{number}")
    assert len(buckets) == 1000


def test_forwarded_for_is_believed_only_from_trusted_proxies() -> None:
    plain = ClientAddress(())
    assert plain.of("203.0.113.9", "198.51.100.1") == "203.0.113.9"
    proxied = ClientAddress(("10.0.0.0/8", "127.0.0.1"))
    assert proxied.of("203.0.113.9", "198.51.100.1") == "203.0.113.9"  # peer not trusted
    assert proxied.of("127.0.0.1", "198.51.100.1") == "198.51.100.1"
    # the left part is the client's to forge: the first untrusted hop from the right counts
    assert proxied.of("127.0.0.1", "1.2.3.4, 198.51.100.1, 10.1.2.3") == "198.51.100.1"
    assert proxied.of("127.0.0.1", "10.9.9.9, 10.1.2.3") == "10.9.9.9"
    assert proxied.of("127.0.0.1", "not-an-address") == "127.0.0.1"
    assert proxied.of("127.0.0.1", "") == "127.0.0.1"
    v6 = ClientAddress(("::1",))
    assert v6.of("::1", "2001:db8::7") == "2001:db8::7"


def test_ipv4_mapped_addresses_are_their_ipv4_address_as_for_the_admin_check() -> None:
    """A dual-stack socket reports an IPv4 peer as ::ffff:a.b.c.d: it is the same
    proxy, and a hop forwarded that way is the same client."""
    proxied = ClientAddress(("10.0.0.0/8",))
    assert proxied.of("::ffff:10.1.2.3", "198.51.100.1") == "198.51.100.1"
    assert proxied.of("10.1.2.3", "::ffff:198.51.100.1") == "198.51.100.1"
    assert proxied.of("10.1.2.3", "198.51.100.1, ::ffff:10.9.9.9") == "198.51.100.1"
    assert proxied.of("::ffff:203.0.113.9", "198.51.100.1") == "::ffff:203.0.113.9"
    mapped = ClientAddress(("::ffff:10.0.0.0/104",))  # written as a mapped range
    assert mapped.of("10.1.2.3", "198.51.100.1") == "198.51.100.1"
    assert ApiSettings.from_env({"ZOSCII_TRUSTED_PROXIES": "::ffff:10.0.0.0/104"})


def test_settings(tmp_path: Path) -> None:
    settings = ApiSettings.from_env(
        {
            "ZOSCII_RATE_LIMIT": "2.5",
            "ZOSCII_RATE_BURST": "10",
            "ZOSCII_TRUSTED_PROXIES": "127.0.0.1, 10.0.0.0/8",
        }
    )
    assert (settings.rate_limit, settings.rate_burst) == (2.5, 10)
    assert settings.trusted_proxies == ("127.0.0.1", "10.0.0.0/8")
    assert ApiSettings.from_env({}).rate_limit == 0  # off by default
    with pytest.raises(SettingsError, match="ZOSCII_TRUSTED_PROXIES"):
        ApiSettings.from_env({"ZOSCII_TRUSTED_PROXIES": "proxy.example.com/24"})
    with pytest.raises(SettingsError, match="ZOSCII_RATE_LIMIT"):
        ApiSettings.from_env({"ZOSCII_RATE_LIMIT": "-1"})


def test_the_api_and_the_live_service_read_trusted_proxies_alike() -> None:
    """Both believe a proxy named as compose names it (issue 27: never an address pool
    that every container shares); the live service once refused a name and so was left
    trusting the pools."""
    env = {"ZOSCII_DATA_DIR": "/nonexistent", "ZOSCII_TRUSTED_PROXIES": "proxy, 10.0.0.0/8"}
    assert ApiSettings.from_env(env).trusted_proxies == ("proxy", "10.0.0.0/8")
    assert LiveSettings.from_env(env).trusted_proxies == ("proxy", "10.0.0.0/8")
    for settings in (ApiSettings, LiveSettings):
        with pytest.raises(SettingsError, match="ZOSCII_TRUSTED_PROXIES"):
            settings.from_env({**env, "ZOSCII_TRUSTED_PROXIES": "proxy.example.com/24"})


TOKEN_A, TOKEN_B = "token-a-0123456789abcdef", "token-b-0123456789abcdef"
CLIENTS = f"""
[[clients]]
name = "a"
token_sha256 = "{hashlib.sha256(TOKEN_A.encode()).hexdigest()}"
write = ["*"]
read = ["*"]

[[clients]]
name = "b"
token_sha256 = "{hashlib.sha256(TOKEN_B.encode()).hexdigest()}"
write = ["*"]
"""


def test_authenticated_clients_are_limited_by_name_and_bad_guesses_by_address() -> None:
    clock = Clock()
    admission = Admission(AccessControl(parse_clients(CLIENTS)), rate=1, burst=2, clock=clock)
    here, there = {"REMOTE_ADDR": "192.0.2.1"}, {"REMOTE_ADDR": "192.0.2.2"}
    assert admission.admit(here, f"Bearer {TOKEN_A}").name == "a"
    assert admission.admit(there, f"Bearer {TOKEN_A}").name == "a"  # the same bucket
    with pytest.raises(RateLimited) as refused:
        admission.admit(here, f"Bearer {TOKEN_A}")
    assert refused.value.retry_after == 1
    assert admission.admit(here, f"Bearer {TOKEN_B}").name == "b"  # b has its own
    from zosciimq.access import Unauthenticated

    for _ in range(2):
        with pytest.raises(Unauthenticated):
            admission.admit(here, "Bearer guess")
    with pytest.raises(RateLimited):  # guessing is limited too
        admission.admit(here, "Bearer guess")


def test_429_is_an_envelope_with_retry_after_and_the_body_is_never_read(tmp_path: Path) -> None:
    client = make_client(tmp_path / "data", rate_limit=0.1, rate_burst=2)
    for _ in range(2):
        assert client.get("/?action=publish&q=a&msg=x").status_code == 200
    reply = client.post(
        "/?action=publish&q=a", data=b"y" * 100_000, content_type="application/octet-stream"
    )
    assert reply.status_code == 429
    body = reply.get_json()
    assert body["system"] == "ZOSCII MQ" and "Too many requests" in body["error"]
    assert reply.headers["Retry-After"] == "10"
    assert list((tmp_path / "data" / "queues" / "temp").iterdir()) == []
    assert list((tmp_path / "data" / "queues" / "a").iterdir()).__len__() == 2
    # operations routes are not limited: monitoring keeps working
    assert client.get("/healthz").status_code == 200
    TALLY["rate limit: requests tried"] += 4


def test_off_by_default(tmp_path: Path) -> None:
    client = make_client(tmp_path / "data")
    statuses = {client.get("/?action=scan").status_code for _ in range(300)}
    assert statuses == {200}
    TALLY["rate limit: requests tried"] += 300


@pytest.mark.slow  # waits for the bucket to refill (the test client checks 429 fast)
def test_under_gunicorn(tmp_path: Path, servers) -> None:
    server = servers(
        tmp_path / "data",
        workers=1,
        env={"ZOSCII_RATE_LIMIT": "1", "ZOSCII_RATE_BURST": "3"},
    )
    session = requests.Session()
    # X-Forwarded-For from an untrusted peer changes nothing
    statuses = [
        session.get(
            server.url, params={"action": "scan"}, headers={"X-Forwarded-For": f"10.0.0.{i}"}
        ).status_code
        for i in range(4)
    ]
    assert statuses[:3] == [200, 200, 200] and statuses[3] == 429
    refused = session.get(server.url, params={"action": "scan"})
    assert refused.status_code == 429 and refused.json()["error"]
    time.sleep(int(refused.headers["Retry-After"]))
    assert session.get(server.url, params={"action": "scan"}).status_code == 200
    TALLY["rate limit: requests tried"] += 6


def test_under_gunicorn_behind_a_trusted_proxy(tmp_path: Path, servers) -> None:
    server = servers(
        tmp_path / "data",
        workers=1,
        env={
            "ZOSCII_RATE_LIMIT": "0.2",
            "ZOSCII_RATE_BURST": "1",
            "ZOSCII_TRUSTED_PROXIES": "127.0.0.1",
        },
    )

    def scan(client: str) -> int:
        headers = {"X-Forwarded-For": client}
        return requests.get(server.url, params={"action": "scan"}, headers=headers).status_code

    assert [scan("198.51.100.1"), scan("198.51.100.1")] == [200, 429]
    assert scan("198.51.100.2") == 200  # another client behind the same proxy
    TALLY["rate limit: requests tried"] += 3
