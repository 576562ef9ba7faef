"""The client against an api with access control: typed 401 and 403, tokens as headers."""

import hashlib
from pathlib import Path

import pytest

from tests.support.api_server import running_api
from zosciimq.client import Forbidden, Unauthenticated, ZosciiClient

TOKEN = "client-test-token-0123456789abcdef"
CLIENTS = f"""
[[clients]]
name = "partner"
token_sha256 = "{hashlib.sha256(TOKEN.encode()).hexdigest()}"
write = ["inbox"]
read = ["inbox"]
"""


def test_typed_authentication_errors(tmp_path: Path) -> None:
    with running_api(tmp_path / "data", env={"ZOSCII_AUTH_CLIENTS": CLIENTS}) as url:
        with ZosciiClient(url) as anonymous:
            with pytest.raises(Unauthenticated) as caught:
                anonymous.publish("inbox", b"x")
            assert caught.value.status == 401 and caught.value.reason == "unauthenticated"
        with ZosciiClient(url, headers={"Authorization": f"Bearer {TOKEN}"}) as partner:
            partner.publish("inbox", b"hello")
            assert partner.fetch("inbox").data == b"hello"
            with pytest.raises(Forbidden):
                partner.publish("outbox", b"x")
