"""A hostile or broken source: logged with the reason, nothing written, pointer unchanged."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.replikate.hostile import BOUNDARY, LATER, LATEST, POINTER, HostileServer
from tests.support.replikate_jobs import make_job, make_replicator
from zoscii_replikate.pointer import pointer_path
from zosciimq.core import DataDir, DataStore
from zosciimq.core.states import read_pointer, write_pointer

CASES = {
    "html": "not_zoscii",
    "html_error": "not_zoscii",
    "garbage": "not_zoscii",
    "foreign_json": "not_zoscii",
    "json_list": "not_zoscii",
    "redirect": "not_zoscii",
    "error_status_with_quiet_envelope": "not_zoscii",
    "octet_without_name": "bad_name",
    "path_filename": "bad_name",
    "not_a_message_name": "bad_name",
    "earlier_name": "out_of_order",
    "same_name": "out_of_order",
    "far_future_name": "future_name",
    "truncated": "truncated",
    "huge_header": "bad_headers",
    "many_headers": "bad_headers",
    "slow_body": "deadline",
    "slow_headers": "deadline",
    "silent": "timeout",
    "too_large": "too_large",
    "too_large_undeclared": "too_large",
    "envelope_error": "not_found",
    # batch fetches (multipart/mixed): every part checked as a single fetch is
    "batch_out_of_order": "out_of_order",
    "batch_not_after_pointer": "out_of_order",
    "batch_same_name_twice": "out_of_order",
    "batch_bad_part_name": "bad_name",
    "batch_part_without_name": "bad_name",
    "batch_part_without_length": "not_zoscii",
    "batch_length_mismatch": "not_zoscii",
    "batch_truncated": "truncated",
    "batch_too_many_parts": "not_zoscii",
    "batch_count_mismatch": "not_zoscii",
    "batch_last_mismatch": "not_zoscii",
    "batch_no_boundary": "not_zoscii",
    "batch_other_boundary": "not_zoscii",
    "batch_empty": "not_zoscii",
    "batch_epilogue": "not_zoscii",
    "batch_too_large_part": "too_large",
    "batch_many_part_headers": "bad_headers",
    "batch_long_line": "not_zoscii",
}


@pytest.fixture(scope="module")
def hostile() -> Iterator[HostileServer]:
    server = HostileServer()
    yield server
    server.close()


def local_files(data_dir: Path) -> list[str]:
    """Every file a replication could have left in queues/ or store/ (temp included)."""
    found = []
    for area in ("queues", "store"):
        for root, _dirs, files in os.walk(data_dir / area):
            found += [os.path.join(root, f) for f in files]
    return found


# Cut by the client's clock (a read timeout or the deadline), before anything is written:
# where the replica would go makes no difference, so the store's case is in the slow tier.
TIMED = frozenset({"slow_body", "slow_headers", "silent"})


@pytest.mark.parametrize(
    ("scenario", "target"),
    [
        pytest.param(
            scenario,
            target,
            id=f"{scenario}-{target}",
            marks=[pytest.mark.slow] if scenario in TIMED and target == "store" else [],
        )
        for target in ("queue", "store")
        for scenario in sorted(CASES)
    ],
)
def test_hostile_reply_changes_nothing(
    hostile: HostileServer, tmp_path: Path, scenario: str, target: str
) -> None:
    hostile.scenario = scenario
    timed = scenario in TIMED  # shorter, so a wait is short: the drips are 50 ms apart
    job = make_job(
        hostile.url,
        "orders",
        "mirror" if target == "queue" else None,
        read_timeout=0.5 if timed else 1.0,
        deadline_seconds=1.0 if timed else 2.0,
        max_message_bytes=1 << 20,
    )
    path = pointer_path(DataDir(tmp_path), job)
    path.parent.mkdir(parents=True)
    write_pointer(path, POINTER)

    started = time.monotonic()
    result = make_replicator(job, tmp_path).run()

    assert (result.outcome, result.reason) == ("error", CASES[scenario]), result.error
    assert result.messages == 0
    assert read_pointer(path) == POINTER
    assert local_files(tmp_path) == []
    assert time.monotonic() - started < 6  # bounded: read timeout or the overall deadline


def test_a_bad_batch_after_good_parts_writes_none_of_them(
    hostile: HostileServer, tmp_path: Path
) -> None:
    """The first part of "batch_out_of_order" is fine, the second is not: the whole batch
    is refused, so nothing is written and the pointer stays."""
    hostile.scenario = "batch_out_of_order"
    job = make_job(hostile.url, "orders", "mirror")
    path = pointer_path(DataDir(tmp_path), job)
    path.parent.mkdir(parents=True)
    write_pointer(path, POINTER)
    result = make_replicator(job, tmp_path).run()
    assert (result.outcome, result.reason, result.messages) == ("error", "out_of_order", 0)
    assert read_pointer(path) == POINTER and local_files(tmp_path) == []


def test_a_message_containing_the_boundary_is_replicated_intact(
    hostile: HostileServer, tmp_path: Path
) -> None:
    hostile.scenario = "batch_boundary_in_body"
    job = make_job(hostile.url, "orders", None)
    write_pointer(pointer_path(DataDir(tmp_path), job), POINTER)
    result = make_replicator(job, tmp_path).run()
    # the next fetch (after LATEST) gets the same batch again, which is refused
    assert (result.outcome, result.reason) == ("error", "out_of_order")
    assert result.messages == 2  # both parts were written before the repeat was refused
    store = DataStore(DataDir(tmp_path))
    names = store.scan()
    assert names == [LATER.replace(".bin", "-u.bin"), LATEST.replace(".bin", "-u.bin")]
    with store.retrieve(names[0])[1] as file:
        assert file.read().startswith(b"\r\n--" + BOUNDARY.encode() + b"\r\n")


@pytest.mark.parametrize("mode", ["default", "original"])
def test_both_modes_refuse_html(hostile: HostileServer, tmp_path: Path, mode: str) -> None:
    hostile.scenario = "html"
    result = make_replicator(make_job(hostile.url, "orders", "mirror", mode=mode), tmp_path).run()
    assert result.reason == "not_zoscii"
