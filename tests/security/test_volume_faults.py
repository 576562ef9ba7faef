"""Faults of the data volume, on real small mounts under a real gunicorn.

* out of space (bytes): 507, no partial file, no nonce kept, and publishing works again
  as soon as space is freed;
* out of inodes just where the nonce marker is written, after the message was renamed
  into the queue: the publish is rolled back (no message, no nonce), 507;
* remounted read-only: /healthz 503 with the reason, publish (and fetch, which opens
  the queue index read-write) 503 with a clear error, all fine again once read-write;
* missing at start: logged at start, /healthz 503 (and no re-creating it elsewhere),
  and healthy once it is there.
"""

from __future__ import annotations

import errno
import hashlib
import os
from pathlib import Path

import pytest
import requests

from tests.security.figures import TALLY
from tests.support.api_server import ApiServer
from tests.support.queues import wal_records
from zosciimq.core import DataDir
from zosciimq.core.nonces import Nonces
from zosciimq.protocol import FRAME_END, FRAMED_BATCH, NONCE, frame_head

# Real mounts under a real gunicorn, a server or two a test. The fast tier has the same
# rules through the test client: tests/api_fuzz (a full volume), tests/api/test_protocol
# (a missing volume, a read-only copy).
pytestmark = pytest.mark.slow


def publish(url: str, queue: str, body: bytes, nonce: str | None = None) -> requests.Response:
    params = {"action": "publish", "q": queue} | ({"n": nonce} if nonce else {})
    return requests.post(
        url, params=params, data=body, headers={"Content-Type": "application/octet-stream"}
    )


def drain(url: str, queue: str) -> list[bytes]:
    bodies, after = [], ""
    while True:
        reply = requests.get(url, params={"action": "fetch", "q": queue, "after": after})
        if "Content-Disposition" not in reply.headers:
            return bodies
        after = reply.headers["Content-Disposition"].split('"')[1]
        bodies.append(reply.content)


def assert_507(reply: requests.Response) -> None:
    assert reply.status_code == 507, reply.text
    body = reply.json()
    assert body["system"] == "ZOSCII MQ" and "No space left" in body["error"]
    TALLY["volume faults: injected"] += 1


def fill(directory: Path, *, block: bytes) -> list[Path]:
    """Files of ``block`` until the volume says ENOSPC (block=b"": until inodes run out);
    the last one may be partly written, so not a byte is left."""
    directory.mkdir(exist_ok=True)
    made = []
    while True:
        path = directory / f"{len(made):06d}"
        try:
            with open(path, "wb") as file:
                file.write(block)
                file.flush()
                os.fsync(file.fileno())
        except OSError as exc:
            assert exc.errno == errno.ENOSPC, exc
            if path.exists():  # a part written: it keeps the last pages taken too
                made.append(path)
            return made
        made.append(path)


def queue_files(data_dir: Path, queue: str) -> list[str]:
    directory = data_dir / "queues" / queue
    return sorted(p.name for p in directory.iterdir()) if directory.exists() else []


def test_out_of_space_is_507_leaves_nothing_and_recovers(mount, servers) -> None:
    volume = mount("tmpfs", "size=2m")
    data_dir = volume.point / "data"
    server = servers(data_dir, workers=1)
    assert publish(server.url, "q", b"before").status_code == 200

    # larger than the volume: fails while streaming the upload
    big = os.urandom(3 << 20)
    assert_507(publish(server.url, "q", big, nonce="big-1"))
    store = requests.post(
        server.url,
        params={"action": "store", "n": "big-2"},
        data=big,
        headers={"Content-Type": "application/octet-stream"},
    )
    assert_507(store)
    assert list((data_dir / "queues" / "temp").iterdir()) == []
    assert not (data_dir / "nonce" / "big-1").exists()
    assert not (data_dir / "nonce" / "big-2").exists()
    assert [p for p in (data_dir / "store").rglob("*") if p.is_file()] == []
    assert drain(server.url, "q") == [b"before"]

    # a full volume: even a small message is refused, whole
    filler = fill(volume.point / "filler", block=b"f" * 65536)
    assert_507(publish(server.url, "q", b"small" * 2000, nonce="small-1"))
    assert not (data_dir / "nonce" / "small-1").exists()
    assert list((data_dir / "queues" / "temp").iterdir()) == []

    # space freed: the same request, same nonce, now goes through
    for path in filler:
        path.unlink()
    reply = publish(server.url, "q", b"small" * 2000, nonce="small-1")
    assert reply.status_code == 200 and reply.json()["message"] == "Message published."
    assert drain(server.url, "q") == [b"before", b"small" * 2000]
    assert requests.get(server.url + "healthz").status_code == 200


