"""The queue policy file: parsing, matching, reloading; limits enforced by QueueStore."""

import logging
import os
import threading
from pathlib import Path

import pytest

from tests.support.queues import publish_body, publish_many, queue_contents, uploads_of
from zosciimq.core import DataDir, QueueStore
from zosciimq.core.group_commit import Submission, run_flushes
from zosciimq.core.outgoing import Outgoing
from zosciimq.core.policy import (
    DROP_OLDEST,
    REFUSE,
    PolicySource,
    QueueRule,
    parse_policy,
)
from zosciimq.errors import QueueFull
from zosciimq.settings import SettingsError

POLICY = """
[default]
retention_days = 30

[queues."orders"]
retention_days = 90
max_messages = 1000

[queues."telemetry_*"]
retention_days = 2
max_bytes = 4096
when_full = "drop_oldest"

[queues."tele*"]
retention_days = 3

[queues."audit"]
max_messages = 5
"""


# --- parsing and matching -------------------------------------------------------------------
def test_exact_name_then_first_pattern_then_default() -> None:
    policy = parse_policy(POLICY)
    assert policy.rule_for("orders") == QueueRule("orders", 90, 1000, None, REFUSE)
    assert policy.rule_for("telemetry_eu").retention_days == 2  # first pattern in file order
    assert policy.rule_for("telemetry_eu").when_full == DROP_OLDEST
    assert policy.rule_for("telex").retention_days == 3
    assert policy.rule_for("other") == QueueRule("", 30)
    assert policy.rule_for("audit").retention_days == 30  # unset keys come from [default]
    assert not policy.rule_for("other").limited and policy.rule_for("audit").limited


def test_empty_file_is_the_server_defaults() -> None:
    policy = parse_policy("")
    assert policy.rule_for("anything") == QueueRule()
    assert PolicySource().retention_for("anything", 7) == 7
    assert PolicySource().limits_for("anything") is None


def test_dead_letter_max_deliveries_per_queue_else_the_servers(tmp_path: Path) -> None:
    path = tmp_path / "policy.toml"
    path.write_text(
        '[default]\nretention_days = 3\n\n[queues."jobs_*"]\ndead_letter_max_deliveries = 2\n'
    )
    source = PolicySource(path)
    assert source.max_deliveries_for("jobs_eu", 5) == 2
    assert source.max_deliveries_for("other", 5) == 5  # not set: the server's default
    assert PolicySource().max_deliveries_for("jobs_eu", 7) == 7
    assert source.rule_for("jobs_eu").retention_days == 3  # the other keys as before


def test_names_are_matched_in_lower_case() -> None:
    assert parse_policy('[queues."Orders"]\nmax_messages = 3').rule_for("orders").max_messages == 3


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("[default\n", "line 1"),
        ('[queues."orders"]\nmax_mesages = 3', "max_mesages"),
        ('[queues."orders"]\nmax_messages = 0', "max_messages = 0: must be at least 1"),
        ('[queues."orders"]\nmax_messages = "10"', "max_messages must be a whole number"),
        ('[queues."orders"]\nmax_bytes = true', "max_bytes must be a whole number"),
        ("[default]\nretention_days = 10000", "between 0 and 9999"),
        ('[queues."orders"]\nwhen_full = "block"', "when_full"),
        ('[queues."a/b"]\nmax_messages = 1', 'queues."a/b"'),
        ("[limits]\nx = 1", "unknown section"),
        ("[queues]\norders = 3", 'queues."orders"'),
        ('[queues."jobs"]\ndead_letter_max_deliveries = 0', "between 1 and 1000"),
        ("[default]\ndead_letter_max_deliveries = 1001", "between 1 and 1000"),
    ],
)
def test_bad_files_name_the_entry_and_key(text: str, says: str) -> None:
    with pytest.raises(SettingsError, match=r"policy\.toml") as caught:
        parse_policy(text, "policy.toml")
    assert says in str(caught.value)


