"""The console's admin actions: buttons only for callers the api allows, a confirmation
step, CSRF guards, and the action relayed to a real api (its Flask app served in a
thread on the same data directory) with the caller's own credentials, so the api's
rules decide and its errors are shown."""

from __future__ import annotations

import base64
import hashlib
import re
import threading
from collections.abc import Iterator
from datetime import timedelta
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from werkzeug.serving import make_server
from werkzeug.test import Client

from tests.statissa.datadir import NOW, Clock
from tests.support.api_app import make_app
from tests.support.api_server import free_port
from tests.support.queues import publish_body
from zoscii_statissa.admin_pages import AdminPanel
from zoscii_statissa.compute import compute_snapshot
from zoscii_statissa.forms import TOKEN_SECONDS, FormTokens, credential
from zoscii_statissa.hosts import KnownHosts
from zoscii_statissa.relay import ApiRelay
from zoscii_statissa.scan import scan_locally
from zoscii_statissa.settings import Settings
from zoscii_statissa.snapshots import SnapshotKeeper
from zoscii_statissa.web import create_app
from zosciimq.access import AccessControl, operator_client
from zosciimq.access import Client as AccessClient
from zosciimq.client import ZosciiClient
from zosciimq.core import DataDir, QueueStore, browse
from zosciimq.settings import SettingsError

QUEUE = "orders"
ADMIN = "admin-token-" + "a" * 24
VIEWER = "viewer-token-" + "v" * 24
OPS = "operator-token-" + "o" * 24  # ZOSCII_ADMIN_TOKEN_SHA256's, access control off
ORIGIN = "http://localhost"


def _clients() -> AccessControl:
    def client(name: str, token: str, actions: set[str]) -> AccessClient:
        digest = hashlib.sha256(token.encode()).digest()
        return AccessClient(name, digest, read=("*",), actions=frozenset(actions))

    return AccessControl(
        [client("ops", ADMIN, {"statistics", "admin"}), client("viewer", VIEWER, {"statistics"})]
    )


class Api:
    """The api's Flask app on a loopback port, in this process."""

    def __init__(self, root: Path, **settings: Any) -> None:
        self.server = make_server("127.0.0.1", 0, make_app(root, **settings), threaded=True)
        self.url = f"http://127.0.0.1:{self.server.server_port}/"
        self.thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class Console:
    """statissa's app relaying to ``api``; ``names``: what was published to QUEUE."""

    def __init__(
        self,
        root: Path,
        api_url: str | None,
        access: AccessControl | None = None,
        hosts: KnownHosts | None = None,
    ):
        self.data_dir = DataDir(root)
        self.clock = Clock(NOW)
        queues = QueueStore(self.data_dir, self.clock)
        self.names = []
        for i in range(5):
            self.clock.moment = NOW + timedelta(minutes=i)
            self.names.append(publish_body(queues, QUEUE, b"order %d" % i, 30).name)
        queues.close()
        compute = partial(compute_snapshot, scan_locally, self.data_dir)
        keeper = SnapshotKeeper(compute, self.clock)
        self.tokens = FormTokens()
        relay = ApiRelay(api_url, 10) if api_url else None
        self.panel = AdminPanel(relay, self.tokens)
        self.client = Client(
            create_app(keeper, self.data_dir, access, admin=self.panel, hosts=hosts)
        )

    def left(self) -> list[str]:
        return [m.name for m in browse.latest(self.data_dir, QUEUE, 100).messages]


def _auth(token: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"} if token else {}


def _basic(user: str, password: str) -> dict[str, str]:
    """What a browser sends once its prompt was answered."""
    return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}


def _token(page: str) -> str:
    found = re.search(r'name="token" value="([^"]+)"', page)
    assert found, "no form token on the page"
    return found[1]


def _post(console: Console, action: str, data: dict[str, str], token: str | None = None, **h):
    headers = {"Origin": ORIGIN, "Sec-Fetch-Site": "same-origin", **_auth(token), **h}
    return console.client.post(f"/queues/{QUEUE}/admin/{action}", data=data, headers=headers)


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return tmp_path / "data"