def test_no_inode_for_the_nonce_marker_rolls_the_publish_back(mount, servers) -> None:
    """The hardest place to run out: the message is already renamed into the queue when
    the nonce marker cannot be created. It must go again, with the marker."""
    volume = mount("tmpfs", "size=8m,nr_inodes=200")
    data_dir = volume.point / "data"
    server = servers(data_dir, workers=1)
    nonce = "inode-retry-1"
    assert publish(server.url, "q", b"first").status_code == 200  # queue dir, index, lock
    with Nonces(DataDir(data_dir)).lock(nonce):  # the nonce's lock file exists too
        pass
    filler = fill(volume.point / "filler", block=b"")

    filler.pop().unlink()  # one inode free: a publish without nonce fits exactly
    assert publish(server.url, "q", b"second").status_code == 200
    filler.pop().unlink()  # one again: the upload takes it, the nonce marker finds none
    for _ in range(2):
        assert_507(publish(server.url, "q", b"third", nonce=nonce))
        assert not (data_dir / "nonce" / nonce).exists()
        assert list((data_dir / "queues" / "temp").iterdir()) == []
        assert len(queue_files(data_dir, "q")) == 2
        assert drain(server.url, "q") == [b"first", b"second"]

    filler.pop().unlink()  # two inodes: message and marker
    reply = publish(server.url, "q", b"third", nonce=nonce)
    assert reply.status_code == 200 and reply.json()["message"] == "Message published."
    assert (data_dir / "nonce" / nonce).exists()
    assert drain(server.url, "q") == [b"first", b"second", b"third"]
    filler.pop().unlink()  # a retry needs room for its upload before the nonce is looked at
    assert publish(server.url, "q", b"third", nonce=nonce).json()["message"] == (
        "Nonce already used."
    )
    assert len(queue_files(data_dir, "q")) == 3


def test_read_only_volume(mount, servers) -> None:
    volume = mount("tmpfs", "size=4m")
    data_dir = volume.point / "data"
    server = servers(data_dir, workers=2)
    assert publish(server.url, "q", b"kept").status_code == 200

    volume.remount("ro", busy_for=10)  # as soon as the api has closed its idle queue files
    TALLY["volume faults: injected"] += 1
    health = requests.get(server.url + "healthz")
    assert health.status_code == 503
    assert health.json()["status"] == "unavailable" and "not writable" in health.json()["reason"]
    for body in (b"x", b"y" * 100_000):
        refused = publish(server.url, "q", body, nonce=hashlib.sha1(body).hexdigest())
        assert refused.status_code == 503, refused.text
        assert refused.json()["error"] == "The data volume is not writable; try again later."
        assert refused.headers["Retry-After"]
    # reads go on: a read-only volume (a disaster-recovery copy) stays servable
    assert drain(server.url, "q") == [b"kept"]
    assert "data volume not usable" in server.log()

    volume.remount("rw")
    assert requests.get(server.url + "healthz").status_code == 200
    assert publish(server.url, "q", b"again").status_code == 200
    assert drain(server.url, "q") == [b"kept", b"again"]


