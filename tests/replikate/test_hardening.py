"""Issue 15 for the replicator: its own leftovers, surprises, and the original's state files."""

from __future__ import annotations

from pathlib import Path

import requests

from tests.support.queues import queue_contents
from tests.support.replikate_jobs import make_job, make_replicator, metrics_text
from zoscii_replikate.pointer import pointer_path
from zosciimq.core import DataDir, Upload
from zosciimq.core.states import read_pointer


def test_a_killed_runs_temp_files_are_removed_at_the_next_run(source, tmp_path) -> None:
    url, _ = source
    layout = DataDir(tmp_path)
    layout.ensure()
    job = make_job(url, "nothing-here", "mirror")
    replicator = make_replicator(job, tmp_path)
    mine = Upload(layout, prefix=replicator.upload_prefix)
    mine.write(b"half a message of a run that was killed")
    other = Upload(layout)  # an api upload in progress: not the job's to remove
    other.write(b"someone else's")
    replicator.run()
    assert not Path(mine.temp_path).exists()
    assert Path(other.temp_path).exists()
    other.discard()


def test_an_unexpected_error_is_an_error_run_with_back_off(source, tmp_path, monkeypatch) -> None:
    url, _ = source
    replicator = make_replicator(make_job(url, "q", "mirror"), tmp_path)

    def broken(*args, **kwargs):
        raise UnicodeEncodeError("ascii", "\uff12", 0, 1, "not ASCII")

    monkeypatch.setattr(replicator, "_follow", broken)
    result = replicator.run()
    assert (result.outcome, result.reason) == ("error", "unexpected")
    assert replicator.not_before > 0, "no back-off after an unexpected error"
    assert 'zoscii_replikate_errors_total{reason="unexpected",replication="test-job"} 1.0' in (
        metrics_text(replicator)
    )
    assert replicator.run().outcome == "backoff"


def test_the_originals_state_file_for_an_upper_case_queue_is_carried_on(source, tmp_path):
    """replikate.php keeps the case of sq: replikate_state_Orders_mirror.txt."""
    url, source_dir = source
    for body in (b"1", b"2", b"3"):
        requests.post(url, data={"action": "publish", "q": "orders", "msg": body}, timeout=10)
    names = [n for n, _ in queue_contents(source_dir, "orders")][-3:]
    states = tmp_path / "states"
    states.mkdir()
    (states / "replikate_state_Orders_mirror.txt").write_text(names[0])
    job = make_job(url, "orders", "mirror")
    assert pointer_path(DataDir(tmp_path), job).name == "replikate_state_Orders_mirror.txt"
    result = make_replicator(job, tmp_path).run()
    assert result.messages == 2, result
    assert [body for _, body in queue_contents(tmp_path, "mirror")] == [b"2", b"3"]
    assert read_pointer(states / "replikate_state_Orders_mirror.txt") == names[-1]
