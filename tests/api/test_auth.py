"""Access control: scopes on every action, hashes only, Basic for the original's clients."""

import base64
import hashlib
import json
from pathlib import Path

import pytest

from tests.support.api_app import make_client
from zoscii_api.app import create_app
from zoscii_api.settings import ApiSettings
from zosciimq.access import AccessControl, parse_clients
from zosciimq.core import parse_name
from zosciimq.settings import SettingsError

PARTNER, OPS, READER = "partner-secret-0123456789", "ops-secret-9876543210", "reader-secret-5555"


def sha(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


CLIENTS = f"""
[[clients]]
name = "partner"
token_sha256 = "{sha(PARTNER)}"
username = "partner"
write = ["inbox_*"]
read = ["outbox"]

[[clients]]
name = "ops"
token_sha256 = "{sha(OPS)}"
read = ["*"]
write = ["*"]
actions = ["store", "retrieve", "scan", "identify", "metrics"]

[[clients]]
name = "reader"
token_sha256 = "{sha(READER)}"
read = ["outbox"]
"""


@pytest.fixture
def client(tmp_path: Path):
    return make_client(tmp_path / "data", access=AccessControl(parse_clients(CLIENTS)))


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def basic(user: str, password: str) -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}


def status(reply) -> tuple[int, str]:
    return reply.status_code, reply.get_json()["error"]


def test_no_credentials_is_401_with_a_challenge(client) -> None:
    reply = client.get("/?action=fetch&q=outbox")
    assert reply.status_code == 401 and "Bearer" in reply.headers["WWW-Authenticate"]
    assert (
        client.get("/?action=publish&q=inbox_a&msg=x", headers=bearer("wrong")).status_code == 401
    )


def test_queue_scopes(client, tmp_path) -> None:
    assert status(client.get("/?action=publish&q=inbox_a&msg=x", headers=bearer(PARTNER)))[0] == 200
    assert client.get("/?action=publish&q=outbox&msg=x", headers=bearer(PARTNER)).status_code == 403
    assert client.get("/?action=fetch&q=inbox_a", headers=bearer(PARTNER)).status_code == 403
    assert client.get("/?action=publish&q=outbox&msg=o", headers=bearer(OPS)).status_code == 200
    assert client.get("/?action=fetch&q=outbox", headers=bearer(READER)).data == b"o"
    assert client.get("/?action=publish&q=outbox&msg=x", headers=bearer(READER)).status_code == 403
    assert sorted(p.name for p in (tmp_path / "data" / "queues").iterdir()) == [
        "inbox_a",
        "outbox",
        "temp",
    ]
    assert len(list((tmp_path / "data" / "queues" / "outbox").iterdir())) == 1


def test_queue_scope_is_checked_on_the_form_body_too(client) -> None:
    reply = client.post(
        "/", data={"action": "publish", "q": "outbox", "msg": "x"}, headers=bearer(PARTNER)
    )
    assert reply.status_code == 403


@pytest.mark.parametrize("action", ["store", "retrieve", "scan", "identify"])
def test_store_actions_need_their_right(client, action: str) -> None:
    name = "202511021826110000-0030-9cc1980a-1719-440a-9650-6991c9cba11d.bin"
    url = f"/?action={action}&msg=x&names=[]&name={name}"
    assert client.get(url, headers=bearer(PARTNER)).status_code == 403
    assert client.get(url, headers=bearer(OPS)).status_code in (200, 404)


def test_basic_auth_for_original_clients(client) -> None:
    assert (
        client.get(
            "/?action=publish&q=inbox_b&msg=x", headers=basic("partner", PARTNER)
        ).status_code
        == 200
    )
    assert (
        client.get("/?action=publish&q=inbox_b&msg=x", headers=basic("ops", PARTNER)).status_code
        == 401
    )
    assert client.get("/?action=scan", headers={"Authorization": "Basic !!!"}).status_code == 401


def test_metrics_need_a_right_when_access_control_is_on(client) -> None:
    assert client.get("/metrics").status_code == 401
    assert client.get("/metrics", headers=bearer(PARTNER)).status_code == 403
    assert client.get("/metrics", headers=bearer(OPS)).status_code == 200
    assert client.get("/healthz").status_code == 200