def test_bad_or_missing_file_at_start_is_a_settings_error(tmp_path: Path) -> None:
    with pytest.raises(SettingsError, match=r"ZOSCII_POLICY_FILE=.*missing\.toml"):
        PolicySource(tmp_path / "missing.toml")
    bad = tmp_path / "bad.toml"
    bad.write_text('[queues."q"]\nwhen_full = "later"\n')
    with pytest.raises(SettingsError, match=r'bad.toml: \[queues."q"\]: when_full'):
        PolicySource(bad)


# --- reloading ------------------------------------------------------------------------------
def _rewrite(path: Path, text: str) -> None:
    before = path.stat().st_mtime_ns
    path.write_text(text)
    os.utime(path, ns=(before + 10**9, before + 10**9))  # a new mtime even on coarse clocks


def test_reload_on_change_and_keep_the_last_good_policy(tmp_path: Path, caplog) -> None:
    path = tmp_path / "policy.toml"
    path.write_text("[default]\nretention_days = 5\n")
    now = [0.0]
    source = PolicySource(path, check_every=1.0, monotonic=lambda: now[0])
    assert source.retention_for("q", 0) == 5

    _rewrite(path, "[default]\nretention_days = 6\n")
    assert source.retention_for("q", 0) == 5  # not looked at again within check_every
    now[0] = 2.0
    assert source.retention_for("q", 0) == 6

    with caplog.at_level(logging.ERROR, logger="zosciimq.core.policy"):
        _rewrite(path, "[default]\nretention_days = -1\n")
        now[0] = 4.0
        assert source.retention_for("q", 0) == 6  # the bad edit is not taken
        assert "keeping the last good policy" in caplog.text and "retention_days" in caplog.text
        path.unlink()
        now[0] = 6.0
        assert source.retention_for("q", 0) == 6  # nor a removed file

    path.write_text("[default]\nretention_days = 7\n")
    now[0] = 8.0
    assert source.retention_for("q", 0) == 7


# --- enforcement in the publish commit -----------------------------------------------------
def _store(data_dir: DataDir, clock, text: str) -> QueueStore:
    return QueueStore(data_dir, clock=clock, rules=parse_policy(text).rule_for)


def test_the_commit_names_a_message_without_retention_by_the_queues_rule(
    data_dir: DataDir, clock
) -> None:
    """Retention None: the queue's rule, else the store's default; a given one wins."""
    queues = QueueStore(
        data_dir, clock=clock, rules=parse_policy(POLICY).rule_for, default_retention_days=45
    )
    no_default = QueueStore(
        data_dir, clock=clock, rules=parse_policy('[queues."x"]\nmax_messages = 9').rule_for
    )
    cases = [
        (queues, "orders", None, 90),
        (queues, "telemetry_eu", None, 2),
        (queues, "orders", 7, 7),
        (QueueStore(data_dir, clock=clock, default_retention_days=45), "orders", None, 45),
        (no_default, "plain", None, 0),  # a rule without retention_days: the default
    ]
    for store, queue, given, expected in cases:
        (upload,) = uploads_of(data_dir, [b"m"])
        (result,) = store.publish_many(queue, [Outgoing(upload, given)])
        assert result.name is not None
        assert int(result.name.split("-")[1]) == expected, (queue, given)


def test_refuse_when_max_messages_is_reached(data_dir: DataDir, clock) -> None:
    queues = _store(data_dir, clock, '[queues."q"]\nmax_messages = 3')
    names = [publish_body(queues, "q", b"m%d" % i).name for i in range(3)]
    with pytest.raises(QueueFull, match="Queue 'q' is full") as caught:
        publish_body(queues, "q", b"one too many")
    assert caught.value.status == 507 and caught.value.reason == "queue_full"
    assert [n for n, _ in queue_contents(data_dir, "q")] == names
    with pytest.raises(QueueFull):  # a batch is all or nothing
        publish_many(queues, data_dir, "q", [b"x", b"y"])
    assert publish_body(queues, "other", b"unlimited").name


def test_refuse_counts_bytes_and_sees_deletions_made_elsewhere(data_dir: DataDir, clock) -> None:
    queues = _store(data_dir, clock, '[queues."q"]\nmax_bytes = 10')
    first = publish_body(queues, "q", b"12345").name
    publish_body(queues, "q", b"12345")
    with pytest.raises(QueueFull):
        publish_body(queues, "q", b"1")
    os.unlink(data_dir.queue_dir("q") / first)  # claireup, a purge: the next publish recounts
    assert publish_body(queues, "q", b"12345").name
    with pytest.raises(QueueFull, match="cannot take this"):
        publish_body(_store(data_dir, clock, '[queues."big"]\nmax_bytes = 2'), "big", b"123")


