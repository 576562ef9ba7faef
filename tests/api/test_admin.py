"""The operators' actions: queues, purge, delete, replay; who may call them (a credential
always, an address when ZOSCII_ADMIN_ALLOW says so, POST for those that change something,
never a web page), and the audit trail they leave."""

from __future__ import annotations

import base64
import hashlib
import logging
import threading
from datetime import UTC, datetime
from pathlib import Path

import pytest
from flask.testing import FlaskClient

from tests.support.api_app import body, drain, make_client
from zoscii_api.settings import ApiSettings
from zosciimq.access import AccessControl, load_access_control, operator_client, parse_clients
from zosciimq.core import parse_name
from zosciimq.settings import SettingsError

ADMIN, PARTNER = "admin-secret-0123456789abcdef", "partner-secret-0123456789abc"
OPERATOR = "operator-token-0123456789abcdef0123456789"  # ZOSCII_ADMIN_TOKEN_SHA256's token
AS_OPERATOR = {"Authorization": f"Bearer {OPERATOR}"}


def sha(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def operator_only() -> AccessControl:
    """Access control off, the operator's token configured (what make up sets up)."""
    return AccessControl([], operator_client(sha(OPERATOR)))


@pytest.fixture
def client(data_dir: Path) -> FlaskClient:
    """Any peer reaches the protocol (ZOSCII_DIRECT_ACCESS has tests of its own): the
    addresses here are those of the admin checks, not of this machine's networks."""
    return make_client(data_dir, access=operator_only(), direct_access="public")


CLIENTS = f"""
[[clients]]
name = "ops"
token_sha256 = "{sha(ADMIN)}"
read = ["*"]
write = ["*"]
actions = ["admin"]

[[clients]]
name = "partner"
token_sha256 = "{sha(PARTNER)}"
read = ["*"]
write = ["*"]
actions = ["store", "retrieve", "scan", "identify", "metrics"]
"""


class Clock:
    """The api's clock, set by the test: names carry the times it gives."""

    def __init__(self, moment: datetime) -> None:
        self.now = moment

    def __call__(self) -> datetime:
        return self.now


def publish(client: FlaskClient, queue: str, message: bytes, **headers: str) -> None:
    reply = client.post(
        "/", data={"action": "publish", "q": queue, "msg": message, "r": "30"}, headers=headers
    )
    assert body(reply)["message"] == "Message published.", reply.get_json()


def admin(client: FlaskClient, action: str, **params: str):
    return client.post("/", data={"action": action, **params}, headers=AS_OPERATOR)


def consume(client: FlaskClient, queue: str, group: str, count: int):
    return client.post(
        "/", data={"action": "consume", "q": queue, "group": group, "count": str(count)}
    )


# --- listing -------------------------------------------------------------------------------
def test_queues_lists_depth_bytes_ends_and_group_lag(client: FlaskClient) -> None:
    for size in (1, 22, 333):
        publish(client, "orders", b"x" * size)
    publish(client, "audit", b"hello")
    assert consume(client, "orders", "billing", 2).status_code == 200  # 2 leased, 1 waiting
    consume(client, "orders", "shipping", 0)  # one leased, two waiting

    reply = admin(client, "queues")
    found = {q["queue"]: q for q in body(reply)["result"]}
    assert set(found) == {"orders", "audit"}
    orders = found["orders"]
    names = [name for name, _ in drain(client, "orders")]
    assert (orders["messages"], orders["bytes"]) == (3, 356)
    assert (orders["oldest"], orders["newest"]) == (names[0], names[-1])
    assert orders["oldest_at"] == parse_name(names[0]).published_at.strftime("%Y-%m-%dT%H:%M:%SZ")
    groups = {g["group"]: g for g in orders["groups"]}
    assert groups["billing"]["leased"] == 2 and groups["billing"]["waiting"] == 1
    assert groups["billing"]["lag"] == 3
    assert groups["shipping"]["lag"] == 3 and groups["shipping"]["leased"] == 1
    assert found["audit"]["messages"] == 1 and found["audit"]["groups"] == []

    one = body(admin(client, "queues", q="audit"))["result"]
    assert [q["queue"] for q in one] == ["audit"]
    assert admin(client, "queues", q="nope").status_code == 404


# --- purge ---------------------------------------------------------------------------------
def test_purge_all_keeps_the_queue_and_later_messages(client: FlaskClient) -> None:
    for number in range(5):
        publish(client, "jobs", f"m{number}".encode())
    reply = body(admin(client, "purge", q="jobs"))
    assert reply["result"]["purged"] == 5 and reply["result"]["bytes"] == 10
    assert drain(client, "jobs") == []
    publish(client, "jobs", b"after")
    assert [m for _, m in drain(client, "jobs")] == [b"after"]


def test_purge_before_a_time_or_a_name(tmp_path: Path) -> None:
    clock = Clock(datetime(2024, 5, 1, 13, 0, 0, tzinfo=UTC))
    client = make_client_with_clock(tmp_path, clock)
    for hour in (13, 14, 15):
        clock.now = clock.now.replace(hour=hour)
        publish(client, "log", f"{hour}".encode())
    reply = body(admin(client, "purge", q="log", before="2024-05-01T14:00:00Z"))
    assert reply["result"]["purged"] == 1
    left = drain(client, "log")
    assert [m for _, m in left] == [b"14", b"15"]
    body(admin(client, "purge", q="log", before=left[1][0]))  # a name: those before it
    assert [m for _, m in drain(client, "log")] == [b"15"]
    assert admin(client, "purge", q="log", before="yesterday").status_code == 400
    assert admin(client, "purge", q="log", before="2024-05-01T14:00:00").status_code == 400


def make_client_with_clock(tmp_path: Path, clock: Clock) -> FlaskClient:
    from zoscii_api.app import create_app
    from zosciimq.settings import CoreSettings

    settings = ApiSettings(core=CoreSettings(data_dir=tmp_path / "data"), access=operator_only())
    return create_app(settings, clock=clock).test_client()


# --- delete --------------------------------------------------------------------------------
def test_delete_then_publish_again(client: FlaskClient, data_dir: Path) -> None:
    publish(client, "tmpq", b"one")
    publish(client, "tmpq", b"two")
    consume(client, "tmpq", "workers", 1)
    reply = body(admin(client, "delete", q="tmpq"))
    assert reply["result"] == {"queue": "tmpq", "messages": 2, "bytes": 6, "groups": ["workers"]}
    assert not (data_dir / "queues" / "tmpq").exists()
    assert not (data_dir / ".zoscii" / "index" / "tmpq.idx").exists()
    assert not (data_dir / ".zoscii" / "groups" / "tmpq").exists()
    assert list((data_dir / ".zoscii" / "trash").iterdir()) == []
    assert client.get("/", query_string={"action": "fetch", "q": "tmpq"}).status_code == 404
    assert admin(client, "delete", q="tmpq").status_code == 404

    publish(client, "tmpq", b"three")
    assert [m for _, m in drain(client, "tmpq")] == [b"three"]
    listed = body(admin(client, "queues", q="tmpq"))["result"][0]
    assert listed["messages"] == 1 and listed["groups"] == []  # the old group is gone


def test_concurrent_publishers_lose_only_what_the_delete_took(data_dir: Path) -> None:
    """Each publisher's acked messages: a prefix deleted by the delete, the rest present
    in the queue made anew; the deleted ones are exactly what the delete counted."""
    publishers, each = 4, 40
    client = make_client(data_dir, access=operator_only())
    publish(client, "busy", b"seed")
    acked: list[list[bytes]] = [[] for _ in range(publishers)]
    halfway = threading.Barrier(publishers + 1)
    errors: list[BaseException] = []

    def run(number: int) -> None:
        mine = make_client(data_dir, access=operator_only())
        try:
            for seq in range(each):
                if seq == each // 4:
                    halfway.wait(timeout=30)
                message = f"{number}:{seq}".encode()
                publish(mine, "busy", message)
                acked[number].append(message)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(n,)) for n in range(publishers)]
    for thread in threads:
        thread.start()
    halfway.wait(timeout=30)
    deleted = body(admin(client, "delete", q="busy"))["result"]["messages"]
    for thread in threads:
        thread.join(timeout=60)
    assert not errors
    present = {m for _, m in drain(client, "busy")}
    gone = 1  # the seed
    for number in range(publishers):
        assert len(acked[number]) == each
        flags = [m in present for m in acked[number]]
        cut = flags.index(True) if True in flags else len(flags)
        assert all(flags[cut:]), f"publisher {number} lost an acked message after the delete"
        assert cut >= each // 4  # everything before the barrier was there to be deleted
        gone += cut
    assert gone == deleted


