"""A hostile or broken source: logged with the reason, nothing written, pointer unchanged."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.replikate.conftest import make_job, make_replicator
from tests.replikate.hostile import POINTER, HostileServer
from zoscii_replikate.pointer import pointer_path
from zosciimq.core import DataDir
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
    "truncated": "truncated",
    "huge_header": "bad_headers",
    "many_headers": "bad_headers",
    "slow_body": "deadline",
    "slow_headers": "deadline",
    "silent": "timeout",
    "too_large": "too_large",
    "too_large_undeclared": "too_large",
    "envelope_error": "not_found",
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


@pytest.mark.parametrize("target", ["queue", "store"])
@pytest.mark.parametrize("scenario", sorted(CASES))
def test_hostile_reply_changes_nothing(
    hostile: HostileServer, tmp_path: Path, scenario: str, target: str
) -> None:
    hostile.scenario = scenario
    job = make_job(
        hostile.url,
        "orders",
        "mirror" if target == "queue" else None,
        read_timeout=1.0,
        deadline_seconds=2.0,
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


@pytest.mark.parametrize("mode", ["default", "original"])
def test_both_modes_refuse_html(hostile: HostileServer, tmp_path: Path, mode: str) -> None:
    hostile.scenario = "html"
    result = make_replicator(make_job(hostile.url, "orders", "mirror", mode=mode), tmp_path).run()
    assert result.reason == "not_zoscii"
