"""The queue policy through the api: per-queue default retention, refuse, drop_oldest."""

from pathlib import Path

import pytest

from tests.api.test_batch_publish import post_batch
from tests.support.api_app import body, drain, make_client
from zoscii_api.settings import ApiSettings
from zosciimq.core import parse_name
from zosciimq.core.policy import PolicySource
from zosciimq.settings import SettingsError

POLICY = """
[default]
retention_days = 30

[queues."orders"]
retention_days = 90

[queues."capped"]
max_messages = 2

[queues."ring_*"]
max_messages = 3
when_full = "drop_oldest"

[queues."fragile"]
dead_letter_max_deliveries = 1
"""


@pytest.fixture
def policy_file(tmp_path: Path) -> Path:
    path = tmp_path / "policy.toml"
    path.write_text(POLICY)
    return path


@pytest.fixture
def client(data_dir: Path, policy_file: Path):
    return make_client(data_dir, policy=PolicySource(policy_file))


def _publish(client, queue: str, msg: str, **extra):
    return client.get("/", query_string={"action": "publish", "q": queue, "msg": msg, **extra})


def _retention(client, queue: str) -> list[int]:
    return [parse_name(name).retention_days for name, _ in drain(client, queue)]


def test_default_retention_per_queue_in_the_name(client) -> None:
    for queue in ("orders", "other"):
        assert body(_publish(client, queue, "x"))["error"] == ""
    assert body(_publish(client, "orders", "y", r="7"))["error"] == ""  # r= still wins
    assert _retention(client, "orders") == [90, 7]
    assert _retention(client, "other") == [30]
    reply = post_batch(client, "orders", [(b"a", {}), (b"b", {"X-ZOSCII-Retention": "5"})])
    assert body(reply)["error"] == ""
    assert _retention(client, "orders")[-2:] == [90, 5]


def test_without_a_policy_the_server_default_applies(data_dir: Path) -> None:
    client = make_client(data_dir, default_retention_days=12)
    _publish(client, "orders", "x")
    assert _retention(client, "orders") == [12]


def test_full_queue_refuses_with_507(client) -> None:
    for msg in ("a", "b"):
        assert body(_publish(client, "capped", msg))["error"] == ""
    reply = _publish(client, "capped", "c")
    assert reply.status_code == 507
    assert "Queue 'capped' is full (max_messages 2)" in body(reply)["error"]
    assert [data for _, data in drain(client, "capped")] == [b"a", b"b"]
    batch = post_batch(client, "capped", [(b"d", {})])
    assert batch.status_code == 507


def test_drop_oldest_keeps_the_newest_and_pointers_keep_rising(client) -> None:
    pointer, seen = "", []
    for number in range(8):
        assert body(_publish(client, "ring_a", f"m{number}"))["error"] == ""
        if number % 3 == 0:  # a reader following by pointer, now and then
            got = drain(client, "ring_a", pointer)
            if got:
                pointer = got[-1][0]
                seen.extend(got)
    kept = drain(client, "ring_a")
    assert [data for _, data in kept] == [b"m5", b"m6", b"m7"]
    seen.extend(drain(client, "ring_a", pointer))
    names = [name for name, _ in seen]
    assert names == sorted(names) and len(set(names)) == len(names)
    assert [data for _, data in seen][-3:] == [b"m5", b"m6", b"m7"]


def test_settings_read_the_policy_file(tmp_path: Path, policy_file: Path) -> None:
    settings = ApiSettings.from_env({"ZOSCII_POLICY_FILE": str(policy_file)})
    assert settings.policy.retention_for("orders", 0) == 90
    assert ApiSettings.from_env({}).core.default_retention_days == 30  # the shipped default
    assert ApiSettings.from_env({}).policy.limits_for("capped") is None
    bad = tmp_path / "bad.toml"
    bad.write_text('[queues."capped"]\nmax_messages = -1\n')
    with pytest.raises(SettingsError, match=r"bad\.toml.*max_messages"):
        ApiSettings.from_env({"ZOSCII_POLICY_FILE": str(bad)})


def test_dead_letter_max_deliveries_of_the_queue(client) -> None:
    """One delivery for "fragile": requeued once, the next consume dead-letters it (the
    server's ZOSCII_MAX_DELIVERIES, 5, would deliver it again)."""
    work = {"q": "fragile", "group": "workers"}
    assert body(_publish(client, "fragile", "x"))["error"] == ""
    leased = client.get("/", query_string={"action": "consume", **work})
    assert leased.data == b"x" and leased.headers["X-ZOSCII-Deliveries"] == "1"
    receipt = leased.headers["X-ZOSCII-Receipt"]
    requeued = client.post("/", data={"action": "requeue", "receipt": receipt, **work})
    assert body(requeued)["error"] == ""
    again = client.get("/", query_string={"action": "consume", **work})
    assert body(again)["error"] == "" and "X-ZOSCII-Receipt" not in again.headers
    assert [data for _, data in drain(client, "fragile--workers--dead")] == [b"x"]