# --- replay --------------------------------------------------------------------------------
def test_replay_gives_the_pointer_before_the_time(tmp_path: Path) -> None:
    clock = Clock(datetime(2024, 5, 1, 13, 59, 59, tzinfo=UTC))
    client = make_client_with_clock(tmp_path, clock)
    publish(client, "feed", b"early-1")
    publish(client, "feed", b"early-2")
    clock.now = datetime(2024, 5, 1, 14, 0, 0, tzinfo=UTC)
    publish(client, "feed", b"on-time")
    clock.now = datetime(2024, 5, 1, 15, 0, 0, tzinfo=UTC)
    publish(client, "feed", b"late")
    names = [name for name, _ in drain(client, "feed")]

    result = body(admin(client, "replay", q="feed", since="2024-05-01T14:00:00Z"))["result"]
    assert result["pointer"] == names[1] and result["first"] == names[2]
    assert result["since"] == "2024-05-01T14:00:00Z" and result["waiting"] == 2
    assert [m for _, m in drain(client, "feed", result["pointer"])] == [b"on-time", b"late"]
    # another zone, and a fraction of a second: the same second
    same = body(admin(client, "replay", q="feed", since="2024-05-01T16:00:00.7+02:00"))
    assert same["result"]["pointer"] == names[1]

    before_all = body(admin(client, "replay", q="feed", since="2024-01-01T00:00:00Z"))["result"]
    assert before_all["pointer"] == "" and before_all["first"] == names[0]
    after_all = body(admin(client, "replay", q="feed", since="2030-01-01T00:00:00Z"))["result"]
    assert after_all["pointer"] == names[-1] and after_all["first"] is None
    assert admin(client, "replay", q="feed").status_code == 400
    assert admin(client, "replay", q="none", since="2024-01-01T00:00:00Z").status_code == 404