def test_secrets_are_not_kept_or_logged(client, caplog) -> None:
    clients = parse_clients(CLIENTS)
    assert PARTNER not in repr(clients)
    client.get("/?action=fetch&q=outbox", headers=bearer(PARTNER + "x"))
    assert PARTNER not in caplog.text


def test_bad_access_files_fail_at_start() -> None:
    for text in (
        "[[clients]]\nname='x'\n",
        "[[clients]]\ntoken_sha256='abc'\n",
        "x = [",
        f"[[clients]]\ntoken_sha256='{sha('a')}'\nactions=['drop']\n",
    ):
        with pytest.raises(SettingsError):
            parse_clients(text)


def test_access_control_is_off_by_default(tmp_path) -> None:
    settings = ApiSettings.from_env({"ZOSCII_DATA_DIR": str(tmp_path)})
    assert not settings.access.enabled
    app = create_app(settings).test_client()
    assert app.get("/?action=publish&q=a&msg=x").status_code == 200
    assert parse_name(app.get("/?action=fetch&q=a").headers["Content-Disposition"].split('"')[1])


def test_access_control_from_the_environment(tmp_path) -> None:
    path = tmp_path / "clients.toml"
    path.write_text(CLIENTS)
    assert ApiSettings.from_env({"ZOSCII_AUTH_FILE": str(path)}).access.enabled
    assert ApiSettings.from_env({"ZOSCII_AUTH_CLIENTS": CLIENTS}).access.enabled
    with pytest.raises(SettingsError):
        ApiSettings.from_env({"ZOSCII_AUTH_FILE": str(tmp_path / "missing.toml")})


# --- rights decided before the message is read (issue 15) ---------------------------------


def _multipart(fields: list[tuple[str, bytes]]) -> tuple[bytes, str]:
    out = b""
    for name, value in fields:
        disposition = f'form-data; name="{name}"' + ('; filename="m"' if name == "msg" else "")
        out += f"--b\r\nContent-Disposition: {disposition}\r\n\r\n".encode() + value + b"\r\n"
    return out + b"--b--\r\n", "multipart/form-data; boundary=b"


def test_a_form_without_the_right_is_refused_before_its_message(client, written) -> None:
    body, content_type = _multipart(
        [("action", b"publish"), ("q", b"outbox"), ("msg", b"x" * 3_000_000)]
    )
    reply = client.post("/", data=body, content_type=content_type, headers=bearer(PARTNER))
    assert reply.status_code == 403
    assert written.total == 0, "message bytes were written before the refusal"


def test_with_access_control_the_action_must_come_before_the_message(client, written):
    body, content_type = _multipart([("msg", b"x" * 100_000), ("action", b"publish")])
    reply = client.post(
        "/?q=inbox_a", data=body, content_type=content_type, headers=bearer(PARTNER)
    )
    assert reply.status_code == 400 and "before the message" in reply.get_json()["error"]
    assert written.total == 0
    body, content_type = _multipart([("action", b"publish"), ("q", b"inbox_a"), ("msg", b"ok")])
    allowed = client.post("/", data=body, content_type=content_type, headers=bearer(PARTNER))
    assert allowed.status_code == 200, allowed.get_json()


def test_a_raw_body_is_refused_unless_it_is_a_publish_or_store(client, written) -> None:
    for url in ("/?action=fetch&q=outbox", "/"):
        reply = client.post(
            url,
            data=b"x" * 1_000_000,
            content_type="application/octet-stream",
            headers=bearer(READER),
        )
        assert reply.status_code == 400, url
    assert written.total == 0


def test_one_partners_nonce_never_blocks_another(tmp_path: Path) -> None:
    """Issue 15: partner A's n=invoice-4711 made B's later publish with the same nonce
    answer "Nonce already used." and store nothing. Under access control a nonce is kept
    to its own client's requests; a retry by the same client is still a repeat."""
    clients = (
        CLIENTS
        + f"""
[[clients]]
name = "other"
token_sha256 = "{sha("other-secret-0123456789")}"
write = ["inbox_*"]
actions = ["store"]
"""
    )
    app = make_client(tmp_path / "data", access=AccessControl(parse_clients(clients)))
    other = bearer("other-secret-0123456789")

    def publish(headers, queue):
        form = {"action": "publish", "q": queue, "msg": "m", "n": "invoice-4711"}
        return app.post("/", data=form, headers=headers).get_json()["message"]

    assert publish(bearer(PARTNER), "inbox_a") == "Message published."
    assert publish(other, "inbox_b") == "Message published."  # not squatted
    assert publish(bearer(PARTNER), "inbox_a") == "Nonce already used."  # its own retry
    assert publish(other, "inbox_b") == "Nonce already used."
    store = {"action": "store", "msg": "doc", "n": "invoice-4711"}
    assert app.post("/", data=store, headers=other).get_json()["message"] == "Nonce already used."
    assert app.post("/", data=store, headers=bearer(OPS)).get_json()["message"] == (
        "Message stored."
    )
    markers = sorted(p.name for p in (tmp_path / "data" / "nonce").iterdir())
    assert "invoice-4711" not in markers and len(markers) == 3