@pytest.fixture
def guarded_api(root: Path) -> Iterator[Api]:
    """An api with access control on: the ops client has the admin right."""
    DataDir(root).ensure()
    api = Api(root, access=_clients())
    yield api
    api.close()


@pytest.fixture
def console(root: Path, guarded_api: Api) -> Console:
    return Console(root, guarded_api.url, _clients())


def test_an_admin_purges_after_confirming(console: Console, guarded_api: Api) -> None:
    page = console.client.get(f"/queues/{QUEUE}", headers=_auth(ADMIN)).text
    assert 'id="purge"' in page and 'id="delete"' in page and 'id="replay"' in page
    assert 'action="orders/admin/purge"' in page  # relative: works behind a path prefix

    confirm = console.client.get(f"/queues/{QUEUE}/admin/purge", headers=_auth(ADMIN))
    assert confirm.status_code == 200
    assert re.search(r"The api counts 5\s+message\(s\), 35 B, in the queue now", confirm.text)
    assert 'name="confirm"' in confirm.text and console.left() == console.names[::-1]
    token = _token(confirm.text)

    unconfirmed = _post(console, "purge", {"token": token, "before": ""}, ADMIN)
    assert unconfirmed.status_code == 400 and "exactly to confirm" in unconfirmed.text
    wrong_name = _post(console, "purge", {"token": token, "confirm": "order"}, ADMIN)
    assert wrong_name.status_code == 400
    assert len(console.left()) == 5  # nothing happened yet

    done = _post(console, "purge", {"token": token, "before": "", "confirm": QUEUE}, ADMIN)
    assert done.status_code == 200, done.text
    assert "Purged 5 message(s) from orders" in done.text
    assert console.left() == []
    with ZosciiClient(guarded_api.url, headers=_auth(ADMIN)) as api:
        assert api.queues(QUEUE)[0]["messages"] == 0  # the api agrees: it did it


