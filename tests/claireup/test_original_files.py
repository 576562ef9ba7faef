"""Files the original writes on a shared volume: claireup expires them by their RRRR as
the original's claireup does, and leaves the original's own files alone."""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta
from pathlib import Path

from tests.support.message_files import all_files, set_mtime
from zoscii_claireup.report import AREA_STORE
from zosciimq.core import DataDir, MessageName
from zosciimq.core.names import format_stamp


def _doubled(data_dir: DataDir, published: datetime, retention_days: int) -> Path:
    """``<source name>.bin-u.bin``: replikate.php's store name without a target queue."""
    name = MessageName(
        stamp=format_stamp(published),
        counter=0,
        retention_days=retention_days,
        guid=str(uuid.uuid4()),
        unidentified=True,
        doubled=True,
    )
    assert str(name).endswith(f"{name.guid}.bin-u.bin")
    path = data_dir.store_path(str(name), name.store_dirs)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"from the original")
    return path


def test_doubled_store_names_expire_by_their_retention(data_dir, clock, make_cleaner) -> None:
    due = _doubled(data_dir, clock.now - timedelta(days=3), 2)
    kept = _doubled(data_dir, clock.now - timedelta(days=1), 2)

    report = make_cleaner().run()

    assert all_files(data_dir.store) == {kept}
    assert not due.exists()
    assert report.tally(AREA_STORE).deleted == 1
    assert report.total().unparsable == 0


def test_the_originals_nonce_readme_is_left_alone(data_dir, clock, make_cleaner) -> None:
    readme = data_dir.nonces / "readme.txt"
    readme.parent.mkdir(parents=True, exist_ok=True)
    readme.write_text("nonce files live here\n")
    set_mtime(readme, clock.now - timedelta(days=365))

    report = make_cleaner(nonce_window_seconds=300).run()

    assert readme.read_text() == "nonce files live here\n"
    assert report.outcome == "success"