# --- a read action never stores a body (issue 27, item 4) ----------------------------------


def _urlencoded(fields: list[tuple[str, bytes]]) -> bytes:
    from urllib.parse import quote_from_bytes

    return b"&".join(f"{k}={quote_from_bytes(v)}".encode() for k, v in fields)


@pytest.mark.parametrize("access", ["on", "off"])
def test_a_read_action_with_a_message_is_refused_before_a_byte_of_it_is_written(
    tmp_path, written, access
) -> None:
    """Issue 27 item 4: an *allowed* fetch (a reader's token) with a 200 MB ``msg`` wrote
    the whole body into queues/temp before answering 200: as a multipart part, with
    action and q as form fields, and urlencoded. Now refused as the message starts,
    whatever the rights (and with access control off too)."""
    rights = AccessControl(parse_clients(CLIENTS) if access == "on" else [])
    client = make_client(tmp_path / "data", access=rights)
    headers = bearer(READER) if access == "on" else {}
    big = b"x" * 3_000_000
    multipart = _multipart([("action", b"fetch"), ("q", b"outbox"), ("msg", big)])
    in_url = _multipart([("msg", big)])
    urlencoded = _urlencoded([("action", b"fetch"), ("q", b"outbox"), ("msg", big)])
    for url, (data, content_type) in [
        ("/", multipart),
        ("/?action=fetch&q=outbox", in_url),
        ("/", (urlencoded, "application/x-www-form-urlencoded")),
        ("/?action=ack&q=outbox&group=reader", in_url),
        ("/?action=consume&q=outbox&group=reader", in_url),
    ]:
        reply = client.post(url, data=data, content_type=content_type, headers=headers)
        assert reply.status_code in (400, 413), (url, reply.status_code, reply.get_json())
        assert "takes no message" in reply.get_json()["error"]
        assert written.total == 0, f"{url}: message bytes written for a read action"
    assert list((tmp_path / "data").rglob("temp/*")) == []
    # The same reader's fetch without a message, as a form, is served as before.
    (tmp_path / "data" / "queues" / "outbox").mkdir(parents=True, exist_ok=True)
    form = _multipart([("action", b"fetch"), ("q", b"outbox")])
    reply = client.post("/", data=form[0], content_type=form[1], headers=headers)
    assert reply.status_code == 200, reply.get_json()


def test_a_message_in_the_url_is_judged_before_it_is_written(tmp_path, written) -> None:
    """A GET publish carries its message in the query string: a client without the
    right to publish there is refused before a byte of it goes to queues/temp."""
    client = make_client(tmp_path / "data", access=AccessControl(parse_clients(CLIENTS)))
    reply = client.get(
        "/", query_string={"action": "publish", "q": "outbox", "msg": "x" * 4000},
        headers=bearer(READER),
    )
    assert reply.status_code == 403, reply.get_json()
    assert written.total == 0


def test_a_read_actions_body_of_many_fields_is_bounded(client, written) -> None:
    """Without a message, a read action's body is small fields only: a declared length
    past that is refused unread (413), and fields past twice ZOSCII_MAX_FIELD_BYTES in
    all (distinct names, each under the limit) are refused as they arrive."""
    reply = client.post(
        "/?action=fetch&q=outbox",
        data=b"a=" + b"x" * 5_000_000,
        content_type="application/x-www-form-urlencoded",
        headers=bearer(READER),
    )
    assert reply.status_code == 413 and "takes no message" in reply.get_json()["error"]
    fields = [(f"f{i}", b"y" * 900_000) for i in range(3)]
    reply = client.post(
        "/",
        data=_urlencoded([("action", b"fetch"), ("q", b"outbox"), *fields]),
        content_type="application/x-www-form-urlencoded",
        headers=bearer(READER),
    )
    assert reply.status_code == 400 and "other than 'msg'" in reply.get_json()["error"]
    assert written.total == 0