def test_purge_before_a_time_keeps_the_later_messages(console: Console) -> None:
    cut = (NOW + timedelta(minutes=3)).strftime("%Y-%m-%dT%H:%M:%SZ")
    confirm = console.client.get(
        f"/queues/{QUEUE}/admin/purge", query_string={"before": cut}, headers=_auth(ADMIN)
    )
    assert "published before 2026-03-10 12:03:00 UTC" in confirm.text
    data = {"token": _token(confirm.text), "before": cut, "confirm": QUEUE}
    # the time is bound to the token: another one is not what was confirmed
    other = {**data, "before": (NOW + timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%SZ")}
    assert _post(console, "purge", other, ADMIN).status_code == 403
    assert len(console.left()) == 5
    done = _post(console, "purge", data, ADMIN)
    assert done.status_code == 200 and "Purged 3 message(s)" in done.text
    assert console.left() == [console.names[4], console.names[3]]


def test_replay_shows_the_pointer_and_changes_nothing(console: Console) -> None:
    since = (NOW + timedelta(minutes=2)).strftime("%Y-%m-%dT%H:%M:%SZ")
    confirm = console.client.get(
        f"/queues/{QUEUE}/admin/replay", query_string={"since": since}, headers=_auth(ADMIN)
    )
    assert confirm.status_code == 200 and "Nothing is changed" in confirm.text
    assert 'name="confirm"' not in confirm.text  # nothing to lose: no name to retype
    done = _post(console, "replay", {"token": _token(confirm.text), "since": since}, ADMIN)
    assert done.status_code == 200
    assert f'id="result-pointer">{console.names[1]}<' in done.text
    assert f'id="result-first">{console.names[2]}<' in done.text
    assert 'id="result-waiting">3<' in done.text
    assert len(console.left()) == 5
    missing = console.client.get(f"/queues/{QUEUE}/admin/replay", headers=_auth(ADMIN))
    assert missing.status_code == 400 and "Give the time" in missing.text
    bad = console.client.get(
        f"/queues/{QUEUE}/admin/replay",
        query_string={"since": "2026-03-10T12:00:00"},  # no zone: refused, not guessed
        headers=_auth(ADMIN),
    )
    assert bad.status_code == 400 and "with a zone" in bad.text


def test_delete_removes_the_queue(console: Console) -> None:
    confirm = console.client.get(f"/queues/{QUEUE}/admin/delete", headers=_auth(ADMIN))
    assert "cannot be undone" in confirm.text.lower()
    done = _post(console, "delete", {"token": _token(confirm.text), "confirm": QUEUE}, ADMIN)
    assert done.status_code == 200 and "Deleted queue orders" in done.text
    assert not console.data_dir.queue_dir(QUEUE).exists()
    assert console.client.get(f"/queues/{QUEUE}", headers=_auth(ADMIN)).status_code == 404


def test_without_the_admin_right_no_buttons_and_the_api_refuses(console: Console) -> None:
    page = console.client.get(f"/queues/{QUEUE}", headers=_auth(VIEWER))
    assert page.status_code == 200
    assert 'id="purge"' not in page.text and 'id="delete"' not in page.text
    assert "refuses them to you (it answered 403" in page.text
    confirm = console.client.get(f"/queues/{QUEUE}/admin/purge", headers=_auth(VIEWER))
    assert confirm.status_code == 403 and 'name="token"' not in confirm.text
    assert "Not allowed" in confirm.text  # the api's own words
    # Forged steps (a token as this console would issue it) still meet the api's refusal
    token = console.tokens.issue("delete", QUEUE, "", credential(f"Bearer {VIEWER}"))
    refused = _post(console, "delete", {"token": token, "confirm": QUEUE}, VIEWER)
    assert refused.status_code == 403 and "The api answered 403" in refused.text
    assert len(console.left()) == 5
    # and an admin's token is no use to anyone else
    admin_token = console.tokens.issue("delete", QUEUE, "", credential(f"Bearer {ADMIN}"))
    stolen = _post(console, "delete", {"token": admin_token, "confirm": QUEUE}, VIEWER)
    assert stolen.status_code == 403 and "stale or was not made by this console" in stolen.text
    assert len(console.left()) == 5


@pytest.mark.parametrize(
    ("headers", "accepted"),
    [
        ({"Origin": ORIGIN, "Sec-Fetch-Site": "same-origin"}, True),
        ({"Origin": ORIGIN}, True),  # an older browser without Fetch Metadata
        ({"Referer": f"{ORIGIN}/queues/orders/admin/purge"}, True),
        ({"Origin": "https://evil.example", "Sec-Fetch-Site": "cross-site"}, False),
        ({"Origin": "https://evil.example"}, False),
        ({"Origin": ORIGIN, "Sec-Fetch-Site": "same-site"}, False),  # a sibling subdomain
        ({"Origin": "null"}, False),  # a sandboxed frame or a data: URL
        ({"Referer": "http://localhost.evil.example/x"}, False),
        ({}, False),  # neither header: not a browser's form
    ],
)
def test_a_post_from_another_site_is_refused(
    console: Console, headers: dict[str, str], accepted: bool
) -> None:
    confirm = console.client.get(f"/queues/{QUEUE}/admin/purge", headers=_auth(ADMIN))
    data = {"token": _token(confirm.text), "before": "", "confirm": QUEUE}
    reply = console.client.post(
        f"/queues/{QUEUE}/admin/purge", data=data, headers={**_auth(ADMIN), **headers}
    )
    if accepted:
        assert reply.status_code == 200, reply.text
        assert console.left() == []
    else:
        assert reply.status_code == 403
        assert len(console.left()) == 5


def test_without_access_control_the_operator_signs_in_with_the_token(root: Path) -> None:
    """The compose stack as make up starts it: no access control, the operator's token
    (issue 29). The pages are open; the buttons need the token, which the browser is
    asked for at /login (Basic, user admin) and then sends with every page."""
    DataDir(root).ensure()
    api = Api(
        root, access=AccessControl([], operator_client(hashlib.sha256(OPS.encode()).hexdigest()))
    )
    try:
        console = Console(root, api.url)
        page = console.client.get(f"/queues/{QUEUE}")
        assert page.status_code == 200 and 'id="purge"' not in page.text
        assert f'href="../login?queue={QUEUE}"' in page.text and "operator's token" in page.text

        challenge = console.client.get(f"/login?queue={QUEUE}")
        assert challenge.status_code == 401
        assert challenge.headers["WWW-Authenticate"].startswith('Basic realm="ZOSCII MQ admin"')
        assert "user name <b>admin</b>" in challenge.text
        wrong = console.client.get(f"/login?queue={QUEUE}", headers=_basic("admin", "guess"))
        assert wrong.status_code == 401 and "did not accept" in wrong.text  # asked again
        operator = _basic("admin", OPS)
        signed_in = console.client.get(f"/login?queue={QUEUE}", headers=operator)
        assert signed_in.status_code == 303 and signed_in.headers["Location"] == f"queues/{QUEUE}"
        assert console.client.get("/login?queue=nope", headers=operator).status_code == 404

        page = console.client.get(f"/queues/{QUEUE}", headers=operator)
        assert 'id="purge"' in page.text
        confirm = console.client.get(f"/queues/{QUEUE}/admin/purge", headers=operator)
        data = {"token": _token(confirm.text), "before": "", "confirm": QUEUE}
        done = _post(console, "purge", data, None, **operator)
        assert done.status_code == 200 and console.left() == []

        # a confirmation page opened without the token says where to sign in
        bare = console.client.get(f"/queues/{QUEUE}/admin/delete")
        assert bare.status_code == 403 and f'href="../../../login?queue={QUEUE}"' in bare.text
        # without the token the relayed delete is the api's to refuse, whatever it claims
        refused = console.client.post(
            f"/queues/{QUEUE}/admin/delete",
            data={
                "token": console.tokens.issue("delete", QUEUE, "", credential(None)),
                "confirm": QUEUE,
            },
            headers={"Origin": ORIGIN, "X-Forwarded-For": "127.0.0.1"},
        )
        assert refused.status_code == 403 and console.data_dir.queue_dir(QUEUE).is_dir()
    finally:
        api.close()


@pytest.mark.parametrize(
    ("host", "answered"),
    [
        ("localhost", True),
        ("localhost:9103", True),
        ("127.0.0.1:9103", True),
        ("[::1]:9103", True),
        ("172.18.0.1:32768", True),  # the tests' own way in: an IP address
        ("console.example.com", True),  # configured (ZOSCII_STATISSA_PUBLIC_ORIGINS)
        ("evil.example", False),  # DNS rebinding: a name nobody configured
        ("evil.example:9103", False),
        ("console.example.com:444", False),  # not as configured
        ("localhost.evil.example", False),
        ("", False),
    ],
)
def test_only_known_hosts_are_answered(root: Path, host: str, answered: bool) -> None:
    """Issue 27: Host: evil.example with Origin: http://evil.example purged a queue."""
    DataDir(root).ensure()
    api = Api(
        root, access=AccessControl([], operator_client(hashlib.sha256(OPS.encode()).hexdigest()))
    )
    try:
        console = Console(root, api.url, hosts=KnownHosts(("https://console.example.com",)))
        operator = {**_basic("admin", OPS), "Host": host}
        confirm = console.client.get(f"/queues/{QUEUE}/admin/purge", headers=operator)
        pages = [console.client.get(path, headers={"Host": host}) for path in ("/", "/stats.json")]
        if not answered:
            assert confirm.status_code == 421 and "ZOSCII_STATISSA_PUBLIC_ORIGINS" in confirm.text
            assert all(p.status_code == 421 for p in pages)
            token = console.tokens.issue("purge", QUEUE, "", credential(operator["Authorization"]))
            posted = console.client.post(
                f"/queues/{QUEUE}/admin/purge",
                data={"token": token, "before": "", "confirm": QUEUE},
                headers={**operator, "Origin": f"http://{host}", "Sec-Fetch-Site": "same-origin"},
            )
            assert posted.status_code == 421 and len(console.left()) == 5
        else:
            assert confirm.status_code == 200 and all(p.status_code != 421 for p in pages)
            data = {"token": _token(confirm.text), "before": "", "confirm": QUEUE}
            scheme = "https" if host == "console.example.com" else "http"
            posted = console.client.post(
                f"/queues/{QUEUE}/admin/purge",
                data=data,
                headers={**operator, "Origin": f"{scheme}://{host}"},
            )
            assert posted.status_code == 200 and console.left() == []
        # what Prometheus and the orchestrator ask stays open, whatever the name
        assert console.client.get("/healthz", headers={"Host": host}).status_code == 200
        assert console.client.get("/metrics", headers={"Host": host}).status_code == 200
    finally:
        api.close()


def test_public_origins_are_a_setting() -> None:
    assert Settings.from_env({}).public_origins == ()
    env = {"ZOSCII_STATISSA_PUBLIC_ORIGINS": "https://console.example.com, http://10.0.0.5:9103"}
    assert Settings.from_env(env).public_origins == (
        "https://console.example.com",
        "http://10.0.0.5:9103",
    )
    for bad in ("console.example.com", "https://x/path", "ftp://x", "https://u:p@x"):
        with pytest.raises(SettingsError, match="ZOSCII_STATISSA_PUBLIC_ORIGINS"):
            Settings.from_env({"ZOSCII_STATISSA_PUBLIC_ORIGINS": bad})


def test_without_an_api_url_there_are_no_admin_actions(root: Path) -> None:
    DataDir(root).ensure()
    console = Console(root, None)
    page = console.client.get(f"/queues/{QUEUE}").text
    assert 'id="purge"' not in page and "ZOSCII_STATISSA_API_URL" in page
    assert console.client.get(f"/queues/{QUEUE}/admin/purge").status_code == 503
    reply = _post(console, "purge", {"token": "1.x", "confirm": QUEUE})
    assert reply.status_code == 503 and len(console.left()) == 5


def test_an_api_that_does_not_answer_is_said_so(root: Path) -> None:
    DataDir(root).ensure()
    console = Console(root, f"http://127.0.0.1:{free_port()}/")
    page = console.client.get(f"/queues/{QUEUE}").text
    assert 'id="purge"' not in page and "answered 502" in page and "does not answer" in page
    assert console.client.get(f"/queues/{QUEUE}/admin/delete").status_code == 502


def test_unknown_actions_and_queues_are_404(console: Console) -> None:
    for path in ("/queues/orders/admin/drop", "/queues/nope/admin/purge", "/queues/../admin/x"):
        assert console.client.get(path, headers=_auth(ADMIN)).status_code == 404, path
    assert _post(console, "requeue", {}, ADMIN).status_code == 404
    # the console itself still needs the statistics right before anything
    assert console.client.get(f"/queues/{QUEUE}/admin/purge").status_code == 401


def test_form_tokens_expire_and_bind_every_field() -> None:
    now = [1_000_000.0]
    tokens = FormTokens(b"k" * 32, clock=lambda: now[0])
    token = tokens.issue("purge", "orders", "", "caller")
    assert tokens.valid(token, "purge", "orders", "", "caller")
    for fields in (
        ("delete", "orders", "", "caller"),
        ("purge", "orders2", "", "caller"),
        ("purge", "orders", "x", "caller"),
        ("purge", "orders", "", "someone"),
    ):
        assert not tokens.valid(token, *fields)
    assert not FormTokens(b"j" * 32).valid(token, "purge", "orders", "", "caller")
    assert not tokens.valid("garbage", "purge", "orders", "", "caller")
    now[0] += TOKEN_SECONDS + 5
    assert not tokens.valid(token, "purge", "orders", "", "caller")


def test_the_api_url_setting() -> None:
    assert Settings.from_env({}).api_url == ""
    assert Settings.from_env({"ZOSCII_STATISSA_API_URL": "none"}).api_url == ""  # compose: off
    settings = Settings.from_env(
        {"ZOSCII_STATISSA_API_URL": "http://api:8080/", "ZOSCII_STATISSA_API_TIMEOUT_SECONDS": "30"}
    )
    assert settings.api_url == "http://api:8080/" and settings.api_timeout_seconds == 30
    for bad in ("api:8080", "ftp://api/", "http://", "http://api/?action=purge"):
        with pytest.raises(SettingsError, match="ZOSCII_STATISSA_API_URL"):
            Settings.from_env({"ZOSCII_STATISSA_API_URL": bad})