# --- who may --------------------------------------------------------------------------------
ALL_ACTIONS = ("queues", "purge", "delete", "replay")


def _params(action: str) -> dict[str, str]:
    return {"action": action, "q": "secret-queue", "since": "2024-01-01T00:00:00Z"}


@pytest.mark.parametrize("action", ALL_ACTIONS)
def test_a_credential_is_needed_from_every_address(client: FlaskClient, action: str) -> None:
    """Access control off: the operator's token decides, not the address (issue 29: the
    host reaches the api from the bridge gateway, never from loopback)."""
    publish(client, "secret-queue", b"x")
    for headers in ({}, {"Authorization": "Bearer wrong-token"}):
        for address in ("127.0.0.1", "::1", "172.18.0.1"):
            denied = client.post(
                "/", data=_params(action), headers=headers, environ_base={"REMOTE_ADDR": address}
            )
            assert denied.status_code == 401, (headers, address, denied.get_json())
            assert "secret-queue" not in denied.get_data(as_text=True)
    assert len(drain(client, "secret-queue")) == 1  # nothing happened
    basic = base64.b64encode(f"admin:{OPERATOR}".encode()).decode()  # a browser's prompt
    for headers in (AS_OPERATOR, {"Authorization": f"Basic {basic}"}):
        publish(client, "secret-queue", b"x")  # there again for a delete
        done = client.post(
            "/", data=_params(action), headers=headers, environ_base={"REMOTE_ADDR": "172.18.0.1"}
        )
        assert done.status_code == 200, done.get_json()