def test_a_read_only_copy_is_served(mount, servers, tmp_path) -> None:
    """A volume mounted read-only from the start, its indexes stale or missing: fetch,
    retrieve and scan answer from a listing; every write answers 503."""
    volume = mount("tmpfs", "size=8m")
    data_dir = volume.point / "data"
    writer = servers(data_dir, workers=1)
    for body in (b"one", b"two", b"three"):
        assert publish(writer.url, "q", body).status_code == 200
    stored = requests.post(writer.url, data={"action": "store", "msg": "doc", "u": "1"}).json()
    writer.stop()
    for index in (data_dir / ".zoscii" / "index").glob("q.*"):
        index.unlink()  # what a copy taken without .zoscii looks like
    volume.remount("ro", busy_for=10)
    TALLY["volume faults: injected"] += 1
    reader = servers(data_dir, workers=2, env={"ZOSCII_READ_ONLY": "true"})
    assert requests.get(reader.url + "healthz").status_code == 200
    assert drain(reader.url, "q") == [b"one", b"two", b"three"]
    retrieved = requests.get(reader.url, params={"action": "retrieve", "name": stored["result"]})
    assert retrieved.status_code == 200 and retrieved.content == b"doc"
    scanned = requests.get(reader.url, params={"action": "scan"}).json()
    assert scanned["result"] == [stored["result"]]
    for refused in (
        publish(reader.url, "q", b"four"),
        requests.post(reader.url, data={"action": "store", "msg": "x"}),
        requests.post(reader.url, data={"action": "identify", "names": f'["{stored["result"]}"]'}),
    ):
        assert refused.status_code == 503, refused.text
        assert "read-only copy" in refused.json()["error"]


def test_missing_volume_at_start(mount) -> None:
    volume = mount("tmpfs", "size=4m,ro")  # /data not there and not creatable
    data_dir = volume.point / "data"
    server = ApiServer(data_dir, workers=1)
    try:
        with pytest.raises(RuntimeError, match="did not become healthy"):
            server.start(timeout=1)
        TALLY["volume faults: injected"] += 1
        assert server.answers("healthz") == 503  # it runs, unhealthy
        assert "data directory not usable" in server.log()
        health = requests.get(server.url + "healthz")
        assert health.status_code == 503 and str(data_dir) in health.json()["reason"]
        refused = publish(server.url, "q", b"x")
        assert refused.status_code == 503 and "not writable" in refused.json()["error"]

        volume.remount("rw")
        assert requests.get(server.url + "healthz").status_code == 503  # never re-created
        data_dir.mkdir()  # the volume arrives, empty: the health check fills it in
        assert requests.get(server.url + "healthz").status_code == 200
        assert publish(server.url, "q", b"x").status_code == 200
        assert drain(server.url, "q") == [b"x"]
    finally:
        server.stop()


def framed(bodies: list[bytes], nonces: list[str]) -> bytes:
    """A framed batch (PROTOCOL.md, "Framed batch"): each message with its own nonce."""
    frames = [frame_head(len(b), {NONCE: n}) + b for b, n in zip(bodies, nonces, strict=True)]
    return b"".join(frames) + FRAME_END


def test_out_of_inodes_in_the_middle_of_a_batch_leaves_nothing_of_it(mount, servers) -> None:
    """A batch of ten with nonces: its ten uploads fit, its fourth nonce marker finds no
    inode, after its record was logged and its messages renamed into place. 507 for the
    batch, none of it visible, on disk, marked or left in the log for a recovery to make
    again; with room, the same batch goes through whole."""
    volume = mount("tmpfs", "size=16m,nr_inodes=300")
    data_dir = volume.point / "data"
    server = servers(data_dir, workers=1)
    assert publish(server.url, "q", b"first").status_code == 200  # queue, index, log, locks
    nonces = [f"batch-{i}" for i in range(10)]
    with Nonces(DataDir(data_dir)).lock(*nonces):  # their lock files exist too
        pass
    bodies = [b"m%d" % i * 50 for i in range(10)]
    body = framed(bodies, nonces)

    def send() -> requests.Response:
        return requests.post(
            server.url,
            params={"action": "publish", "q": "q"},
            data=body,
            headers={"Content-Type": FRAMED_BATCH},
        )

    filler = fill(volume.point / "filler", block=b"")
    for _ in range(13):  # ten uploads and three markers
        filler.pop().unlink()
    assert_507(send())
    assert len(queue_files(data_dir, "q")) == 1
    assert drain(server.url, "q") == [b"first"]
    assert not any((data_dir / "nonce" / n).exists() for n in nonces)
    assert list((data_dir / "queues" / "temp").iterdir()) == []
    logged = {b for record in wal_records(DataDir(data_dir), "q") for b in record}
    assert not logged & set(bodies), "the failed batch was left in the log"

    for _ in range(8):
        filler.pop().unlink()
    reply = send()
    assert reply.status_code == 200, reply.text
    assert drain(server.url, "q") == [b"first", *bodies]
    assert all((data_dir / "nonce" / n).exists() for n in nonces)
