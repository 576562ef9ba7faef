"""HTTPS served by the api itself (ZOSCII_TLS_CERT / ZOSCII_TLS_KEY), checked by a client
that verifies the certificate, as the replicator does by default."""

from __future__ import annotations

import hashlib
import os
import shutil
import ssl
import subprocess
import time
from pathlib import Path

import pytest
import requests

from tests.security.figures import TALLY
from tests.security.rawhttp import connect, read_all
from tests.support.api_server import ApiServer


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 and localhost, made by the openssl CLI."""
    if shutil.which("openssl") is None:
        pytest.skip("no openssl CLI to make a certificate")
    directory = tmp_path_factory.mktemp("tls")
    cert, key = directory / "cert.pem", directory / "key.pem"
    subprocess.run(
        [
            "openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
            "ec_paramgen_curve:prime256v1", "-nodes", "-days", "2",
            "-keyout", str(key), "-out", str(cert), "-subj", "/CN=localhost",
            "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost",
        ],
        check=True,
        capture_output=True,
    )  # fmt: skip
    key.chmod(0o600)
    return cert, key


@pytest.fixture(scope="module")
def tls_server(tmp_path_factory: pytest.TempPathFactory, certificate):
    """One HTTPS api for the module's tests (each uses its own queue, if any)."""
    cert, key = certificate
    server = ApiServer(
        tmp_path_factory.mktemp("tls-api") / "data",
        workers=1,
        env={
            "ZOSCII_TLS_CERT": str(cert),
            "ZOSCII_TLS_KEY": str(key),
            "ZOSCII_HEADER_TIMEOUT_SECONDS": "1",
        },
    )
    server.url = f"https://127.0.0.1:{server.port}/"
    with pytest.MonkeyPatch.context() as patched:  # for start()'s health probe only
        patched.setenv("SSL_CERT_FILE", str(cert))
        server.start()
    yield server, cert
    server.stop()


def test_publish_and_fetch_over_verified_https(tls_server) -> None:
    server, cert = tls_server
    session = requests.Session()
    verify = str(cert)  # per request: REQUESTS_CA_BUNDLE would override a session's
    body = os.urandom(3 << 20)
    reply = session.post(
        server.url,
        params={"action": "publish", "q": "secure"},
        data=body,
        headers={"Content-Type": "application/octet-stream"},
        verify=verify,
    )
    assert reply.status_code == 200 and reply.json()["message"] == "Message published."
    fetched = session.get(server.url, params={"action": "fetch", "q": "secure"}, verify=verify)
    assert hashlib.sha256(fetched.content).digest() == hashlib.sha256(body).digest()
    assert session.get(server.url + "healthz", verify=verify).json() == {"status": "ok"}
    TALLY["tls: requests tried"] += 3


def test_the_loop_server_speaks_https_too(tmp_path: Path, certificate) -> None:
    """ZOSCII_API_SERVER=loop: its own accept loop (gunicorn_worker.Acceptor) hands each
    connection to gunicorn's protocol with the TLS context; a small and a large publish,
    a fetch, over verified HTTPS."""
    cert, _ = certificate
    server = _loop_server(tmp_path, certificate, workers=2)
    try:
        session, verify = requests.Session(), str(cert)
        # Bodies of 100 KB one after another on the same connection: under uvloop most
        # such connections were cut (gunicorn.conf.py's asgi_loop).
        for body in (b"small", os.urandom(1 << 20), *(os.urandom(100_000) for _ in range(10))):
            reply = session.post(
                server.url, params={"action": "publish", "q": "loop-tls"}, data=body,
                headers={"Content-Type": "application/octet-stream"}, verify=verify,
            )  # fmt: skip
            assert reply.status_code == 200, reply.text
        fetched = session.get(server.url, params={"action": "fetch", "q": "loop-tls"},
                              verify=verify)  # fmt: skip
        assert fetched.content == b"small"
        with pytest.raises(requests.exceptions.SSLError):  # an unverified certificate
            requests.get(server.url + "healthz", verify=True, timeout=10)
    finally:
        server.stop()


def test_the_certificate_is_what_a_verifying_client_checks(tls_server) -> None:
    server, _ = tls_server
    with pytest.raises(requests.exceptions.SSLError):  # not in the default trust store
        requests.get(server.url + "healthz", timeout=10)
    with pytest.raises(requests.exceptions.ConnectionError):  # plain HTTP is not served
        requests.get(server.url.replace("https", "http") + "healthz", timeout=10)
    TALLY["tls: requests tried"] += 2


@pytest.mark.slow  # waits for the head deadline (the plain-HTTP head: test_slow_clients)
def test_a_stalled_tls_handshake_is_cut(tls_server) -> None:
    """The head deadline covers the handshake: one byte of a ClientHello, then nothing."""
    server, cert = tls_server
    with connect(server.port, timeout=30) as sock:
        sock.sendall(b"\x16")
        alert = b""
        while chunk := sock.recv(100):  # until the server closes (our own 30 s would raise)
            alert += chunk
        assert alert[:1] in (b"", b"\x15")  # nothing, or a TLS alert record
    context = ssl.create_default_context(cafile=str(cert))
    with connect(server.port) as raw, context.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
        tls.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        assert read_all(tls).startswith(b"HTTP/1.1 200")
    TALLY["tls: requests tried"] += 2
    TALLY["slow clients: cut"] += 1


@pytest.mark.slow  # waits for the head deadline
def test_the_loop_server_cuts_a_stalled_tls_handshake(tmp_path: Path, certificate) -> None:
    """ZOSCII_API_SERVER=loop: the handshake has the head deadline too (asyncio's own
    default is 60 s): one byte of a ClientHello, then nothing, is cut."""
    cert, _ = certificate
    server = _loop_server(tmp_path, certificate, workers=1, ZOSCII_HEADER_TIMEOUT_SECONDS="1")
    try:
        started = time.monotonic()
        with connect(server.port, timeout=30) as sock:
            sock.sendall(b"\x16")
            while sock.recv(100):  # until the server closes (our own 30 s would raise)
                pass
        assert time.monotonic() - started < 15
        context = ssl.create_default_context(cafile=str(cert))
        with connect(server.port) as raw, context.wrap_socket(
            raw, server_hostname="127.0.0.1"
        ) as tls:
            tls.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            assert read_all(tls).startswith(b"HTTP/1.1 200")
    finally:
        server.stop()
    TALLY["slow clients: cut"] += 1


def _loop_server(
    tmp_path: Path, certificate: tuple[Path, Path], *, workers: int, **env: str
) -> ApiServer:
    """The loop server (ZOSCII_API_SERVER=loop) on HTTPS with ``certificate``, started."""
    cert, key = certificate
    env |= {"ZOSCII_TLS_CERT": str(cert), "ZOSCII_TLS_KEY": str(key), "ZOSCII_API_SERVER": "loop"}
    server = ApiServer(tmp_path / "data", workers=workers, env=env)
    server.url = f"https://127.0.0.1:{server.port}/"
    with pytest.MonkeyPatch.context() as patched:
        patched.setenv("SSL_CERT_FILE", str(cert))
        server.start()
    return server