def test_without_any_credential_configured_admin_is_off_and_says_how(data_dir: Path) -> None:
    client = make_client(data_dir)
    reply = client.post("/", data={"action": "queues"}, headers=AS_OPERATOR)
    assert reply.status_code == 403
    assert "ZOSCII_ADMIN_TOKEN_SHA256" in body(reply)["error"]


def test_the_operator_token_is_read_as_a_hash(data_dir: Path) -> None:
    access = load_access_control({"ZOSCII_ADMIN_TOKEN_SHA256": sha(OPERATOR).upper()})
    assert not access.enabled  # everything else stays open
    assert access.operator is not None and access.operator.name == "admin-token"
    assert OPERATOR not in repr(access.operator)
    assert load_access_control({}).operator is None
    with pytest.raises(SettingsError, match="ZOSCII_ADMIN_TOKEN_SHA256"):
        load_access_control({"ZOSCII_ADMIN_TOKEN_SHA256": OPERATOR})  # the token, not its hash
    client = make_client(data_dir, access=access)
    assert client.post("/", data={"action": "queues"}, headers=AS_OPERATOR).status_code == 200


@pytest.mark.parametrize("action", ["purge", "delete", "replay"])
@pytest.mark.parametrize("method", ["GET", "HEAD"])
def test_actions_that_change_or_hand_out_a_pointer_need_post(
    client: FlaskClient, action: str, method: str
) -> None:
    """``curl '...?action=delete&q=x'`` (or any page's <img src>) deletes nothing."""
    publish(client, "secret-queue", b"x")
    reply = client.open("/", method=method, query_string=_params(action), headers=AS_OPERATOR)
    assert reply.status_code == 405
    assert reply.headers["Allow"] == "POST"
    if method == "GET":
        assert f"'{action}' needs POST, not GET" in body(reply)["error"]
    assert len(drain(client, "secret-queue")) == 1
    assert (
        client.get("/", query_string={"action": "queues"}, headers=AS_OPERATOR).status_code == 200
    )


@pytest.mark.parametrize(
    "browser",
    [
        {"Origin": "http://evil.example"},
        {"Origin": "null"},
        {"Sec-Fetch-Site": "cross-site"},
        {"Sec-Fetch-Site": "same-site"},
    ],
)
def test_admin_actions_from_a_web_page_are_refused(client: FlaskClient, browser: dict) -> None:
    """A browser holding the token (Basic, typed once into its prompt) would send it with
    a form any site makes it post; the browser's own headers give that away."""
    publish(client, "secret-queue", b"x")
    reply = client.post("/", data=_params("delete"), headers={**AS_OPERATOR, **browser})
    assert reply.status_code == 403 and "web pages" in body(reply)["error"]
    assert len(drain(client, "secret-queue")) == 1
    typed = {**AS_OPERATOR, "Sec-Fetch-Site": "none"}  # typed into the address bar
    assert client.get("/", query_string={"action": "queues"}, headers=typed).status_code == 200


def test_the_allow_list_is_an_extra_restriction(data_dir: Path) -> None:
    client = make_client(
        data_dir, access=operator_only(), admin_allow=("10.0.0.0/8",), direct_access="public"
    )
    far = {"REMOTE_ADDR": "10.1.2.3"}
    queues = {"action": "queues"}
    assert client.post("/", data=queues, headers=AS_OPERATOR, environ_base=far).status_code == 200
    assert client.post("/", data=queues, environ_base=far).status_code == 401  # still a token
    near = client.post("/", data=queues, headers=AS_OPERATOR)  # 127.0.0.1
    assert near.status_code == 403 and "ZOSCII_ADMIN_ALLOW" in body(near)["error"]
    closed = make_client(data_dir, access=operator_only(), admin_allow=())
    assert closed.post("/", data=queues, headers=AS_OPERATOR).status_code == 403
    assert ApiSettings.from_env({"ZOSCII_ADMIN_ALLOW": "none"}).admin_allow == ()
    assert ApiSettings.from_env({}).admin_allow is None  # no restriction by address
    with pytest.raises(SettingsError, match="ZOSCII_ADMIN_ALLOW"):
        ApiSettings.from_env({"ZOSCII_ADMIN_ALLOW": "10.0.0.0/8,bogus"})