def test_drop_oldest_keeps_the_newest(data_dir: DataDir, clock) -> None:
    text = '[queues."q"]\nmax_messages = 3\nwhen_full = "drop_oldest"'
    queues = _store(data_dir, clock, text)
    names = []
    for i in range(10):
        names.append(publish_body(queues, "q", b"m%d" % i).name)
        clock.advance(seconds=1)
    assert queue_contents(data_dir, "q") == [(n, b"m%d" % i) for i, n in enumerate(names)][-3:]
    results = publish_many(queues, data_dir, "q", [b"a", b"b"])  # a batch drops for itself
    kept = queue_contents(data_dir, "q")
    assert [body for _, body in kept] == [b"m9", b"a", b"b"]
    assert [n for n, _ in kept][1:] == [r.name for r in results]
    # a new process (another worker) agrees on the counts and keeps dropping
    other = _store(data_dir, clock, text)
    publish_body(other, "q", b"c")
    assert [body for _, body in queue_contents(data_dir, "q")] == [b"a", b"b", b"c"]


def test_drop_oldest_by_bytes_and_the_index_is_rebuilt_eventually(
    data_dir: DataDir, clock, monkeypatch
) -> None:
    monkeypatch.setattr("zosciimq.core.limits.REBUILD_AFTER", 4)
    queues = _store(data_dir, clock, '[queues."q"]\nmax_bytes = 6\nwhen_full = "drop_oldest"')
    for i in range(20):
        publish_body(queues, "q", b"%02d" % i)
    assert [body for _, body in queue_contents(data_dir, "q")] == [b"17", b"18", b"19"]
    assert queues.depth("q") < 10  # dropped records do not pile up in the index


def test_a_refused_publish_writes_nothing_of_itself_even_in_a_shared_commit(
    data_dir: DataDir, clock
) -> None:
    """Refusal is per publish and all or nothing: a refused batch leaves no message, no
    nonce marker and no upload, so its retry is stored once there is room; a publish that
    fits and shares the commit is kept whole."""
    queues = _store(data_dir, clock, '[queues."q"]\nmax_messages = 3')
    first = publish_body(queues, "q", b"first").name
    with pytest.raises(QueueFull):
        publish_many(queues, data_dir, "q", [b"a", b"b", b"c"], nonces=["n1", "n2", "n3"])
    assert [n for n, _ in queue_contents(data_dir, "q")] == [first]
    assert not any(data_dir.nonce_path(n).exists() for n in ("n1", "n2", "n3"))
    assert list(data_dir.temp.iterdir()) == []

    fits, over = (
        Submission(
            [Outgoing(u, 1, n) for u, n in zip(uploads, nonces, strict=True)], threading.Lock()
        )
        for uploads, nonces in (
            (uploads_of(data_dir, [b"fits"]), ["f1"]),
            (uploads_of(data_dir, [b"x", b"y"]), ["o1", "o2"]),
        )
    )
    try:
        with queues._open.use("q") as files:  # one commit for both, as concurrent publishers
            run_flushes(queues.committer.commit(files, [fits, over]))
    finally:
        for message in [*fits.work, *over.work]:
            message.upload.discard()
    assert fits.error is None and isinstance(over.error, QueueFull)
    contents = queue_contents(data_dir, "q")
    assert [body for _, body in contents] == [b"first", b"fits"]
    assert data_dir.nonce_path("f1").exists()
    assert not any(data_dir.nonce_path(n).exists() for n in ("o1", "o2"))

    os.unlink(data_dir.queue_dir("q") / first)  # room again: the retries go through
    results = publish_many(queues, data_dir, "q", [b"x", b"y"], nonces=["o1", "o2"])
    assert [r.duplicate for r in results] == [False, False]
    assert [body for _, body in queue_contents(data_dir, "q")] == [b"fits", b"x", b"y"]