# --- consumer groups belong to clients (issue 27, item 5) ---------------------------------

ALICE, BOB = "alice-secret-0123456789", "bob-secret-0123456789"
SHARING = f"""
[[clients]]
name = "alice"
token_sha256 = "{sha(ALICE)}"
read = ["shared*"]
write = ["shared"]

[[clients]]
name = "bob"
token_sha256 = "{sha(BOB)}"
read = ["shared"]
groups = ["billing", "bob-*"]
"""


def test_a_partner_cannot_consume_or_bury_another_partners_group(tmp_path) -> None:
    """Issue 27 item 5: A and B may both read ``shared``; A consumed q=shared&group=billing
    (B's group), got 5 leases and dead-lettered them; B then saw "No messages for this
    group" and got 403 on shared--billing--dead. A group belongs to the clients whose
    ``groups`` patterns name it (by default: groups named after the client), and its
    dead-letter queue follows the group, not the read patterns."""
    app = make_client(tmp_path / "data", access=AccessControl(parse_clients(SHARING)))
    alice, bob = bearer(ALICE), bearer(BOB)
    for number in range(5):
        form = {"action": "publish", "q": "shared", "msg": f"invoice {number}"}
        assert app.post("/", data=form, headers=alice).status_code == 200

    def call(headers: dict, **params: str):
        return app.post("/", data=params, headers=headers)

    taken = call(alice, action="consume", q="shared", group="billing", count="5")
    assert taken.status_code == 403, taken.get_data()[:200]
    assert "not one of this client's groups" in taken.get_json()["error"]
    assert app.get("/?action=consume&q=shared&group=billing", headers=alice).status_code == 403
    fake = "202601020304050000-0007-0b1e6a52-9c1f-4c43-a1f4-3d1e52b7c001.bin:" + "0" * 32
    for action in ("ack", "requeue", "deadletter", "extend"):
        reply = call(alice, action=action, q="shared", group="billing", receipt=fake)
        assert reply.status_code == 403, action
    # Bob's group is untouched: all five messages are his to take, and to bury.
    got = call(bob, action="consume", q="shared", group="billing", count="5")
    assert got.status_code == 200 and got.mimetype == "multipart/mixed"
    receipts = [line.split(": ", 1)[1] for line in got.get_data(as_text=True).splitlines()
                if line.startswith("X-ZOSCII-Receipt: ")]  # fmt: skip
    assert len(receipts) == 5
    listed = json.dumps(receipts)
    buried = call(bob, action="deadletter", q="shared", group="billing", receipts=listed)
    assert buried.get_json()["message"] == "5 of 5 dead-lettered."
    # The dead letters follow the group: Bob reads them (no read pattern names them),
    # Alice does not (her pattern shared* would).
    dead = "shared--billing--dead"
    assert app.get(f"/?action=fetch&q={dead}", headers=bob).status_code == 200
    assert app.get(f"/?action=fetch&q={dead}", headers=alice).status_code == 403
    assert call(alice, action="consume", q=dead, group="alice").status_code == 403
    # Each still has groups of its own: Alice's by her name, Bob's by his patterns.
    assert call(alice, action="consume", q="shared", group="alice").status_code == 200
    assert call(alice, action="consume", q="shared", group="alice-audit").status_code == 200
    assert call(bob, action="consume", q="shared", group="bob-2").status_code == 200
    assert call(bob, action="consume", q="shared", group="bob").status_code == 403


def test_groups_in_the_clients_file() -> None:
    alice, bob = parse_clients(SHARING)
    assert alice.groups is None and alice.own_groups == ("alice", "alice-*")
    assert bob.groups == ("billing", "bob-*")
    assert bob.may("consume", "shared", "billing") and not alice.may("ack", "shared", "billing")
    assert bob.may("fetch", "shared--billing--dead") and not bob.may("fetch", "shared--x--dead")
    assert alice.may("consume", "shared")  # the group not known yet: the queue alone
    with pytest.raises(SettingsError, match="groups must be a list"):
        parse_clients(SHARING.replace('groups = ["billing", "bob-*"]', 'groups = "billing"'))