def test_a_trusted_proxy_on_a_dual_stack_socket_is_still_trusted(data_dir: Path) -> None:
    """The proxy check maps ::ffff:a.b.c.d as the allow list does (one function)."""
    client = make_client(
        data_dir,
        access=operator_only(),
        trusted_proxies=("10.9.9.9/32",),
        admin_allow=("127.0.0.1/32",),
    )
    proxied = {"REMOTE_ADDR": "::ffff:10.9.9.9"}
    inside = {**AS_OPERATOR, "X-Forwarded-For": "::ffff:127.0.0.1"}
    reply = client.post("/", data={"action": "queues"}, environ_base=proxied, headers=inside)
    assert reply.status_code == 200, reply.get_json()
    outside = {**AS_OPERATOR, "X-Forwarded-For": "198.51.100.7"}
    reply = client.post("/", data={"action": "queues"}, environ_base=proxied, headers=outside)
    assert reply.status_code == 403


def test_a_trusted_proxy_forwards_the_client_address(data_dir: Path) -> None:
    allow = {"access": operator_only(), "admin_allow": ("127.0.0.1/32",)}
    client = make_client(data_dir, trusted_proxies=("10.9.9.9/32",), **allow)
    proxied = {"REMOTE_ADDR": "10.9.9.9"}
    outside = {**AS_OPERATOR, "X-Forwarded-For": "198.51.100.7"}
    reply = client.post("/", data={"action": "queues"}, environ_base=proxied, headers=outside)
    assert reply.status_code == 403
    inside = {**AS_OPERATOR, "X-Forwarded-For": "127.0.0.1"}
    reply = client.post("/", data={"action": "queues"}, environ_base=proxied, headers=inside)
    assert reply.status_code == 200
    forged = make_client(data_dir, direct_access="public", **allow)  # not trusted: ignored
    far = {"REMOTE_ADDR": "198.51.100.7"}
    reply = forged.post("/", data={"action": "queues"}, environ_base=far, headers=inside)
    assert reply.status_code == 403


def test_the_admin_right_with_access_control(data_dir: Path) -> None:
    access = AccessControl(parse_clients(CLIENTS), operator_client(sha(OPERATOR)))
    client = make_client(data_dir, access=access, direct_access="public")
    publish(client, "partner-q", b"x", Authorization=f"Bearer {ADMIN}")
    for action in ALL_ACTIONS:
        params = {"action": action, "q": "partner-q", "since": "2024-01-01T00:00:00Z"}
        denied = client.post("/", data=params, headers={"Authorization": f"Bearer {PARTNER}"})
        assert denied.status_code == 403, action
        assert client.post("/", data=params).status_code == 401
    far = {"REMOTE_ADDR": "203.0.113.9"}  # the right, not the address, decides
    for token in (ADMIN, OPERATOR):  # a client with the right, or the operator's token
        ok = client.post(
            "/",
            data={"action": "queues"},
            headers={"Authorization": f"Bearer {token}"},
            environ_base=far,
        )
        assert [q["queue"] for q in body(ok)["result"]] == ["partner-q"]
    # the operator's token has no queue rights: it is not a partner
    refused = client.post(
        "/", data={"action": "publish", "q": "partner-q", "msg": "x"}, headers=AS_OPERATOR
    )
    assert refused.status_code == 403


def test_purge_and_delete_are_writes(data_dir: Path) -> None:
    client = make_client(data_dir, access=operator_only())
    publish(client, "q1", b"x")
    read_only = make_client(data_dir, access=operator_only(), read_only=True)
    purge = {"action": "purge", "q": "q1"}
    assert read_only.post("/", data=purge, headers=AS_OPERATOR).status_code == 503
    assert read_only.post("/", data={"action": "queues"}, headers=AS_OPERATOR).status_code == 200
    disabled = make_client(
        data_dir, access=operator_only(), enabled_actions=frozenset({"publish", "fetch"})
    )
    delete = {"action": "delete", "q": "q1"}
    assert disabled.post("/", data=delete, headers=AS_OPERATOR).status_code == 403
    assert len(drain(client, "q1")) == 1


# --- the audit trail -------------------------------------------------------------------------
def _trail(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "zoscii_api.audit"]


def test_every_admin_action_leaves_who_what_which_queue_and_what_changed(
    client: FlaskClient, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="zoscii_api.audit")
    for number in range(3):
        publish(client, "orders", f"m{number}".encode())
    far = {"REMOTE_ADDR": "172.18.0.1"}
    req = {"X-Request-ID": "audit-1"}
    client.post(
        "/",
        data={"action": "purge", "q": "Orders"},
        headers={**AS_OPERATOR, **req},
        environ_base=far,
    )
    client.post("/", data={"action": "delete", "q": "missing"}, headers=AS_OPERATOR)
    client.post("/", data={"action": "delete", "q": "orders"})  # no credential
    client.get("/", query_string={"action": "purge", "q": "orders"}, headers=AS_OPERATOR)
    client.post("/", data={"action": "queues", "q": "bad name\n"}, headers=AS_OPERATOR)

    done, missing, anonymous, by_get, garbled = _trail(caplog)
    assert (done.action, done.queue, done.outcome) == ("purge", "orders", "done")
    assert (done.client, done.address, done.request_id) == ("admin-token", "172.18.0.1", "audit-1")
    assert done.result == {"purged": 3, "bytes": 6, "before": None}
    assert done.levelno == logging.INFO and done.event == "admin"
    assert "purged=3" in done.getMessage() and "admin-token" in done.getMessage()
    assert (missing.outcome, missing.queue, missing.client) == ("failed", "missing", "admin-token")
    assert "not found" in missing.result["error"].lower()
    assert (anonymous.outcome, anonymous.client, anonymous.address) == ("refused", "-", "127.0.0.1")
    assert anonymous.levelno == logging.WARNING
    assert (by_get.outcome, by_get.action) == ("refused", "purge")
    assert garbled.queue == "invalid" and "\n" not in garbled.getMessage()

    metrics = client.get("/metrics").get_data(as_text=True)
    assert 'zoscii_api_admin_actions_total{action="purge",outcome="done"} 1.0' in metrics
    assert 'zoscii_api_admin_actions_total{action="purge",outcome="refused"} 1.0' in metrics
    assert 'zoscii_api_admin_actions_total{action="delete",outcome="failed"} 1.0' in metrics
    assert 'zoscii_api_admin_removed_messages_total{action="purge"} 3.0' in metrics


def test_delete_and_replay_say_what_they_did(
    client: FlaskClient, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="zoscii_api.audit")
    publish(client, "jobs", b"one")
    consume(client, "jobs", "workers", 1)
    admin(client, "replay", q="jobs", since="2000-01-01T00:00:00Z")
    admin(client, "delete", q="jobs")
    admin(client, "queues")
    replay, delete, listed = _trail(caplog)
    assert replay.result == {"since": "2000-01-01T00:00:00Z", "pointer": '""', "waiting": 1}
    assert delete.result == {"messages": 1, "bytes": 3, "groups": "workers"}
    assert (listed.queue, listed.result) == (None, {"listed": 0})
    metrics = client.get("/metrics").get_data(as_text=True)
    assert 'zoscii_api_admin_removed_messages_total{action="delete"} 1.0' in metrics
